"""Incremental Server-Sent-Events parser for OpenAI-style streams.

Network reads split events anywhere: inside ``data:``, between ``\r`` and ``\n``, inside a
multi-byte character. The parser keeps the incomplete tail and returns only complete event
payloads. Comments (``: keep-alive``) and non-data fields are ignored; multi-line data is
joined with ``\n`` as the SSE spec says. It is on the hot path: one call per network read,
for every stream at once, so its cost is linear in the bytes fed, whatever the line length,
and a line or event past ``MAX_EVENT_BYTES`` is refused rather than buffered.
"""

from __future__ import annotations

MAX_EVENT_BYTES = 16 << 20
"""Longest line or event accepted (16 MiB): past it the stream is refused, so one hostile
line cannot take the client's memory. A real chat chunk is a few hundred bytes."""


class SSEError(ValueError):
    """The stream broke the parser's bounds; the message says how."""


class SSEParser:
    """Lines end in CRLF, LF or CR (a CR at the end of one read may pair with an LF at the
    start of the next). An incomplete line is kept as a list of pieces and joined once when
    its end arrives, and only the new bytes are searched for it, so the cost stays linear in
    the line's length however finely the network splits it."""

    __slots__ = ("_cr", "_data", "_more", "_more_len", "_pending", "_pending_len")

    def __init__(self) -> None:
        self._pending: list[bytes] = []
        self._pending_len = 0
        self._cr = False
        """The last read ended in CR: an LF starting the next read belongs to it."""
        self._data: bytes | None = None
        self._more: list[bytes] | None = None
        """Data lines after the first of a multi-line event (rare)."""
        self._more_len = 0

    def feed(self, chunk: bytes) -> list[bytes]:
        """Add bytes from the network; return the payloads of events now complete.

        Raises ``SSEError`` when a line or an event grows past ``MAX_EVENT_BYTES``.
        """
        if (  # a paced stream's read: one whole one-line event, and nothing held over
            chunk[-2:] == b"\n\n"
            and chunk[:6] == b"data: "
            and chunk.count(10) == 2
            and 13 not in chunk
            and not self._pending
            and self._data is None
            and not self._cr
        ):
            return [chunk[6:-2]]
        if not chunk:
            return []
        if self._cr:
            self._cr = False
            if chunk[0] == 10:  # the LF of a CRLF split across reads
                chunk = chunk[1:]
        if 13 in chunk:  # CR; an int operand makes ``in`` one memchr (bytes take 10x longer)
            self._cr = chunk[-1] == 13
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if 10 not in chunk:  # LF
            if chunk:
                self._pending.append(chunk)
                self._pending_len += len(chunk)
                if self._pending_len > MAX_EVENT_BYTES:
                    self._overflow("line")
            return []
        if self._pending:
            self._pending.append(chunk)
            chunk = b"".join(self._pending)
            self._pending = []
        lines = chunk.split(b"\n")
        rest = lines.pop()  # the incomplete line after the last line end
        if rest:
            self._pending.append(rest)
        self._pending_len = len(rest)
        out: list[bytes] = []
        data = self._data
        for line in lines:
            if not line:
                if data is not None:
                    if self._more is not None:
                        data = b"\n".join([data, *self._more])
                        self._more = None
                        self._more_len = 0
                    out.append(data)
                    data = None
            elif line.startswith(b"data:"):
                value = line[6:] if line.startswith(b"data: ") else line[5:]
                if data is None:
                    data = value
                else:  # kept apart and joined once: appending would copy the event each time
                    if self._more is None:
                        self._more = []
                        self._more_len = len(data)
                    self._more.append(value)
                    self._more_len += len(value) + 1
                    if self._more_len > MAX_EVENT_BYTES:
                        self._overflow("event")
            # ":comment", "event:", "id:", "retry:" lines carry nothing we need
        self._data = data
        return out

    def close(self) -> list[bytes]:
        """End of stream: return an event left without its terminating blank line."""
        self._cr = False
        out = self.feed(b"\n\n") if self._pending else []
        if self._data is not None:
            data = self._data
            if self._more is not None:
                data = b"\n".join([data, *self._more])
            out.append(data)
        self._data = None
        self._more = None
        self._more_len = 0
        return out

    def _overflow(self, what: str) -> None:
        self._pending = []
        self._pending_len = 0
        self._data = None
        self._more = None
        self._more_len = 0
        raise SSEError(
            f"an SSE {what} longer than {MAX_EVENT_BYTES >> 20} MiB (the limit of one event)"
        )
