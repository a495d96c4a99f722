"""``stress ls``: the archive of runs, one line each, for capacity planning over time.

Every run directory under a folder becomes one row (date, scenario, target / model, users,
duration, verdict, the SLO's grades, where the capacity answer found the SLO held, goodput,
TTFT p95, aggregate tok/s, hit rate), from the run's one analysis exactly as the report
has it, so a killed run is listed too. Rows sort and filter in the terminal and
export to CSV for spreadsheets and notebooks. A run directory whose files are damaged is
listed as ``damaged: <reason>`` and the listing goes on: one bad run must not hide the rest.
"""

from __future__ import annotations

import csv
import fnmatch
import io
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from stress.analysis import figures
from stress.analysis.analyze import analyze
from stress.analysis.capacity import Bucket, CapacityAnswer, within
from stress.analysis.judge import SloCheck, tier_grade
from stress.core.errors import RunDirError, StressError
from stress.core.fmt import num, pct, times, tokens
from stress.report.headline import aggregate_tok_s
from stress.report.model import SORT_KEYS


@dataclass(slots=True)
class ArchiveRow:
    date: str
    run_id: str
    scenario: str
    target: str
    model: str
    users: int
    duration_s: float
    verdict: str
    slo: str
    """Each SLO figure's grade ("TTFT p95 MISSED x1.14"), "-" without an SLO."""
    slo_tiers: str
    """Each ``slo.tiers`` entry's grade ("interactive MISSED x1.14, batch MET"), "-" without."""
    within_slo: str
    """Where the capacity answer found the SLO held ("4 users", "6 in flight", "30k tok")."""
    goodput: float | None
    requests: int
    ttft_p95_s: float | None
    output_tok_s: float | None
    hit_rate: float | None
    path: str
    damaged: str = ""
    """Why this run could not be read ("" for a readable run)."""


def row_for(run_dir: Path) -> ArchiveRow:
    analysis = analyze(run_dir)
    run = analysis.run
    m = run.manifest
    start = m.start_time
    date = time.strftime("%Y-%m-%d %H:%M", time.gmtime(start)) if start is not None else "-"
    hit = run.collector("server").get("hit_rate_run")
    a = analysis.capacity
    return ArchiveRow(
        date=date,
        run_id=run.run_id,
        scenario=run.scenario_name,
        target=m.target_url or "-",
        model=m.model or "-",
        users=run.peak_users,
        duration_s=round(run.duration_s, 1),
        verdict=analysis.verdict.status,
        slo=slo_cell(analysis.verdict.slo),
        slo_tiers=tier_cell(analysis.verdict.tiers),
        within_slo=within_cell(a),
        goodput=a.goodput,
        requests=len(run.requests),
        ttft_p95_s=figures.ttft_p95(run.requests),
        output_tok_s=aggregate_tok_s(run),
        hit_rate=float(hit) if isinstance(hit, int | float) else figures.cached_share(run.main),
        path=str(run_dir),
    )


def slo_cell(checks: list[SloCheck]) -> str:
    """'TTFT p95 MISSED x1.14, decode p50 MET' as the verdict grades them."""
    return (
        ", ".join(
            f"{c.figure} {c.status}"
            + (f" {times(c.factor or 0.0)}" if c.status == "MISSED" else "")
            for c in checks
        )
        or "-"
    )


def tier_cell(tiers: Mapping[str, list[SloCheck]]) -> str:
    """'interactive MISSED x1.14, batch MET': each SLO tier by its worst check
    (``judge.tier_grade``), as the verdict judged them."""
    parts = []
    for name, checks in tiers.items():
        status, factor = tier_grade(checks)
        if status == "MISSED":
            parts.append(f"{name} MISSED {times(factor or 0.0)}")
        else:
            parts.append(f"{name} {'MET' if status == 'MET' else 'not judged'}")
    return ", ".join(parts) or "-"


def within_cell(a: CapacityAnswer) -> str:
    """The capacity answer's 'within SLO up to' per axis, short: '4 users, 30k tok'."""
    parts = []
    axes: list[tuple[str, list[Bucket], Callable[[Bucket], str]]] = [
        ("users", a.by_users, lambda b: f"{b.lo:g} users"),
        ("concurrency", a.by_concurrency, lambda b: f"{b.hi:g} in flight"),
        ("length", a.by_length, lambda b: f"{tokens(b.hi)} tok"),
    ]
    for key, buckets, unit in axes:
        if key not in a.within:
            continue
        met, _ = within(buckets)
        if met is not None:
            parts.append(unit(met))
    return ", ".join(parts) or "-"


def damaged_row(run_dir: Path, reason: str) -> ArchiveRow:
    """The row of a run whose files could not be read: its name and why."""
    return ArchiveRow(
        date="-",
        run_id=run_dir.name,
        scenario="-",
        target="-",
        model="-",
        users=0,
        duration_s=0.0,
        verdict="damaged",
        slo="-",
        slo_tiers="-",
        within_slo="-",
        goodput=None,
        requests=0,
        ttft_p95_s=None,
        output_tok_s=None,
        hit_rate=None,
        path=str(run_dir),
        damaged=reason.replace(f"{run_dir}/", ""),  # the path is in the row already
    )


def find_runs(root: Path) -> list[Path]:
    """Run directories at ``root`` itself or one or two levels below it."""
    if not root.is_dir():
        raise RunDirError(f"{root} is not a folder -- fix: pass the folder holding runs (out/)")
    if (root / "manifest.json").exists():
        return [root]
    found = sorted(p.parent for p in root.glob("*/manifest.json"))
    found += sorted(p.parent for p in root.glob("*/*/manifest.json"))
    return found


def archive(
    root: Path, scenario: str | None = None, sort: str = "date", reverse: bool = False
) -> tuple[list[ArchiveRow], list[str]]:
    """A row for every run; a damaged one gets a ``damaged`` row (and its reason in the
    problems), never stops the listing."""
    if sort not in SORT_KEYS:
        raise StressError(f"unknown sort key {sort!r} -- fix: one of {', '.join(SORT_KEYS)}")
    rows: list[ArchiveRow] = []
    problems: list[str] = []
    for d in find_runs(root):
        try:
            row = row_for(d)
        except StressError as e:
            problems.append(str(e))
            if not scenario:  # a filtered listing cannot tell which scenario it was
                rows.append(damaged_row(d, str(e)))
            continue
        if scenario and not fnmatch.fnmatch(row.scenario, scenario) and scenario != row.scenario:
            continue
        rows.append(row)

    def key(r: ArchiveRow) -> tuple[bool, float | str]:
        v: float | str | None = {
            "date": r.date + r.run_id,
            "scenario": r.scenario,
            "ttft_p95": r.ttft_p95_s,
            "tok_s": r.output_tok_s,
            "hit_rate": r.hit_rate,
            "duration": r.duration_s,
        }[sort]
        return (v is None, v if v is not None else 0.0)

    rows.sort(key=key, reverse=reverse)
    return sorted(rows, key=lambda r: bool(r.damaged)), problems  # damaged ones last


COLUMNS = (
    "date",
    "scenario",
    "target / model",
    "users",
    "duration",
    "verdict",
    "SLO",
    "SLO tiers",
    "within SLO up to",
    "goodput",
    "TTFT p95 s",
    "tok/s",
    "hit rate",
    "run",
)


def render_table(rows: list[ArchiveRow]) -> str:
    """The listing as aligned columns; the SLO tiers column only when a run has tiers."""
    good = [r for r in rows if not r.damaged]
    tiers = any(r.slo_tiers != "-" for r in good)
    columns = [c for c in COLUMNS if tiers or c != "SLO tiers"]
    cells = [
        [
            r.date,
            r.scenario,
            f"{r.target} / {r.model}",
            str(r.users),
            f"{r.duration_s / 60:.1f}m",
            r.verdict,
            r.slo,
            *([r.slo_tiers] if tiers else []),
            r.within_slo,
            pct(r.goodput),
            num(r.ttft_p95_s),
            num(r.output_tok_s),
            pct(r.hit_rate),
            r.run_id,
        ]
        for r in good
    ]
    widths = [max(len(c[i]) for c in [columns, *cells]) for i in range(len(columns))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [columns, *cells]
    ]
    lines += [f"{r.path}  damaged: {r.damaged}" for r in rows if r.damaged]
    return "\n".join(lines)


def to_csv(rows: list[ArchiveRow]) -> str:
    buf = io.StringIO()
    fields = list(ArchiveRow.__dataclass_fields__)
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow(asdict(r))
    return buf.getvalue()
