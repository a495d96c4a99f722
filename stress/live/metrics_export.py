"""Live metrics in the Prometheus text format, from the load generator itself.

``stress run --metrics-port PORT`` serves ``http://HOST:PORT/metrics`` (HOST 127.0.0.1
unless ``--metrics-host`` says otherwise) while the run goes on, so a soak can be watched in
Grafana beside the server's own dashboards. docs/live-metrics.md lists every series.

Cheap by construction: the exporter is fed once per *finished* request (``observe``, from
the recorder's ``write_request``), never per chunk; the inter-token gaps of a request are
binned in one vectorised call. Gauges (in flight, the client's loop lag) are read at scrape
time from callables, so nothing runs between scrapes. Scrapes are answered by
prometheus_client's HTTP server on its own daemon thread, never on the run's event loop; a
lock guards the little state the two threads share.

It owns its ``CollectorRegistry`` (never the process-global one) and one custom
``Collector`` that renders its state at each scrape.

Labels on every series: ``scenario``, ``run`` (the run id, the run directory's name),
``model_name`` (the served model, as vLLM and SGLang label their own series, so the two
join) and ``server`` (``vllm``, ``sglang``, ``llamacpp``, ``sim``, or ``auto`` when the
server was not recognised). Per-user series add ``user`` (0 .. users-1, so bounded by the
scenario's user count); ``outcome`` and ``error_class`` take a fixed set of values.
Latency histograms carry no ``user`` label (their buckets would multiply by the users).

Times are seconds of the server's clock as the user saw them; in a time-scaled simulator
run they are simulated seconds (``time_scale`` x wall seconds), as in the live view.
"""

from __future__ import annotations

import contextlib
import errno
import threading
from array import array
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from stress.core.events import RunEvent
from stress.core.record import RequestRecord
from stress.store.recorder import Recorder

DEFAULT_HOST = "127.0.0.1"
PREFIX = "stress_"
RUN_LABELS = ("scenario", "run", "model_name", "server")
_USER_LABELS = (*RUN_LABELS, "user")

# bucket upper edges, seconds (tok/s for decode); +Inf is added
TTFT_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60)
ITL_BUCKETS = (
    0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1,
    2, 5, 10,
)  # fmt: skip
E2E_BUCKETS = (0.5, 1, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600)
MAX_GAP_BUCKETS = (0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60, 120)
DECODE_BUCKETS = (1, 2, 5, 10, 15, 20, 30, 40, 50, 60, 80, 100, 150, 200, 300, 500, 1000)


class MetricsPortError(Exception):
    """The metrics endpoint could not be opened; the message is the user's one line."""


class _Hist:
    """A fixed-bucket histogram; ``observe_many`` bins an array in one call."""

    __slots__ = ("counts", "edges", "sum")

    def __init__(self, edges: tuple[float, ...]) -> None:
        self.edges = np.asarray(edges, dtype=np.float64)
        self.counts = np.zeros(len(edges) + 1, dtype=np.int64)  # the last: above every edge
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[int(np.searchsorted(self.edges, value, side="left"))] += 1
        self.sum += value

    def observe_many(self, values: npt.NDArray[np.float64]) -> None:
        if values.size:
            idx = np.searchsorted(self.edges, values, side="left")
            self.counts += np.bincount(idx, minlength=self.counts.size)
            self.sum += float(values.sum())

    def buckets(self) -> list[tuple[str, float]]:
        cum = np.cumsum(self.counts)
        out = [
            (_le(e), float(c)) for e, c in zip(self.edges.tolist(), cum[:-1].tolist(), strict=True)
        ]
        out.append(("+Inf", float(cum[-1])))
        return out


def _le(edge: float) -> str:
    return f"{edge:g}" if edge < 1e6 else repr(edge)


@dataclass(frozen=True, slots=True)
class RunInfo:
    """What the exporter labels its series with, and where its gauges read from."""

    scenario: str
    run: str
    model_name: str
    server: str
    users: int
    time_scale: float = 1.0
    in_flight: Callable[[], int] = lambda: 0
    client_health: Callable[[], Mapping[str, Any] | None] = lambda: None
    """The client-health collector's latest window (``loop_lag_ms_p50`` / ``_max``,
    ``cpu_pct``), or None before its first sample."""
    elapsed: Callable[[], float] = lambda: 0.0

    def labels(self) -> list[str]:
        return [self.scenario, self.run, self.model_name, self.server]


class _RunState:
    """Everything observed for one run; replaced (not merged) when the next run starts."""

    def __init__(self, info: RunInfo) -> None:
        self.info = info
        self.active = True
        self.final_elapsed: float | None = None
        """Seconds the run took, kept when it ends (the clock keeps going)."""
        self.requests: dict[tuple[str, str], int] = {}
        self.errors: dict[str, int] = {}
        self.prompt_tokens: dict[str, int] = {}
        self.cached_tokens: dict[str, int] = {}
        self.completion_tokens: dict[str, int] = {}
        self.user_ttft: dict[str, list[float]] = {}  # user -> [count, sum]
        self.ttft = _Hist(TTFT_BUCKETS)
        self.itl = _Hist(ITL_BUCKETS)
        self.e2e = _Hist(E2E_BUCKETS)
        self.max_gap = _Hist(MAX_GAP_BUCKETS)
        self.decode = _Hist(DECODE_BUCKETS)


def _add(d: dict[Any, int], key: Any, n: int) -> None:
    d[key] = d.get(key, 0) + n


class MetricsExporter(Collector):
    """The run's live Prometheus metrics: its own registry, one collector, a server."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        self._lock = threading.Lock()
        self._state: _RunState | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.url = ""

    # --- serving -------------------------------------------------------------------------

    @classmethod
    def serve(cls, host: str, port: int, flag: str = "--metrics-port") -> MetricsExporter:
        """Bind ``host:port`` (0: a free port) and serve ``/metrics`` on a daemon thread;
        ``MetricsPortError`` (one line naming the flag and the fix) when it cannot."""
        if not 0 <= port <= 65535:
            raise MetricsPortError(
                f"{flag} {port}: not a port number -- fix: give 1-65535, or 0 for a free port"
            )
        exporter = cls()
        try:
            server, thread = start_http_server(port, addr=host, registry=exporter.registry)
        except OSError as e:
            why = e.strerror or str(e) or type(e).__name__
            if e.errno == errno.EADDRINUSE:
                fix = f"give another port, or {flag} 0 to pick a free one"
            else:
                fix = "check --metrics-host (an address of this machine) and the port"
            raise MetricsPortError(
                f"{flag} {port}: cannot listen on {host}:{port} ({why}) -- fix: {fix}"
            ) from None
        exporter._server, exporter._thread = server, thread
        bound_host, bound_port = str(server.server_address[0]), int(server.server_address[1])
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        exporter.url = f"http://{shown}:{bound_port}/metrics"
        return exporter

    def close(self) -> None:
        """Stop serving (idempotent)."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    # --- feeding -------------------------------------------------------------------------

    def start_run(self, info: RunInfo) -> None:
        """A run starts: later observations are labelled with it; the previous run's
        series end (a capacity search runs one pass after another)."""
        with self._lock:
            self._state = _RunState(info)

    def end_run(self) -> None:
        """The run finished: ``stress_run_active`` drops to 0; the counters stay as they
        are for the last scrapes (``--metrics-linger``)."""
        with self._lock:
            st = self._state
            if st is not None and st.active:
                st.active = False
                st.final_elapsed = _read(st.info.elapsed)

    def observe(self, rec: RequestRecord, token_times: array[float] | None = None) -> None:
        """One finished request (one ``requests.jsonl`` line); ``token_times`` are the
        receive times of its text chunks (``perf_counter`` seconds), for the ITL buckets."""
        gaps: npt.NDArray[np.float64] | None = None
        if token_times is not None and len(token_times) > 1:
            gaps = np.diff(np.frombuffer(token_times, dtype=np.float64))
        with self._lock:
            st = self._state
            if st is None:
                return
            scale = st.info.time_scale
            user = str(rec.user)
            _add(st.requests, (user, rec.outcome), 1)
            if rec.error_class is not None:
                _add(st.errors, str(rec.error_class), 1)
            _add(st.prompt_tokens, user, rec.prompt_tokens or rec.prompt_tokens_est)
            _add(st.cached_tokens, user, rec.cached_tokens or 0)
            _add(st.completion_tokens, user, rec.completion_tokens)
            if rec.ttft_s is not None:
                ttft = rec.ttft_s * scale
                st.ttft.observe(ttft)
                acc = st.user_ttft.setdefault(user, [0.0, 0.0])
                acc[0] += 1
                acc[1] += ttft
            if rec.e2e_s is not None:
                st.e2e.observe(rec.e2e_s * scale)
            if rec.max_gap_s is not None:
                st.max_gap.observe(rec.max_gap_s * scale)
            if rec.decode_tok_s is not None:
                st.decode.observe(rec.decode_tok_s / scale)
            if gaps is not None:
                st.itl.observe_many(gaps * scale if scale != 1.0 else gaps)

    def recorder(
        self,
        run_dir: Path,
        on_event: Callable[[RunEvent], None] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> Recorder:
        """A ``Recorder`` whose every accepted request record is also observed here."""
        return _ObservedRecorder(self, run_dir, on_event=on_event, clock=clock)

    # --- scraping ------------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            st = self._state
            if st is None:
                return
            snap = _snapshot(st)
        base = st.info.labels()
        yield from _run_gauges(snap, st.info.users, base)
        yield from _client_gauges(snap.health or {}, base)
        yield from _request_counters(snap, base)
        yield from _token_counters(snap, base)
        yield from _user_ttft(snap, base)
        yield from _histograms(snap, base)

    def describe(self) -> Iterator[Metric]:
        return iter(())


@dataclass(slots=True)
class _Snapshot:
    active: float
    elapsed: float | None
    in_flight: float | None
    health: Mapping[str, Any] | None
    requests: dict[tuple[str, str], int]
    errors: dict[str, int]
    prompt_tokens: dict[str, int]
    cached_tokens: dict[str, int]
    completion_tokens: dict[str, int]
    user_ttft: dict[str, tuple[float, float]]
    ttft: tuple[list[tuple[str, float]], float]
    itl: tuple[list[tuple[str, float]], float]
    e2e: tuple[list[tuple[str, float]], float]
    max_gap: tuple[list[tuple[str, float]], float]
    decode: tuple[list[tuple[str, float]], float]


def _read(f: Callable[[], Any]) -> Any:
    try:
        return f()
    except Exception:  # a gauge that cannot be read is left out of this scrape
        return None


def _snapshot(st: _RunState) -> _Snapshot:
    """A copy taken under the lock (the loop keeps observing while the scrape renders)."""
    info = st.info
    in_flight = _read(info.in_flight) if st.active else 0
    scale = info.time_scale
    elapsed = _read(info.elapsed) if st.active else st.final_elapsed
    return _Snapshot(
        active=1.0 if st.active else 0.0,
        elapsed=None if elapsed is None else float(elapsed) * scale,
        in_flight=None if in_flight is None else float(in_flight),
        health=_read(info.client_health),
        requests=dict(st.requests),
        errors=dict(st.errors),
        prompt_tokens=dict(st.prompt_tokens),
        cached_tokens=dict(st.cached_tokens),
        completion_tokens=dict(st.completion_tokens),
        user_ttft={u: (v[0], v[1]) for u, v in st.user_ttft.items()},
        ttft=(st.ttft.buckets(), st.ttft.sum),
        itl=(st.itl.buckets(), st.itl.sum),
        e2e=(st.e2e.buckets(), st.e2e.sum),
        max_gap=(st.max_gap.buckets(), st.max_gap.sum),
        decode=(st.decode.buckets(), st.decode.sum),
    )


# --- rendering a scrape: each step yields its families in the exposition's order ----------


def _gauge(name: str, doc: str, value: float | None, base: list[str]) -> Iterator[Metric]:
    """One run-labelled gauge; left out of the scrape when its reading is None."""
    if value is not None:
        g = GaugeMetricFamily(PREFIX + name, doc, labels=RUN_LABELS)
        g.add_metric(base, value)
        yield g


def _run_gauges(snap: _Snapshot, users: int, base: list[str]) -> Iterator[Metric]:
    run_info = GaugeMetricFamily(
        PREFIX + "run_info", "The run these series belong to (always 1).", labels=RUN_LABELS
    )
    run_info.add_metric(base, 1.0)
    yield run_info
    yield from _gauge("run_active", "1 while the run sends requests, 0 after.", snap.active, base)
    yield from _gauge("run_elapsed_seconds", "Seconds since the run started.", snap.elapsed, base)
    yield from _gauge("users", "Users (concurrent conversations) of the run.", users, base)
    yield from _gauge("in_flight", "Requests sent and not yet finished.", snap.in_flight, base)


def _client_gauges(health: Mapping[str, Any], base: list[str]) -> Iterator[Metric]:
    """The client-health collector's window; a reading it has not taken is left out."""
    for key, name, doc in (
        (
            "loop_lag_ms_max",
            "client_loop_lag_seconds",
            "The load generator's event-loop lag, the most over its last window: "
            "every request's timing is late by this much.",
        ),
        (
            "loop_lag_ms_p50",
            "client_loop_lag_p50_seconds",
            "The load generator's event-loop lag, median over its last window.",
        ),
    ):
        v = health.get(key)
        yield from _gauge(name, doc, None if v is None else float(v) / 1000, base)
    cpu = health.get("cpu_pct")
    yield from _gauge(
        "client_cpu_percent",
        "The load generator's CPU, % of one core (its loop can use at most one).",
        None if cpu is None else float(cpu),
        base,
    )


def _request_counters(snap: _Snapshot, base: list[str]) -> Iterator[Metric]:
    req = CounterMetricFamily(
        PREFIX + "requests",
        "Finished requests (one per requests.jsonl line), by user and outcome.",
        labels=(*RUN_LABELS, "user", "outcome"),
    )
    for (user, outcome), n in sorted(snap.requests.items()):
        req.add_metric([*base, user, outcome], n)
    yield req
    err = CounterMetricFamily(
        PREFIX + "request_errors",
        "Failed requests by error class (outcome error).",
        labels=(*RUN_LABELS, "error_class"),
    )
    for cls, n in sorted(snap.errors.items()):
        err.add_metric([*base, cls], n)
    yield err


def _token_counters(snap: _Snapshot, base: list[str]) -> Iterator[Metric]:
    for name, doc, values in (
        (
            "prompt_tokens",
            "Prompt tokens sent (the server's count, else stress's estimate).",
            snap.prompt_tokens,
        ),
        (
            "cached_tokens",
            "Prompt tokens the server reported served from its prefix cache.",
            snap.cached_tokens,
        ),
        ("completion_tokens", "Tokens generated.", snap.completion_tokens),
    ):
        c = CounterMetricFamily(PREFIX + name, doc, labels=_USER_LABELS)
        for user, n in sorted(values.items()):
            c.add_metric([*base, user], n)
        yield c


def _user_ttft(snap: _Snapshot, base: list[str]) -> Iterator[Metric]:
    """Each user's TTFT as a count and a sum (a histogram per user would multiply the
    series by the buckets)."""
    count = CounterMetricFamily(
        PREFIX + "user_ttft_requests",
        "Requests with a first token, by user (with stress_user_ttft_seconds_total: "
        "the mean TTFT of each user).",
        labels=_USER_LABELS,
    )
    total = CounterMetricFamily(
        PREFIX + "user_ttft_seconds",
        "Sum of the time to first token of each user's requests.",
        labels=_USER_LABELS,
    )
    for user, (n, seconds) in sorted(snap.user_ttft.items()):
        count.add_metric([*base, user], n)
        total.add_metric([*base, user], seconds)
    yield count
    yield total


def _histograms(snap: _Snapshot, base: list[str]) -> Iterator[Metric]:
    for name, doc, (buckets, total) in (
        ("ttft_seconds", "Time to first token (send to first text chunk).", snap.ttft),
        (
            "itl_seconds",
            "Inter-token latency: the gap between consecutive text chunks "
            "(binned when each request finishes).",
            snap.itl,
        ),
        ("e2e_seconds", "Request latency, send to the last byte.", snap.e2e),
        ("max_gap_seconds", "The longest silence within each request's stream.", snap.max_gap),
        (
            "decode_tokens_per_second",
            "Each request's decode rate (tokens after the first / decode time).",
            snap.decode,
        ),
    ):
        h = HistogramMetricFamily(PREFIX + name, doc, labels=RUN_LABELS)
        h.add_metric(base, buckets, total)
        yield h


class _ObservedRecorder(Recorder):
    """The run's recorder, also handing each accepted request record to the exporter."""

    def __init__(
        self,
        exporter: MetricsExporter,
        run_dir: Path,
        on_event: Callable[[RunEvent], None] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        super().__init__(run_dir, on_event=on_event, clock=clock)
        self._exporter = exporter

    def write_request(self, rec: RequestRecord, token_times: array[float] | None = None) -> None:
        accepted = not self.closed
        super().write_request(rec, token_times)
        if accepted:
            with contextlib.suppress(Exception):  # live metrics never cost the run a record
                self._exporter.observe(rec, token_times)
