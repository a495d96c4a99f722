"""Helpers for the simulator tests: stream a chat over real HTTP, read /metrics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson


@dataclass
class Reply:
    status: int
    content: str = ""
    reasoning: str = ""
    content_chunks: int = 0
    reasoning_chunks: int = 0
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    timings: dict[str, Any] | None = None
    done: bool = False
    chunks: list[dict[str, Any]] = field(default_factory=list)
    body: Any = None


async def stream_chat(
    session: aiohttp.ClientSession,
    url: str,
    messages: list[dict[str, Any]],
    **extra: Any,
) -> Reply:
    """POST a streamed chat completion with include_usage and parse every SSE event."""
    payload: dict[str, Any] = {
        "model": "sim-llm",
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        **extra,
    }
    async with session.post(url + "/v1/chat/completions", json=payload) as resp:
        reply = Reply(status=resp.status)
        if resp.status != 200:
            reply.body = await resp.read()
            return reply
        async for raw in resp.content:
            line = raw.strip()
            if not line.startswith(b"data: "):
                continue
            data = line[6:]
            if data == b"[DONE]":
                reply.done = True
                continue
            obj = orjson.loads(data)
            reply.chunks.append(obj)
            for ch in obj.get("choices") or []:
                delta = ch.get("delta") or {}
                if delta.get("content"):
                    reply.content += delta["content"]
                    reply.content_chunks += 1
                r = delta.get("reasoning") or delta.get("reasoning_content")
                if r:
                    reply.reasoning += r
                    reply.reasoning_chunks += 1
                if ch.get("finish_reason"):
                    reply.finish_reason = ch["finish_reason"]
            if obj.get("usage"):
                reply.usage = obj["usage"]
            if obj.get("timings"):
                reply.timings = obj["timings"]
        return reply


def parse_metrics(text: str) -> dict[str, float]:
    """``name{labels}`` -> value, plus ``name`` -> sum over label sets."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, val = line.rpartition(" ")
        out[key] = float(val)
        name = key.split("{", 1)[0]
        if "{" in key:
            out[name] = out.get(name, 0.0) + float(val)
    return out


async def get_metrics(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with session.get(url + "/metrics") as resp:
        return parse_metrics(await resp.text())


class SimProcess:
    """``stress sim`` in a subprocess, up once its listening line is printed.

    ``startup_s`` (spawn to listening) measures how fast this machine is right now; tests
    derive their bounds from it instead of guessing, so a busy 2-core machine only makes
    them slower, never flaky.
    """

    def __init__(self, *args: str) -> None:
        import subprocess
        import sys
        import time

        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "stress", "sim", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        # Blocks until the line or the process's end; pytest's timeout bounds a hang.
        self.line = self.proc.stdout.readline()
        self.startup_s = time.monotonic() - t0
        if " at http://" not in self.line:
            self.proc.kill()
            _, err = self.proc.communicate()
            raise AssertionError(f"stress sim did not start: {self.line!r} {err!r}")
        self.url = self.line.split(" at ", 1)[1].split()[0]

    def bound(self, factor: float = 3.0) -> float:
        """A wait for ``factor`` x the start-up's work, which any quick action is below."""
        return max(self.startup_s, 1.0) * factor

    def stop(self, sig: int) -> tuple[int, str, str]:
        """Signal, wait (bounded by the start-up's measured speed), return rc/stdout/stderr."""
        import subprocess

        self.proc.send_signal(sig)
        try:
            out, err = self.proc.communicate(timeout=self.bound(4.0))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            raise AssertionError(
                f"stress sim still running {self.bound(4.0):.1f}s after signal {sig} "
                f"(start-up took {self.startup_s:.1f}s)"
            ) from None
        return self.proc.returncode, out, err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
