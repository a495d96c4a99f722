"""The header's verdict badge: is this run healthy, suspicious or failing right now?

A soak that says "zero errors" can still hide a hang, a restart, empty replies, stalls, a
GPU that logged an Xid (field notes 4, 5, 10), or a run that cannot write its files, lost
a collector or a user's task. The badge folds all of those into one colour an
operator can see from across the room, and names the reasons. Pure: no Textual.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from stress.live import Snapshot
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


def _n(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def judge(s: Snapshot, kinds: Counter[str], warnings: int, hardware: int) -> Verdict:
    """``kinds`` counts every run event by kind; ``warnings`` / ``hardware`` count the
    warning-severity events and the GPU error events seen so far."""
    bad: list[str] = []
    warn: list[str] = []
    server: Mapping[str, Any] = s.collectors.get("server") or {}
    errors = s.outcomes.get("error", 0)
    if errors:
        bad.append(_n(errors, "error"))
    restarts = max(int(num(server, "restarts") or 0), kinds["restart"])
    if restarts:
        bad.append(_n(restarts, "restart"))
    if server.get("up") is False:
        bad.append("server down")
    if kinds["hang_suspected"] > kinds["hang_cleared"]:
        bad.append("hang")
    elif kinds["hang_suspected"]:
        warn.append(_n(kinds["hang_suspected"], "hang"))
    if hardware:
        bad.append(_n(hardware, "hw error"))
    if kinds["recorder_failed"]:
        bad.append("recorder failed")
    if kinds["user_crashed"]:
        bad.append(f"{_n(kinds['user_crashed'], 'user')} crashed")
    if kinds["collector_failed"]:
        bad.append(f"{_n(kinds['collector_failed'], 'collector')} failed")
    if kinds["stall"]:
        bad.append(_n(kinds["stall"], "stall"))
    empty = sum(s.outcomes.get(k, 0) for k in ("empty", "reasoning_only", "truncated"))
    if empty:
        warn.append(f"{empty} empty")
    preempt = num(server, "preemptions")
    if preempt:
        warn.append(f"{preempt:.0f} preempted")
    if kinds["model_mismatch"]:
        warn.append("model mismatch")
    if any(c.get("flagged") for c in gpu_cards(s.collectors.get("gpu"))):
        warn.append("idle GPU")
    if warnings:
        warn.append(_n(warnings, "warning"))
    if bad:
        return Verdict("bad", tuple(bad + warn))
    if warn:
        return Verdict("warn", tuple(warn))
    return Verdict("ok", ())
