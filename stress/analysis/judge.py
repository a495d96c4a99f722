"""The verdict that opens every report: did the run go well, and what went wrong.

Field notes 3-5: "zero errors" alone hides empty replies, budget-starved reasoning, stalls,
hangs and preemption storms; a restart counter alone misses a hang. So the verdict lists
each of those separately, with the diagnosis where the record carries one, and the summary's
loud warnings. It is decided on all requests, warm-up included: a failure is a failure.
A run that did nothing, lost users or lost records is never a PASS: the summary's health
checks (``stress.analysis.checks``) decide that, here and in ``summary.json`` alike.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from stress.analysis import figures
from stress.analysis.checks import FAIL_CODES, accounting_text, health_warnings, warnings_for
from stress.analysis.rundata import RunData
from stress.analysis.stats import describe
from stress.fmt import num
from stress.report.model import Status, Verdict

HW_KINDS = ("xid", "aer", "ecc", "ecc_dbe", "ecc_uncorrected", "gpu_lost", "gpu_unavailable")

ERROR_HINTS = {
    "redirect": "the server answered with a redirect, never followed: check target.url",
    "protocol": "not a chat-completion reply (unparseable HTTP, or e.g. an HTML page): check "
    "that target.url is an OpenAI-compatible server",
    "client_error": "a failure inside stress itself, not the server's: please report it",
}
"""What an error class means, for the classes a reader cannot guess."""


def _events(run: RunData, *kinds: str) -> list[dict[str, Any]]:
    return [e for e in run.events if e.get("kind") in kinds]


def make_verdict(run: RunData) -> Verdict:
    recs = run.requests
    items: list[str] = []
    fail: list[str] = []
    warn: list[str] = []
    outcomes = Counter(str(r.get("outcome", "error")) for r in recs)
    warm = sum(1 for r in recs if r.get("warmup"))
    acct = run.accounting
    items.append(
        f"Requests: {accounting_text(acct.as_dict())}"
        + (" (" + ", ".join(f"{k} {v:,}" for k, v in sorted(outcomes.items())) + ")")
        * bool(outcomes)
        + f"; {warm:,} warm-up requests are excluded from the figures."
    )
    if not run.complete:
        warn.append("incomplete")
        items.append(
            f"The run did not finish (killed or crashed) after {num(run.duration_s)} s: this "
            "report covers the files up to the last flush."
        )
    errors = [r for r in recs if r.get("outcome") == "error"]
    classes = Counter(str(r.get("error_class") or "unclassified") for r in errors)
    real = sum(v for k, v in classes.items() if k != "cancelled")
    if errors:
        items.append(
            f"Errors: {len(errors):,} ("
            + ", ".join(
                f"{k} {v:,}" + (f": {ERROR_HINTS[k]}" if k in ERROR_HINTS else "")
                for k, v in classes.most_common()
            )
            + ")."
        )
        if real:
            fail.append("errors")
    else:
        items.append("Errors: none.")
    odd = [r for r in recs if r.get("outcome") in ("empty", "reasoning_only", "truncated")]
    if odd:
        diag = Counter(
            (str(r.get("outcome")), str(r.get("diagnosis") or "no diagnosis")) for r in odd
        )
        items.append(
            "Empty, reasoning-only or truncated replies: "
            + "; ".join(f"{n:,} {o} ({d})" for (o, d), n in diag.most_common())
            + "."
        )
        warn.append("replies")
    else:
        items.append("Empty or reasoning-only replies: none.")
    stalls = classes.get("stall", 0)
    first_token = classes.get("first_token_timeout", 0)
    server = run.collector("server")
    hangs = len(_events(run, "hang_suspected")) or int(server.get("hangs_suspected") or 0)
    restarts = len(_events(run, "restart")) or int(server.get("restarts") or 0)
    downs = len(_events(run, "server_down")) or int(server.get("down_events") or 0)
    preempt = server.get("preemptions")
    items.append(
        f"Stalls {stalls}, first-token timeouts {first_token}, suspected hangs {hangs}, server "
        f"restarts {restarts}, server down {downs} times"
        + (f", preemptions {preempt:,.0f}" if preempt else "")
        + "."
    )
    gaps = [float(r["max_gap_s"]) for r in recs if r.get("max_gap_s") is not None]
    if gaps:
        g = describe(gaps)
        items.append(
            f"Longest silence inside each stream (max_gap_s): p50 {num(g.p50)} s, p95 "
            f"{num(g.p95)} s, max {num(max(gaps))} s (n = {g.n:,})."
        )
    if hangs or restarts or downs:
        fail.append("server")
    if preempt:  # zero errors can hide this (field notes: 92 s median TTFT, no errors)
        items.append(
            f"Preemptions: the server evicted and recomputed running requests {preempt:,.0f} "
            "times; latency suffers even with zero errors (a larger KV pool is the lever)."
        )
        warn.append("preemptions")
    slo = run.scenario.get("slo") or {}
    p95 = figures.ttft_p95(run.main)  # the headline's and summary.json's own figure
    if slo.get("ttft_p95") and p95 is not None and p95 > float(slo["ttft_p95"]):
        items.append(f"SLO missed: TTFT p95 {p95:.3g} s > {float(slo['ttft_p95']):g} s.")
        warn.append("slo")
    p50 = figures.decode_p50(run.main)
    if slo.get("decode_tok_s_p50") and p50 is not None and p50 < float(slo["decode_tok_s_p50"]):
        items.append(
            f"SLO missed: decode p50 {p50:.3g} tok/s < {float(slo['decode_tok_s_p50']):g}."
        )
        warn.append("slo")
    hw = Counter(str(e.get("kind")) for e in run.events if e.get("kind") in HW_KINDS)
    gpu = run.collector("gpu")
    if not hw and isinstance(gpu.get("hw_errors"), dict):
        hw.update(
            {str(k): int(v) for k, v in gpu["hw_errors"].items() if isinstance(v, int | float)}
        )
    if run.gpu_cards or run.gpu_samples or gpu.get("available"):
        if hw:
            items.append(
                "GPU hardware errors: " + ", ".join(f"{k} {v}" for k, v in hw.items()) + "."
            )
            fail.append("hardware")
        else:
            items.append("GPU hardware errors (Xid / AER / ECC): none.")
    else:
        items.append("GPU hardware errors: not measured (no GPU telemetry in this run).")
    found = health_warnings(run.files) + warnings_for(recs, run.manifest)
    warnings = [w["message"] for w in found]
    codes = {w["code"] for w in found}
    if codes & FAIL_CODES:
        fail.append("measurement")
    elif warnings:
        warn.append("warnings")
    status: Status = "FAIL" if fail else ("WARN" if warn else "PASS")
    answered = outcomes.get("ok", 0)  # a reasoning-only reply is not an answer
    summary = (
        f"{status}: {answered:,} of {acct.sent:,} requests answered, {real:,} errors, "
        f"{hangs} hangs, {restarts} restarts"
    )
    return Verdict(status, summary, items, warnings)
