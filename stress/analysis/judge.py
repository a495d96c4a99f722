"""The one judge: run health PASS / WARN / FAIL and the SLO MET / MISSED with its factor.

Field notes 3-5: "zero errors" alone hides empty replies, budget-starved reasoning, stalls,
hangs and preemption storms; a restart counter alone misses a hang. So the verdict lists
each of those separately, with the diagnosis where the record carries one, and the checks'
loud warnings (``stress.analysis.checks``). Health is decided on all requests, warm-up
included: a failure is a failure. The rules (``health_findings``) take counts, so the live
view's badge applies the very same rules to a run in progress.

Grades, worst wins:

- FAIL: no request, or none answered; lost records, crashed users, a recorder failure,
  more failed requests than ``slo.error_rate`` allows, or more cancelled at the drain
  deadline after the run's end (each share on its own), a suspected hang, a server restart
  or outage, GPU hardware errors, or an SLO missed by more than ``SLO_FAIL_FACTOR`` (2x);
- WARN: fewer failed or cancelled requests than that, requests the user cut short (a
  second Ctrl-C), empty or cut-off replies, preemptions, any other check's warning, a run
  that did not finish, an SLO missed by up to 2x, or an SLO that could not be judged
  (fewer than ``MIN_SAMPLES`` requests);
- PASS: none of these.

The exit code of ``stress run`` follows the grade (``stress.core.limits.exit_code``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from stress.analysis import figures
from stress.analysis.checks import accounting_text, health_warnings, level_of, warnings_for
from stress.analysis.hangs import hang_count, hangs_from_events, outage_count
from stress.analysis.rows import EventRow, RequestRow
from stress.analysis.rundata import RunData
from stress.analysis.stats import describe, percentile_interval
from stress.core.fmt import num, times
from stress.core.limits import DEFAULT_ERROR_RATE, MIN_SAMPLES, SLO_FAIL_FACTOR
from stress.core.record import CANCEL_CAUSES

HW_KINDS = ("xid", "aer", "ecc", "ecc_dbe", "ecc_uncorrected", "gpu_lost", "gpu_unavailable")

ERROR_HINTS = {
    "redirect": "the server answered with a redirect, never followed: check target.url",
    "protocol": "not a chat-completion reply (unparseable HTTP, or e.g. an HTML page): check "
    "that target.url is an OpenAI-compatible server",
    "client_error": "a failure inside stress itself, not the server's: please report it",
    "worker_died": "the stress worker process sending it died (--workers): stress's failure, "
    "not the server's",
}
"""What an error class means, for the classes a reader cannot guess."""


USER_CANCELS = frozenset({"interrupt", "interrupt_drain"})
"""Cancellation causes that are the user's choice (``stress.core.record.CANCEL_CAUSES``)."""
CANCEL_WHY: dict[str, str] = {
    **{str(k): v for k, v in CANCEL_CAUSES.items()},
    "unrecorded": "for a cause not recorded",
}


@dataclass(frozen=True, slots=True)
class RequestTally:
    """The run's requests counted once, warm-up included as health is judged: the
    headline, the verdict's list and its rules all read these numbers. An error is a
    failed request; a cancelled one is counted apart, by its cause."""

    requests: int
    answered: int
    errors: Counter[str]
    """Failed requests by error class, cancelled ones aside."""
    cancelled: Counter[str]
    """Cancelled requests by cause (``CANCEL_WHY``'s keys)."""

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    @property
    def by_user(self) -> int:
        return sum(n for cause, n in self.cancelled.items() if cause in USER_CANCELS)

    @property
    def charged(self) -> int:
        """Cancelled at the drain deadline after the run's own end, or for no recorded
        cause: requests the server did not finish in the time the scenario gave."""
        return sum(self.cancelled.values()) - self.by_user

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "answered": self.answered,
            "errors": self.error_count,
            "cancelled": sum(self.cancelled.values()),
            "cancelled_by": dict(self.cancelled.most_common()),
        }


def tally(records: list[RequestRow]) -> RequestTally:
    errors: Counter[str] = Counter()
    cancelled: Counter[str] = Counter()
    for r in records:
        if r.get("outcome", "error") != "error":
            continue
        cls = str(r.get("error_class") or "unclassified")
        if cls == "cancelled":
            cancelled[str(r.get("cancelled_by") or "unrecorded")] += 1
        else:
            errors[cls] += 1
    answered = sum(1 for r in records if r.get("outcome") == "ok")  # reasoning-only is not
    return RequestTally(len(records), answered, errors, cancelled)


def cancelled_text(t: RequestTally, error_rate: float) -> str | None:
    """The cancelled requests in a sentence: how many, by what, and how they grade."""
    total = sum(t.cancelled.values())
    if not total:
        return None
    parts = "; ".join(
        f"{n:,} {CANCEL_WHY.get(cause, cause)}" for cause, n in t.cancelled.most_common()
    )
    text = f"{total:,} ({parts})"
    if t.charged:
        text += (
            f"; the run fails past {100 * error_rate:g}% of requests cancelled at the drain "
            "deadline after its end (slo.error_rate, counted apart from errors)"
        )
    if t.by_user:
        text += "; those the user cut short fail nothing, but no figure holds them"
    return text


def _events(run: RunData, *kinds: str) -> list[EventRow]:
    return [e for e in run.events if e.get("kind") in kinds]


Status = Literal["PASS", "WARN", "FAIL"]
Level = Literal["WARN", "FAIL"]
SloStatus = Literal["MET", "MISSED", "NOT JUDGED"]

COUNTED_CHECKS = frozenset({"errors", "empty_replies", "truncated"})
"""Checks whose subject the health counts already grade (with a rate, not per warning)."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One reason for the grade: its level, a code, and a few words for badges and lists."""

    level: Level
    code: str
    short: str


def _n(n: int | float, word: str) -> str:
    return f"{n:,.0f} {word}{'' if n == 1 else 's'}"


@dataclass(frozen=True, slots=True)
class HealthCounts:
    """What the health rules look at. The verdict fills it from the run's files, the live
    view's badge from the run in progress: one set of rules for both."""

    requests: int = 0
    answered: int = 0
    """Requests answered (``ok``): none of many is a FAIL, whatever else the run shows."""
    errors: int = 0
    """Failed requests, cancelled ones aside (``RequestTally.errors``)."""
    cancelled: int = 0
    """Requests the run cancelled at its drain deadline after its own end (or for a cause
    not recorded): graded against ``error_rate_limit`` like the errors, apart from them."""
    cancelled_by_user: int = 0
    """Requests the user cut short (a second Ctrl-C or SIGTERM, or the drain after one):
    no failure of the server, but the figures lack them, the slowest requests."""
    odd_replies: int = 0
    """Empty, reasoning-only and cut-off replies."""
    hangs: int = 0
    restarts: int = 0
    downs: int = 0
    preemptions: float = 0.0
    hardware: int = 0
    users_crashed: int = 0
    workers_died: int = 0
    """Worker processes (``--workers``) that died during the run."""
    recorder_failed: int = 0
    records_failed: int = 0
    """Finished requests a bug in stress kept from being written (``record_failed``)."""
    collector_failed: int = 0
    incomplete: bool = False
    error_rate_limit: float = DEFAULT_ERROR_RATE


def health_findings(c: HealthCounts) -> list[Finding]:
    """The run-health rules, FAIL ones first."""
    out: list[Finding] = []
    if c.requests and not c.answered:
        out.append(Finding("FAIL", "none_answered", f"0 of {c.requests:,} answered"))
    for count, code, what in ((c.errors, "errors", "error"), (c.cancelled, "cancelled", "")):
        if count:
            rate = count / max(c.requests, 1)
            level: Level = "FAIL" if rate > c.error_rate_limit else "WARN"
            words = _n(count, what) if what else f"{count:,} cancelled at drain"
            out.append(Finding(level, code, f"{words} ({100 * rate:.1f}%)"))
    if c.cancelled_by_user:
        out.append(Finding("WARN", "cancelled_by_user", f"{c.cancelled_by_user:,} cut by Ctrl-C"))
    for count, code, word in (
        (c.hangs, "hangs", "hang"),
        (c.restarts, "restarts", "restart"),
        (c.downs, "server_down", "server outage"),
        (c.hardware, "hardware", "hw error"),
        (c.users_crashed, "users_crashed", "crashed user"),
        (c.workers_died, "workers_died", "dead worker"),
    ):
        if count:
            out.append(Finding("FAIL", code, _n(count, word)))
    if c.recorder_failed:
        out.append(Finding("FAIL", "recorder_failed", "recorder failed"))
    if c.records_failed:
        out.append(Finding("WARN", "record_failed", _n(c.records_failed, "failed record")))
    if c.collector_failed:
        out.append(Finding("WARN", "collector_failed", _n(c.collector_failed, "dead collector")))
    if c.odd_replies:
        out.append(Finding("WARN", "replies", f"{c.odd_replies:,} empty/cut"))
    if c.preemptions:
        out.append(Finding("WARN", "preemptions", f"{c.preemptions:,.0f} preempted"))
    if c.incomplete:
        out.append(Finding("WARN", "incomplete", "did not finish"))
    return sorted(out, key=lambda f: f.level != "FAIL")


def grade(findings: list[Finding]) -> Status:
    """The worst level among the findings; PASS without any."""
    levels = {f.level for f in findings}
    return "FAIL" if "FAIL" in levels else ("WARN" if levels else "PASS")


@dataclass(frozen=True, slots=True)
class SloCheck:
    """One SLO figure against its limit, with the bootstrap interval of the figure."""

    figure: str
    """e.g. "TTFT p95"."""
    unit: str
    limit: float
    value: float | None
    n: int
    interval: tuple[float, float] | None
    higher_is_worse: bool

    @property
    def factor(self) -> float | None:
        """How many times the SLO the figure is, in the bad direction (1.14 = 14 % past
        it; below 1 = within it). None without a value."""
        if self.value is None:
            return None
        if self.higher_is_worse:
            return self.value / self.limit
        return self.limit / self.value if self.value > 0 else float("inf")

    @property
    def status(self) -> SloStatus:
        if self.value is None or self.n < MIN_SAMPLES:
            return "NOT JUDGED"
        return "MISSED" if (self.factor or 0.0) > 1.0 else "MET"

    def finding(self) -> Finding | None:
        f = self.factor
        if self.status == "NOT JUDGED":
            return Finding("WARN", "slo_not_judged", f"{self.figure} n={self.n}")
        if self.status == "MISSED" and f is not None:
            level: Level = "FAIL" if f > SLO_FAIL_FACTOR else "WARN"
            return Finding(level, "slo", f"{self.figure} {times(f)} SLO")
        return None

    def text(self) -> str:
        """'TTFT p95 11.4 s [10.2-12.9] vs SLO 10 s: MISSED x1.14'."""
        op = "" if self.higher_is_worse else "≥ "
        got = "no data" if self.value is None else f"{num(self.value)} {self.unit}"
        if self.interval is not None and self.value is not None:
            got += f" [{num(self.interval[0])}-{num(self.interval[1])}]"
        head = f"{self.figure} {got} vs SLO {op}{num(self.limit)} {self.unit}"
        if self.status == "NOT JUDGED":
            return f"{head}: not judged (n = {self.n} < {MIN_SAMPLES})"
        if self.status == "MISSED":
            return f"{head}: MISSED {times(self.factor or 0.0)}"
        return f"{head}: MET"

    def as_dict(self) -> dict[str, Any]:
        return {
            "figure": self.figure,
            "unit": self.unit,
            "limit": self.limit,
            "value": self.value,
            "n": self.n,
            "interval": list(self.interval) if self.interval else None,
            "status": self.status,
            "factor": self.factor,
            "text": self.text(),
        }


SLO_FIGURES = (
    ("ttft_p95", "TTFT p95", "ttft_s", 95, "s", True),
    ("decode_tok_s_p50", "decode p50", "decode_tok_s", 50, "tok/s", False),
)
"""The scenario's SLO keys and the headline figure each is graded on: (slo key, figure,
record field, percentile, unit, higher is worse)."""


def slo_limit(slo: Mapping[str, Any] | None, key: str) -> float | None:
    v = (slo or {}).get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and v > 0 else None


def slo_checks(run: RunData, slo: Mapping[str, Any] | None = None) -> list[SloCheck]:
    """The scenario's SLO (or ``slo``, a tier's limits), each on the headline's own figure
    (``stress.analysis.figures``): TTFT p95 and decode p50 over non-warm-up requests that
    generated text."""
    slo = (run.scenario.get("slo") or {}) if slo is None else slo
    main = figures.main_requests(run.requests)
    out: list[SloCheck] = []
    for key, figure, field, q, unit, worse in SLO_FIGURES:
        limit = slo_limit(slo, key)
        if limit is None:
            continue
        values = figures.generated_values(main, field)
        out.append(
            SloCheck(
                figure,
                unit,
                limit,
                figures.percentile(values, q),
                len(values),
                percentile_interval(values, q, clusters=figures.generated_users(main, field))
                if len(values) >= MIN_SAMPLES
                else None,
                worse,
            )
        )
    return out


def tier_grade(checks: list[SloCheck]) -> tuple[str, float | None]:
    """An SLO tier's grade from its checks, its worst one: ("MISSED", the largest factor),
    ("NOT JUDGED", None) when a figure has too few samples or none is judged, else
    ("MET", None). ``stress ls``, ``compare`` and the live badge all grade a tier so."""
    missed = [c.factor or 0.0 for c in checks if c.status == "MISSED"]
    if missed:
        return "MISSED", max(missed)
    if not checks or any(c.status == "NOT JUDGED" for c in checks):
        return "NOT JUDGED", None
    return "MET", None


def tier_checks(run: RunData) -> dict[str, list[SloCheck]]:
    """Each of the scenario's ``slo.tiers`` judged as the SLO is, on the same figures."""
    tiers = (run.scenario.get("slo") or {}).get("tiers") or {}
    if not isinstance(tiers, Mapping):
        return {}
    return {
        str(name): slo_checks(run, limits)
        for name, limits in tiers.items()
        if isinstance(limits, Mapping)
    }


def error_rate_limit(run: RunData) -> float:
    v = (run.scenario.get("slo") or {}).get("error_rate")
    return float(v) if isinstance(v, int | float) and 0 <= v <= 1 else DEFAULT_ERROR_RATE


@dataclass(slots=True)
class Verdict:
    status: Status
    summary: str
    items: list[str]
    """One line each: requests, errors, empty replies, stalls/hangs/restarts, hardware."""
    warnings: list[str]
    findings: list[Finding]
    """Why the grade: FAIL reasons first."""
    slo: list[SloCheck]
    tiers: dict[str, list[SloCheck]]
    """``slo.tiers``, each judged like ``slo`` (shown, never grading the verdict)."""
    tally: RequestTally
    error_rate: float
    """The scenario's ``slo.error_rate``, as the verdict applied it."""

    @property
    def reasons(self) -> list[str]:
        """The findings in a few words each (the live badge and ``stress ls`` show these)."""
        return [f.short for f in self.findings]

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "summary": self.summary,
            "reasons": self.reasons,
            "findings": [
                {"level": f.level, "code": f.code, "short": f.short} for f in self.findings
            ],
            "slo": [c.as_dict() for c in self.slo],
            "slo_tiers": {k: [c.as_dict() for c in v] for k, v in self.tiers.items()},
            "items": self.items,
            "warnings": self.warnings,
            "counts": self.tally.as_dict(),
            "cancelled": cancelled_text(self.tally, self.error_rate),
        }


def _request_items(run: RunData, t: RequestTally) -> list[str]:
    """The verdict's first lines: requests sent and recorded by outcome, whether the run
    finished, its errors and its cancelled requests (one count each, as the headline)."""
    recs = run.requests
    outcomes = Counter(str(r.get("outcome", "error")) for r in recs)
    cancelled = sum(t.cancelled.values())
    if outcomes.get("error"):  # an error outcome is an error or a cancellation, apart
        outcomes["error"] -= cancelled
        outcomes["cancelled"] = cancelled
    warm = sum(1 for r in recs if r.get("warmup"))
    shown = ", ".join(f"{k} {v:,}" for k, v in sorted(outcomes.items()) if v)
    items = [
        f"Requests: {accounting_text(run.accounting.as_dict())}"
        + f" ({shown})" * bool(shown)
        + f"; {warm:,} warm-up requests are excluded from the figures."
    ]
    if not run.complete:
        items.append(
            f"The run did not finish (killed or crashed) after {num(run.duration_s)} s: this "
            "report covers the files up to the last flush."
        )
    rate = error_rate_limit(run)
    if t.errors:
        items.append(
            f"Errors: {t.error_count:,} ("
            + ", ".join(
                f"{k} {v:,}" + (f": {ERROR_HINTS[k]}" if k in ERROR_HINTS else "")
                for k, v in t.errors.most_common()
            )
            + f"); the run fails past {100 * rate:g}% failed requests (slo.error_rate)."
        )
    else:
        items.append("Errors: none.")
    text = cancelled_text(t, rate)
    if text is not None:
        items.append(f"Cancelled: {text}.")
    return items


def _hardware(run: RunData) -> tuple[Counter[str], str]:
    """GPU hardware errors by kind, and the verdict's line about them."""
    hw = Counter(str(e.get("kind")) for e in run.events if e.get("kind") in HW_KINDS)
    gpu = run.collector("gpu")
    if not hw and isinstance(gpu.get("hw_errors"), dict):
        hw.update(
            {str(k): int(v) for k, v in gpu["hw_errors"].items() if isinstance(v, int | float)}
        )
    if not (run.gpu_cards or run.gpu_samples or gpu.get("available")):
        return hw, "GPU hardware errors: not measured (no GPU telemetry in this run)."
    if hw:
        return hw, "GPU hardware errors: " + ", ".join(f"{k} {v}" for k, v in hw.items()) + "."
    return hw, "GPU hardware errors (Xid / AER / ECC): none."


def _odd_item(odd: list[RequestRow]) -> str:
    if not odd:
        return "Empty or reasoning-only replies: none."
    diag = Counter((str(r.get("outcome")), str(r.get("diagnosis") or "no diagnosis")) for r in odd)
    return (
        "Empty, reasoning-only or truncated replies: "
        + "; ".join(f"{n:,} {o} ({d})" for (o, d), n in diag.most_common())
        + "."
    )


@dataclass(frozen=True, slots=True)
class _Trouble:
    """The server's trouble as the events (else its collector) count it."""

    hangs: int
    restarts: int
    downs: int
    """Outages: a frozen process's timed-out health checks inside a hang are that hang."""
    preemptions: float
    frozen_s: float = 0.0
    """How long the health checks timed out inside the hangs (``Hang.health_silent_s``)."""


def _server_items(run: RunData, t: RequestTally) -> tuple[_Trouble, list[str]]:
    """The server's trouble (hangs, restarts, outages, preemptions) and its lines."""
    recs = run.requests
    server = run.collector("server")
    preempt = server.get("preemptions")
    c = _Trouble(
        hang_count(run.events, server),
        len(_events(run, "restart")) or int(server.get("restarts") or 0),
        outage_count(run.events, server),
        float(preempt) if isinstance(preempt, int | float) else 0.0,
        sum(h.health_silent_s or 0.0 for h in hangs_from_events(run.events)),
    )
    frozen = (
        f" (the server also stopped answering its health checks for {num(c.frozen_s)} s: "
        "frozen, counted as the hang, not as an outage)"
        if c.frozen_s
        else ""
    )
    items = [
        f"Stalls {t.errors['stall']}, first-token timeouts {t.errors['first_token_timeout']}, "
        f"suspected hangs {c.hangs}{frozen}, server restarts {c.restarts}, server down "
        f"{c.downs} times" + (f", preemptions {c.preemptions:,.0f}" if c.preemptions else "") + "."
    ]
    gaps = [float(v) for r in recs if (v := r.get("max_gap_s")) is not None]
    if gaps:
        d = describe(gaps)
        items.append(
            f"Longest silence inside each stream (max_gap_s): p50 {num(d.p50)} s, p95 "
            f"{num(d.p95)} s, max {num(max(gaps))} s (n = {d.n:,})."
        )
    if c.preemptions:  # zero errors can hide this (field notes: 92 s median TTFT)
        items.append(
            f"Preemptions: the server evicted and recomputed running requests "
            f"{c.preemptions:,.0f} times; latency suffers even with zero errors (a larger KV "
            "pool is the lever)."
        )
    return c, items


def _graded(
    counts: HealthCounts, found: list[dict[str, str]], checks: list[SloCheck]
) -> list[Finding]:
    """The health rules, then the checks the counts do not already grade, then the SLO."""
    findings = health_findings(counts)
    counted = {f.code for f in findings}
    for w in found:
        level = level_of(w["code"])
        if level == "NOTE" or w["code"] in counted or w["code"] in COUNTED_CHECKS:
            continue
        findings.append(
            Finding("FAIL" if level == "FAIL" else "WARN", w["code"], w["code"].replace("_", " "))
        )
    findings += [f for f in (c.finding() for c in checks) if f is not None]
    return sorted(findings, key=lambda f: f.level != "FAIL")


def make_verdict(run: RunData) -> Verdict:
    recs = run.requests
    t = tally(recs)
    items = _request_items(run, t)
    odd = [r for r in recs if r.get("outcome") in ("empty", "reasoning_only", "truncated")]
    items.append(_odd_item(odd))
    server, lines = _server_items(run, t)
    items += lines
    checks = slo_checks(run)
    items += [f"SLO: {c.text()}." for c in checks]
    tiers = tier_checks(run)
    items += [f"SLO tier {name}: {c.text()}." for name, cs in tiers.items() for c in cs]
    hw, hw_line = _hardware(run)
    items.append(hw_line)
    found = health_warnings(run.files) + warnings_for(recs, run.manifest, run.files.collectors)
    kinds = Counter(str(e.get("kind")) for e in run.events)
    counts = HealthCounts(
        requests=t.requests,
        answered=t.answered,
        errors=t.error_count,
        cancelled=t.charged,
        cancelled_by_user=t.by_user,
        odd_replies=len(odd),
        hangs=server.hangs,
        restarts=server.restarts,
        downs=server.downs,
        preemptions=server.preemptions,
        hardware=sum(hw.values()),
        users_crashed=kinds["user_crashed"],
        workers_died=kinds["worker_died"],
        recorder_failed=kinds["recorder_failed"],
        records_failed=kinds["record_failed"],
        collector_failed=kinds["collector_failed"],
        incomplete=not run.complete,
        error_rate_limit=error_rate_limit(run),
    )
    findings = _graded(counts, found, checks)
    status = grade(findings)
    summary = f"{status}: {headline_counts(t, run.accounting.sent, counts)}"
    for c in checks:
        summary += f"; {c.figure} {c.status}" + (
            f" {times(c.factor or 0.0)}" if c.status == "MISSED" else ""
        )
    warnings = [w["message"] for w in found]
    return Verdict(
        status, summary, items, warnings, findings, checks, tiers, t, error_rate_limit(run)
    )


def headline_counts(t: RequestTally, sent: int, c: HealthCounts) -> str:
    """'0 of 12 requests answered, 0 errors, 12 cancelled, 0 hangs, 0 restarts'."""
    cancelled = sum(t.cancelled.values())
    return (
        f"{t.answered:,} of {sent:,} requests answered, {t.error_count:,} errors"
        + (f", {cancelled:,} cancelled" if cancelled else "")
        + f", {c.hangs} hangs, {c.restarts} restarts"
    )
