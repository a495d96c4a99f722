"""Incremental Server-Sent-Events parser for OpenAI-style streams.

Network reads split events anywhere: inside ``data:``, between ``\r`` and ``\n``, inside a
multi-byte character. The parser keeps the incomplete tail and returns only complete event
payloads. Comments (``: keep-alive``) and non-data fields are ignored; multi-line data is
joined with ``\n`` as the SSE spec says. It is on the hot path: one call per network read.
"""

from __future__ import annotations


class SSEParser:
    __slots__ = ("_buf", "_data")

    def __init__(self) -> None:
        self._buf = b""
        self._data: bytes | None = None

    def feed(self, chunk: bytes) -> list[bytes]:
        """Add bytes from the network; return the payloads of events now complete."""
        buf = self._buf + chunk if self._buf else chunk
        end = buf.rfind(b"\n")
        if end < 0:
            self._buf = buf
            return []
        self._buf = buf[end + 1 :]
        out: list[bytes] = []
        data = self._data
        for line in buf[:end].split(b"\n"):
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if data is not None:
                    out.append(data)
                    data = None
            elif line.startswith(b"data:"):
                value = line[6:] if line.startswith(b"data: ") else line[5:]
                data = value if data is None else data + b"\n" + value
            # ":comment", "event:", "id:", "retry:" lines carry nothing we need
        self._data = data
        return out

    def close(self) -> list[bytes]:
        """End of stream: return an event left without its terminating blank line."""
        out = self.feed(b"\n\n") if self._buf else []
        if self._data is not None:
            out.append(self._data)
            self._data = None
        return out
