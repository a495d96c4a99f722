"""Helpers for the real-server tests: scripts, free ports, server processes."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts" / "realserver"
SKIP_VAR = "STRESS_SKIP_REALSERVER"
BUILD_TIMEOUT_S = float(os.environ.get("STRESS_REALSERVER_BUILD_TIMEOUT", "2400"))


def cache_dir() -> Path:
    return Path(os.environ.get("STRESS_CACHE_DIR") or Path.home() / ".cache/stress-realserver")


def skip_if_opted_out() -> None:
    if os.environ.get(SKIP_VAR, "") not in ("", "0"):
        pytest.skip(f"{SKIP_VAR}={os.environ[SKIP_VAR]}: real-server tests opted out")


def run_script(name: str, timeout_s: float, env: dict[str, str] | None = None) -> str:
    """Run one of scripts/realserver/ and return the last stdout line (a path)."""
    cmd = ["bash", str(SCRIPTS / name)]
    full_env = {**os.environ, "PYTHON": sys.executable, **(env or {})}
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout_s, env=full_env, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{name} did not finish within {timeout_s:.0f}s (cache: {cache_dir()})")
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr + proc.stdout).strip().splitlines()[-25:])
        pytest.fail(f"{name} failed (exit {proc.returncode}); cache {cache_dir()}:\n{tail}")
    return proc.stdout.strip().splitlines()[-1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def http_get(url: str, timeout_s: float = 10.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class ServerProcess:
    """A server started in its own process group, with its log kept for failure messages."""

    def __init__(self, name: str, cmd: list[str], port: int, log: Path, env: dict[str, str]):
        self.name = name
        self.cmd = cmd
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        self._log_f = log.open("wb")
        self.proc = subprocess.Popen(
            cmd,
            stdout=self._log_f,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **env},
            start_new_session=True,
        )

    def log_tail(self, n: int = 30) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-n:])

    def wait_healthy(self, timeout_s: float, path: str = "/health") -> float:
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(
                    f"{self.name} exited with {self.proc.returncode} during start-up "
                    f"({' '.join(self.cmd)}):\n{self.log_tail()}"
                )
            with contextlib.suppress(OSError):
                status, _ = http_get(self.url + path, timeout_s=2.0)
                if status == 200:
                    return time.monotonic() - t0
            time.sleep(0.5)
        self.stop()
        pytest.fail(f"{self.name} not healthy within {timeout_s:.0f}s:\n{self.log_tail()}")

    def get_json(self, path: str) -> Any:
        status, body = http_get(self.url + path)
        assert status == 200, f"{path}: HTTP {status}: {body[:200]!r}"
        return orjson.loads(body)

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._log_f.close()


VLLM_STARTUP_S = float(os.environ.get("STRESS_VLLM_STARTUP_TIMEOUT", "420"))


def start_vllm(
    install: tuple[str, Path], log_dir: Path, *extra: str, kv_space_gib: int = 1
) -> ServerProcess:
    py, model = install
    port = free_port()
    cmd = [
        py,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        "smol",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--enforce-eager",
        "--enable-prompt-tokens-details",
        *extra,
    ]
    env = {
        "VLLM_CPU_KVCACHE_SPACE": str(kv_space_gib),
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    server = ServerProcess("vllm", cmd, port, log_dir / "vllm.log", env=env)
    server.wait_healthy(timeout_s=VLLM_STARTUP_S)
    return server


def start_llamacpp(bin_: Path, model: Path, port: int, log: Path, slots: int = 2) -> ServerProcess:
    """A small llama-server of its own for a test that restarts it or needs few slots:
    ``slots`` slots sharing 8,192 tokens of context, 2 threads, /metrics on."""
    cmd = [str(bin_), "-m", str(model), "--parallel", str(slots), "-c", "8192", "--metrics",
           "--host", "127.0.0.1", "--port", str(port), "--threads", "2"]  # fmt: skip
    server = ServerProcess("llama-server", cmd, port, log, env={})
    server.wait_healthy(timeout_s=90)
    return server
