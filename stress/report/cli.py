"""Entry points for ``stress report``, ``stress compare`` and ``stress ls``.

Each pair is ``add_*_arguments(parser)`` and ``*_main(args) -> int``; the top-level CLI
wires them. Failures are one line on stderr (a :class:`StressError` the CLI prints, or a
printed line and a non-zero return), never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stress.core.errors import RunDirError, StressError
from stress.core.secrets import REDACTOR


def add_report_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="a run directory (out/<run>)")


def report_main(args: argparse.Namespace) -> int:
    from stress.analysis.analyze import analyze
    from stress.report.build import build_report, terminal_headline
    from stress.report.summary import build_summary

    run_dir = Path(args.run_dir)
    if (run_dir / "capacity.json").is_file() and not (run_dir / "manifest.json").exists():
        return _search_report(run_dir)  # a `stress capacity` directory: its own report
    analysis = analyze(run_dir)  # read, checked and analysed once, for every output
    build_summary(run_dir, analysis)  # summary.json stays the machine-readable record
    try:
        report, md, html = build_report(run_dir, analysis)
    except ImportError as e:
        raise StressError(
            f"cannot draw the report's charts ({e.name} missing) -- fix: reinstall stress "
            "(`pip install --force-reinstall .` in the checkout): matplotlib is one of its "
            "dependencies"
        ) from None
    except OSError as e:
        raise RunDirError(
            f"cannot write the report into {run_dir}: {e.strerror or e} -- fix: free disk "
            "space or make the run directory writable"
        ) from None
    print(REDACTOR.text(terminal_headline(report)))
    print(f"\nreport: {md}\n        {html}")
    return 0


def _search_report(root: Path) -> int:
    import orjson

    from stress.report.search import rebuild_search_report

    try:
        doc = orjson.loads((root / "capacity.json").read_bytes())
    except (OSError, orjson.JSONDecodeError) as e:
        raise RunDirError(
            f"{root / 'capacity.json'}: cannot be read ({e}) -- fix: rerun the search"
        ) from None
    if not isinstance(doc, dict) or doc.get("kind") != "capacity_search":
        raise RunDirError(
            f"{root / 'capacity.json'}: not a capacity search -- fix: give a run directory "
            "or a `stress capacity` directory"
        )
    md, html = rebuild_search_report(root, doc)  # a search whose process is gone: killed
    print(REDACTOR.text(str(doc.get("answer_line") or "")))
    print(f"\nreport: {md}\n        {html}")
    return 0


def add_compare_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="two or more run directories")
    p.add_argument("--html", metavar="FILE", help="also write the comparison as HTML")


def compare_main(args: argparse.Namespace) -> int:
    from stress.report.compare import compare, render_compare_html, render_compare_md

    if len(args.run_dirs) < 2:
        print("stress: compare needs at least two run directories", file=sys.stderr)
        return 2
    c = compare([Path(d) for d in args.run_dirs])
    print(REDACTOR.text(render_compare_md(c)), end="")
    if args.html:
        try:
            Path(args.html).write_text(REDACTOR.text(render_compare_html(c)), encoding="utf-8")
        except OSError as e:
            raise StressError(f"cannot write {args.html}: {e.strerror}") from None
        print(f"\nHTML: {args.html}")
    return 0


def add_ls_arguments(p: argparse.ArgumentParser) -> None:
    from stress.report.model import SORT_KEYS

    p.add_argument("dir", nargs="?", default="out", help="folder holding runs (default out/)")
    p.add_argument("--scenario", help="only runs of this scenario (name or glob)")
    p.add_argument("--sort", choices=SORT_KEYS, default="date", help="sort key (default date)")
    p.add_argument("--reverse", action="store_true", help="reverse the order")
    p.add_argument("--csv", metavar="FILE", help="write the rows as CSV (`-` for stdout)")


def ls_main(args: argparse.Namespace) -> int:
    from stress.report.archive import archive, render_table, to_csv

    rows, problems = archive(Path(args.dir), args.scenario, args.sort, args.reverse)
    if args.scenario:  # damaged runs are rows otherwise; a filter cannot place them
        for p in problems:
            print(f"stress: damaged run skipped: {REDACTOR.text(p)}", file=sys.stderr)
    if args.csv == "-":
        print(REDACTOR.text(to_csv(rows)), end="")
        return 0
    print(REDACTOR.text(render_table(rows)) if rows else f"no runs under {args.dir}")
    if args.csv:
        try:
            Path(args.csv).write_text(REDACTOR.text(to_csv(rows)), encoding="utf-8")
        except OSError as e:
            raise StressError(f"cannot write {args.csv}: {e.strerror}") from None
        print(f"CSV: {args.csv} ({len(rows)} runs)")
    return 0
