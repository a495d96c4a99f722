"""Run a capacity search: each step is ordinary runs of the scenario at one user count.

Every pass of every step is a complete run directory under the search's own directory
(``out/<time>-capacity-<scenario>/``), with its own warm-up, records, summary.json and
report, so any two steps can be put side by side with ``stress compare`` and ``stress ls``
lists them. A step is judged with the one analysis (``stress.analysis``): the verdict's
SLO checks and health findings of each pass. ``capacity.json`` beside them holds the
search: its settings, each step, the bracket and the answer; it is rewritten after every
step, so a search that is stopped keeps what it found.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from stress.fmt import times, tokens
from stress.recorder import new_run_dir, write_json
from stress.scenario import LoadedScenario, SearchSpec, with_overrides
from stress.search.steps import Search, Step

HEALTH_STOPS = frozenset({"hangs"})
"""Findings that end the search: a server that hangs at N users has answered it."""
NOT_SLO = frozenset({"slo", "slo_not_judged"})


def step_scenario(loaded: LoadedScenario, spec: SearchSpec, value: int) -> LoadedScenario:
    """The scenario at one value of the axis (users, or tokens of history for the length
    axis); with ``rounds``, at least enough of them for ``min_requests`` judged requests
    (a history turn is warm-up, so the length axis adds one)."""
    sc = loaded.scenario
    length = spec.axis == "length"
    users = sc.users.count if length else value
    rounds = sc.rounds
    if rounds is not None:
        warm = sc.warmup.rounds + (1 if length else 0)
        rounds = max(rounds, warm + math.ceil(spec.min_requests / users))
    return with_overrides(
        loaded, users=users, rounds=rounds, start_tokens=value if length else None
    )


def make_search(loaded: LoadedScenario, spec: SearchSpec) -> Search:
    """The pure search over the scenario's axis."""
    if spec.axis == "length":
        top = spec.length_max or int(0.9 * loaded.scenario.conversation.ceiling_tokens)
        start = min(spec.length_start, top)
        return Search(start, spec.factor, top, spec.length_width, unit="tokens")
    return Search(spec.start, spec.factor, spec.max_users, spec.width)


def judge_step(step: Step, summaries: list[dict[str, Any]]) -> None:
    """Fill ``step`` from its passes' summary.json: MET only when every pass met the SLO
    and stayed healthy; MISSED when a pass missed it or failed its health; NOT JUDGED
    when a pass had too few requests to judge."""
    statuses: list[str] = []
    for s in summaries:
        server = s.get("server") or {}
        if isinstance(server.get("probe_slots"), int) and server.get("probe_kind") == "llamacpp":
            step.slots = int(server["probe_slots"])
            step.slot_context = int(server.get("probe_context_length") or 0)
        capacity = s.get("capacity") or {}
        step.conversation_tokens = max(
            step.conversation_tokens, int(capacity.get("max_conversation_tokens") or 0)
        )
        causes = [c for c in capacity.get("causes") or [] if c.get("code") != "telemetry_gaps"]
        if causes and not step.limit:
            step.limit = str(causes[0].get("title") or "")
        verdict = s.get("verdict") or {}
        checks = verdict.get("slo") or []
        factors = [float(c["factor"]) for c in checks if isinstance(c.get("factor"), int | float)]
        step.factors.append(max(factors, default=0.0))
        fails = [
            f
            for f in verdict.get("findings") or []
            if f.get("level") == "FAIL" and f.get("code") not in NOT_SLO
        ]
        step.reasons += [str(f.get("short")) for f in fails]
        step.hang = step.hang or any(f.get("code") in HEALTH_STOPS for f in fails)
        if fails:
            statuses.append("MISSED")
        elif not checks or any(c.get("status") == "NOT JUDGED" for c in checks):
            statuses.append("NOT JUDGED")
        else:
            statuses.append("MISSED" if any(c.get("status") == "MISSED" for c in checks) else "MET")
    if "MISSED" in statuses:
        step.status = "MISSED"
    elif "NOT JUDGED" in statuses or not statuses:
        step.status = "NOT JUDGED"
    else:
        step.status = "MET"


RunStep = Callable[[LoadedScenario, Path], Any]
"""Runs one pass (``stress.run.execute`` in production) and returns its ``RunOutcome``."""


async def run_search(
    loaded: LoadedScenario,
    out_dir: Path,
    settings: SearchSpec,
    run_pass: RunStep,
    say: Callable[[str], None] = print,
) -> tuple[Search, Path]:
    """Search, writing each pass's run directory and ``capacity.json`` under a new
    directory in ``out_dir``; returns the finished search and that directory."""
    root = new_run_dir(out_dir, f"capacity-{loaded.scenario.name}")
    search = make_search(loaded, settings)
    slo = loaded.scenario.slo
    criterion = slo_text(slo.ttft_p95, slo.decode_tok_s_p50)
    say(f"capacity search: {loaded.scenario.name}, SLO {criterion}; writing {root}")
    started = time.time()
    at = f" at {loaded.scenario.users.count} users" if settings.axis == "length" else ""
    while (value := search.next_value()) is not None:
        step = Step(value)
        summaries: list[dict[str, Any]] = []
        for k in range(settings.repeat):
            say(
                f"step {len(search.steps) + 1}: {search.fmt(value)}{at}, pass "
                f"{k + 1}/{settings.repeat}"
                f"  (bracket so far: {bracket_text(search)})"
            )
            outcome = await run_pass(step_scenario(loaded, settings, value), root)
            step.run_dirs.append(str(Path(outcome.run_dir).relative_to(root)))
            summaries.append(outcome.summary)
        judge_step(step, summaries)
        search.steps.append(step)
        say(f"step {len(search.steps)}: {search.fmt(value)}{at} -> {step_text(step)}")
        write_json(root / "capacity.json", document(search, settings, criterion, started, at))
    write_json(root / "capacity.json", document(search, settings, criterion, started, at))
    say(f"\n{answer_line(search, criterion, at)}")
    slots = next((s for s in search.steps if s.slots), None)
    if slots is not None:  # llama.cpp: the slots bound every answer
        say(
            f"llama.cpp serves {slots.slots} slots of {tokens(slots.slot_context)} tokens: at "
            "most that many requests run at once (others wait), and no conversation grows "
            "past a slot's context"
        )
    say(f"stopped: {STOP_TEXT[search.stop or 'bracket']}")
    say(f"search directory: {root}  (each step's runs: stress ls {root})")
    return search, root


STOP_TEXT = {
    "bracket": "the bracket is as narrow as asked (search.width)",
    "maximum": "the SLO held up to the most the search may try (search.max_users / length_max)",
    "hang": "the server hung",
    "not_judged": "a step had fewer requests than the SLO needs to be judged (20); "
    "lengthen the steps (duration or rounds)",
    "missed_at_start": "the SLO was missed at the least the search tried",
}


def answer_line(search: Search, criterion: str, at: str = "") -> str:
    """'capacity at SLO (TTFT p95 <= 5 s): 11 users [11-12] with conversations up to 30k
    tokens; first limit: ...' (the limit the first missed step's analysis named); on the
    length axis '... : 12k tokens [12-14] of history at 8 users ...'."""
    line = f"capacity at SLO ({criterion}): {search.answer()}"
    line += " of history" + at if search.unit == "tokens" and search.met else ""
    lo, hi = search.met, search.missed
    if lo is not None and lo.conversation_tokens:
        line += f" with conversations up to {tokens(lo.conversation_tokens)} tokens"
    if hi is not None and hi.limit:
        line += f"; first limit: {hi.limit} (at {search.fmt(hi.value)})"
    elif hi is not None and hi.reasons:
        line += f"; at {search.fmt(hi.value)}: {', '.join(dict.fromkeys(hi.reasons))}"
    return line


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


def step_text(step: Step) -> str:
    spread = ", ".join(times(f) for f in step.factors)
    why = f"; {', '.join(dict.fromkeys(step.reasons))}" if step.reasons else ""
    return f"{step.status} (SLO factor per pass: {spread}){why}"


def document(
    search: Search, settings: SearchSpec, criterion: str, started: float, at: str = ""
) -> dict[str, Any]:
    lo, hi = search.met, search.missed
    return {
        "kind": "capacity_search",
        "criterion": criterion,
        "settings": settings.model_dump(),
        "started": started,
        "steps": [asdict(s) for s in search.steps],
        "axis": settings.axis,
        "unit": search.unit,
        "bracket": [lo.value if lo else None, hi.value if hi else None],
        "answer": search.answer(),
        "answer_line": answer_line(search, criterion, at),
        "llamacpp_slots": next((s.slots for s in search.steps if s.slots), None),
        "stop": search.stop,
    }
