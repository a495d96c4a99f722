"""A capacity search's steps: each is ordinary runs of the scenario at one user count.

Every pass of every step is a complete run directory under the search's own directory
(``out/<time>-capacity-<scenario>/``), with its own warm-up, records, summary.json and
report, so any two steps can be put side by side with ``stress compare`` and ``stress ls``
lists them. A step is judged with the one analysis (``stress.analysis``): the verdict's
SLO checks and health findings of each pass. ``capacity.json`` beside them holds the
search: its settings, each step, the bracket and the answer; it is rewritten after every
step, so a search that is stopped keeps what it found (``stress.search.session`` runs the
passes and says how the search ended).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from stress.config.scenario import LoadedScenario, Scenario, SearchSpec, with_overrides
from stress.core.fmt import times, tokens
from stress.search.steps import Search, Step, boundary, decide

HEALTH_STOPS = frozenset({"hangs"})
"""Findings that end the search: a server that hangs at N users has answered it."""
NOT_SLO = frozenset({"slo", "slo_not_judged"})


def step_rounds(sc: Scenario, spec: SearchSpec, users: int, start_tokens: int | None) -> int | None:
    """A pass's rounds at ``users`` users: the scenario's, or enough for ``min_requests``
    judged requests (a history turn is warm-up, so it adds one); None with a duration."""
    if sc.rounds is None:
        return None
    warm = sc.warmup.rounds + (1 if start_tokens else 0)
    return max(sc.rounds, warm + math.ceil(spec.min_requests / users))


def step_scenario(
    loaded: LoadedScenario, spec: SearchSpec, users: int, start_tokens: int | None
) -> LoadedScenario:
    """The scenario at one point of the search: ``users`` users whose conversations open
    with ``start_tokens`` tokens of history (None: the scenario's own), for
    ``step_rounds``."""
    rounds = step_rounds(loaded.scenario, spec, users, start_tokens)
    return with_overrides(loaded, users=users, rounds=rounds, start_tokens=start_tokens)


def make_search(loaded: LoadedScenario, spec: SearchSpec) -> Search:
    """The pure search over the scenario's axis (for the grid: its first row's)."""
    if spec.axis == "length":
        top = length_top(loaded, spec)
        start = min(spec.length_start, top)
        return Search(start, spec.factor, top, spec.length_width, unit="tokens")
    return Search(spec.start, spec.factor, spec.max_users, spec.width)


def length_top(loaded: LoadedScenario, spec: SearchSpec) -> int:
    return spec.length_max or int(0.9 * loaded.scenario.conversation.ceiling_tokens)


SLOT_MARGIN = 64
"""Tokens of a slot kept for the chat template and the system prompt's framing."""
QUESTION_TOKENS = 64
"""Tokens allowed for a turn's question and its message framing."""


def slot_history(step: LoadedScenario, slot_context: int) -> int:
    """The most history a step's conversations can open with on a llama.cpp slot of
    ``slot_context`` tokens: the slot less what the step adds to each conversation, a
    turn (the longest paste and a question) and its reply (``max_tokens``) per round (one
    round when the step runs for a duration). Past it a conversation outgrows its slot
    within the step and its turns fail, which measures the slot, not the load."""
    sc = step.scenario
    paste = sc.conversation.turn.paste
    turn = (max(paste.tokens) if paste is not None else 0) + QUESTION_TOKENS
    return max(1, slot_context - (sc.rounds or 1) * (turn + sc.request.max_tokens) - SLOT_MARGIN)


def slot_sentence(slot_context: int, top: int) -> str:
    return (
        f"a llama.cpp slot holds {tokens(slot_context)} tokens: at most {tokens(top)} tokens "
        "of history with a turn and its reply"
    )


def bound_by_slots(search: Search, slot_context: int, top: int) -> bool:
    """On the length axis, lower the search's maximum to ``top``, the most history a
    llama.cpp slot holds; True when that changed it (``search.bound`` says why)."""
    if search.unit != "tokens" or top >= search.maximum:
        return False
    search.maximum = max(top, search.start)
    search.bound = slot_sentence(slot_context, search.maximum)
    return True


def stop_text(search: Search) -> str:
    if search.stop == "maximum" and search.bound:
        return f"the SLO held up to the most a slot allows ({search.bound})"
    return STOP_TEXT[search.stop or "bracket"]


def grid_lengths(loaded: LoadedScenario, spec: SearchSpec) -> list[int]:
    """The capacity map's rows: ``lengths``, else ``length_start`` doubling up to the
    longest history tried."""
    if spec.lengths:
        return sorted(set(spec.lengths))
    top = length_top(loaded, spec)
    rows = [min(spec.length_start, top)]
    while rows[-1] * 2 <= top and len(rows) < 12:
        rows.append(rows[-1] * 2)
    return rows


def judge_step(
    step: Step, summaries: list[dict[str, Any]], confidence: float = 0.9, passes_max: int = 1
) -> None:
    """Fill ``step`` from its passes' summary.json and decide it (``settle_step``)."""
    settle_step(step, [read_pass(step, s) for s in summaries], confidence, passes_max)


def read_pass(step: Step, s: dict[str, Any]) -> str:
    """Add one pass's summary.json to ``step``; its own status: FAILED (its health
    failed: a hang, a restart, errors), NOT JUDGED (too few requests), or MET / MISSED on
    its SLO checks."""
    server = s.get("server") or {}
    if isinstance(server.get("probe_slots"), int) and server.get("probe_kind") == "llamacpp":
        step.slots = int(server["probe_slots"])
        step.slot_context = int(server.get("probe_context_length") or 0)
    capacity = s.get("capacity") or {}
    step.conversation_tokens = max(
        step.conversation_tokens, int(capacity.get("max_conversation_tokens") or 0)
    )
    causes = [  # the causes that may lead (Cause.can_lead)
        c
        for c in capacity.get("causes") or []
        if c.get("code") != "telemetry_gaps" and not c.get("minor")
    ]
    if causes and not step.limit:
        step.limit = str(causes[0].get("title") or "")
    verdict = s.get("verdict") or {}
    judged = add_checks(step, verdict.get("slo") or [])
    fails = [
        f
        for f in verdict.get("findings") or []
        if f.get("level") == "FAIL" and f.get("code") not in NOT_SLO
    ]
    step.reasons += [str(f.get("short")) for f in fails]
    step.hang = step.hang or any(f.get("code") in HEALTH_STOPS for f in fails)
    return "FAILED" if fails else judged


def add_checks(step: Step, checks: list[dict[str, Any]]) -> str:
    """Add one pass's SLO checks (summary.json's) to ``step``: their text and the worst
    factor; NOT JUDGED (none, or one with too few requests), MISSED or MET."""
    step.checks.append("; ".join(str(c.get("text")) for c in checks))
    factors = [float(c["factor"]) for c in checks if isinstance(c.get("factor"), int | float)]
    step.factors.append(max(factors, default=0.0))
    if not checks or any(c.get("status") == "NOT JUDGED" for c in checks):
        return "NOT JUDGED"
    return "MISSED" if any(c.get("status") == "MISSED" for c in checks) else "MET"


def read_tier(tier: Step, s: dict[str, Any], name: str, health: str, main: Step) -> str:
    """Add one pass's judgement of SLO tier ``name`` (summary.json's ``verdict.slo_tiers``)
    to the tier's ``tier`` step; its status: the pass's own health first (``health``, from
    ``read_pass``: a failed pass fails every tier), then the tier's checks."""
    checks = ((s.get("verdict") or {}).get("slo_tiers") or {}).get(name) or []
    judged = add_checks(tier, checks)
    tier.hang, tier.reasons, tier.run_dirs = main.hang, main.reasons, main.run_dirs
    tier.conversation_tokens, tier.limit = main.conversation_tokens, main.limit
    return "FAILED" if health == "FAILED" else judged


def tier_searches(
    loaded: LoadedScenario, settings: SearchSpec, row: Search | None = None
) -> dict[str, Search]:
    """One search per ``slo.tiers`` entry, with the main search's start, factor, maximum
    and width (``make_search``); empty without tiers. A grid's later row passes its own
    search (``row``, started at the row before's answer): each tier starts where it does,
    then goes on from wherever the row's steps leave it."""
    if row is None:
        return {name: make_search(loaded, settings) for name in loaded.scenario.slo.tiers}
    return {
        name: Search(row.start, row.factor, row.maximum, row.width)
        for name in loaded.scenario.slo.tiers
    }


def tier_criterion(loaded: LoadedScenario, name: str) -> str:
    tier = loaded.scenario.slo.tiers[name]
    return slo_text(tier.ttft_p95, tier.decode_tok_s_p50)


def settle_step(step: Step, statuses: list[str], confidence: float, passes_max: int) -> None:
    """The step's status from its passes so far: MISSED when a pass failed its health,
    NOT JUDGED when a pass could not be judged (or none ran), else ``decide`` on the
    passes' SLO factors (MET, MISSED, or UNDECIDED while the limit is inside their
    interval at ``confidence``)."""
    if "FAILED" in statuses:
        step.status = "MISSED"
    elif "NOT JUDGED" in statuses or not statuses:
        step.status = "NOT JUDGED"
    else:
        step.status = decide(step.factors, confidence, passes_max)


RunStep = Callable[[LoadedScenario, Path, str], Awaitable[Any]]
"""Runs one pass (``stress.runtime.run.execute`` in production) and returns its ``RunOutcome``;
the string says where the search stands, for the live view's header."""


@dataclass(slots=True)
class Row:
    """One user-count search at one conversation length (the grid's rows; the users and
    length axes are a single row)."""

    search: Search
    length: int | None
    """Tokens of history each conversation opens with (None: the scenario's own)."""
    tiers: dict[str, Search] = field(default_factory=dict)
    """Each SLO tier's search over the row's passes (``slo.tiers``)."""


class Progress:
    """Where the search stands, in one line for the live view and the step lines."""

    def __init__(self, rows: list[Row], grid: bool) -> None:
        self.rows = rows
        self.grid = grid

    def line(self, row: Row, value: int, k: int, repeat: int, at: str) -> str:
        s = row.search
        where = f"{s.fmt(value)}{at}"
        if self.grid:
            where += f" at {tokens(row.length or 0)} tokens of history"
        done = " ".join(f"{st.value}:{st.status.replace('NOT JUDGED', '?')}" for st in s.steps)
        text = (
            f"capacity search · step {len(s.steps) + 1}: {where}, pass {k + 1}/{repeat}"
            f" · bracket {bracket_text(s)}"
        )
        if self.grid:
            text += f" · row {self.rows.index(row) + 1}/{len(self.rows)}"
        return text + (f" · done {done}" if done else "")


STOP_TEXT = {
    "bracket": "the bracket is as narrow as asked (search.width)",
    "maximum": "the SLO held up to the most the search may try (search.max_users / length_max)",
    "hang": "the server hung",
    "not_judged": "a step had fewer requests than the SLO needs to be judged (20); "
    "lengthen the steps (duration or rounds)",
    "missed_at_start": "the SLO was missed at the least the search tried",
}


def answer_line(rows: list[Row], criterion: str, at: str = "") -> str:
    """One row: 'capacity at SLO (TTFT p95 <= 5 s): 11 users [11-12] with conversations
    up to 30k tokens; first limit: ...' (the limit the first missed step's analysis named);
    on the length axis '... : 12k tokens [12k-14k] of history at 8 users ...'. The grid:
    'capacity map at SLO (...): 2k tokens of history: 12 users [12-13]; 8k: ...'."""
    if len(rows) == 1 and rows[0].length is None:
        return row_answer(rows[0].search, f"capacity at SLO ({criterion}): ", at)
    parts = [f"{tokens(r.length or 0)} tokens: {r.search.answer()}" for r in rows]
    return f"capacity map at SLO ({criterion}), by tokens of history: " + "; ".join(parts)


def tier_map_line(rows: list[Row], name: str, criterion: str) -> str:
    """A grid's answer for SLO tier ``name``, as ``answer_line``'s for the SLO: 'capacity
    map at SLO tier batch (TTFT p95 <= 30 s), by tokens of history: 2k tokens: 24 users
    [24-25]; 8k: ...' (the rows whose search reached the tier)."""
    parts = [
        f"{tokens(r.length or 0)} tokens: {r.tiers[name].answer()}" for r in rows if name in r.tiers
    ]
    head = f"capacity map at SLO tier {name} ({criterion}), by tokens of history: "
    return head + "; ".join(parts)


def row_tier_answer(row: Row, name: str, criterion: str) -> str:
    """A grid row's answer for SLO tier ``name``, with the row's history first, so the line
    reads alone: '30k tokens of history: SLO tier batch (TTFT p95 <= 30 s): 24 users
    [24-25] with conversations up to ...'."""
    head = f"{tokens(row.length or 0)} tokens of history: SLO tier {name} ({criterion}): "
    return row_answer(row.tiers[name], head)


def row_answer(search: Search, head: str, at: str = "") -> str:
    # the undecided steps come last: the bracket's conversations and limit belong to it
    line = head + search.answer(note=False)
    line += " of history" + at if search.unit == "tokens" and search.met else ""
    lo, hi = search.met, search.missed
    if lo is not None and lo.conversation_tokens:
        line += f" with conversations up to {tokens(lo.conversation_tokens)} tokens"
    if hi is not None and hi.limit:
        line += f"; first limit: {hi.limit} (at {search.fmt(hi.value)})"
    elif hi is not None and hi.reasons:
        line += f"; at {search.fmt(hi.value)}: {', '.join(dict.fromkeys(hi.reasons))}"
    return line + search.undecided_note()


def cell_text(step: Step) -> str:
    """A map cell: 'MET x0.62', 'MISSED x1.4' (the worst pass's SLO factor)."""
    worst = max(step.factors, default=0.0)
    return f"{step.status} {times(worst)}" if worst else step.status


def map_text(rows: list[Row], criterion: str) -> str:
    """The capacity map as a text table: a row per history length, a column per user
    count tried, each cell MET / MISSED with the worst pass's SLO factor, then the row's
    capacity at the SLO and at each SLO tier (its own column, so each tier reads down)."""
    users = sorted({s.value for r in rows for s in r.search.steps})
    names = list(rows[0].tiers)
    head = ["history", *[str(u) for u in users], "capacity", *[f"tier {n}" for n in names]]
    body = []
    for r in rows:
        by = {s.value: cell_text(s) for s in r.search.steps}
        tiers = [r.tiers[n].answer() if n in r.tiers else "." for n in names]
        body.append(
            [
                f"{tokens(r.length or 0)} tokens",
                *[by.get(u, ".") for u in users],
                r.search.answer(),
                *tiers,
            ]
        )
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
    lines = [
        f"capacity map (users x tokens of history), SLO {criterion}; cells: the "
        "worst pass's SLO factor" + ("; tier columns: each SLO tier's capacity" if names else "")
    ]
    for line in [head, *body]:
        lines.append("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
    return "\n".join(lines)


def slo_text(ttft: float | None, decode: float | None) -> str:
    parts = []
    if ttft is not None:
        parts.append(f"TTFT p95 <= {ttft:g} s")
    if decode is not None:
        parts.append(f"decode p50 >= {decode:g} tok/s")
    return ", ".join(parts) or "none"


def bracket_text(search: Search) -> str:
    lo, hi = search.met, search.missed
    return f"[{lo.value if lo else '?'}-{hi.value if hi else '?'}]"


def step_text(step: Step, reasons: bool = True) -> str:
    spread = ", ".join(times(f) for f in step.factors)
    why = f"; {', '.join(dict.fromkeys(step.reasons))}" if step.reasons and reasons else ""
    return f"{step.status} (SLO factor per pass: {spread}){why}"


def _tier_doc(name: str, t: Search, criterion: str, line: str = "") -> dict[str, Any]:
    """capacity.json's entry for one SLO tier: its own bracket and answer (``line``: the
    answer line, when not ``tier_answer``'s)."""
    lo, hi = t.met, t.missed
    return {
        "criterion": criterion,
        "bracket": [lo.value if lo else None, hi.value if hi else None],
        "answer": t.answer(),
        "answer_line": line or tier_answer(name, t, criterion),
        "undecided": [st.value for st in t.undecided],
        "boundary": _boundary_doc(t),
        "stop": t.stop,
        "steps": [
            {"value": st.value, "status": st.status, "factors": st.factors} for st in t.steps
        ],
    }


def tier_answer(name: str, t: Search, criterion: str) -> str:
    """'SLO tier batch (TTFT p95 <= 30 s): 24 users [24-25] ...', as the main answer."""
    return row_answer(t, f"SLO tier {name} ({criterion}): ")


def _boundary_doc(search: Search) -> dict[str, Any] | None:
    """capacity.json's ``boundary``: the monotone fit's crossing of the limit, or None."""
    b = boundary(search)
    if b is None:
        return None
    return {
        "value": b.value,
        "below": list(b.below),
        "above": list(b.above),
        "cliff": b.cliff,
        "text": b.text(search.fmt),
    }


def document(
    rows: list[Row],
    settings: SearchSpec,
    criterion: str,
    started: float,
    at: str = "",
    scenario: str = "",
    tier_criteria: dict[str, str] | None = None,
) -> dict[str, Any]:
    """capacity.json: the settings, every step, the bracket(s) and the answer; a grid also
    has ``rows`` (one search per history length, each with its own ``tiers``) and
    ``map``; SLO tiers have ``tiers`` (each tier's criterion, bracket and answer, from
    ``tier_criteria``)."""
    tier_criteria = tier_criteria or {}
    first = rows[0].search
    lo, hi = first.met, first.missed
    steps = [s for r in rows for s in r.search.steps]
    doc: dict[str, Any] = {
        "kind": "capacity_search",
        "scenario": scenario,
        "criterion": criterion,
        "settings": settings.model_dump(),
        "started": started,
        "axis": settings.axis,
        "unit": first.unit,
        "steps": [asdict(s) for s in steps],
        "bracket": [lo.value if lo else None, hi.value if hi else None],
        "answer": first.answer(),
        "answer_line": answer_line(rows, criterion, at),
        "llamacpp_slots": next((s.slots for s in steps if s.slots), None),
        "llamacpp_slot_context": next((s.slot_context for s in steps if s.slot_context), None),
        "bound": first.bound or None,
        "undecided": [st.value for st in first.undecided],
        "boundary": _boundary_doc(first),
        "stop": first.stop,
        "stop_text": "; ".join(dict.fromkeys(stop_text(r.search) for r in rows if r.search.stop)),
    }
    if rows[0].tiers:
        doc["tiers"] = _tiers_doc(rows, settings.axis == "grid", tier_criteria)
    if settings.axis == "grid":
        doc |= _grid_doc(rows, tier_criteria)
    return doc


def _tiers_doc(rows: list[Row], grid: bool, criteria: dict[str, str]) -> dict[str, Any]:
    """capacity.json's ``tiers``: each SLO tier's search of the first row (a 1-D search's
    only one), as ``bracket`` is the first row's; on a grid a tier's answer line holds
    every row's answer (``tier_map_line``), as ``answer_line`` does for the SLO."""
    out = {}
    for name, t in rows[0].tiers.items():
        crit = criteria.get(name, "")
        out[name] = _tier_doc(name, t, crit, tier_map_line(rows, name, crit) if grid else "")
    return out


def _grid_doc(rows: list[Row], tier_criteria: dict[str, str]) -> dict[str, Any]:
    """capacity.json's ``rows`` (each row's search, and its SLO tiers' as the 1-D
    search's ``tiers``: a tier's capacity falls with the history as the SLO's does) and
    ``map``."""
    out: list[dict[str, Any]] = []
    for r in rows:
        entry: dict[str, Any] = {
            "length": r.length,
            "bracket": [
                r.search.met.value if r.search.met else None,
                r.search.missed.value if r.search.missed else None,
            ],
            "answer": r.search.answer(),
            "stop": r.search.stop,
            "steps": [asdict(s) for s in r.search.steps],
        }
        if r.tiers:
            entry["tiers"] = {}
            for name, t in r.tiers.items():
                crit = tier_criteria.get(name, "")
                entry["tiers"][name] = _tier_doc(name, t, crit, row_tier_answer(r, name, crit))
        out.append(entry)
    steps = [s for r in rows for s in r.search.steps]
    users = sorted({s.value for s in steps})
    cells = [
        [next((cell_text(s) for s in r.search.steps if s.value == u), None) for u in users]
        for r in rows
    ]
    return {
        "rows": out,
        "map": {"users": users, "lengths": [r.length for r in rows], "cells": cells},
    }
