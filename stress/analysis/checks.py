"""The run's checks: the loud warnings of the field notes and the run's health checks.

Each check is a rule with a code and one line of text, decided here once from the run's
files: ``summary.json`` lists them, the verdict (``stress.analysis.judge``) grades them
(``FAIL_CODES`` make a run FAIL: it measured nothing or lost part of itself), the report
and the terminal print them. ``accounting_text`` is the one sentence that says how many
requests were sent and recorded.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from stress.analysis.rows import RequestRow
from stress.analysis.runfiles import RunFiles

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


def warnings_for(
    records: list[RequestRow], manifest: dict[str, Any], collectors: dict[str, Any]
) -> list[dict[str, str]]:
    """The loud warnings (each: code + one line). Decided on all requests, warm-up included."""
    warns: list[dict[str, str]] = []

    def warn(code: str, text: str) -> None:
        warns.append({"code": code, "message": text})

    # replies: HTTP 200 and no failure (answered or not: empty and reasoning-only too)
    replied = [r for r in records if r.get("http_status") == 200 and not r.get("error_class")]
    if replied and all(
        (r.get("chunks_content") or 0) + (r.get("chunks_reasoning") or 0) == 0 for r in replied
    ):
        warn(
            "measuring_noise",
            f"MEASURING NOISE: none of {len(replied)} replies streamed a chunk "
            "carrying content or reasoning; TTFT and decode figures mean nothing. Check the "
            "server's reply fields (delta.content / delta.reasoning / reasoning_content).",
        )
    outcomes = Counter(r.get("outcome") for r in replied)
    budget = [
        r
        for r in replied
        if r.get("outcome") in ("reasoning_only", "empty") and r.get("finish_reason") == "length"
    ]
    if replied and len(budget) == len(replied):
        warn(
            "all_replies_budget",
            f"EVERY reply ({len(replied)}) ran out of max_tokens with no answer text: raise "
            "request.max_tokens (thinking alone takes ~350 tokens; 1,500-2,000 is the "
            "practical floor for reasoning models).",
        )
    elif budget:
        warn(
            "replies_budget",
            f"{len(budget)} of {len(replied)} replies ran out of max_tokens while "
            "reasoning and have no answer text: raise request.max_tokens (1,500-2,000 is the "
            "practical floor).",
        )
    unanswered = [
        r
        for r in replied
        if r.get("outcome") == "reasoning_only" and r.get("finish_reason") != "length"
    ]
    if unanswered:
        warn(
            "reasoning_no_answer",
            f"{len(unanswered)} replies reasoned and then stopped with no answer text "
            "(finish_reason: stop): not answered, and not counted as answered anywhere.",
        )
    empty = outcomes.get("empty", 0)
    if replied and empty == len(replied) and not budget:
        warn(
            "all_replies_empty",
            f"EVERY reply ({len(replied)}) came back empty (HTTP 200, no text).",
        )
    elif empty:
        warn("empty_replies", f"{empty} replies were empty (HTTP 200, no text): not successes.")
    errors = [
        r for r in records if r.get("outcome") == "error" and r.get("error_class") != "cancelled"
    ]
    if errors:
        top = Counter(r.get("error_class") or "unclassified" for r in errors).most_common(3)
        warn(
            "errors",
            f"{len(errors)} requests failed (" + ", ".join(f"{k}: {v}" for k, v in top) + ")",
        )
    truncated = outcomes.get("truncated", 0)
    if truncated:
        warn("truncated", f"{truncated} streams ended without finish_reason: cut off mid-reply.")
    reconnects = sum(r.get("reconnects") or 0 for r in records)
    if reconnects:
        warn(
            "reconnects",
            f"{reconnects} requests found their pooled connection closed by the server and "
            "were re-sent once on a fresh connection (not counted as server errors).",
        )
    cache_mode = manifest.get("scenario", {}).get("conversation", {}).get("cache")
    follow_ups = [r for r in replied if (r.get("turn") or 1) > 1]
    known = [r for r in follow_ups if r.get("cached_tokens") is not None]
    if cache_mode != "cold" and follow_ups:
        if not known:
            warn(
                "cache_unreported",
                "The server reported no cached-token counts, so prefix-cache reuse cannot be "
                "measured per request (vLLM: --enable-prompt-tokens-details; SGLang: "
                "--enable-cache-report; llama.cpp reports timings.cache_n).",
            )
        elif sum(r.get("cached_tokens") or 0 for r in known) == 0:
            warn(
                "zero_hit_rate",
                f"0% prefix-cache hits on {len(known)} follow-up turns of a multi-turn "
                "scenario: prefix caching looks off, or the pool is far too small. vLLM: "
                "--enable-prefix-caching (hybrid attention/Mamba models have it off by "
                "default); SGLang: drop --disable-radix-cache; llama.cpp: keep cache_prompt "
                "on and check that slots are not reassigned (--parallel, id_slot).",
            )
    not_streamed = sum(1 for r in replied if r.get("streamed") is False)
    if not_streamed:
        warn(
            "not_streamed",
            f"{not_streamed} replies were not streamed: TTFT equals end-to-end time for them.",
        )
    est = manifest.get("tokenizer", "")
    if isinstance(est, str) and est.startswith("estimate"):
        warn("token_estimate", "Token budgets are estimates (no tokenizer available).")
    client = collectors.get("client") or {}
    if client.get("distorted"):
        evidence = (
            f"{client.get('overloaded_samples')} samples; event-loop lag up to "
            f"{client.get('loop_lag_ms_max')} ms, stress's CPU up to "
            f"{client.get('cpu_pct_max')} % of a core"
        )
        cause = client.get("overload_cause")
        if cause == "machine":
            text = (
                f"The machine running stress was starved by other processes ({evidence}): "
                "latencies may include the wait for a CPU. Stop the other work, or run "
                "stress on another machine."
            )
        elif cause == "loop":
            text = (
                f"stress's event loop was blocked with little CPU in use ({evidence}): "
                "latencies may include that delay. Please report it with the run directory."
            )
        else:
            text = (
                f"The load generator itself was overloaded ({evidence}): latencies may "
                "include stress's own delay. Run fewer users per stress process."
            )
        warn("client_overloaded", text)
    return warns


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def unreadable_text(unreadable: dict[str, int]) -> str:
    """Say which lines could not be read: "2 lines of requests.jsonl and 1 line of ..."."""
    parts = [f"{_plural(n, 'line')} of {name}" for name, n in unreadable.items() if n]
    return " and ".join([", ".join(parts[:-1]), parts[-1]] if len(parts) > 1 else parts)


def health_warnings(files: RunFiles) -> list[dict[str, str]]:
    """The run's own health, from all its files: did it measure anything, did it lose
    users, records or collectors, which of its lines and values could not be used."""
    warns: list[dict[str, str]] = []

    def warn(code: str, text: str) -> None:
        warns.append({"code": code, "message": text})

    acct = files.accounting
    main = [r for r in files.requests if not r.get("warmup")]
    if not files.requests:
        sent = f" ({acct.sent:,} sent, none has a record)" if acct.sent else ""
        warn(
            "no_requests",
            f"NO REQUESTS FINISHED{sent}: this run measured nothing. Check the target and "
            "the events (events.jsonl) for why.",
        )
    elif not main:
        warn(
            "no_requests",
            f"NO REQUESTS FINISHED after warm-up ({_plural(len(files.requests), 'warm-up request')}"
            " only): there is nothing to measure; run longer than the warm-up.",
        )
    events = files.events
    crashed = [e for e in events if e["kind"] == "user_crashed"]
    if crashed:
        users = {e.get("user") for e in crashed}
        when = ", ".join(
            f"user {e.get('user', '?')} at {float(e.get('t') or 0):.0f} s" for e in crashed[:5]
        ) + (", ..." if len(crashed) > 5 else "")
        first = crashed[0].get("message")
        warn(
            "users_crashed",
            f"{_plural(len(users), 'SIMULATED USER').upper()} CRASHED and sent nothing more "
            f"({when}): the rest of the run had fewer users than the scenario asked for"
            + (f". First: {first}" if first else "")
            + ".",
        )
    unwritten = [e for e in events if e["kind"] == "record_failed"]
    if unwritten:
        warn(
            "record_failed",
            f"STRESS FAILED RECORDING {_plural(len(unwritten), 'REQUEST')} IN FULL (its record, "
            "its events or its live state; a bug in stress: please report it with "
            "events.jsonl); a record that is missing is also counted as lost, and the run went "
            f"on. First: {unwritten[0].get('message')}",
        )
    died = [e for e in events if e["kind"] == "worker_died"]
    if died:
        lost = sum(int((e.get("data") or {}).get("in_flight") or 0) for e in died)
        idle = sum(int((e.get("data") or {}).get("users") or 0) for e in died)
        warn(
            "workers_died",
            f"{_plural(len(died), 'WORKER PROCESS', 'WORKER PROCESSES')} DIED (--workers): "
            f"{_plural(lost, 'request')} in flight recorded as worker_died errors, and the "
            f"{_plural(idle, 'user')} they ran sent nothing more: the rest of the run had "
            f"fewer users than the scenario asked for. First: {died[0].get('message')}",
        )
    rec_failed = [e for e in events if e["kind"] == "recorder_failed"]
    if rec_failed or files.manifest.get("exit_reason") == "recorder_failed" or acct.write_error:
        why = rec_failed[0].get("message") if rec_failed else acct.write_error
        warn(
            "recorder_failed",
            "THE RECORDER FAILED"
            + (f" ({why})" if why else "")
            + ": the run could not write its files and was stopped; the figures cover only "
            "what was written.",
        )
    names: dict[str, str] = {}
    for e in events:
        if e["kind"] in ("collector_failed", "gpu_collector_failed"):
            name = str(e["data"].get("collector") or e.get("source") or "?")
            if e["kind"] == "gpu_collector_failed":
                name = "gpu"
            names.setdefault(name, str(e.get("message") or "no message"))
    collectors = files.collectors
    for name, summary in collectors.items():
        if isinstance(summary, dict) and summary.get("error"):
            names.setdefault(str(name), f"its summary failed: {summary['error']}")
    if names:
        warn(
            "collector_failed",
            "Telemetry collector failed: "
            + "; ".join(f"{n} ({why})" for n, why in sorted(names.items()))
            + ". Its figures are missing or cover only part of the run.",
        )
    if acct.no_record and acct.killed:
        warn(
            "in_flight_lost",
            f"{_plural(acct.no_record, 'request')} in flight when the run was killed "
            f"{'has' if acct.no_record == 1 else 'have'} no record ({acct.sent:,} sent, "
            f"{acct.recorded + acct.unreadable:,} recorded): they are in no figure.",
        )
    elif acct.lost_to_disk:
        warn(
            "records_lost",
            f"RECORDS LOST TO THE DISK: {acct.no_record:,} of {acct.sent:,} requests sent have "
            f"no record: {acct.lost_to_disk:,} finished but could not be written "
            f"({acct.write_error}); the figures cover the {acct.recorded:,} recorded.",
        )
    elif acct.no_record:
        warn(
            "records_lost",
            f"RECORDS LOST: {acct.no_record:,} of {acct.sent:,} requests sent have no record "
            "although the run finished.",
        )
    unread = unreadable_text(files.quality.unreadable)
    if unread:
        warn(
            "unreadable_lines",
            f"{unread} could not be read (torn by a kill, or damaged): what they held is in "
            "no figure.",
        )
    q = files.quality
    if q.excluded:
        reasons = ", ".join(f"{why} {n:,}" for why, n in q.excluded.most_common())
        warn(
            "data_quality",
            f"IMPOSSIBLE VALUES: {_plural(sum(q.excluded.values()), 'value')} in "
            f"{_plural(q.records, 'request')} excluded from every figure ({reasons}).",
        )
    for e in events:
        if e["kind"] == "model_mismatch":
            warn("model_mismatch", str(e.get("message") or "the server serves another model"))
            break
    return warns


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
