"""Which server a run ran against, and what its KV cache is: a shared pool or slots.

vLLM and SGLang keep one KV pool that every running sequence shares, so "the pool holds
N users' conversations" is a fair reading. llama.cpp's server has ``--parallel`` slots,
each its own context of ``n_ctx`` tokens: a conversation lives in one slot and can never
use another's room, so the slots' contexts summed are no pool at all. Every output that
states the cache's size (the capacity answer, the report, ``summary.json``, the
fingerprint) asks here which of the two the run had.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from stress.analysis import figures
from stress.analysis.figures import Record
from stress.analysis.rundata import RunData
from stress.analysis.runfiles import end_time

KINDS = ("vllm", "sglang", "llamacpp")


def server_kind(run: RunData) -> str | None:
    """The server's dialect, from the first source that names a known one: the server
    collector's summary, the server samples, the probe's kind, the manifest's
    ``server_kind``; None when none does."""
    sampled = next((s.get("dialect") for s in run.server if s.get("dialect")), None)
    for kind in (
        run.collector("server").get("dialect"),
        sampled,
        run.manifest.probe.get("kind"),
        run.manifest.server_kind,
    ):
        if kind in KINDS:
            return str(kind)
    return None


@dataclass(frozen=True, slots=True)
class SlotLayout:
    """llama.cpp's slots: how many, and each one's context (prompt + reply) in tokens."""

    count: int
    context_tokens: int | None
    """The smallest slot's n_ctx (llama.cpp gives every slot the same); None: unknown."""

    def sentence(self) -> str:
        """'16 slots of 32,768 tokens: 16 conversations at once, each up to 32,768 tokens
        (prompt + reply)'."""
        s = "" if self.count == 1 else "s"
        if self.context_tokens is None:
            return f"{self.count:,} slot{s}: {self.count:,} conversation{s} at once"
        ctx = f"{self.context_tokens:,}"
        return (
            f"{self.count:,} slot{s} of {ctx} tokens: {self.count:,} conversation{s} at "
            f"once, each up to {ctx} tokens (prompt + reply)"
        )


def _int(v: object) -> int | None:
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) and v > 0 else None


def slot_layout(run: RunData) -> SlotLayout | None:
    """The slots of a llama.cpp run (the probe's /props and /slots, else the server
    samples' /slots summary); None for any other server or when the count is unknown."""
    if server_kind(run) != "llamacpp":
        return None
    probe = run.manifest.probe
    ctx = [c for c in (_int(v) for v in probe.get("slot_n_ctx") or ()) if c is not None]
    count = _int(probe.get("slots")) or (len(ctx) or None)
    sampled: Mapping[str, Any] = next(
        (s["slots"] for s in run.server if isinstance(s.get("slots"), dict)), {}
    )
    count = count or _int(sampled.get("total"))
    if count is None:
        return None
    return SlotLayout(count, min(ctx) if ctx else _int(sampled.get("n_ctx_min")))


def shared_pool_tokens(run: RunData) -> float | None:
    """The shared KV pool in tokens (``figures.kv_pool_tokens``); None on llama.cpp, whose
    slots are separate contexts (their n_ctx summed is no pool a conversation can use)."""
    if server_kind(run) == "llamacpp":
        return None
    return figures.kv_pool_tokens(run.server, run.collector("server"), run.manifest.probe)


@dataclass(frozen=True, slots=True)
class PastSlots:
    """llama.cpp's cache tier below the slots, seen from the turns it had to serve."""

    turns: int
    """Follow-up turns whose slot another conversation most likely took (``past_slots``)."""
    retention: float | None
    """Cache retention over those turns: what came back from below the slots."""
    others: int
    """The other follow-up turns (their slot most likely still held their prompt)."""
    others_retention: float | None


def _returning(records: list[Record]) -> list[tuple[Record, float]]:
    """Each follow-up turn that counts for retention with its user's previous turn's end."""
    last_end: dict[Any, float] = {}
    out = []
    for r in sorted(records, key=lambda r: float(r.get("t_start") or 0.0)):
        user = r.get("user")
        if figures.counts_for_retention(r) and user in last_end:
            out.append((r, last_end[user]))
        last_end[user] = max(last_end.get(user, 0.0), end_time(r))
    return out


def past_slots(run: RunData) -> PastSlots | None:
    """Cache retention of the turns that came back after their slot was most likely given
    away, beside the other turns'; None off llama.cpp, with the slot count unknown, or
    when no turn came back that way.

    A slot holds one prompt; a finished turn leaves its prompt in its slot, and llama.cpp
    gives a new turn the idle slot holding the same prompt, else the least recently used
    one. So once at least as many other users have started a turn since a user's last one
    as there are slots, that user's slot has most likely gone to another conversation, and
    what its next turn still finds cached came from below the slots: the host-RAM prompt
    cache (``--cache-ram``), whose size and hits llama.cpp reports nowhere."""
    layout = slot_layout(run)
    if layout is None:
        return None
    starts = sorted((float(r.get("t_start") or 0.0), r.get("user")) for r in run.requests)
    times = [t for t, _ in starts]
    past: list[Record] = []
    kept: list[Record] = []
    for r, since in _returning(figures.main_requests(run.requests)):
        lo, hi = bisect_right(times, since), bisect_left(times, float(r.get("t_start") or 0.0))
        others = {u for _, u in starts[lo:hi] if u != r.get("user")}
        (past if len(others) >= layout.count else kept).append(r)
    if not past:
        return None
    return PastSlots(
        len(past), figures.cache_retention(past), len(kept), figures.cache_retention(kept)
    )
