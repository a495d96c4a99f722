"""The header's verdict badge: is this run healthy, suspicious or failing right now?

A soak that says "zero errors" can still hide a hang, a restart, empty replies, stalls, a
GPU that logged an Xid (field notes 4, 5, 10), or a run that cannot write its files, lost
a collector or a user's task. The badge folds all of those into one colour an
operator can see from across the room, and names the reasons, by the very rules of the
end-of-run verdict (one judge: ``stress.analysis.judge``). Pure: no Textual.

A frozen server is one hang, not also an outage: its health checks time out, so the server
collector writes ``server_down``, and the hang gate adds ``server_frozen`` once it finds
that down inside a hang (``stress.live.hangs``); the badge counts the difference, as the
verdict counts ``stress.analysis.hangs.outage_count``. The scenario's ``slo.tiers`` are
judged on the same live figures as the SLO and shown on a line of their own
(``Verdict.tiers``), never changing the level, as in the verdict.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from stress.analysis.judge import (
    SLO_FIGURES,
    Finding,
    HealthCounts,
    SloCheck,
    grade,
    health_findings,
    slo_limit,
    tier_grade,
)
from stress.core.fmt import times
from stress.core.limits import DEFAULT_ERROR_RATE
from stress.live.hangs import FROZEN_KIND
from stress.live.state import Snapshot
from stress.tui.format import gpu_cards, num

Level = Literal["ok", "warn", "bad"]
HARDWARE_KINDS = frozenset({"xid", "ecc", "ecc_dbe", "aer", "gpu_lost", "gpu_unavailable"})


@dataclass(frozen=True, slots=True)
class Verdict:
    level: Level
    reasons: tuple[str, ...]
    tiers: tuple[str, ...] = ()
    """Each ``slo.tiers`` entry so far, missed first: ``interactive ✖x1.3``, ``batch ✓``,
    ``bulk ? n=5`` (too few requests to judge). They never change ``level``."""

    @property
    def label(self) -> str:
        if self.level == "ok":
            return "● OK"
        mark = "▲" if self.level == "warn" else "✖"
        return f"{mark} {' · '.join(self.reasons)}"


LEVELS: dict[str, Level] = {"FAIL": "bad", "WARN": "warn", "PASS": "ok"}


def judge(
    s: Snapshot,
    kinds: Counter[str],
    warnings: int,
    hardware: int,
    slo: Mapping[str, Any] | None = None,
) -> Verdict:
    """The badge: the verdict's own health rules (``stress.analysis.judge.health_findings``)
        on the run so far, plus live signs the end-of-run checks grade as WARN too (a model
        mismatch, an idle GPU, warning events). ``kinds`` counts every run event by kind;
        ``warnings`` / ``hardware`` count the warning-severity events and the GPU error events
        seen so far; ``slo`` is the scenario's (limits and ``error_rate``). The SLO is graded on
    the headline figures so far (``Snapshot.ttft_p95_run``...), as the verdict grades them."""
    rate = (slo or {}).get("error_rate")
    server: Mapping[str, Any] = s.collectors.get("server") or {}
    cancelled = s.cancelled
    # the snapshot has no causes: a drain deadline says so in its event, any other
    # cancellation is the user's second Ctrl-C (a drain after the user's first is taken
    # for the run's own here, and told apart in the verdict)
    charged = cancelled if kinds["drain_timeout"] else 0
    counts = HealthCounts(
        requests=sum(s.outcomes.values()),
        answered=s.outcomes.get("ok", 0),
        errors=s.errors,
        cancelled=charged,
        cancelled_by_user=cancelled - charged,
        odd_replies=sum(s.outcomes.get(k, 0) for k in ("empty", "reasoning_only", "truncated")),
        hangs=kinds["hang_suspected"],
        restarts=max(int(num(server, "restarts") or 0), kinds["restart"]),
        downs=outages(kinds, server),
        preemptions=float(num(server, "preemptions") or 0.0),
        hardware=hardware,
        users_crashed=kinds["user_crashed"],
        workers_died=kinds["worker_died"],
        recorder_failed=kinds["recorder_failed"],
        records_failed=kinds["record_failed"],
        collector_failed=kinds["collector_failed"],
        error_rate_limit=float(rate) if isinstance(rate, int | float) else DEFAULT_ERROR_RATE,
    )
    found = health_findings(counts)
    found += [f for c in slo_checks(s, slo) if (f := c.finding()) is not None]
    if kinds["model_mismatch"]:
        found.append(Finding("WARN", "model_mismatch", "model mismatch"))
    if any(c.get("flagged") for c in gpu_cards(s.collectors.get("gpu"))):
        found.append(Finding("WARN", "idle_gpu", "idle GPU"))
    if warnings:
        found.append(
            Finding("WARN", "warnings", f"{warnings} warning{'' if warnings == 1 else 's'}")
        )
    if kinds["hang_suspected"] > kinds["hang_cleared"]:  # still hanging: say so
        found = [replace(f, short="hang now") if f.code == "hangs" else f for f in found]
    found.sort(key=lambda f: f.level != "FAIL")
    level = LEVELS[grade(found)]
    return Verdict(level, tuple(f.short for f in found), tier_marks(s, slo))


def outages(kinds: Counter[str], server: Mapping[str, Any]) -> int:
    """The server's outages so far: its ``server_down`` events but those the hang gate
    found inside a hang (``server_frozen``), or one while it is down before any event came."""
    downs = kinds["server_down"] - kinds[FROZEN_KIND]
    return max(downs, 1 if server.get("up") is False and not kinds["server_down"] else 0)


def slo_checks(s: Snapshot, slo: Mapping[str, Any] | None) -> list[SloCheck]:
    """The SLO (or a tier's limits) on the headline figures so far, as the verdict grades
    them (``SloCheck``); a figure with no value yet is left out."""
    live = {
        "ttft_p95": (s.ttft_p95_run, s.ttft_n),
        "decode_tok_s_p50": (s.decode_p50_run, s.decode_n),
    }
    out: list[SloCheck] = []
    for key, figure, _, _, unit, worse in SLO_FIGURES:
        limit, (value, n) = slo_limit(slo, key), live[key]
        if limit is not None and value is not None:
            out.append(SloCheck(figure, unit, limit, value, n, None, worse))
    return out


def tier_marks(s: Snapshot, slo: Mapping[str, Any] | None) -> tuple[str, ...]:
    """Each tier in a few characters, missed ones first (worst first): ``name ✖x1.3`` when
    a figure misses it (the worst factor), ``name ? n=5`` when one is not judged yet,
    ``name ✓`` when all are met; a tier without a figure yet is left out."""
    tiers = (slo or {}).get("tiers")
    if not isinstance(tiers, Mapping):
        return ()
    marks: list[tuple[float, str]] = []
    for name, limits in tiers.items():
        checks = slo_checks(s, limits) if isinstance(limits, Mapping) else []
        if not checks:
            continue
        status, factor = tier_grade(checks)
        if status == "MISSED":
            marks.append((-(factor or 0.0), f"{name} ✖{times(factor or 0.0)}"))
        elif status == "NOT JUDGED":
            marks.append((0.0, f"{name} ? n={min(c.n for c in checks)}"))
        else:
            marks.append((1.0, f"{name} ✓"))
    return tuple(m for _, m in sorted(marks, key=lambda m: m[0]))
