"""``summary.json``: the run's figures, computed from ``requests.jsonl`` on disk.

Built from the files, never from live aggregates, so a killed run gets the same summary
(``stress report RUN_DIR``). Headline figures exclude warm-up requests and come as mean,
standard deviation, p50/p95/p99 and n (field note 6: mean with spread, never max). The
loud warnings of the field notes are decided here, and so are the run's health checks
that turn a run which did nothing, lost records or lost users into a FAIL: a report must
never read PASS for a run that measured nothing.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from stress.analysis import figures
from stress.analysis.runfiles import RunFiles, read_run_files, rescale_record
from stress.errors import RunDirError
from stress.record import OUTCOMES
from stress.recorder import write_json

__all__ = ["build_summary", "health_warnings", "render_summary", "rescale_record", "stats"]

METRICS = ("ttft_s", "ttfc_s", "decode_tok_s", "e2e_s", "queue_s")
"""Requests that generated text: the population of latency and speed figures. Only ``ok``
is *answered*: a reply that reasoned and stopped without answer text is not an answer."""

FAIL_CODES = frozenset(
    {
        "no_requests",
        "users_crashed",
        "recorder_failed",
        "records_lost",
        "measuring_noise",
        "all_replies_budget",
        "all_replies_empty",
    }
)
"""Warnings that make the verdict FAIL: the run measured nothing, or lost part of itself."""


def stats(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {
            "n": 0,
            "mean": None,
            "sd": None,
            "p50": None,
            "p95": None,
            "p99": None,
            "min": None,
            "max": None,
        }
    a = np.asarray(values, dtype=float)
    p50, p95, p99 = np.percentile(a, [50, 95, 99])
    return {
        "n": int(a.size),
        "mean": float(a.mean()),
        "sd": float(a.std(ddof=1)) if a.size > 1 else 0.0,
        "p50": float(p50),
        "p95": float(p95),
        "p99": float(p99),
        "min": float(a.min()),
        "max": float(a.max()),
    }


def _group(records: list[dict[str, Any]]) -> dict[str, Any]:
    outcomes = Counter(r.get("outcome", "error") for r in records)
    classes = Counter(r["error_class"] for r in records if r.get("error_class"))
    out: dict[str, Any] = {
        "requests": len(records),
        "outcomes": {k: outcomes.get(k, 0) for k in OUTCOMES},
        "error_classes": dict(sorted(classes.items())),
    }
    for m in METRICS:
        out[m] = stats(
            [r["queue_s"] for r in records if r.get("queue_s") is not None]
            if m == "queue_s"  # the client's own wait: every request has one
            else figures.generated_values(records, m)
        )
    # every stream's longest silence, failed ones too: a stall is the point of this figure
    out["max_gap_s"] = stats([r["max_gap_s"] for r in records if r.get("max_gap_s") is not None])
    out["answered"] = outcomes.get("ok", 0)
    known = [r for r in records if r.get("cached_tokens") is not None and r.get("prompt_tokens")]
    prompt = sum(r["prompt_tokens"] for r in known)
    out["cached_share"] = (sum(r["cached_tokens"] for r in known) / prompt) if prompt else None
    out["cache_retention"] = figures.cache_retention(records)
    out["prompt_tokens"] = sum(r.get("prompt_tokens") or 0 for r in records)
    out["completion_tokens"] = figures.output_tokens(records)
    out["rounds"] = max((r.get("round", 0) for r in records), default=0)
    out["max_conversation_tokens"] = max(
        (r.get("conversation_tokens", 0) for r in records), default=0
    )
    out["reconnects"] = sum(r.get("reconnects", 0) for r in records)
    return out


def warnings_for(records: list[dict[str, Any]], manifest: dict[str, Any]) -> list[dict[str, str]]:
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
        elif sum(r["cached_tokens"] for r in known) == 0:
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
    client = (manifest.get("collectors") or {}).get("client") or {}
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
    rec_failed = [e for e in events if e["kind"] == "recorder_failed"]
    if rec_failed or files.manifest.get("exit_reason") == "recorder_failed":
        why = rec_failed[0].get("message") if rec_failed else None
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
    collectors = files.manifest.get("collectors") or {}
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


def stall_figures(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Stalls (silence after the first token) and first-token timeouts, counted apart,
    and every stream's longest silence (``max_gap_s``) as a distribution."""
    classes = Counter(r.get("error_class") for r in records)
    return {
        "stall": classes.get("stall", 0),
        "first_token_timeout": classes.get("first_token_timeout", 0),
        "max_gap_s": stats([r["max_gap_s"] for r in records if r.get("max_gap_s") is not None]),
    }


def _phases(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per phase of a sweep (in run order): figures over its non-warm-up requests, with the
    warm-up requests counted but excluded, and the users that took part."""
    labels = list(dict.fromkeys(str(r.get("phase") or "main") for r in records))
    if labels == ["main"]:
        return {}
    out: dict[str, Any] = {}
    for label in labels:
        rows = [r for r in records if str(r.get("phase") or "main") == label]
        group = _group([r for r in rows if not r.get("warmup")])
        group["warmup_requests"] = sum(1 for r in rows if r.get("warmup"))
        group["users"] = len({r.get("user") for r in rows})
        out[label] = group
    return out


def _steps(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Repeated phases (``name#1``, ``name#2``...) pooled per step: the mean and spread of
    the per-pass figures, so a sweep is judged on its passes, never on its best one
    (field note 6). Only steps with at least two passes appear."""
    passes: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for r in records:
        label = str(r.get("phase") or "main")
        if "#" not in label or r.get("warmup"):
            continue
        step, _, n = label.rpartition("#")
        passes.setdefault(step, {}).setdefault(n, []).append(r)
    out: dict[str, Any] = {}
    for step, by_pass in passes.items():
        if len(by_pass) < 2:
            continue
        per_pass: dict[str, list[float]] = {
            "ttft_p50_s": [],
            "decode_p50_tok_s": [],
            "e2e_p50_s": [],
            "output_tok_s": [],
        }
        for rows in by_pass.values():
            ok = [r for r in rows if r.get("outcome") in figures.GENERATED]
            for key, field in (
                ("ttft_p50_s", "ttft_s"),
                ("decode_p50_tok_s", "decode_tok_s"),
                ("e2e_p50_s", "e2e_s"),
            ):
                vals = [r[field] for r in ok if r.get(field) is not None]
                if vals:
                    per_pass[key].append(float(np.median(vals)))
            start = min(r.get("t_start", 0.0) for r in rows)
            end = max(r.get("t_start", 0.0) + (r.get("e2e_s") or 0.0) for r in rows)
            if end > start:
                per_pass["output_tok_s"].append(
                    sum(r.get("completion_tokens") or 0 for r in rows) / (end - start)
                )
        out[step] = {"passes": len(by_pass)} | {
            key: {
                "mean": float(np.mean(v)),
                "sd": float(np.std(v, ddof=1)) if len(v) > 1 else 0.0,
                "n": len(v),
            }
            for key, v in per_pass.items()
            if v
        }
    return out


def _server_section(files: RunFiles, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The server's own figures (from the metrics collector) plus the hit rate by round
    from the per-request cached tokens, and the KV pool as the report reads it."""
    manifest = files.manifest
    collected = (manifest.get("collectors") or {}).get("server")
    out: dict[str, Any] = dict(collected or {})
    probe = manifest.get("probe") or {}
    out["kv_pool_tokens"] = figures.kv_pool_tokens(files.server, collected, probe)
    for key in ("kind", "version", "context_length", "kv_pool_tokens", "slots"):
        if probe.get(key) is not None:
            out.setdefault(f"probe_{key}", probe[key])
    by_round: dict[int, list[int]] = {}
    for r in records:
        if r.get("cached_tokens") is not None and r.get("prompt_tokens"):
            acc = by_round.setdefault(int(r.get("round") or 0), [0, 0])
            acc[0] += r["cached_tokens"]
            acc[1] += r["prompt_tokens"]
    out["hit_rate_by_round"] = {str(k): v[0] / v[1] for k, v in sorted(by_round.items()) if v[1]}
    return out


def build_summary(run_dir: Path, files: RunFiles | None = None) -> dict[str, Any]:
    """Compute and write ``summary.json`` for a run directory; return it.

    ``RunDirError`` when the run's files are damaged or ``summary.json`` cannot be written.
    """
    files = files or read_run_files(run_dir)
    manifest = files.manifest
    records = files.requests
    main = [r for r in records if not r.get("warmup")]
    users = sorted({int(r.get("user") or 0) for r in records})
    duration = files.duration_s
    overall = _group(main)
    overall["output_tok_s"] = (
        sum(r.get("completion_tokens") or 0 for r in main) / duration if duration else None
    )
    scenario = manifest.get("scenario") or {}
    collectors = manifest.get("collectors") or {}
    summary = {
        "run_id": manifest.get("run_id", run_dir.name),
        "scenario": scenario.get("name"),
        "complete": manifest.get("end_time") is not None,
        "exit_reason": manifest.get("exit_reason"),
        "duration_s": duration,
        "time_scale": files.time_scale,
        "cache_mode": (scenario.get("conversation") or {}).get("cache"),
        "requests_total": len(records),
        "warmup_requests": len(records) - len(main),
        "accounting": files.accounting.as_dict(),
        "data_quality": files.quality.as_dict(),
        "stalls": stall_figures(records),
        "overall": overall,
        "per_user": {str(u): _group(g) for u, g in _by_user(main, users).items()},
        "phases": _phases(records),
        "phase_steps": _steps(records),
        "events": dict(Counter(e["kind"] for e in files.events)),
        "server": _server_section(files, main),
        "gpu": _gpu_section(files),
        "client": collectors.get("client"),
        "warnings": health_warnings(files) + warnings_for(records, manifest),
    }
    summary["verdict"] = _verdict(run_dir, files)
    try:
        write_json(run_dir / "summary.json", summary)
    except OSError as e:
        raise RunDirError(
            f"cannot write {run_dir / 'summary.json'}: {e.strerror or e} -- fix: free disk "
            "space or make the run directory writable, then `stress report` it again"
        ) from None
    return summary


def _gpu_section(files: RunFiles) -> dict[str, Any] | None:
    """The GPU collector's summary, with energy and J/token from ``stress.analysis.figures`` (the
    report shows the same); a run killed before that summary gets them from gpu.jsonl."""
    collected = (files.manifest.get("collectors") or {}).get("gpu")
    samples = [r for r in files.gpu if r.get("type") == "sample"]
    server_cards = next(
        (r.get("server_cards") for r in files.gpu if r.get("type") == "cards"), None
    )
    if isinstance(collected, dict) and collected.get("server_cards"):
        server_cards = collected["server_cards"]
    energy = figures.energy_j(
        collected if isinstance(collected, dict) else None, samples, server_cards
    )
    if energy is None:
        return collected if isinstance(collected, dict) else None
    tokens = figures.energy_tokens(files.requests)
    out: dict[str, Any] = (
        dict(collected) if isinstance(collected, dict) else {"source": "gpu.jsonl"}
    )
    out.update(energy_j=energy, tokens=tokens, j_per_token=figures.j_per_token(energy, tokens))
    return out


def _by_user(records: list[dict[str, Any]], users: list[int]) -> dict[int, list[dict[str, Any]]]:
    """Records per user in one pass (per user, a scan of all records was O(users x n))."""
    out: dict[int, list[dict[str, Any]]] = {u: [] for u in users}
    for r in records:
        out[int(r.get("user") or 0)].append(r)
    return out


def _verdict(run_dir: Path, files: RunFiles) -> dict[str, Any]:
    """The report's verdict, decided once by ``stress.analysis.judge.make_verdict`` and
    stored here, so summary.json, the terminal, the report and ``stress ls`` agree."""
    from stress.analysis.judge import make_verdict
    from stress.analysis.rundata import load_run

    v = make_verdict(load_run(run_dir, files=files))
    return {"status": v.status, "summary": v.summary, "items": v.items, "warnings": v.warnings}


def _fmt(v: float | int | None, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, int):
        return f"{v}{unit}"
    return f"{v:.3g}{unit}" if abs(v) < 1000 else f"{v:,.0f}{unit}"


def accounting_text(a: dict[str, Any]) -> str:
    """The request count as a sentence ("N sent, M recorded, K in flight with no record
    (the run was killed)") from ``summary.json``'s ``accounting``; a run without
    state.json says what it cannot know."""
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
    if missing:
        return text + f", {missing:,} with no record (lost)"
    return text


def render_summary(summary: dict[str, Any]) -> str:
    """A terminal table of the headline figures and the warnings."""
    o = summary["overall"]
    verdict = summary.get("verdict") or {}
    lines = [
        f"verdict: {verdict.get('summary') or verdict.get('status') or '-'}",
        f"run {summary['run_id']}  scenario {summary['scenario']}  "
        f"exit: {summary.get('exit_reason') or 'killed (incomplete)'}  "
        f"duration {_fmt(summary.get('duration_s'), 's')}",
        f"requests: {accounting_text(summary.get('accounting') or {})}; "
        f"warm-up {summary['warmup_requests']} (excluded below)",
        "  " + "  ".join(f"{k} {v}" for k, v in o["outcomes"].items()),
    ]
    if o["error_classes"]:
        lines.append("errors: " + ", ".join(f"{k} {v}" for k, v in o["error_classes"].items()))
    st = summary.get("stalls") or {}
    gap = st.get("max_gap_s") or {}
    if gap.get("n"):
        lines.append(
            f"stalls {st.get('stall', 0)}  first-token timeouts {st.get('first_token_timeout', 0)}"
            f"  longest silence in a stream: p50 {_fmt(gap['p50'], 's')}  p95 "
            f"{_fmt(gap['p95'], 's')}  max {_fmt(gap['max'], 's')} (n {gap['n']})"
        )
    lines.append("")
    lines.append(f"{'metric':<14}{'n':>6}{'mean':>10}{'sd':>10}{'p50':>10}{'p95':>10}{'p99':>10}")
    for m, label in (
        ("ttft_s", "TTFT s"),
        ("ttfc_s", "TTFC s"),
        ("decode_tok_s", "decode tok/s"),
        ("e2e_s", "e2e s"),
        ("queue_s", "queue s"),
    ):
        s = o[m]
        lines.append(
            f"{label:<14}{s['n']:>6}{_fmt(s['mean']):>10}{_fmt(s['sd']):>10}"
            f"{_fmt(s['p50']):>10}{_fmt(s['p95']):>10}{_fmt(s['p99']):>10}"
        )
    share = o.get("cached_share")
    ret = o.get("cache_retention")
    lines.append("")
    lines.append(
        f"output {_fmt(o.get('output_tok_s'))} tok/s aggregate   prompt tokens "
        f"{o['prompt_tokens']:,}   completion tokens {o['completion_tokens']:,}   "
        f"cached share {'-' if share is None else f'{100 * share:.0f}%'}   retention "
        f"{'-' if ret is None else f'{100 * ret:.0f}%'}   max conversation "
        f"{o['max_conversation_tokens']:,} tokens   cache mode {summary.get('cache_mode')}"
    )
    if summary.get("phases"):
        lines.append("")
        lines.append(
            f"{'phase':<16}{'users':>6}{'n':>6}{'TTFT p50':>10}{'TTFT p95':>10}"
            f"{'decode p50':>12}{'e2e p50':>10}{'errors':>8}"
        )
        for label, g in summary["phases"].items():
            lines.append(
                f"{label:<16}{g['users']:>6}{g['requests']:>6}{_fmt(g['ttft_s']['p50']):>10}"
                f"{_fmt(g['ttft_s']['p95']):>10}{_fmt(g['decode_tok_s']['p50']):>12}"
                f"{_fmt(g['e2e_s']['p50']):>10}{g['outcomes']['error']:>8}"
            )
    if summary.get("phase_steps"):
        lines.append("")
        lines.append("steps pooled over their passes (mean ± sd of per-pass figures):")
        for step, g in summary["phase_steps"].items():
            parts = [f"{step}: {g['passes']} passes"]
            for key, label in (
                ("ttft_p50_s", "TTFT p50"),
                ("decode_p50_tok_s", "decode p50"),
                ("output_tok_s", "output tok/s"),
            ):
                if key in g:
                    parts.append(f"{label} {_fmt(g[key]['mean'])} ± {_fmt(g[key]['sd'])}")
            lines.append("  " + "   ".join(parts))
    for w in summary["warnings"]:
        lines.append(f"WARNING: {w['message']}")
    return "\n".join(lines)
