"""Shared pieces of the client benchmarks: SSE bodies, an nginx target, the client driver.

Not a benchmark itself. The driver runs the real ``stress.net.client.ChatClient`` with its own
connection pool (``stress.net.http1``), so the figures are those of the code a run uses, not
of a copy.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import psutil

from stress.core.record import RequestRecord
from stress.net.client import ChatClient, TimeoutPolicy

POLICY = TimeoutPolicy(connect=10, first_token=60, stall=60, total=600)
WORDS = (" the", " model", " streams", " one", " token", " per", " chunk", ",", " and", " so")


def vllm_chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
    """One chunk shaped like vLLM 0.x's OpenAI server writes it."""
    obj = {
        "id": "chatcmpl-3f2a9c1e8b7d4e6fa0c5b2d1e9f8a7b6",
        "object": "chat.completion.chunk",
        "created": 1767225600,
        "model": "Qwen/Qwen3-30B-A3B",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def sse_body(n_chunks: int, prompt_tokens: int = 1000) -> bytes:
    """``n_chunks`` content chunks (the first also has the role), usage chunk, [DONE]."""
    parts = [vllm_chunk({"role": "assistant", "content": WORDS[0]})]
    parts += [vllm_chunk({"content": WORDS[i % len(WORDS)]}) for i in range(1, n_chunks - 1)]
    parts.append(vllm_chunk({"content": "."}, finish="length"))
    usage = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + n_chunks,
        "completion_tokens": n_chunks,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    tail = {
        "id": "chatcmpl-3f2a9c1e8b7d4e6fa0c5b2d1e9f8a7b6",
        "object": "chat.completion.chunk",
        "created": 1767225600,
        "model": "Qwen/Qwen3-30B-A3B",
        "choices": [],
        "usage": usage,
    }
    parts.append(b"data: " + orjson.dumps(tail) + b"\n\n")
    parts.append(b"data: [DONE]\n\n")
    return b"".join(parts)


def request_body(prompt_tokens: int = 200, extra: dict[str, object] | None = None) -> bytes:
    """A chat request whose user message is about ``prompt_tokens`` tokens long."""
    words = " ".join(("lorem", "ipsum", "dolor", "sit") * (prompt_tokens // 4 + 1))
    body: dict[str, object] = {
        "model": "Qwen/Qwen3-30B-A3B",
        "messages": [{"role": "user", "content": words}],
        "max_tokens": 2000,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if extra:
        body.update(extra)
    return orjson.dumps(body)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


NGINX_CONF = """
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    sendfile on;
    tcp_nodelay on;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
    client_max_body_size 64m;
    client_body_buffer_size 1m;
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        root {dir}/www;
        default_type text/event-stream;
        # nginx answers POST to a static file with 405; turn that into the file itself
        error_page 405 =200 $uri;
        location / {{ }}
    }}
}}
"""


@contextlib.contextmanager
def nginx(
    bodies: dict[str, bytes], cpu: int | None = 1, files: dict[str, bytes] | None = None
) -> Iterator[str]:
    """Serve each body at ``/<name>/v1/chat/completions``; yield the base URL.

    ``files`` adds static files at other paths (``"b/v1/models"``: a model list, so the
    real ``stress run`` finds the model it names)."""
    exe = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(exe).exists():
        raise SystemExit("nginx not found -- fix: apt-get install -y nginx")
    tmp = Path(tempfile.mkdtemp(prefix="stress-bench-nginx-"))
    tmp.chmod(0o755)  # nginx's workers run unprivileged when started as root
    port = free_port()
    for name, body in bodies.items():
        target = tmp / "www" / name / "v1" / "chat" / "completions"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(body)
    for rel, data in (files or {}).items():
        target = tmp / "www" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    conf = tmp / "nginx.conf"
    conf.write_text(NGINX_CONF.format(dir=tmp, port=port))
    cmd = [exe, "-p", str(tmp), "-c", str(conf), "-g", "daemon off;"]
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    proc = subprocess.Popen(cmd)
    try:
        wait_port(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGQUIT)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def cpu_seconds() -> float:
    """CPU time of this process (user + system), all threads."""
    t = os.times()
    return t.user + t.system


def rss_mib() -> float:
    return float(psutil.Process().memory_info().rss) / (1 << 20)


@dataclass(slots=True)
class Window:
    """What the client did between two instants."""

    wall_s: float = 0.0
    cpu_s: float = 0.0
    chunks: int = 0
    requests: int = 0
    errors: int = 0
    records: list[RequestRecord] = field(default_factory=list)

    @property
    def chunks_per_wall_s(self) -> float:
        return self.chunks / self.wall_s if self.wall_s else 0.0

    @property
    def chunks_per_cpu_s(self) -> float:
        return self.chunks / self.cpu_s if self.cpu_s else 0.0

    @property
    def cpu_us_per_chunk(self) -> float:
        return 1e6 * self.cpu_s / self.chunks if self.chunks else 0.0


def chunks_of(rec: RequestRecord) -> int:
    """SSE events carrying JSON (content, reasoning and empty ones, usage included)."""
    return rec.chunks_content + rec.chunks_reasoning + rec.chunks_empty


async def drive(
    base_url: str,
    streams: int,
    body: bytes | Callable[[int, int], bytes],
    warmup_s: float,
    measure_s: float,
    keep: Callable[[RequestRecord], bool] | None = None,
) -> Window:
    """``streams`` back-to-back request loops; count what finished inside the window.

    A request is counted in the window when it ends inside it; with many short requests
    per stream the edges average out. ``body`` may be a function of (stream, sequence).
    """
    client = ChatClient(base_url, {}, POLICY, limit=streams + 4)
    win = Window()
    state = {"on": False, "stop": False}

    async def loop(u: int) -> None:
        n = 0
        while not state["stop"]:
            rec = RequestRecord(user=u, conversation=1, round=n, turn=1)
            b = body(u, n) if callable(body) else body
            await client.chat(b, rec, time.perf_counter())
            n += 1
            if state["on"]:
                win.requests += 1
                win.chunks += chunks_of(rec)
                if rec.outcome != "ok":
                    win.errors += 1
                if keep is not None and keep(rec):
                    win.records.append(rec)

    tasks = [asyncio.create_task(loop(u)) for u in range(streams)]
    try:
        await asyncio.sleep(warmup_s)
        state["on"] = True
        c0, t0 = cpu_seconds(), time.perf_counter()
        await asyncio.sleep(measure_s)
        state["on"] = False
        win.cpu_s = cpu_seconds() - c0
        win.wall_s = time.perf_counter() - t0
        state["stop"] = True
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=120)
    finally:
        for t in tasks:
            t.cancel()
        await client.close()
    return win


def mean_spread(values: list[float], digits: int = 0) -> str:
    """``mean ± sd (min-max, n)`` for a benchmark line, ``digits`` after the point."""
    if not values:
        return "n/a"
    m = statistics.fmean(values)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    f = f",.{digits}f"
    return f"{m:{f}} ± {sd:{f}} (min {min(values):{f}}, max {max(values):{f}}, n={len(values)})"


def machine() -> str:
    load = os.getloadavg()
    return (
        f"{os.cpu_count()} cores, load {load[0]:.2f}, "
        f"pinned to cpus {sorted(os.sched_getaffinity(0))}"
    )


def run_loop(coro_factory: Callable[[], Coroutine[Any, Any, object]]) -> object:
    """Run on uvloop, as ``stress run`` does."""
    import uvloop

    return uvloop.run(coro_factory())


@contextlib.contextmanager
def paced_server(
    cpu: int | None = 1,
    log_dir: Path | None = None,
    clock: str = "stream",
    command: list[str] | None = None,
) -> Iterator[tuple[str, Path]]:
    """Start ``paced_server.py`` on ``cpu`` with its ``clock`` (``stream`` or ``step``);
    yield its URL and the log it writes on exit. ``command``: what starts it, before its
    flags (default ``python paced_server.py``; ``ttft_accuracy.py`` wraps it).

    The log appears once the context has exited; pass ``log_dir`` to read it afterwards
    (otherwise it goes to a temporary folder removed at exit).
    """
    import sys

    with tempfile.TemporaryDirectory(prefix="stress-bench-paced-") as tmp:
        log = (log_dir or Path(tmp)) / "first_chunks.jsonl"
        port = free_port()
        script = Path(__file__).with_name("paced_server.py")
        start = command or [sys.executable, str(script)]
        cmd = [*start, "--port", str(port), "--log", str(log)]
        cmd += ["--clock", clock]
        if cpu is not None:
            cmd = ["taskset", "-c", str(cpu), *cmd]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
        try:
            wait_port(port)
            yield f"http://127.0.0.1:{port}", log
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def server_cpu_seconds(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)
