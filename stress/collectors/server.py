"""Server telemetry during a run: /metrics (and llama.cpp /slots) on fixed deadlines.

Why this exists: the client alone sees latency, not why. The server's counters say whether
the prefix cache is working, whether requests are being preempted, how full the KV pool
is and how many requests queue. This collector turns those counters into per-run numbers
(window and run hit rate from counter deltas, never from a single-scrape gauge), writes one
``server`` record per scrape, and raises run events for what an operator must not miss:

- ``restart``: a counter went backwards or the process start time changed;
- ``server_down`` / ``server_back``: /health (or, without one, /metrics) stopped answering
  for ``down_after`` consecutive scrapes, and came back;
- ``hang_suspected`` / ``hang_cleared``: requests are running or waiting but no work
  counter moved for ``hang_after_s`` (field note 5: a hang is not a restart).

It never raises out of :meth:`ServerCollector.run`; failures are records and events.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import orjson

from stress.collectors.base import Collector, RunClock, Sink
from stress.collectors.prometheus import (
    COUNTERS,
    DIALECTS,
    METRICS_FLAGS,
    CounterTracker,
    Dialect,
    MetricSet,
    MetricsParseError,
    canonical,
    detect_dialect,
    normalize_base_url,
    parse_metrics,
)
from stress.core.events import RunEvent, Severity
from stress.net.fetch import Fetcher, FetchError

_MAX_ERROR_EVENTS = 20


@dataclass(frozen=True, slots=True)
class HttpResult:
    """One GET: a status and body, or a transport error (status None)."""

    status: int | None
    body: bytes = b""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200


@dataclass(frozen=True, slots=True)
class Scrape:
    """Everything one tick fetched, already parsed (parsing runs off the event loop)."""

    t: float
    health: HttpResult
    metrics_http: HttpResult | None
    metrics: MetricSet | None
    metrics_error: str | None
    slots: list[dict[str, Any]] | None
    scrape_ms: float
    slots_asked: bool = False
    """/slots was requested this tick (llama.cpp, while the endpoint is enabled)."""
    slots_error: str | None = None
    """Why the /slots request failed (None: it answered, or was not asked)."""


async def http_get(
    session: Fetcher, url: str, headers: dict[str, str], timeout_s: float
) -> HttpResult:
    """GET ``url`` and read the body, never raising on transport errors."""
    try:
        resp = await session.get(url, headers, timeout_s)
    except FetchError as exc:
        return HttpResult(None, b"", exc.short)
    return HttpResult(resp.status, resp.body)


def _parse_slots(body: bytes) -> list[dict[str, Any]] | None:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if isinstance(data, list) and all(isinstance(s, dict) for s in data):
        return data
    return None


def _slot_busy(slot: dict[str, Any]) -> bool:
    if "is_processing" in slot:
        return bool(slot["is_processing"])
    return bool(slot.get("state", 0))  # older builds: 0 = idle


def _slot_decoded(slot: dict[str, Any]) -> int:
    nt = slot.get("next_token")
    first = nt[0] if isinstance(nt, list) and nt else nt
    if isinstance(first, dict):
        return int(first.get("n_decoded", 0) or 0)
    return 0


def summarize_slots(slots: list[dict[str, Any]]) -> dict[str, Any]:
    """Busy slots, per-slot context, and an estimate of KV in use (llama.cpp has no metric).

    The estimate counts each slot's last prompt plus decoded tokens: an idle slot keeps its
    prompt in the KV cache for reuse, so it still occupies its share.
    """
    n_ctx = [int(s.get("n_ctx", 0) or 0) for s in slots]
    used = [
        min(int(s.get("n_prompt_tokens", 0) or 0) + _slot_decoded(s), c or 1 << 62)
        for s, c in zip(slots, n_ctx, strict=True)
    ]
    total_ctx = sum(n_ctx)
    return {
        "total": len(slots),
        "busy": sum(1 for s in slots if _slot_busy(s)),
        "n_ctx_min": min(n_ctx) if n_ctx else None,
        "tokens_in_use": sum(used),
        "kv_usage_est": (sum(used) / total_ctx) if total_ctx else None,
    }


def _slots_signature(slots: list[dict[str, Any]]) -> tuple[tuple[Any, ...], ...]:
    return tuple(
        (s.get("id"), s.get("id_task"), _slot_decoded(s), s.get("n_prompt_tokens_processed"))
        for s in slots
    )


def _as_dialect(kind: str) -> Dialect | None:
    for d in DIALECTS:
        if d == kind:
            return d
    return None


def _ratio(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


class ServerCollector(Collector):
    """Scrapes one inference server; see the module docstring."""

    name = "server"

    def __init__(
        self,
        sink: Sink,
        clock: RunClock,
        interval_s: float,
        session: Fetcher,
        base_url: str,
        headers: dict[str, str],
        kind: str,
        hang_after_s: float = 60.0,
        *,
        window_s: float = 60.0,
        timeout_s: float | None = None,
        down_after: int = 2,
    ) -> None:
        super().__init__(sink, clock, interval_s)
        self.session = session
        self.base_url = normalize_base_url(base_url)
        self._headers = dict(headers)
        self.kind = kind
        self.hang_after_s = hang_after_s
        self.window_s = window_s
        self.timeout_s = timeout_s if timeout_s is not None else min(5.0, max(1.0, interval_s))
        self.down_after = max(1, down_after)
        self._dialect: Dialect | None = _as_dialect(kind)
        self._tracker = CounterTracker()
        maxlen = math.ceil(window_s / max(interval_s, 1e-3)) + 4
        self._window: deque[tuple[float, dict[str, float]]] = deque(maxlen=maxlen)
        self._prev_t: float | None = None
        self._process_start: float | None = None
        # health state
        self._up = True
        self._fails = 0
        self._down_since: float | None = None
        self._first_fail_t = 0.0
        self._downtime_s = 0.0
        self._down_events = 0
        # hang state
        self._progress_sig: tuple[Any, ...] | None = None
        self._last_progress_t: float | None = None
        self._hang = False
        self._hangs = 0
        # bookkeeping
        self._restarts = 0
        self._scrapes = 0
        self._scrape_errors = 0
        self._slots_requests = 0
        self._slots_errors = 0
        self._late_ticks = 0
        self._error_keys: set[str] = set()
        self._metrics_seen = False
        self._metrics_warned = False
        self._slots_enabled = True
        self._kv_sum = 0.0
        self._kv_n = 0
        self._kv_max: float | None = None
        self._running_max: float | None = None
        self._waiting_max: float | None = None
        self._gauges: dict[str, float] = {}
        self._last_rates: dict[str, float | None] = {}
        self._first_counter_t: float | None = None
        self._live: dict[str, Any] = self._empty_live()

    # --- loop ---------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        try:
            start = self.clock.now()
            k = 0
            while not stop.is_set():
                await self.tick()
                now = self.clock.now()
                due = max(k + 1, math.floor((now - start) / self.interval_s) + 1)
                self._late_ticks += due - (k + 1)
                k = due
                delay = start + k * self.interval_s - now
                try:
                    await asyncio.wait_for(stop.wait(), timeout=max(delay, 0.0))
                except TimeoutError:
                    continue
            await self.tick()  # one last scrape so the run totals include the end
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug here must not end the run
            self._event(
                "collector_error",
                f"server telemetry stopped: {type(exc).__name__}: {exc}",
                "error",
            )

    async def tick(self) -> dict[str, Any]:
        """Scrape once, ingest, write the ``server`` record; returns the record."""
        scrape = await self.scrape_once()
        record = self.ingest(scrape)
        self.sink.write("server", record)
        return record

    async def scrape_once(self) -> Scrape:
        t = self.clock.now()
        t0 = time.perf_counter()
        base = self.base_url
        want_slots = self._slots_enabled and (self._dialect or self.kind) == "llamacpp"
        tasks = [
            http_get(self.session, f"{base}/health", self._headers, self.timeout_s),
            http_get(self.session, f"{base}/metrics", self._headers, self.timeout_s),
        ]
        if want_slots:
            tasks.append(http_get(self.session, f"{base}/slots", self._headers, self.timeout_s))
        results = await asyncio.gather(*tasks)
        health, mhttp = results[0], results[1]
        metrics: MetricSet | None = None
        metrics_error: str | None = None
        if mhttp.ok:
            text = mhttp.body.decode("utf-8", errors="replace")
            try:
                metrics = await asyncio.to_thread(parse_metrics, text)
            except MetricsParseError as exc:
                metrics_error = str(exc)[:200]
        elif mhttp.status is not None:
            metrics_error = f"/metrics HTTP {mhttp.status}"
        else:
            metrics_error = f"/metrics {mhttp.error}"
        slots: list[dict[str, Any]] | None = None
        slots_error: str | None = None
        if want_slots:
            shttp = results[2]
            if shttp.ok:
                slots = _parse_slots(shttp.body)
                if slots is None:
                    slots_error = "/slots answered something other than a list of slots"
            elif shttp.status in (404, 501):
                self._slots_enabled = False  # disabled (--no-slots); stop asking
            elif shttp.status is not None:
                slots_error = f"/slots HTTP {shttp.status}"
            else:
                slots_error = f"/slots {shttp.error}"
        return Scrape(
            t=t,
            health=health,
            metrics_http=mhttp,
            metrics=metrics,
            metrics_error=metrics_error,
            slots=slots,
            scrape_ms=(time.perf_counter() - t0) * 1000.0,
            slots_asked=want_slots,
            slots_error=slots_error,
        )

    # --- processing ---------------------------------------------------------------

    def ingest(self, s: Scrape) -> dict[str, Any]:
        """Turn one scrape into a record, updating state and emitting events."""
        self._scrapes += 1
        reachable, reason = self._reachability(s)
        self._update_up(s.t, reachable, reason)

        record: dict[str, Any] = {
            "t": round(s.t, 3),
            "wall": round(self.clock.wall_t0 + s.t, 3),
            "up": self._up,
            "health": s.health.status,
            "scrape_ms": round(s.scrape_ms, 1),
        }
        if s.metrics_error:
            self._scrape_errors += 1
            record["error"] = s.metrics_error
            self._note_metrics_problem(s)
        if s.slots_asked:
            self._slots_requests += 1
        if s.slots_error:
            self._slots_errors += 1
            record["slots_error"] = s.slots_error

        values: dict[str, float] = {}
        if s.metrics is not None:
            self._metrics_seen = True
            if self._dialect is None:
                self._dialect = detect_dialect(s.metrics)
            if self._dialect is not None:
                values = canonical(s.metrics, self._dialect)
        record["dialect"] = self._dialect
        record["values"] = values

        counters = {k: v for k, v in values.items() if k in COUNTERS}
        if counters:
            self._ingest_counters(s.t, values, counters, record)

        gauges = {k: v for k, v in values.items() if k not in COUNTERS}
        slot_info = summarize_slots(s.slots) if s.slots else None
        if slot_info is not None:
            record["slots"] = slot_info
            if "kv_usage" not in gauges and slot_info["kv_usage_est"] is not None:
                gauges["kv_usage"] = slot_info["kv_usage_est"]
                record["kv_usage_source"] = "slots_estimate"
            gauges.setdefault("running", float(slot_info["busy"]))
        if s.metrics is not None or slot_info is not None:
            self._gauges = gauges
            self._track_gauges(gauges)
        self._check_hang(s, counters, gauges)

        live = self._compute_live(s.t)
        record.update({k: v for k, v in live.items() if k not in ("up",)})
        self._live = live
        self._prev_t = s.t if counters else self._prev_t
        return record

    def _reachability(self, s: Scrape) -> tuple[bool, str]:
        h = s.health
        if h.status is None:
            return False, h.error or "unreachable"
        if h.status >= 500:
            text = h.body[:120].decode("utf-8", errors="replace")
            return False, f"/health HTTP {h.status} {text}".strip()
        if h.status == 404:  # no /health here; fall back to whether /metrics answered
            m = s.metrics_http
            if m is not None and m.status is None:
                return False, m.error or "unreachable"
        return True, ""

    def _update_up(self, t: float, reachable: bool, reason: str) -> None:
        if reachable:
            self._fails = 0
            if not self._up:
                down_s = t - (self._down_since or t)
                self._downtime_s += down_s
                self._up = True
                self._down_since = None
                self._event(
                    "server_back",
                    f"server answering again after {down_s:.0f}s",
                    "warning",
                    {"down_s": round(down_s, 3)},
                    t,
                )
            return
        self._fails += 1
        if self._fails == 1:
            self._first_fail_t = t
        if self._up and self._fails >= self.down_after:
            self._up = False
            self._down_since = self._first_fail_t
            self._down_events += 1
            self._event(
                "server_down",
                f"server not answering ({reason}) at {self.base_url}",
                "error",
                {"reason": reason, "failed_scrapes": self._fails},
                t,
            )

    def _note_metrics_problem(self, s: Scrape) -> None:
        m = s.metrics_http
        if m is not None and m.status is not None and not self._metrics_seen:
            if not self._metrics_warned:
                self._metrics_warned = True
                flag = METRICS_FLAGS.get(self._dialect or self.kind, "")
                hint = f"; {flag}" if flag else ""
                self._event(
                    "metrics_unavailable",
                    f"no server metrics: {s.metrics_error}{hint}",
                    "warning",
                    {"status": m.status},
                    s.t,
                )
            return
        if m is not None and m.status is None:
            return  # reachability handles transport errors
        key = (s.metrics_error or "")[:60]
        if key not in self._error_keys and len(self._error_keys) < _MAX_ERROR_EVENTS:
            self._error_keys.add(key)
            self._event(
                "telemetry_error", f"server metrics: {s.metrics_error}", "warning", None, s.t
            )

    def _ingest_counters(
        self,
        t: float,
        values: dict[str, float],
        counters: dict[str, float],
        record: dict[str, Any],
    ) -> None:
        restarted = False
        start = values.get("process_start")
        if start is not None:
            if self._process_start is not None and abs(start - self._process_start) > 1.0:
                restarted = True
            self._process_start = start
        upd = self._tracker.update(counters, restarted=restarted)
        record["deltas"] = {k: round(v, 6) for k, v in upd.deltas.items()}
        record["reset"] = upd.reset
        if upd.reset:
            self._restarts += 1
            why = (
                "process start time changed"
                if restarted
                else f"counters went backwards ({', '.join(upd.reset_names)})"
            )
            self._event(
                "restart",
                f"server restarted: {why}",
                "warning",
                {"counters": list(upd.reset_names), "process_start_changed": restarted},
                t,
            )
        if not upd.first and self._prev_t is not None:
            dt = t - self._prev_t
            if dt > 0:
                record["rates"] = {
                    "prompt_tok_s": _rate(upd.deltas, "prompt_tokens", dt),
                    "prefill_tok_s": _rate(upd.deltas, "prompt_computed_tokens", dt),
                    "gen_tok_s": _rate(upd.deltas, "gen_tokens", dt),
                }
                self._last_rates = record["rates"]
        if self._first_counter_t is None:
            self._first_counter_t = t
        self._window.append((t, self._tracker.totals))
        while len(self._window) > 2 and self._window[1][0] <= t - self.window_s:
            self._window.popleft()

    def _track_gauges(self, g: dict[str, float]) -> None:
        kv = g.get("kv_usage")
        if kv is not None:
            self._kv_sum += kv
            self._kv_n += 1
            self._kv_max = kv if self._kv_max is None else max(self._kv_max, kv)
        for key in ("running", "waiting"):
            v = g.get(key)
            if v is None:
                continue
            attr = f"_{key}_max"
            cur = getattr(self, attr)
            setattr(self, attr, v if cur is None else max(cur, v))

    def _check_hang(self, s: Scrape, counters: dict[str, float], g: dict[str, float]) -> None:
        if not self._up:
            return
        running, waiting = g.get("running"), g.get("waiting")
        if running is None and waiting is None:
            return
        load = (running or 0.0) + (waiting or 0.0)
        totals = self._tracker.totals
        sig: tuple[Any, ...] = (
            tuple(totals.get(k) for k in ("progress", "gen_tokens", "prompt_tokens")),
            self._restarts,
            _slots_signature(s.slots) if s.slots else None,
        )
        moved = sig != self._progress_sig
        self._progress_sig = sig
        if load <= 0 or moved or self._last_progress_t is None:
            self._last_progress_t = s.t
            if self._hang:
                self._hang = False
                self._event("hang_cleared", "server making progress again", "info", None, s.t)
            return
        stalled = s.t - self._last_progress_t
        if not self._hang and stalled >= self.hang_after_s:
            self._hang = True
            self._hangs += 1
            self._event(
                "hang_suspected",
                f"no generation progress for {stalled:.0f}s with {running or 0:.0f} running "
                f"and {waiting or 0:.0f} waiting on the server",
                "error",
                {
                    "stalled_s": round(stalled, 3),
                    "silent_since_s": round(s.t - stalled, 3),
                    "running": running,
                    "waiting": waiting,
                },
                s.t,
            )

    # --- derived figures ----------------------------------------------------------

    def _window_delta(self, key: str) -> tuple[float, float] | None:
        """(increase, seconds) of a run-total counter over the hit-rate window."""
        if len(self._window) < 2:
            return None
        t_now, now = self._window[-1]
        t_base, base = self._window[0]
        if key not in now:
            return None
        return now[key] - base.get(key, 0.0), t_now - t_base

    def _compute_live(self, t: float) -> dict[str, Any]:
        totals = self._tracker.totals
        live = self._empty_live()
        live["up"] = self._up
        live["restarts"] = self._restarts
        hits_w, queries_w = self._window_delta("prefix_hits"), self._window_delta("prefix_queries")
        if hits_w is not None and queries_w is not None:
            live["hit_rate_window"] = _ratio(hits_w[0], queries_w[0])
        if "prefix_queries" in totals and "prefix_hits" in totals:
            live["hit_rate_run"] = _ratio(totals["prefix_hits"], totals["prefix_queries"])
        if "preemptions" in totals:
            live["preemptions"] = round(totals["preemptions"])
            pw = self._window_delta("preemptions")
            if pw is not None and pw[1] > 0:
                live["preemptions_per_min"] = pw[0] * 60.0 / pw[1]
        acc_w = self._window_delta("spec_accepted_tokens")
        draft_w = self._window_delta("spec_draft_tokens")
        if acc_w is not None and draft_w is not None:
            live["spec_accept"] = _ratio(acc_w[0], draft_w[0])
        if live["spec_accept"] is None and "spec_accept_rate" in self._gauges:
            live["spec_accept"] = self._gauges["spec_accept_rate"]
        for key in ("kv_usage", "running", "waiting"):
            live[key] = self._gauges.get(key)
        live["prompt_tok_s"] = self._last_rates.get("prompt_tok_s")
        live["gen_tok_s"] = self._last_rates.get("gen_tok_s")
        return live

    @staticmethod
    def _empty_live() -> dict[str, Any]:
        return {
            "hit_rate_window": None,
            "hit_rate_run": None,
            "preemptions": None,
            "preemptions_per_min": None,
            "kv_usage": None,
            "running": None,
            "waiting": None,
            "prompt_tok_s": None,
            "gen_tok_s": None,
            "spec_accept": None,
            "restarts": 0,
            "up": True,
        }

    def live(self) -> dict[str, Any]:
        out = dict(self._live)
        out["kv_pool_tokens"] = self._gauges.get("kv_pool_tokens")
        out["dialect"] = self._dialect
        return out

    def summary(self) -> dict[str, Any]:
        totals = self._tracker.totals
        first = self._first_counter_t
        span = (self._window[-1][0] - first) if self._window and first is not None else 0.0
        acc, draft = totals.get("spec_accepted_tokens"), totals.get("spec_draft_tokens")
        downtime = self._downtime_s
        if not self._up and self._down_since is not None and self._prev_t is not None:
            downtime += max(0.0, self._prev_t - self._down_since)
        return {
            "dialect": self._dialect,
            "metrics_available": self._metrics_seen,
            "scrapes": self._scrapes,
            "scrape_errors": self._scrape_errors,
            "slots_requests": self._slots_requests,
            "slots_errors": self._slots_errors,
            "late_ticks": self._late_ticks,
            "restarts": self._restarts,
            "down_events": self._down_events,
            "downtime_s": round(downtime, 3),
            "hangs_suspected": self._hangs,
            "hit_rate_run": _ratio(
                totals.get("prefix_hits", 0.0), totals.get("prefix_queries", 0.0)
            )
            if "prefix_queries" in totals
            else None,
            "prefix_queries_tokens": totals.get("prefix_queries"),
            "prefix_hits_tokens": totals.get("prefix_hits"),
            "preemptions": totals.get("preemptions"),
            "preemptions_per_min": (totals["preemptions"] * 60.0 / span)
            if "preemptions" in totals and span > 0
            else None,
            "prompt_tokens": totals.get("prompt_tokens"),
            "gen_tokens": totals.get("gen_tokens"),
            "queue_time_s_mean": _mean(totals, "queue_time"),
            "prefill_time_s_mean": _mean(totals, "prefill_time"),
            "spec_accept": _ratio(acc, draft) if acc is not None and draft is not None else None,
            "kv_usage_mean": (self._kv_sum / self._kv_n) if self._kv_n else None,
            "kv_usage_max": self._kv_max,
            "kv_pool_tokens": self._gauges.get("kv_pool_tokens"),
            "running_max": self._running_max,
            "waiting_max": self._waiting_max,
        }

    def _event(
        self,
        kind: str,
        message: str,
        severity: Severity,
        data: dict[str, Any] | None = None,
        t: float | None = None,
    ) -> None:
        self.sink.event(
            RunEvent(
                t=round(self.clock.now() if t is None else t, 3),
                kind=kind,
                message=message,
                severity=severity,
                source="server",
                data=data or {},
            )
        )


def _mean(totals: dict[str, float], histogram: str) -> float | None:
    """A histogram's mean over the run (seconds per request) from its ``_s`` and ``_n``
    counter totals; None when the server does not expose it or observed nothing."""
    total, n = totals.get(f"{histogram}_s"), totals.get(f"{histogram}_n")
    return total / n if total is not None and n else None


def _rate(deltas: dict[str, float], key: str, dt: float) -> float | None:
    return deltas[key] / dt if key in deltas else None
