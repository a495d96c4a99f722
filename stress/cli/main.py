"""The ``stress`` command line.

Subcommands: run, capacity, validate, scenarios, init, schema, report, compare, ls, sim,
probe, gpus; a scenario argument may be a bundled scenario's name (``stress.config.bundled``).
Every user-facing failure is one line on stderr (what, where, how to fix) and a non-zero
exit code, never a traceback:
2 for bad input (scenario, options), 1 for an unusable target or run directory (also a
bad ``--out`` and damaged run files), 70 only for a bug of ours.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn, TypeVar

from stress import __version__

# pydantic looks for third-party plugins when it builds the scenario's models: one read of
# every installed package's entry points (14 ms with the 225 packages of a PyTorch venv on
# the H200 host, on the way to the first request: issue 15). stress's models want no
# plugin; a user who sets the variable keeps their choice.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

from stress.core.durations import parse_duration
from stress.core.errors import RunDirError, ScenarioError, StressError
from stress.core.limits import EXIT_VERDICT_FAIL, FAIL_ON, exit_code
from stress.core.secrets import REDACTOR
from stress.runtime.loop import run_async

if TYPE_CHECKING:
    from stress.config.scenario import LoadedScenario
    from stress.live.metrics_export import MetricsExporter
    from stress.live.view_process import ViewChild
    from stress.runtime.gpu_discovery import GpuDiscovery

T = TypeVar("T")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (what, where, fix), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} -- fix: see `{self.prog} --help`\n")


def _duration_arg(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is below 1; give at least 1")
    return value


def _workers_arg(text: str) -> int | Literal["auto"]:
    """``--workers``: a whole number of at least 1, or ``auto``."""
    if text.strip().lower() == "auto":
        return "auto"
    return _positive_int(text)


def _lengths_arg(text: str) -> list[int]:
    """'2000,8000,32k' -> [2000, 8000, 32000]."""
    out = []
    for part in text.split(","):
        p = part.strip().lower()
        scale = 1000 if p.endswith("k") else 1
        try:
            out.append(int(float(p.removesuffix("k")) * scale))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{part!r} is not a number of tokens; give e.g. 2000,8000,32k"
            ) from None
    return out


def _usable_out(out: Path) -> Path:
    """The ``--out`` folder, created if needed; ``RunDirError`` (exit 1, one line) when it
    is a file or cannot be written, before the run starts anything."""
    if out.exists() and not out.is_dir():
        raise RunDirError(
            f"--out {out}: is a file, not a folder -- fix: give a folder for run directories"
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RunDirError(
            f"--out {out}: cannot create the folder ({e.strerror or e}) -- fix: give a folder "
            "you may write to"
        ) from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise RunDirError(
            f"--out {out}: the folder is not writable -- fix: give a folder you may write to "
            "(or chmod u+w it)"
        )
    return out


def cmd_validate(args: argparse.Namespace) -> int:
    from stress.config.bundled import find_scenario
    from stress.config.scenario import load_scenario

    failed = 0
    for path in args.files:
        try:
            loaded = load_scenario(find_scenario(path), corpus_roots=args.corpus_root or ())
        except ScenarioError as e:
            failed += 1
            for problem in e.problems:
                print(REDACTOR.text(problem.render()), file=sys.stderr)
            continue
        sc = loaded.scenario
        bound = []
        if sc.duration is not None:
            bound.append(f"{sc.duration:g}s")
        if sc.rounds is not None:
            bound.append(f"{sc.rounds} rounds/user")
        steps = f", {len(sc.phases)} phases" if sc.phases else ""
        load = f"{sc.users.count} users"
        if sc.arrivals is not None:
            load = f"sessions arriving at {sc.arrivals.rate:g}/min ({sc.arrivals.process})"
        if sc.replay is not None:
            load = f"replay of {sc.replay.trace} at speed {sc.replay.speed:g}"
            bound.append("the trace's end")
        print(
            f"{path}: ok ({sc.name}: {load}, {' or '.join(bound)}{steps}, "
            f"cache {sc.conversation.cache}, target {sc.target.url})"
        )
    return 2 if failed else 0


def cmd_scenarios(args: argparse.Namespace) -> int:
    from stress.config.bundled import (
        CORPUS_PREFIX,
        SCENARIOS,
        corpus_names,
        describe,
        scenario_names,
    )

    names = scenario_names()
    width = max(map(len, names), default=0)
    print("Bundled scenarios (`stress run NAME` runs one, `stress init NAME` copies it to edit):")
    for name in names:
        print(f"  {name:<{width}}  {describe(SCENARIOS / f'{name}.yaml')}")
    corpora = [(f"{CORPUS_PREFIX}{name}", what) for name, what in corpus_names()]
    width = max((len(ref) for ref, _ in corpora), default=0)
    print("\nBundled corpora (a scenario's conversation.turn.paste.corpus):")
    for ref, what in corpora:
        print(f"  {ref:<{width}}  {what}")
    print(f"\nInstalled in {SCENARIOS.parent}")
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    from stress.config.bundled import SCHEMA_NAME, init_scenario

    written = init_scenario(args.name, args.dest, force=args.force)
    print(f"wrote {written.scenario}: edit it, then `stress run {written.scenario}`")
    if written.schema is not None:
        print(
            f"wrote {written.schema}: the scenario's JSON Schema, which the file's first line "
            "points editors at (completion and checks with the YAML language server)"
        )
    else:
        print(f"{SCHEMA_NAME} next to it is up to date")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from stress.config.schema_doc import schema_json

    sys.stdout.write(schema_json())
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """``stress export RUN --csv [FILE] | --parquet [FILE]`` (docs/export.md)."""
    from stress.report.export import MissingPyarrow, pyarrow_module, rows, write_csv, write_parquet

    run_dir = Path(args.run_dir)
    parquet = args.parquet is not None
    if parquet:
        try:
            pyarrow_module()  # before reading the run: the fix comes at once
        except MissingPyarrow as e:
            print(f"stress: {e}", file=sys.stderr)
            return 2
    dest = args.parquet if parquet else args.csv
    if dest == "-" and not parquet:
        write_csv(rows(run_dir), sys.stdout)
        return 0
    out = Path(dest) if dest else run_dir / ("requests.parquet" if parquet else "requests.csv")
    if parquet:
        n = write_parquet(rows(run_dir), out)
    else:
        with out.open("w", encoding="utf-8", newline="") as f:
            n = write_csv(rows(run_dir), f)
    print(f"{'Parquet' if parquet else 'CSV'}: {out} ({n} requests; columns: docs/export.md)")
    return 0


def _resolve_scenario(args: argparse.Namespace) -> None:
    """A command's scenario argument given as a bare name: the file in the current
    directory, else the bundled one (said on stderr, so a run from anywhere is clear)."""
    arg = getattr(args, "scenario", None)
    if not isinstance(arg, str):
        return
    from stress.config.bundled import SCENARIOS, find_scenario

    path = find_scenario(arg)
    if path.parent == SCENARIOS and not Path(arg).exists():
        print(f"stress: {arg}: the bundled scenario {path}", file=sys.stderr)
    args.scenario = str(path)


class _MetricsPortProblem(Exception):
    """A ``--metrics-port`` that cannot be served: said in one line, exit 2."""


def _open_metrics(args: argparse.Namespace) -> MetricsExporter | None:
    """The live metrics endpoint (``--metrics-port``), bound before anything is sent, or
    None without the flag; ``_MetricsPortProblem`` when the port cannot be used."""
    if args.metrics_port is None:
        return None
    from stress.live.metrics_export import MetricsExporter, MetricsPortError

    try:
        return MetricsExporter.serve(args.metrics_host, args.metrics_port)
    except MetricsPortError as e:
        raise _MetricsPortProblem(str(e)) from None


def _close_metrics(metrics: MetricsExporter | None, linger: float) -> None:
    """Keep the final values up ``--metrics-linger`` seconds (Prometheus's last scrape
    sees the whole run), then stop serving; Ctrl-C cuts the wait short."""
    if metrics is None:
        return
    try:
        if linger > 0:
            print(
                f"live metrics: final values at {metrics.url} for {linger:g}s more "
                "(--metrics-linger); Ctrl-C ends now",
                flush=True,
            )
            time.sleep(linger)
    except KeyboardInterrupt:
        pass
    finally:
        metrics.close()


def cmd_run(args: argparse.Namespace) -> int:
    from stress.runtime.gpu_discovery import GpuDiscovery

    gpu = GpuDiscovery()  # first: NVML's start-up overlaps the imports below
    view = None
    if _wants_view(args):  # the live view's process: its imports overlap ours too
        from stress.live.view_process import ViewChild

        with contextlib.suppress(OSError):  # the run says why when it tries again
            view = ViewChild()
    try:
        ran = _cmd_run(args, gpu, view)
    finally:
        gpu.discard()
        if view is not None:
            view.discard()
    if isinstance(ran, Path):  # the run's files are complete: conclude without its memory
        from stress.runtime.conclude import exec_conclusion

        exec_conclusion(ran, args.fail_on)
    return ran


def _wants_view(args: argparse.Namespace) -> bool:
    """The live view, unless --no-tui, or not in a terminal, or built without it."""
    tty = sys.stdout.isatty() and sys.stdin.isatty()
    return not args.no_tui and tty and importlib.util.find_spec("stress.tui") is not None


def _cmd_run(args: argparse.Namespace, gpu: GpuDiscovery, view: ViewChild | None) -> int | Path:
    """The run; its exit code, or (files complete) its directory, to be concluded."""
    from stress.config.scenario import load_scenario, with_overrides
    from stress.runtime.run import execute

    loaded = load_scenario(args.scenario, corpus_roots=args.corpus_root or ())
    loaded = with_overrides(
        loaded,
        users=args.users,
        duration=args.duration,
        target=args.target,
        rounds=args.rounds,
        workers=args.workers,
    )
    open_loop = loaded.scenario.arrivals or loaded.scenario.replay
    if args.ray is not None and open_loop:
        print(
            f"stress run: {args.scenario}: --ray applies to users: scenarios; "
            f"{'arrivals' if loaded.scenario.arrivals else 'replay'} runs in one process "
            "-- fix: drop --ray",
            file=sys.stderr,
        )
        return 2
    _usable_out(Path(args.out))
    ui: Literal["headless", "tui"] = "tui" if _wants_view(args) else "headless"
    try:
        metrics = _open_metrics(args)
    except _MetricsPortProblem as e:
        print(f"stress run: {e}", file=sys.stderr)
        return 2
    try:
        outcome = run_async(
            execute(
                loaded,
                Path(args.out),
                progress_interval=args.progress_interval,
                ui=ui,
                metrics=metrics,
                ray=args.ray,
                gpu_discovery=gpu,
                view=view,
                conclude=False,
            )
        )
    finally:
        _close_metrics(metrics, args.metrics_linger)
    if outcome.exit_reason == "crashed":
        return 1
    if not outcome.concluded:  # the caller concludes, in a fresh process image
        return outcome.run_dir
    status = (outcome.summary.get("verdict") or {}).get("status")
    if not status:  # summary.json could not be built: said on screen, nothing to judge
        return 1
    return exit_code(str(status), args.fail_on)


def cmd_capacity(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from stress.config.scenario import SearchSpec, load_scenario, with_overrides
    from stress.runtime.run import execute
    from stress.search.session import run_search, search_exit_code

    loaded = load_scenario(args.scenario, corpus_roots=args.corpus_root or ())
    refused = _unsearchable(loaded)
    if refused:
        print(REDACTOR.text(refused), file=sys.stderr)
        return 2
    loaded = with_overrides(loaded, duration=args.duration, target=args.target, rounds=args.rounds)
    slo = loaded.scenario.slo
    if slo.ttft_p95 is None and slo.decode_tok_s_p50 is None:
        print(
            f"stress capacity: {args.scenario}: slo: sets no limit, so there is nothing to "
            "search for -- fix: add e.g. `slo: {ttft_p95: 5s, decode_tok_s_p50: 20}`",
            file=sys.stderr,
        )
        return 2
    out = _usable_out(Path(args.out))
    flags = {"axis": args.axis, "start": args.start, "factor": args.factor}
    flags |= {"max_users": args.max_users}
    flags |= {"width": args.width, "repeat": args.repeat, "lengths": args.lengths}
    flags |= {"max_repeat": args.max_repeat, "confidence": args.confidence}
    try:
        settings = SearchSpec.model_validate(
            loaded.scenario.search.model_dump() | {k: v for k, v in flags.items() if v is not None}
        )
    except ValidationError as e:
        err = e.errors()[0]
        flag = "--" + str(err["loc"][0] if err["loc"] else "").replace("_", "-")
        where = f"{flag}: " if err["loc"] else ""
        msg = str(err["msg"]).removeprefix("Value error, ")
        fix = "" if " -- fix: " in msg else " -- fix: see docs/capacity.md"
        print(f"stress capacity: {where}{msg}{fix}", file=sys.stderr)
        return 2

    ui: Literal["headless", "tui"] = "tui" if _wants_view(args) else "headless"
    try:
        metrics = _open_metrics(args)
    except _MetricsPortProblem as e:
        print(f"stress capacity: {e}", file=sys.stderr)
        return 2

    async def one_pass(step: LoadedScenario, root: Path, where: str) -> Any:
        return await execute(
            step,
            root,
            progress_interval=args.progress_interval,
            ui=ui,
            search=where,
            metrics=metrics,  # each pass is a run of its own: its series replace the last's
        )

    try:
        search = run_async(run_search(loaded, out, settings, one_pass))
    finally:
        _close_metrics(metrics, args.metrics_linger)
    return search_exit_code(search)


def _unsearchable(loaded: LoadedScenario) -> str:
    """Why a search cannot vary the scenario's users, in one line ("": it can)."""
    from stress.config.yamlpos import load_located
    from stress.core.errors import Problem

    sc = loaded.scenario
    field = "replay" if sc.replay is not None else "arrivals" if sc.arrivals is not None else ""
    if not field:
        return ""
    try:
        line = load_located(loaded.path.read_text(encoding="utf-8")).line_of((field,))
    except (OSError, ValueError):
        line = None
    why, fix = {
        "replay": (
            "a replay sends a trace's requests at the trace's times, so `stress capacity` "
            "cannot vary its users",
            "search a `users:` scenario (e.g. `stress init find_capacity`), or replay the "
            "trace faster with `replay.speed` in `stress run`",
        ),
        "arrivals": (
            "sessions arrive at a rate (an open loop), so `stress capacity` cannot vary its users",
            "replace `arrivals:` with `users: {count: 1}` to search, or step the rate with "
            "`arrivals.schedule` in `stress run`",
        ),
    }[field]
    return Problem(str(loaded.path), line, field, why, fix).render()


def _optional(
    sub: argparse._SubParsersAction[_Parser],
    name: str,
    module: str,
    help_: str,
    command: str | None,
) -> None:
    """Subcommands whose modules import heavy packages (aiohttp, pydantic, numpy): their
    arguments are only loaded when ``command`` (the one on the command line) is theirs, so
    ``stress --help`` and the other commands start without them. Skipped when the module
    does not exist in this build."""
    if importlib.util.find_spec(module) is None:
        return
    p = sub.add_parser(name, help=help_)
    if command != name:
        return  # listed in `stress --help`; parsed only when chosen
    mod = importlib.import_module(module)
    mod.add_arguments(p)
    p.set_defaults(func=mod.main)


def _command(argv: list[str] | None) -> str | None:
    """The subcommand named on the command line (the first word not an option)."""
    args = sys.argv[1:] if argv is None else argv
    return next((a for a in args if not a.startswith("-")), None)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="stress",
        description="Load and soak tester for self-hosted LLM inference servers.",
    )
    parser.add_argument("--version", action="version", version=f"stress {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    # the order here is the order `stress --help` lists the subcommands in
    _add_run_parser(sub)
    _add_capacity_parser(sub)
    _add_scenario_parsers(sub)
    _add_run_dir_parsers(sub)
    command = _command(argv)
    _optional(sub, "sim", "stress.sim.cli", "run the built-in simulated inference server", command)
    _optional(sub, "probe", "stress.cli.probe", "check a server before a long run", command)
    _optional(sub, "gpus", "stress.cli.gpus", "list GPUs and their telemetry support", command)
    return parser


def _add_run_parser(sub: argparse._SubParsersAction[_Parser]) -> None:
    p = sub.add_parser("run", help="run a scenario")
    p.add_argument(
        "scenario", help="scenario YAML file, or a bundled scenario's name (`stress scenarios`)"
    )
    p.add_argument("--out", default="out", help="folder for run directories (default: out/)")
    p.add_argument("--duration", type=_duration_arg, help="override duration, e.g. 20s, 5m")
    p.add_argument("--rounds", type=_positive_int, help="override rounds per user")
    p.add_argument("--users", type=_positive_int, help="override the number of users")
    p.add_argument("--target", help="server root URL, or `sim` for the built-in simulator")
    p.add_argument(
        "--workers",
        type=_workers_arg,
        help="client processes sharing the users (N or auto; default: the scenario's "
        "workers, 1); users: scenarios only (docs/scaling.md)",
    )
    p.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="run the workers as actors of a running Ray cluster (its head's host:port; "
        "alone: the cluster this machine joined with `ray start`); needs stress[ray] "
        "on every node (docs/scaling.md)",
    )
    p.add_argument(
        "--no-tui",
        action="store_true",
        help="plain progress lines (automatic when stdout is not a terminal)",
    )
    p.add_argument(
        "--progress-interval",
        type=_duration_arg,
        default=None,
        help="seconds between headless status lines",
    )
    p.add_argument(
        "--fail-on",
        choices=FAIL_ON,
        default="fail",
        help=f"exit {EXIT_VERDICT_FAIL} when the verdict is FAIL (default), WARN or FAIL "
        "(warn), or never",
    )
    _metrics_args(p)
    _corpus_root_arg(p)
    p.set_defaults(func=cmd_run)


def _add_capacity_parser(sub: argparse._SubParsersAction[_Parser]) -> None:
    p = sub.add_parser(
        "capacity", help="search for the number of users at which the scenario's SLO breaks"
    )
    p.add_argument("scenario", help="scenario YAML file (its slo: is the criterion)")
    p.add_argument("--out", default="out", help="folder for the search (default: out/)")
    p.add_argument("--target", help="server root URL, or `sim` for the built-in simulator")
    p.add_argument("--duration", type=_duration_arg, help="length of each pass, e.g. 2m")
    p.add_argument("--rounds", type=_positive_int, help="rounds per user in each pass")
    # each overrides the scenario's search: section (defaults there: docs/capacity.md)
    p.add_argument(
        "--axis",
        choices=("users", "length", "grid"),
        help="vary the users (default), the length, or both (a capacity map)",
    )
    p.add_argument(
        "--lengths",
        type=_lengths_arg,
        help="grid: tokens of history of the map's rows, e.g. 2000,8000,32000",
    )
    p.add_argument("--start", type=_positive_int, help="users of the first step (1)")
    p.add_argument("--max-users", type=_positive_int, help="most users to try (64)")
    p.add_argument("--factor", type=float, help="growth of the user count per step (2)")
    p.add_argument("--width", type=_positive_int, help="stop at a bracket this narrow (1)")
    p.add_argument("--repeat", type=_positive_int, help="passes per step, at least (2)")
    p.add_argument(
        "--max-repeat",
        type=_positive_int,
        help="most passes a step runs to be decided, else UNDECIDED (3 x repeat)",
    )
    p.add_argument(
        "--confidence",
        type=float,
        choices=(0.8, 0.9, 0.95, 0.99),
        help="confidence a step's passes must give to call it MET or MISSED (0.9)",
    )
    p.add_argument(
        "--no-tui",
        action="store_true",
        help="plain lines (automatic when stdout is not a terminal); the live view's header "
        "shows the search's step, bracket and finished steps",
    )
    p.add_argument(
        "--progress-interval",
        type=_duration_arg,
        default=None,
        help="seconds between status lines within a pass",
    )
    _metrics_args(p)
    _corpus_root_arg(p)
    p.set_defaults(func=cmd_capacity)


def _add_scenario_parsers(sub: argparse._SubParsersAction[_Parser]) -> None:
    """validate, scenarios, init and schema: the scenario files, before any run."""
    p = sub.add_parser("validate", help="check scenario files")
    p.add_argument("files", nargs="+", help="scenario files or bundled scenarios' names")
    _corpus_root_arg(p)
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("scenarios", help="list the bundled scenarios and corpora")
    p.set_defaults(func=cmd_scenarios)
    p = sub.add_parser("init", help="copy a bundled scenario here to edit")
    p.add_argument("name", help="a bundled scenario (`stress scenarios` lists them)")
    p.add_argument(
        "dest", nargs="?", help="folder (created if needed) or .yaml file (default: here)"
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="overwrite an existing scenario file or a differing stress-scenario.schema.json",
    )
    p.set_defaults(func=cmd_init)
    p = sub.add_parser("schema", help="print the scenario's JSON Schema (for editors)")
    p.set_defaults(func=cmd_schema)


def _add_run_dir_parsers(sub: argparse._SubParsersAction[_Parser]) -> None:
    """report, compare, ls and export: they read run directories, so a damaged file there
    is exit 1 with its path (``reads_runs``), not a bug."""
    from stress.report import cli as report_cli

    p = sub.add_parser("report", help="write report.md and report.html for a run directory")
    report_cli.add_report_arguments(p)
    p.set_defaults(func=report_cli.report_main, reads_runs=True)
    p = sub.add_parser("compare", help="compare runs, with the run-to-run noise")
    report_cli.add_compare_arguments(p)
    p.set_defaults(func=report_cli.compare_main, reads_runs=True)
    p = sub.add_parser("ls", help="the archive: one line per run")
    report_cli.add_ls_arguments(p)
    p.set_defaults(func=report_cli.ls_main, reads_runs=True)
    _add_export_parser(sub)


def _add_export_parser(sub: argparse._SubParsersAction[_Parser]) -> None:
    p = sub.add_parser("export", help="a run's requests with derived figures, CSV or Parquet")
    p.add_argument("run_dir", help="run directory")
    fmt = p.add_mutually_exclusive_group(required=True)
    fmt.add_argument(
        "--csv",
        nargs="?",
        const="",
        metavar="FILE",
        help="CSV (default RUN/requests.csv; - stdout)",
    )
    fmt.add_argument(
        "--parquet",
        nargs="?",
        const="",
        metavar="FILE",
        help="Parquet (default RUN/requests.parquet; needs pyarrow: pip install '.[parquet]' "
        "in the checkout)",
    )
    p.set_defaults(func=cmd_export, reads_runs=True)


def _metrics_args(p: argparse.ArgumentParser) -> None:
    """Live Prometheus metrics of the run (docs/live-metrics.md)."""
    p.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve live Prometheus metrics on this port (0: a free one, printed and in "
        "manifest.json) at /metrics; see docs/live-metrics.md",
    )
    p.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        metavar="HOST",
        help="address the metrics endpoint listens on (default 127.0.0.1; 0.0.0.0 for a "
        "Prometheus on another machine)",
    )
    p.add_argument(
        "--metrics-linger",
        type=_duration_arg,
        default=0.0,
        metavar="SECONDS",
        help="keep serving the final values this long after the run (e.g. 30s, two scrape "
        "intervals, so Prometheus sees the end of the run; default 0)",
    )


def _corpus_root_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--corpus-root",
        action="append",
        metavar="DIR",
        help="also allow paste corpora under DIR (repeatable; the scenario's folder, the "
        "bundled corpora/ and $STRESS_CORPUS_ROOTS are always allowed)",
    )


def _run_files(args: argparse.Namespace) -> str:
    names = [getattr(args, n, None) for n in ("run_dir", "dir")]
    names += getattr(args, "run_dirs", None) or []
    return ", ".join(str(n) for n in names if n) or "the run directory"


def _conclusion(argv: list[str] | None) -> argparse.Namespace | None:
    """The end of a ``stress run`` in its fresh process image
    (``stress.runtime.conclude``): its arguments, which no user types."""
    from stress.runtime.conclude import CONCLUDE_COMMAND

    given = sys.argv[1:] if argv is None else argv
    if len(given) != 3 or given[0] != CONCLUDE_COMMAND:
        return None

    def conclude(args: argparse.Namespace) -> int:
        from stress.runtime.conclude import conclude_main

        return conclude_main(Path(args.run_dir), args.fail_on)

    return argparse.Namespace(
        func=conclude, run_dir=given[1], fail_on=given[2], reads_runs=True, command="run"
    )


def main(argv: list[str] | None = None) -> int:
    # stress does no linear algebra: numpy's OpenBLAS needs no thread (and buffers) per core
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    args = _conclusion(argv) or build_parser(argv).parse_args(argv)
    try:
        _resolve_scenario(args)
        code: int = args.func(args)
        return code
    except ScenarioError as e:
        for problem in e.problems:
            print(REDACTOR.text(problem.render()), file=sys.stderr)
        return 2
    except StressError as e:
        print(f"stress: {REDACTOR.text(str(e))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("stress: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as e:  # the machine, not us: a full disk, a permission, a vanished file
        where = e.filename or (_run_files(args) if getattr(args, "reads_runs", False) else "")
        what = e.strerror or str(e) or type(e).__name__
        print(
            REDACTOR.text(
                f"stress: {where + ': ' if where else ''}{what} -- fix: check the path, its "
                "permissions and the free disk space"
            ),
            file=sys.stderr,
        )
        return 1
    except ValueError as e:
        if not getattr(args, "reads_runs", False):
            return _internal_error(e)
        print(
            REDACTOR.text(
                f"stress: {_run_files(args)}: damaged run files ({type(e).__name__}: "
                f"{str(e).splitlines()[0] if str(e) else 'unreadable'}) -- fix: check the "
                "files named, or remove the damaged run"
            ),
            file=sys.stderr,
        )
        return 1
    except Exception as e:  # a bug of ours: one line, the details on request
        return _internal_error(e)


def _internal_error(e: Exception) -> int:
    if os.environ.get("STRESS_DEBUG"):
        raise e
    print(
        f"stress: internal error: {type(e).__name__}: {REDACTOR.text(str(e))} -- "
        "run again with STRESS_DEBUG=1 for the traceback and please report it",
        file=sys.stderr,
    )
    return 70


if __name__ == "__main__":
    sys.exit(main())
