"""What really happened to each request, as the server saw it.

``stress`` measures from the client side; tests and benchmarks compare those numbers with
these. One record per chat request that reached the engine: wall-clock instants (Unix
seconds, for labels and cross-process comparison), wall durations from ``perf_counter``,
the engine's simulated durations, and the token counts actually written to the wire.
Records are kept in a bounded in-memory ring and, when a path is configured, appended to a
JSON Lines file (one line per request, flushed as written).
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

import orjson


@dataclass(slots=True)
class GroundTruthRecord:
    id: str
    request_no: int
    received_at: float  # Unix seconds
    first_token_at: float | None  # Unix seconds when the first token chunk was written
    last_token_at: float | None
    ttft_s: float | None  # wall seconds, received -> first token written
    e2e_s: float  # wall seconds, received -> response finished
    sim_ttft_s: float | None  # simulated seconds (engine clock)
    sim_e2e_s: float | None
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int  # planned by the engine
    reasoning_tokens: int
    tokens_sent: int  # generated tokens actually written to the client
    finish_reason: str | None
    preemptions: int
    stream: bool
    status: int
    fault: str | None
    request_id: str | None = None  # the X-Request-ID header as received, if any


class GroundTruth:
    """Bounded list of records plus an optional JSONL file."""

    def __init__(self, path: str | None, keep: int = 20_000) -> None:
        self.records: deque[GroundTruthRecord] = deque(maxlen=keep)
        self._file: IO[bytes] | None = None
        if path:
            p = Path(path)
            p.parent.mkdir(parents=True, exist_ok=True)
            self._file = p.open("ab")

    def add(self, rec: GroundTruthRecord) -> None:
        self.records.append(rec)
        if self._file is not None:
            self._file.write(orjson.dumps(asdict(rec)) + b"\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
