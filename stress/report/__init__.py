"""Soak reports, run comparison and the run archive (``stress report | compare | ls``).

Everything here is built from the files of a run directory, never from live state, so a
killed run gets the same report as a finished one. Public surface:

- :func:`build_report` reads a run directory and writes ``report.md`` and a
  self-contained ``report.html`` (charts inline, no network) beside its files.
- :mod:`stress.report.cli` holds the three command-line entry points.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stress.report.build import build_report, make_report
    from stress.report.model import Report

__all__ = ["Report", "build_report", "make_report"]


def __getattr__(name: str) -> Any:
    # Lazy: importing one submodule (the CLI entry points) does not load the
    # whole report (which itself uses the summary's warnings).
    if name == "Report":
        from stress.report import model

        return model.Report
    if name in __all__:
        from stress.report import build

        return getattr(build, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
