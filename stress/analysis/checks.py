"""The run's checks: the loud warnings of the field notes and the run's health checks.

Each check is a rule with a code and one line of text, decided here once from the run's
files: ``summary.json`` lists them, the verdict (``stress.analysis.judge``) grades them
(``FAIL_CODES`` make a run FAIL: it measured nothing or lost part of itself), the report
and the terminal print them. ``accounting_text`` is the one sentence that says how many
requests were sent and recorded.

Every rule is one small registered function: it reads one view of the run and returns its
warning's line, or ``None`` when the run passes it. ``HEALTH_RULES`` (the run's own health,
``health_warnings``) and ``REQUEST_RULES`` (what the replies say, ``warnings_for``) hold
them in the order they are reported, which is their order in this file: a new rule goes
where its warning should print.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from stress.analysis.manifest import Manifest
from stress.analysis.rows import RequestRow
from stress.analysis.runfiles import Accounting, RunFiles

FAIL_CODES = frozenset(
    {
        "no_requests",
        "users_crashed",
        "workers_died",
        "recorder_failed",
        "records_lost",
        "measuring_noise",
        "all_replies_budget",
        "all_replies_empty",
    }
)
"""Warnings that make the verdict FAIL: the run measured nothing, or lost part of itself."""
NOTE_CODES = frozenset({"reconnects", "token_estimate"})
"""Checks that inform without grading: a pooled connection the server closed and that was
re-sent (recorded truthfully), token budgets from an estimate. Every other check is a WARN."""


def level_of(code: str) -> str:
    """How a check grades the run: "FAIL", "WARN" or "NOTE" (no effect on the grade)."""
    return "FAIL" if code in FAIL_CODES else ("NOTE" if code in NOTE_CODES else "WARN")


@dataclass(frozen=True, slots=True)
class RunView:
    """What the health rules read: the run's files, and their accounting worked out once."""

    files: RunFiles
    acct: Accounting

    @classmethod
    def of(cls, files: RunFiles) -> RunView:
        return cls(files, files.accounting)


@dataclass(frozen=True, slots=True)
class RequestView:
    """What the request rules read: every request (warm-up included), the manifest and the
    collectors' results, with the populations several rules share worked out once."""

    records: list[RequestRow]
    manifest: Manifest
    collectors: dict[str, Any]
    replied: list[RequestRow]
    """HTTP 200 and no failure: answered or not (empty and reasoning-only replies too)."""
    outcomes: Counter[Any]
    """The replies counted by outcome."""
    budget: list[RequestRow]
    """Replies with no answer text (reasoning-only or empty) that stopped at max_tokens."""

    @classmethod
    def of(
        cls, records: list[RequestRow], manifest: Manifest, collectors: dict[str, Any]
    ) -> RequestView:
        replied = [r for r in records if r.get("http_status") == 200 and not r.get("error_class")]
        no_text = ("reasoning_only", "empty")
        budget = [
            r for r in replied if r.get("outcome") in no_text and r.get("finish_reason") == "length"
        ]
        outcomes = Counter(r.get("outcome") for r in replied)
        return cls(records, manifest, collectors, replied, outcomes, budget)


View = TypeVar("View", RunView, RequestView)
Check = Callable[[View], str | None]


@dataclass(frozen=True, slots=True)
class Rule(Generic[View]):
    """One check: the warning's code (unique over both registries) and the function that
    returns its line for a run, or ``None`` when the run passes."""

    code: str
    check: Check[View]


HEALTH_RULES: list[Rule[RunView]] = []
"""The run's health rules, in report order."""
REQUEST_RULES: list[Rule[RequestView]] = []
"""The requests' rules, in report order."""


def _rule(registry: list[Rule[View]], code: str) -> Callable[[Check[View]], Check[View]]:
    """Register the decorated function as the rule for ``code``, after those above it."""

    def register(check: Check[View]) -> Check[View]:
        registry.append(Rule(code, check))
        return check

    return register


def _fired(rules: list[Rule[View]], view: View) -> list[dict[str, str]]:
    return [
        {"code": rule.code, "message": text}
        for rule in rules
        if (text := rule.check(view)) is not None
    ]


def health_warnings(files: RunFiles) -> list[dict[str, str]]:
    """The run's own health, from all its files: did it measure anything, did it lose
    users, records or collectors, which of its lines and values could not be used."""
    return _fired(HEALTH_RULES, RunView.of(files))


def warnings_for(
    records: list[RequestRow], manifest: Manifest, collectors: dict[str, Any]
) -> list[dict[str, str]]:
    """The loud warnings (each: code + one line). Decided on all requests, warm-up included."""
    return _fired(REQUEST_RULES, RequestView.of(records, manifest, collectors))


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def unreadable_text(unreadable: dict[str, int]) -> str:
    """Say which lines could not be read: "2 lines of requests.jsonl and 1 line of ..."."""
    parts = [f"{_plural(n, 'line')} of {name}" for name, n in unreadable.items() if n]
    return " and ".join([", ".join(parts[:-1]), parts[-1]] if len(parts) > 1 else parts)


# The run's health -------------------------------------------------------------------


@_rule(HEALTH_RULES, "no_requests")
def _no_requests(v: RunView) -> str | None:
    """No request has a record, or only warm-up requests do. Population: every record
    in requests.jsonl. Every figure of such a run is empty: it measured nothing."""
    files, acct = v.files, v.acct
    if not files.requests:
        sent = f" ({acct.sent:,} sent, none has a record)" if acct.sent else ""
        return (
            f"NO REQUESTS FINISHED{sent}: this run measured nothing. Check the target and "
            "the events (events.jsonl) for why."
        )
    if all(r.get("warmup") for r in files.requests):
        return (
            f"NO REQUESTS FINISHED after warm-up ({_plural(len(files.requests), 'warm-up request')}"
            " only): there is nothing to measure; run longer than the warm-up."
        )
    return None


@_rule(HEALTH_RULES, "users_crashed")
def _users_crashed(v: RunView) -> str | None:
    """A simulated user crashed (``user_crashed`` events). Population: the run's events.
    The rest of the run put less load on the server than the scenario asked for."""
    crashed = [e for e in v.files.events if e["kind"] == "user_crashed"]
    if not crashed:
        return None
    users = {e.get("user") for e in crashed}
    when = ", ".join(
        f"user {e.get('user', '?')} at {float(e.get('t') or 0):.0f} s" for e in crashed[:5]
    ) + (", ..." if len(crashed) > 5 else "")
    first = crashed[0].get("message")
    return (
        f"{_plural(len(users), 'SIMULATED USER').upper()} CRASHED and sent nothing more "
        f"({when}): the rest of the run had fewer users than the scenario asked for"
        + (f". First: {first}" if first else "")
        + "."
    )


@_rule(HEALTH_RULES, "record_failed")
def _record_failed(v: RunView) -> str | None:
    """stress could not record a request in full (``record_failed`` events). Population:
    the run's events. A bug in stress: the request's record may be missing from the files."""
    unwritten = [e for e in v.files.events if e["kind"] == "record_failed"]
    if not unwritten:
        return None
    return (
        f"STRESS FAILED RECORDING {_plural(len(unwritten), 'REQUEST')} IN FULL (its record, "
        "its events or its live state; a bug in stress: please report it with "
        "events.jsonl); a record that is missing is also counted as lost, and the run went "
        f"on. First: {unwritten[0].get('message')}"
    )


@_rule(HEALTH_RULES, "workers_died")
def _workers_died(v: RunView) -> str | None:
    """A ``--workers`` process died (``worker_died`` events). Population: the run's events.
    Its requests in flight became errors and its users stopped: the load dropped."""
    died = [e for e in v.files.events if e["kind"] == "worker_died"]
    if not died:
        return None
    lost = sum(int((e.get("data") or {}).get("in_flight") or 0) for e in died)
    idle = sum(int((e.get("data") or {}).get("users") or 0) for e in died)
    return (
        f"{_plural(len(died), 'WORKER PROCESS', 'WORKER PROCESSES')} DIED (--workers): "
        f"{_plural(lost, 'request')} in flight recorded as worker_died errors, and the "
        f"{_plural(idle, 'user')} they ran sent nothing more: the rest of the run had "
        f"fewer users than the scenario asked for. First: {died[0].get('message')}"
    )


@_rule(HEALTH_RULES, "recorder_failed")
def _recorder_failed(v: RunView) -> str | None:
    """The recorder could not write the run's files (a ``recorder_failed`` event, exit
    reason or write error). Population: events, manifest, state. The run was stopped early
    and its figures cover only what reached the disk."""
    rec_failed = [e for e in v.files.events if e["kind"] == "recorder_failed"]
    stopped = v.files.manifest.exit_reason == "recorder_failed"
    if not (rec_failed or stopped or v.acct.write_error):
        return None
    why = rec_failed[0].get("message") if rec_failed else v.acct.write_error
    return (
        "THE RECORDER FAILED"
        + (f" ({why})" if why else "")
        + ": the run could not write its files and was stopped; the figures cover only "
        "what was written."
    )


def _failed_collectors(files: RunFiles) -> dict[str, str]:
    """Each failed collector's name and why: its first failure event, else its summary's error."""
    names: dict[str, str] = {}
    for e in files.events:
        if e["kind"] in ("collector_failed", "gpu_collector_failed"):
            name = str(e["data"].get("collector") or e.get("source") or "?")
            if e["kind"] == "gpu_collector_failed":
                name = "gpu"
            names.setdefault(name, str(e.get("message") or "no message"))
    for name, summary in files.collectors.items():
        if isinstance(summary, dict) and summary.get("error"):
            names.setdefault(str(name), f"its summary failed: {summary['error']}")
    return names


@_rule(HEALTH_RULES, "collector_failed")
def _collector_failed(v: RunView) -> str | None:
    """A telemetry collector (server metrics, GPUs, the client's own health) failed.
    Population: the run's events and the collectors' summaries. Its figures are missing or
    cover only part of the run, so their absence says nothing about the server."""
    names = _failed_collectors(v.files)
    if not names:
        return None
    return (
        "Telemetry collector failed: "
        + "; ".join(f"{n} ({why})" for n, why in sorted(names.items()))
        + ". Its figures are missing or cover only part of the run."
    )


@_rule(HEALTH_RULES, "in_flight_lost")
def _in_flight_lost(v: RunView) -> str | None:
    """Requests in flight when the run was killed have no record. Population: requests sent
    (state.json) against lines written. Expected of a kill, but those requests are in no
    figure."""
    acct = v.acct
    if not (acct.no_record and acct.killed):
        return None
    return (
        f"{_plural(acct.no_record, 'request')} in flight when the run was killed "
        f"{'has' if acct.no_record == 1 else 'have'} no record ({acct.sent:,} sent, "
        f"{acct.recorded + acct.unreadable:,} recorded): they are in no figure."
    )


@_rule(HEALTH_RULES, "records_lost")
def _records_lost(v: RunView) -> str | None:
    """Requests sent have no record although the run was not killed (lost to a full disk,
    or lost). Population: requests sent (state.json) against lines written. The figures
    cover only part of what the server served."""
    acct = v.acct
    if acct.no_record and acct.killed:
        return None  # in_flight_lost says it
    if acct.lost_to_disk:
        return (
            f"RECORDS LOST TO THE DISK: {acct.no_record:,} of {acct.sent:,} requests sent have "
            f"no record: {acct.lost_to_disk:,} finished but could not be written "
            f"({acct.write_error}); the figures cover the {acct.recorded:,} recorded."
        )
    if acct.no_record:
        return (
            f"RECORDS LOST: {acct.no_record:,} of {acct.sent:,} requests sent have no record "
            "although the run finished."
        )
    return None


@_rule(HEALTH_RULES, "unreadable_lines")
def _unreadable_lines(v: RunView) -> str | None:
    """Lines of the run's files could not be read (torn by a kill, or damaged). Population:
    every JSONL file of the run. What they held is in no figure."""
    unread = unreadable_text(v.files.quality.unreadable)
    if not unread:
        return None
    return (
        f"{unread} could not be read (torn by a kill, or damaged): what they held is in no figure."
    )


@_rule(HEALTH_RULES, "data_quality")
def _data_quality(v: RunView) -> str | None:
    """Recorded values that cannot be true (negative, not a number, cached > prompt ...)
    were excluded. Population: every request's values. A figure then rests on fewer
    requests than were recorded, and the cause (a server or stress bug) is worth a look."""
    q = v.files.quality
    if not q.excluded:
        return None
    reasons = ", ".join(f"{why} {n:,}" for why, n in q.excluded.most_common())
    return (
        f"IMPOSSIBLE VALUES: {_plural(sum(q.excluded.values()), 'value')} in "
        f"{_plural(q.records, 'request')} excluded from every figure ({reasons})."
    )


@_rule(HEALTH_RULES, "model_mismatch")
def _model_mismatch(v: RunView) -> str | None:
    """The server serves another model than the scenario names (the first
    ``model_mismatch`` event). Population: the run's events. The figures then describe
    another model than the one the operator meant to measure."""
    for e in v.files.events:
        if e["kind"] == "model_mismatch":
            return str(e.get("message") or "the server serves another model")
    return None


# What the replies say ----------------------------------------------------------------


@_rule(REQUEST_RULES, "measuring_noise")
def _measuring_noise(v: RequestView) -> str | None:
    """No reply streamed a chunk carrying content or reasoning. Population: the replies
    (HTTP 200, no failure), warm-up included. stress reads other reply fields than the
    server sends, so every TTFT and decode figure times nothing."""
    if not v.replied or not all(
        (r.get("chunks_content") or 0) + (r.get("chunks_reasoning") or 0) == 0 for r in v.replied
    ):
        return None
    return (
        f"MEASURING NOISE: none of {len(v.replied)} replies streamed a chunk "
        "carrying content or reasoning; TTFT and decode figures mean nothing. Check the "
        "server's reply fields (delta.content / delta.reasoning / reasoning_content)."
    )


def _all_budget(v: RequestView) -> bool:
    return bool(v.replied) and len(v.budget) == len(v.replied)


@_rule(REQUEST_RULES, "all_replies_budget")
def _all_replies_budget(v: RequestView) -> str | None:
    """Every reply stopped at max_tokens with no answer text. Population: the replies.
    The run measured thinking cut short, never an answer: max_tokens is too small."""
    if not _all_budget(v):
        return None
    return (
        f"EVERY reply ({len(v.replied)}) ran out of max_tokens with no answer text: raise "
        "request.max_tokens (thinking alone takes ~350 tokens; 1,500-2,000 is the "
        "practical floor for reasoning models)."
    )


@_rule(REQUEST_RULES, "replies_budget")
def _replies_budget(v: RequestView) -> str | None:
    """Some replies (not all) stopped at max_tokens while reasoning, with no answer text.
    Population: the replies. Those turns answered nothing: max_tokens is too small for them."""
    if not v.budget or _all_budget(v):
        return None
    return (
        f"{len(v.budget)} of {len(v.replied)} replies ran out of max_tokens while "
        "reasoning and have no answer text: raise request.max_tokens (1,500-2,000 is the "
        "practical floor)."
    )


@_rule(REQUEST_RULES, "reasoning_no_answer")
def _reasoning_no_answer(v: RequestView) -> str | None:
    """Replies that reasoned and then stopped by themselves with no answer text.
    Population: the replies, reasoning-only and not cut by max_tokens. They are not answers,
    and no figure counts them as answered."""
    unanswered = [
        r
        for r in v.replied
        if r.get("outcome") == "reasoning_only" and r.get("finish_reason") != "length"
    ]
    if not unanswered:
        return None
    return (
        f"{len(unanswered)} replies reasoned and then stopped with no answer text "
        "(finish_reason: stop): not answered, and not counted as answered anywhere."
    )


def _all_empty(v: RequestView) -> bool:
    empty = v.outcomes.get("empty", 0)
    return bool(v.replied) and empty == len(v.replied) and not v.budget


@_rule(REQUEST_RULES, "all_replies_empty")
def _all_replies_empty(v: RequestView) -> str | None:
    """Every reply was empty (HTTP 200, no text) and none was cut by max_tokens.
    Population: the replies. The server answered nothing, so the run measured nothing."""
    if not _all_empty(v):
        return None
    return f"EVERY reply ({len(v.replied)}) came back empty (HTTP 200, no text)."


@_rule(REQUEST_RULES, "empty_replies")
def _empty_replies(v: RequestView) -> str | None:
    """Some replies were empty (HTTP 200, no text). Population: the replies. An empty
    reply looks like a success on the wire and is not one."""
    empty = v.outcomes.get("empty", 0)
    if not empty or _all_empty(v):
        return None
    return f"{empty} replies were empty (HTTP 200, no text): not successes."


@_rule(REQUEST_RULES, "errors")
def _errors(v: RequestView) -> str | None:
    """Requests that failed, with their three most common classes. Population: every
    request with an error outcome, cancellations (stress's own stop) left out. Failures are
    what an operator fixes first."""
    errors = [
        r for r in v.records if r.get("outcome") == "error" and r.get("error_class") != "cancelled"
    ]
    if not errors:
        return None
    top = Counter(r.get("error_class") or "unclassified" for r in errors).most_common(3)
    return f"{len(errors)} requests failed (" + ", ".join(f"{k}: {n}" for k, n in top) + ")"


@_rule(REQUEST_RULES, "truncated")
def _truncated(v: RequestView) -> str | None:
    """Streams that ended without a finish_reason. Population: the replies. A reply cut
    off mid-stream is an incomplete answer, often a proxy or server timeout."""
    truncated = v.outcomes.get("truncated", 0)
    if not truncated:
        return None
    return f"{truncated} streams ended without finish_reason: cut off mid-reply."


@_rule(REQUEST_RULES, "reconnects")
def _reconnects(v: RequestView) -> str | None:
    """Requests re-sent once because the server had closed their pooled connection.
    Population: every request. A NOTE: recorded truthfully, and not server errors, but a
    server closing idle connections early is worth knowing."""
    reconnects = sum(r.get("reconnects") or 0 for r in v.records)
    if not reconnects:
        return None
    return (
        f"{reconnects} requests found their pooled connection closed by the server and "
        "were re-sent once on a fresh connection (not counted as server errors)."
    )


def _follow_ups(v: RequestView) -> list[RequestRow]:
    """Replied follow-up turns (turn > 1) of a scenario that reuses its prefix (cache not
    "cold"): the turns that should hit the prefix cache."""
    if v.manifest.cache_mode == "cold":
        return []
    return [r for r in v.replied if (r.get("turn") or 1) > 1]


@_rule(REQUEST_RULES, "cache_unreported")
def _cache_unreported(v: RequestView) -> str | None:
    """The server reported no cached-token count on any follow-up turn. Population: the
    replied follow-up turns of a scenario that reuses its prefix. Prefix-cache reuse cannot
    be measured per request until the server is told to report it."""
    follow_ups = _follow_ups(v)
    if not follow_ups or any(r.get("cached_tokens") is not None for r in follow_ups):
        return None
    return (
        "The server reported no cached-token counts, so prefix-cache reuse cannot be "
        "measured per request (vLLM: --enable-prompt-tokens-details; SGLang: "
        "--enable-cache-report; llama.cpp reports timings.cache_n)."
    )


@_rule(REQUEST_RULES, "zero_hit_rate")
def _zero_hit_rate(v: RequestView) -> str | None:
    """Not one cached token on the follow-up turns that report a count. Population: the
    replied follow-up turns of a scenario that reuses its prefix, with a cached-token count.
    Prefix caching is off or the pool is far too small: every turn recomputes its prompt."""
    known = [r for r in _follow_ups(v) if r.get("cached_tokens") is not None]
    if not known or sum(r.get("cached_tokens") or 0 for r in known) != 0:
        return None
    return (
        f"0% prefix-cache hits on {len(known)} follow-up turns of a multi-turn "
        "scenario: prefix caching looks off, or the pool is far too small. vLLM: "
        "--enable-prefix-caching (hybrid attention/Mamba models have it off by "
        "default); SGLang: drop --disable-radix-cache; llama.cpp: keep cache_prompt "
        "on and check that slots are not reassigned (--parallel, id_slot)."
    )


@_rule(REQUEST_RULES, "not_streamed")
def _not_streamed(v: RequestView) -> str | None:
    """Replies that came back whole instead of streamed. Population: the replies. For
    them TTFT is the end-to-end time, which makes the TTFT figures look worse than they are."""
    not_streamed = sum(1 for r in v.replied if r.get("streamed") is False)
    if not not_streamed:
        return None
    return f"{not_streamed} replies were not streamed: TTFT equals end-to-end time for them."


@_rule(REQUEST_RULES, "token_estimate")
def _token_estimate(v: RequestView) -> str | None:
    """The run counted tokens with an estimate (the manifest's tokenizer). Population: the
    run as a whole. A NOTE: paste budgets and ceilings are approximate."""
    if not v.manifest.tokenizer.startswith("estimate"):
        return None
    return "Token budgets are estimates (no tokenizer available)."


def _overload_text(client: dict[str, Any]) -> str:
    """What distorted the timings, by the client collector's cause, with its evidence."""
    evidence = (
        f"{client.get('overloaded_samples')} samples; event-loop lag up to "
        f"{client.get('loop_lag_ms_max')} ms, stress's CPU up to "
        f"{client.get('cpu_pct_max')} % of a core"
    )
    cause = client.get("overload_cause")
    if cause == "machine":
        return (
            f"The machine running stress was starved by other processes ({evidence}): "
            "latencies may include the wait for a CPU. Stop the other work, or run "
            "stress on another machine."
        )
    if cause == "loop":
        return (
            f"stress's event loop was blocked with little CPU in use ({evidence}): "
            "latencies may include that delay. Please report it with the run directory."
        )
    return (
        f"The load generator itself was overloaded ({evidence}): latencies may "
        "include stress's own delay. Run fewer users per stress process."
    )


@_rule(REQUEST_RULES, "client_overloaded")
def _client_overloaded(v: RequestView) -> str | None:
    """The load generator's own health collector saw its timings distorted (event-loop
    lag, CPU). Population: the client collector's samples over the run. The latencies may
    include stress's own delay, not the server's."""
    client = v.collectors.get("client") or {}
    if not client.get("distorted"):
        return None
    return _overload_text(client)


def accounting_text(a: dict[str, Any]) -> str:
    """The request count as a sentence ("N sent, M recorded, K in flight with no record
    (the run was killed)", or "K lost to the disk (No space left on device)") from
    ``summary.json``'s ``accounting``; a run without state.json says what it cannot know."""
    lines = int(a.get("recorded") or 0) + int(a.get("unreadable_lines") or 0)
    unread = int(a.get("unreadable_lines") or 0)
    text = f"{lines:,} recorded" + (f" ({unread:,} of them unreadable)" if unread else "")
    sent, missing, killed = a.get("sent"), int(a.get("no_record") or 0), bool(a.get("killed"))
    if sent is None:
        return text + (
            "; the run was killed, and requests in flight then have no record (this run "
            "wrote no state.json, so how many is unknown)"
            if killed
            else ""
        )
    text = f"{int(sent):,} sent, " + text
    if missing and killed:
        return text + f", {missing:,} in flight with no record (the run was killed)"
    disk = min(int(a.get("lost_to_disk") or 0), missing)
    if disk:
        text += f", {disk:,} lost to the disk ({a.get('write_error') or 'a write failed'})"
    if missing > disk:
        return text + f", {missing - disk:,} with no record (lost)"
    return text
