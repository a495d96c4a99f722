"""The report's open-loop section: the load offered against the load achieved."""

from __future__ import annotations

from stress.analysis.arrivals import OpenLoad
from stress.report.model import Section, Table


def _f(v: float | int | None, fmt: str = ".2f") -> str:
    return "-" if v is None else format(v, fmt)


def load_section(load: OpenLoad | None) -> Section | None:
    """Offered vs achieved (sessions per minute, requests per second), the arrival process
    as it came out (gap CV), and under a cap the backlog and waits; None: a closed loop."""
    if load is None:
        return None
    rows = [
        ["sessions per minute", _f(load.offered_per_min), _f(load.admitted_per_min)],
        ["sessions completed per minute", "-", _f(load.completed_per_min)],
        ["requests per second", _f(load.offered_req_s), _f(load.achieved_req_s)],
    ]
    table = Table(
        "Offered vs achieved load",
        ["figure", "offered", "achieved"],
        rows,
        note=(
            f"{load.arrivals} arrivals in {load.window_s:.0f}s ({load.process} at "
            f"{load.rate_per_min:g}/min"
            + (f", burstiness {load.burstiness:g}" if load.process == "gamma" else "")
            + f"; gap CV {_f(load.gap_cv)}); {load.admitted} admitted, {load.completed} "
            f"completed, {load.stopped} cut short by the run's end, {load.never_admitted} "
            f"never admitted; at most {load.max_active} sessions at once."
        ),
        id="load",
    )
    tables = [table]
    if load.max_concurrent is not None:
        tables.append(
            Table(
                f"Backlog (max_concurrent {load.max_concurrent})",
                ["most waiting", "wait mean (s)", "wait p95 (s)", "wait max (s)"],
                [
                    [
                        str(load.max_backlog),
                        _f(load.wait_s_mean),
                        _f(load.wait_s_p95),
                        _f(load.wait_s_max),
                    ]
                ],
                id="backlog",
            )
        )
    return Section("load", "Offered vs achieved load", [load.sentence], tables)
