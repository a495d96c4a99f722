"""The header's verdict badge: is this run healthy, suspicious or failing right now?

A soak that says "zero errors" can still hide a hang, a restart, empty replies, stalls, a
GPU that logged an Xid (field notes 4, 5, 10), or a run that cannot write its files, lost
a collector or a user's task. The badge folds all of those into one colour an
operator can see from across the room, and names the reasons, by the very rules of the
end-of-run verdict (one judge: ``stress.analysis.judge``). Pure: no Textual.
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
)
from stress.core.limits import DEFAULT_ERROR_RATE
from stress.live.state import Snapshot
from stress.tui.format import gpu_cards, num

Level = Literal["ok", "warn", "bad"]
HARDWARE_KINDS = frozenset({"xid", "ecc", "ecc_dbe", "aer", "gpu_lost", "gpu_unavailable"})


@dataclass(frozen=True, slots=True)
class Verdict:
    level: Level
    reasons: tuple[str, ...]

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
        downs=max(kinds["server_down"], 1 if server.get("up") is False else 0),
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
    live = {
        "ttft_p95": (s.ttft_p95_run, s.ttft_n),
        "decode_tok_s_p50": (s.decode_p50_run, s.decode_n),
    }
    for key, figure, _, _, unit, worse in SLO_FIGURES:
        limit = slo_limit(slo, key)
        if limit is not None and live[key][0] is not None:
            check = SloCheck(figure, unit, limit, live[key][0], live[key][1], None, worse)
            finding = check.finding()
            if finding is not None:
                found.append(finding)
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
    return Verdict(level, tuple(f.short for f in found))
