"""The end of ``stress run`` in a fresh process image: summary.json, the summary on
stdout and the report, from the run directory alone.

When the last record is written, the run's process still holds what the load needed (the
tokenizer's tables, the corpus, the connections, the imports: ~85 MB at 256 streams), and
the analysis and the report's charts come on top of it (to ~210 MB after 29k requests).
Every report is rebuilt from the run directory, so nothing of that is needed: the process
replaces its image (``os.execv``: the same process id, its terminal, its exit code to the
caller) with ``python -m stress`` concluding the directory, whose peak is the analysis's
alone. The secrets the run scrubbed from its files are registered again where they can
be read again (``target.api_key_env``, ``target.api_key_file``); the concluding process
reads only the run's files, which were scrubbed when written.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from stress.core.secrets import REDACTOR

if TYPE_CHECKING:
    from stress.analysis.analyze import Analysis

CONCLUDE_COMMAND = "__conclude_run"
"""argv[1] of the concluding process (``stress.cli.main.main``): not a command a user types."""


def exec_conclusion(run_dir: Path, fail_on: str) -> NoReturn:
    """Replace this process with one that concludes ``run_dir`` and exits with the
    verdict's code for ``fail_on``. What was printed is flushed first (the image, and
    its buffers, are gone after), and Ctrl-C gets its default back (an ignored signal
    stays ignored across exec)."""
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    argv = [sys.executable, "-m", "stress", CONCLUDE_COMMAND, str(run_dir), fail_on]
    os.execv(sys.executable, argv)


def register_keys(run_dir: Path) -> None:
    """Register with the redactor the keys the run read that can be read again: the
    environment variable and the key file its scenario named (as the manifest has it)."""
    from stress.analysis.runfiles import read_manifest_checked
    from stress.core.errors import StressError
    from stress.core.secrets import read_key_file

    target: Any = read_manifest_checked(run_dir).scenario.get("target") or {}
    name = target.get("api_key_env") if isinstance(target, dict) else None
    if isinstance(name, str) and os.environ.get(name):
        REDACTOR.add(os.environ[name])
    path = target.get("api_key_file") if isinstance(target, dict) else None
    if isinstance(path, str) and path and Path(path).is_file():
        with contextlib.suppress(StressError):  # changed since: the files are scrubbed
            REDACTOR.add(read_key_file(Path(path)))


def conclude_main(run_dir: Path, fail_on: str) -> int:
    """summary.json, the summary and the report of a finished run; the exit code of
    ``stress run`` (1 when summary.json could not be written: nothing to judge)."""
    from stress.core.limits import exit_code

    register_keys(run_dir)
    summary = conclude_files(run_dir, lambda text: print(REDACTOR.text(text), flush=True))
    status = (summary.get("verdict") or {}).get("status")
    return exit_code(str(status), fail_on) if status else 1


def conclude_files(run_dir: Path, line: Callable[[str], None]) -> dict[str, Any]:
    """summary.json and the report from a run directory whose files are complete, the
    summary on stdout; returns the summary ({} when it could not be written, said in one
    ``line``). A failure of the report never costs the summary."""
    from stress.analysis.analyze import analyze  # not before: nothing in the run needs them
    from stress.report.summary import build_summary, render_summary

    summary: dict[str, Any] = {}
    analysis: list[Analysis] = []  # read and analysed once, for summary.json and the report
    if guarded(line, "summary.json", lambda: analysis.append(analyze(run_dir))) and (
        guarded(line, "summary.json", lambda: summary.update(build_summary(run_dir, analysis[0])))
    ):
        text = f"\n{render_summary(summary)}\n\nrun directory: {run_dir}"
        print(REDACTOR.text(text), flush=True)
        _write_report(run_dir, analysis[0])
    return summary


def guarded(line: Callable[[str], None], what: str, write: Callable[[], object]) -> bool:
    """Write one end-of-run file; a failure is one line, never a traceback past the user."""
    try:
        write()
        return True
    except OSError as e:
        line(f"{what} not written: {REDACTOR.text(str(e.strerror or e))}")
        return False


def _write_report(run_dir: Path, analysis: Analysis) -> None:
    """report.md and report.html beside the data; a failure here never costs the run."""
    try:
        from stress.report.build import build_report

        _, _, html = build_report(run_dir, analysis)
    except Exception as e:
        print(
            f"report not written ({type(e).__name__}: {REDACTOR.text(str(e))}); "
            f"`stress report {run_dir}` retries",
            flush=True,
        )
        return
    print(f"report: {html}", flush=True)
