"""Run events: the things that happen during a run besides finished requests.

Warnings, errors worth a line in the log, server restarts, hangs, hardware errors. Each is
appended to ``events.jsonl`` in the run directory and shown live (headless lines or TUI).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args

Severity = Literal["info", "warning", "error"]

EventKind = Literal[
    # the run
    "run_started",  # info; data {run_nonce}
    "phase_started",  # info; data {phase}
    "users_started",  # info: every user of a phase has started; data {users, late_s, phase}
    "histories_built",  # info: conversation.start_tokens histories are ready; data {users, tokens}
    "session_ended",  # info: an open-loop session left (one per arrival: the arrival record);
    # data {session, phase, arrived, admitted, wait_s, rounds, rounds_done, reason}; times
    # in run-clock wall seconds, reason done | stopped | cancelled | crashed | backlog
    # (still waiting for a slot when the run stopped: never admitted)
    "arrivals_ended",  # info: the arrival process stopped; data {phase, arrivals, window_s,
    # started}: the offered load is arrivals / window_s
    "preflight",  # warning: something pre-flight found about the server
    "run_crashed",  # error: an exception ended the run (the files are still completed)
    "drain_timeout",  # warning: requests still running after timeouts.drain, cancelled
    "model_mismatch",  # warning: the server answered with a model other than target.model
    # one request (emitted by Engine._finish)
    "request_failed",  # warning: outcome error, not cancelled; data {error_class, http_status}
    "empty_reply",  # warning: outcome empty or reasoning_only; data {finish_reason, outcome}
    "stall",  # error: stall or first_token_timeout; data {error_class, max_gap_s}
    "context_exceeded",  # warning: the server refused the conversation as too long
    "user_crashed",  # error: a simulated user's task died (its request still has a record)
    "record_failed",  # error: a bug kept a finished request's record (or its events, or its
    # live state) from being written; data {round, request_id, step: record | events |
    # live}; the run goes on
    "worker_died",  # error: a worker process (--workers) ended without finishing; its
    # requests in flight have worker_died records; data {worker, pid, returncode,
    # in_flight, users}
    # the recorder and the collectors
    "recorder_failed",  # error: a run file cannot be written; data {stream, error}
    "collector_failed",  # error: a collector's task died; data {collector}
    "collector_error",  # warning: a collector could not take one sample
    "client_overloaded",  # warning: stress itself may be the bottleneck
    "hang_suspected",  # error: requests in flight and no bytes for telemetry.hang_after
    "hang_cleared",  # warning: bytes flow again (every detector that saw the hang cleared)
    "hang_corroborated",  # info: another detector sees the hang already counted, maybe
    # after it cleared (data late: true; analysis/hangs.py decides it is the same hang)
    "hang_partly_cleared",  # info: one detector cleared, another still sees the hang
    "restart",  # error: the server restarted (its counters went back)
    "server_down",
    "server_back",
    "server_frozen",  # info: a server_down that timed out inside a hang is that freeze,
    # not an outage (the live hang gate writes it once; analysis/hangs.py decides it)
    "metrics_unavailable",
    "telemetry_error",
]
"""The known event kinds. Collectors add their own (``gpu_*``, ``xid``...); ``kind`` stays
a plain ``str`` so that a reader of an old run never fails on a kind it does not know."""
EVENT_KINDS: tuple[str, ...] = get_args(EventKind)
QUIET_EVENT_KINDS = frozenset({"session_ended"})
"""Kinds written to events.jsonl but not shown live: one per session, a record, not news
(the live view counts sessions instead)."""


@dataclass(slots=True)
class RunEvent:
    t: float
    """Seconds since the run started (perf_counter based)."""
    kind: str
    """Short machine-readable name, e.g. ``empty_reply``, ``restart``, ``xid``, ``stall``."""
    message: str
    """One human-readable line. Never contains a secret (the recorder redacts anyway)."""
    severity: Severity = "info"
    source: str = "engine"
    """Who noticed: engine, client, server, gpu."""
    user: int | None = None
    data: dict[str, Any] = field(default_factory=dict)
