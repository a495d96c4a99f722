"""One phase of load: the scenario's load model, chosen here, behind the interface the
runtime drives (``Engine``: ``run``, ``request_stop``, ``cancel_in_flight``, ``now``).

Three load models share the turn machinery of ``stress.load.turns`` (the clock, stopping
and draining, every request's record and events): closed-loop users with think time
(``stress.load.closed``), open-loop session arrivals (``stress.load.arrivals``) and trace
replay (``stress.load.trace``); the first two hold conversations (``stress.load.users``).
A scenario has one of them (``load_model``); adding a model is a class and a line there.
"""

from __future__ import annotations

from collections.abc import Callable

from stress.config.scenario import Scenario
from stress.core.record import CancelCause
from stress.load.arrivals import OpenArrivals, arrival_gap, session_rounds
from stress.load.closed import ClosedUsers
from stress.load.corpus import Corpus
from stress.load.replay import TraceRequest
from stress.load.trace import Replay
from stress.load.turns import (
    RECORD_STEPS,
    START_BATCH,
    START_SLACK_S,
    USER_STOPS,
    EngineResult,
    LiveSink,
    LoadModel,
    LoadSetup,
    RecordSink,
    RunCounters,
    build_body,
    count_request,
    request_id,
    shard_users,
)
from stress.load.users import think_seconds
from stress.net.client import ChatClient

__all__ = [
    "RECORD_STEPS",
    "START_BATCH",
    "START_SLACK_S",
    "USER_STOPS",
    "ClosedUsers",
    "Engine",
    "EngineResult",
    "LiveSink",
    "LoadModel",
    "OpenArrivals",
    "RecordSink",
    "Replay",
    "RunCounters",
    "arrival_gap",
    "build_body",
    "count_request",
    "load_model",
    "request_id",
    "session_rounds",
    "shard_users",
    "think_seconds",
]


def load_model(scenario: Scenario) -> type[LoadModel]:
    """The scenario's load model (the scenario's checks allow one): a trace replayed,
    open-loop arrivals, else closed-loop users."""
    if scenario.replay is not None:
        return Replay
    if scenario.arrivals is not None:
        return OpenArrivals
    return ClosedUsers


class Engine:
    """The load of one phase, under the scenario's load model (``self.load``)."""

    def __init__(
        self,
        scenario: Scenario,
        client: ChatClient,
        recorder: RecordSink,
        live: LiveSink,
        corpus: Corpus | None,
        model: str,
        run_nonce: str,
        clock_t0: float,
        paste_scale: float = 1.0,
        on_stop: Callable[[str], None] | None = None,
        phase: str = "main",
        counters: RunCounters | None = None,
        trace: list[TraceRequest] | None = None,
        shard: tuple[int, int] = (0, 1),
        limits: bool = True,
        time_scale: float = 1.0,
    ) -> None:
        setup = LoadSetup(
            scenario,
            client,
            recorder,
            live,
            corpus,
            model,
            run_nonce,
            clock_t0,
            paste_scale=paste_scale,
            on_stop=on_stop,
            phase=phase,
            counters=counters,
            trace=trace,
            shard=shard,
            limits=limits,
            time_scale=time_scale,
        )
        self.load: LoadModel = load_model(scenario)(setup)

    @property
    def t0(self) -> float:
        """The run clock's origin (perf time)."""
        return self.load.t0

    @property
    def exit_reason(self) -> str:
        return self.load.exit_reason

    def now(self) -> float:
        return self.load.now()

    def request_stop(self, reason: str) -> None:
        """Start no new turns; requests in flight get ``timeouts.drain`` to finish."""
        self.load.request_stop(reason)

    def cancel_in_flight(self, cause: CancelCause = "interrupt") -> None:
        """Cancel the requests in flight, each recorded ``cancelled`` with the cause."""
        self.load.cancel_in_flight(cause)

    async def run(self, t_phase: float | None = None) -> EngineResult:
        """Run the phase; ``t_phase``: its start (perf time) when several processes share
        it, so every worker's ramp-up counts from the same instant."""
        return await self.load.run(t_phase)
