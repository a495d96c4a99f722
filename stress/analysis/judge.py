"""The one judge: run health PASS / WARN / FAIL and the SLO MET / MISSED with its factor.

Field notes 3-5: "zero errors" alone hides empty replies, budget-starved reasoning, stalls,
hangs and preemption storms; a restart counter alone misses a hang. So the verdict lists
each of those separately, with the diagnosis where the record carries one, and the checks'
loud warnings (``stress.analysis.checks``). Health is decided on all requests, warm-up
included: a failure is a failure. The rules (``health_findings``) take counts, so the live
view's badge applies the very same rules to a run in progress.

Grades, worst wins:

- FAIL: no request, lost records, crashed users, a recorder failure, more failed requests
  than ``slo.error_rate`` allows, a suspected hang, a server restart or outage, GPU
  hardware errors, or an SLO missed by more than ``SLO_FAIL_FACTOR`` (2x);
- WARN: fewer failed requests than that, empty or cut-off replies, preemptions, any
  other check's warning, a run that did not finish, an SLO missed by up to 2x, or an SLO
  that could not be judged (fewer than ``MIN_SAMPLES`` requests);
- PASS: none of these.

The exit code of ``stress run`` follows the grade (``stress.analysis.limits.exit_code``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from stress.analysis import figures
from stress.analysis.checks import accounting_text, health_warnings, level_of, warnings_for
from stress.analysis.limits import DEFAULT_ERROR_RATE, MIN_SAMPLES, SLO_FAIL_FACTOR
from stress.analysis.rows import EventRow
from stress.analysis.rundata import RunData
from stress.analysis.stats import describe, percentile_interval
from stress.fmt import num, times

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
    errors: int = 0
    """Failed requests, cancelled ones (Ctrl-C, drain deadline) aside."""
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
    if c.errors:
        rate = c.errors / max(c.requests, 1)
        level: Level = "FAIL" if rate > c.error_rate_limit else "WARN"
        out.append(Finding(level, "errors", f"{_n(c.errors, 'error')} ({100 * rate:.1f}%)"))
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


def slo_checks(run: RunData) -> list[SloCheck]:
    """The scenario's SLO, each on the headline's own figure (``stress.analysis.figures``):
    TTFT p95 and decode p50 over non-warm-up requests that generated text."""
    slo = run.scenario.get("slo") or {}
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
                percentile_interval(values, q) if len(values) >= MIN_SAMPLES else None,
                worse,
            )
        )
    return out


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
            "items": self.items,
            "warnings": self.warnings,
        }


def make_verdict(run: RunData) -> Verdict:
    recs = run.requests
    items: list[str] = []
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
            + f"); the run fails past {100 * error_rate_limit(run):g}% failed requests "
            "(slo.error_rate)."
        )
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
    else:
        items.append("Empty or reasoning-only replies: none.")
    stalls = classes.get("stall", 0)
    first_token = classes.get("first_token_timeout", 0)
    server = run.collector("server")
    hangs = len(_events(run, "hang_suspected")) or int(server.get("hangs_suspected") or 0)
    restarts = len(_events(run, "restart")) or int(server.get("restarts") or 0)
    downs = len(_events(run, "server_down")) or int(server.get("down_events") or 0)
    preempt = server.get("preemptions")
    preempt = float(preempt) if isinstance(preempt, int | float) else 0.0
    items.append(
        f"Stalls {stalls}, first-token timeouts {first_token}, suspected hangs {hangs}, server "
        f"restarts {restarts}, server down {downs} times"
        + (f", preemptions {preempt:,.0f}" if preempt else "")
        + "."
    )
    gaps = [float(v) for r in recs if (v := r.get("max_gap_s")) is not None]
    if gaps:
        d = describe(gaps)
        items.append(
            f"Longest silence inside each stream (max_gap_s): p50 {num(d.p50)} s, p95 "
            f"{num(d.p95)} s, max {num(max(gaps))} s (n = {d.n:,})."
        )
    if preempt:  # zero errors can hide this (field notes: 92 s median TTFT, no errors)
        items.append(
            f"Preemptions: the server evicted and recomputed running requests {preempt:,.0f} "
            "times; latency suffers even with zero errors (a larger KV pool is the lever)."
        )
    checks = slo_checks(run)
    for c in checks:
        items.append(f"SLO: {c.text()}.")
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
        else:
            items.append("GPU hardware errors (Xid / AER / ECC): none.")
    else:
        items.append("GPU hardware errors: not measured (no GPU telemetry in this run).")
    found = health_warnings(run.files) + warnings_for(recs, run.manifest, run.files.collectors)
    kinds = Counter(str(e.get("kind")) for e in run.events)
    findings = health_findings(
        HealthCounts(
            requests=len(recs),
            errors=real,
            odd_replies=len(odd),
            hangs=hangs,
            restarts=restarts,
            downs=downs,
            preemptions=preempt,
            hardware=sum(hw.values()),
            users_crashed=kinds["user_crashed"],
            workers_died=kinds["worker_died"],
            recorder_failed=kinds["recorder_failed"],
            records_failed=kinds["record_failed"],
            collector_failed=kinds["collector_failed"],
            incomplete=not run.complete,
            error_rate_limit=error_rate_limit(run),
        )
    )
    counted = {f.code for f in findings}
    for w in found:  # the checks the counts above do not already grade
        level = level_of(w["code"])
        if level == "NOTE" or w["code"] in counted or w["code"] in COUNTED_CHECKS:
            continue
        findings.append(
            Finding("FAIL" if level == "FAIL" else "WARN", w["code"], w["code"].replace("_", " "))
        )
    findings += [f for f in (c.finding() for c in checks) if f is not None]
    findings.sort(key=lambda f: f.level != "FAIL")
    status = grade(findings)
    answered = outcomes.get("ok", 0)  # a reasoning-only reply is not an answer
    summary = (
        f"{status}: {answered:,} of {acct.sent:,} requests answered, {real:,} errors, "
        f"{hangs} hangs, {restarts} restarts"
    )
    for c in checks:
        summary += f"; {c.figure} {c.status}" + (
            f" {times(c.factor or 0.0)}" if c.status == "MISSED" else ""
        )
    return Verdict(status, summary, items, [w["message"] for w in found], findings, checks)
