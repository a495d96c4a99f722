"""``summary.json``: the run's figures, computed from ``requests.jsonl`` on disk.

Built from the files, never from live aggregates, so a killed run gets the same summary
(``stress report RUN_DIR``). Headline figures exclude warm-up requests and come as mean,
standard deviation, p50/p95/p99 and n (field note 6: mean with spread, never max). The
loud warnings of the field notes are decided here.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from stress.record import OUTCOMES
from stress.recorder import read_jsonl, read_manifest, write_json

METRICS = ("ttft_s", "ttfc_s", "decode_tok_s", "e2e_s", "queue_s")


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
            [
                r[m]
                for r in records
                if r.get(m) is not None
                and (m == "queue_s" or r.get("outcome") in ("ok", "reasoning_only"))
            ]
        )
    known = [r for r in records if r.get("cached_tokens") is not None and r.get("prompt_tokens")]
    prompt = sum(r["prompt_tokens"] for r in known)
    out["cached_share"] = (sum(r["cached_tokens"] for r in known) / prompt) if prompt else None
    reuse = [r for r in known if r.get("reusable_tokens")]
    reusable = sum(r["reusable_tokens"] for r in reuse)
    out["cache_retention"] = (
        sum(min(r["cached_tokens"], r["reusable_tokens"]) for r in reuse) / reusable
        if reusable
        else None
    )
    out["prompt_tokens"] = sum(r.get("prompt_tokens") or 0 for r in records)
    out["completion_tokens"] = sum(r.get("completion_tokens") or 0 for r in records)
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

    answered = [r for r in records if r.get("http_status") == 200 and not r.get("error_class")]
    if answered and all(
        r.get("chunks_content", 0) + r.get("chunks_reasoning", 0) == 0 for r in answered
    ):
        warn(
            "measuring_noise",
            f"MEASURING NOISE: none of {len(answered)} answered requests streamed a chunk "
            "carrying content or reasoning; TTFT and decode figures mean nothing. Check the "
            "server's reply fields (delta.content / delta.reasoning / reasoning_content).",
        )
    outcomes = Counter(r.get("outcome") for r in answered)
    budget = [
        r
        for r in answered
        if r.get("outcome") in ("reasoning_only", "empty") and r.get("finish_reason") == "length"
    ]
    if answered and len(budget) == len(answered):
        warn(
            "all_replies_budget",
            f"EVERY reply ({len(answered)}) ran out of max_tokens with no answer text: raise "
            "request.max_tokens (thinking alone takes ~350 tokens; 1,500-2,000 is the "
            "practical floor for reasoning models).",
        )
    elif budget:
        warn(
            "replies_budget",
            f"{len(budget)} of {len(answered)} replies ran out of max_tokens while "
            "reasoning and have no answer text: raise request.max_tokens (1,500-2,000 is the "
            "practical floor).",
        )
    empty = outcomes.get("empty", 0)
    if answered and empty == len(answered) and not budget:
        warn(
            "all_replies_empty",
            f"EVERY reply ({len(answered)}) came back empty (HTTP 200, no text).",
        )
    elif empty:
        warn("empty_replies", f"{empty} replies were empty (HTTP 200, no text): not successes.")
    errors = [
        r for r in records if r.get("outcome") == "error" and r.get("error_class") != "cancelled"
    ]
    if errors:
        top = Counter(r.get("error_class") for r in errors).most_common(3)
        warn(
            "errors",
            f"{len(errors)} requests failed (" + ", ".join(f"{k}: {v}" for k, v in top) + ")",
        )
    truncated = outcomes.get("truncated", 0)
    if truncated:
        warn("truncated", f"{truncated} streams ended without finish_reason: cut off mid-reply.")
    reconnects = sum(r.get("reconnects", 0) for r in records)
    if reconnects:
        warn(
            "reconnects",
            f"{reconnects} requests found their pooled connection closed by the server and "
            "were re-sent once on a fresh connection (not counted as server errors).",
        )
    cache_mode = manifest.get("scenario", {}).get("conversation", {}).get("cache")
    follow_ups = [r for r in answered if (r.get("turn") or 1) > 1]
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
    not_streamed = sum(1 for r in answered if r.get("streamed") is False)
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
        warn(
            "client_overloaded",
            f"The load generator itself was overloaded ({client.get('overloaded_samples')} "
            f"samples; event-loop lag up to {client.get('loop_lag_ms_max')} ms, CPU up to "
            f"{client.get('cpu_pct_max')} % of a core): latencies may include stress's own "
            "delay. Run fewer users per stress process or on a less busy machine.",
        )
    return warns


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
        figures: dict[str, list[float]] = {
            "ttft_p50_s": [],
            "decode_p50_tok_s": [],
            "e2e_p50_s": [],
            "output_tok_s": [],
        }
        for rows in by_pass.values():
            ok = [r for r in rows if r.get("outcome") in ("ok", "reasoning_only")]
            for key, field in (
                ("ttft_p50_s", "ttft_s"),
                ("decode_p50_tok_s", "decode_tok_s"),
                ("e2e_p50_s", "e2e_s"),
            ):
                vals = [r[field] for r in ok if r.get(field) is not None]
                if vals:
                    figures[key].append(float(np.median(vals)))
            start = min(r.get("t_start", 0.0) for r in rows)
            end = max(r.get("t_start", 0.0) + (r.get("e2e_s") or 0.0) for r in rows)
            if end > start:
                figures["output_tok_s"].append(
                    sum(r.get("completion_tokens") or 0 for r in rows) / (end - start)
                )
        out[step] = {"passes": len(by_pass)} | {
            key: {
                "mean": float(np.mean(v)),
                "sd": float(np.std(v, ddof=1)) if len(v) > 1 else 0.0,
                "n": len(v),
            }
            for key, v in figures.items()
            if v
        }
    return out


def _server_section(manifest: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, Any]:
    """The server's own figures (from the metrics collector) plus the hit rate by round
    from the per-request cached tokens."""
    out: dict[str, Any] = dict(manifest.get("collectors", {}).get("server") or {})
    probe = manifest.get("probe") or {}
    for key in ("kind", "version", "context_length", "kv_pool_tokens", "slots"):
        if probe.get(key) is not None:
            out.setdefault(f"probe_{key}", probe[key])
    by_round: dict[int, list[int]] = {}
    for r in records:
        if r.get("cached_tokens") is not None and r.get("prompt_tokens"):
            acc = by_round.setdefault(int(r.get("round", 0)), [0, 0])
            acc[0] += r["cached_tokens"]
            acc[1] += r["prompt_tokens"]
    out["hit_rate_by_round"] = {str(k): v[0] / v[1] for k, v in sorted(by_round.items()) if v[1]}
    return out


def rescale_record(r: dict[str, Any], scale: float) -> dict[str, Any]:
    r = dict(r)
    for key in ("ttft_s", "ttfc_s", "e2e_s", "queue_s", "max_gap_s", "t_start", "t_sched"):
        if r.get(key) is not None:
            r[key] *= scale
    if r.get("decode_tok_s") is not None:
        r["decode_tok_s"] /= scale
    return r


def build_summary(run_dir: Path) -> dict[str, Any]:
    """Compute and write ``summary.json`` for a run directory; return it."""
    manifest = read_manifest(run_dir)
    records = read_jsonl(run_dir / "requests.jsonl")
    events = read_jsonl(run_dir / "events.jsonl")
    scale = float(manifest.get("time_scale") or 1.0)
    if scale != 1.0:  # simulator time ran faster than the wall: report simulated seconds
        records = [rescale_record(r, scale) for r in records]
    main = [r for r in records if not r.get("warmup")]
    users = sorted({r.get("user", 0) for r in records})
    t_end = max((r.get("t_start", 0) + (r.get("e2e_s") or 0) for r in records), default=0.0)
    duration = manifest["duration_s"] * scale if manifest.get("duration_s") else t_end
    overall = _group(main)
    overall["output_tok_s"] = (
        sum(r.get("completion_tokens") or 0 for r in main) / duration if duration else None
    )
    summary = {
        "run_id": manifest.get("run_id", run_dir.name),
        "scenario": manifest.get("scenario", {}).get("name"),
        "complete": manifest.get("end_time") is not None,
        "exit_reason": manifest.get("exit_reason"),
        "duration_s": duration,
        "time_scale": scale,
        "cache_mode": manifest.get("scenario", {}).get("conversation", {}).get("cache"),
        "requests_total": len(records),
        "warmup_requests": len(records) - len(main),
        "overall": overall,
        "per_user": {str(u): _group([r for r in main if r.get("user") == u]) for u in users},
        "phases": _phases(records),
        "phase_steps": _steps(records),
        "events": dict(Counter(e.get("kind", "?") for e in events)),
        "server": _server_section(manifest, main),
        "gpu": manifest.get("collectors", {}).get("gpu"),
        "client": manifest.get("collectors", {}).get("client"),
        "warnings": warnings_for(records, manifest),
    }
    write_json(run_dir / "summary.json", summary)
    return summary


def _fmt(v: float | int | None, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, int):
        return f"{v}{unit}"
    return f"{v:.3g}{unit}" if abs(v) < 1000 else f"{v:,.0f}{unit}"


def render_summary(summary: dict[str, Any]) -> str:
    """A terminal table of the headline figures and the warnings."""
    o = summary["overall"]
    lines = [
        f"run {summary['run_id']}  scenario {summary['scenario']}  "
        f"exit: {summary.get('exit_reason') or 'killed (incomplete)'}  "
        f"duration {_fmt(summary.get('duration_s'), 's')}",
        f"requests {summary['requests_total']} (warm-up {summary['warmup_requests']}, "
        "excluded below)  " + "  ".join(f"{k} {v}" for k, v in o["outcomes"].items()),
    ]
    if o["error_classes"]:
        lines.append("errors: " + ", ".join(f"{k} {v}" for k, v in o["error_classes"].items()))
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
