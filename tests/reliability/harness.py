"""The reliability suite's harness: tiny scenarios, the real CLI as a subprocess, checks.

Every test here drives the installed ``stress`` command against a server that really
misbehaves on loopback (``hostile.py``) or the built-in simulator with a fault schedule.
Nothing inside ``stress`` is replaced. Each subprocess is bounded by the scenario's own
timeouts plus ``MARGIN_S`` (process start, imports and the report on a busy 2-core machine),
and killed, with its whole process group, if it outlives that bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from stress.core.limits import EXIT_VERDICT_FAIL

ROOT = Path(__file__).resolve().parents[2]
MARGIN_S = 90.0
"""Start-up, pre-flight and the report at the end, on a loaded machine. Only a bound: no
test asserts on how long anything took."""

ERROR_CLASSES = frozenset(
    {
        "connect",
        "reset",
        "http_429",
        "http_4xx",
        "http_5xx",
        "context_exceeded",
        "first_token_timeout",
        "stall",
        "total_timeout",
        "malformed_stream",
        "stream_error",
        "cancelled",
        "redirect",
        "protocol",
        "client_error",
    }
)
STATE_KEYS = frozenset({"t", "sent", "recorded", "in_flight_count", "in_flight", "finished"})


def stress_command() -> list[str]:
    exe = Path(sys.executable).with_name("stress")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "stress"]


def cli_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("STRESS_") or k == "STRESS_CACHE_DIR"
    }
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


@dataclass(frozen=True)
class Plan:
    """A tiny scenario: what it asks for, and how long it can take at worst."""

    path: Path
    bound_s: float


def write_scenario(
    tmp: Path,
    *,
    name: str = "rel",
    users: int = 1,
    rounds: int | None = 2,
    duration: float | None = None,
    think_s: float = 0.1,
    connect_s: float = 2.0,
    first_token_s: float = 8.0,
    stall_s: float = 4.0,
    total_s: float = 10.0,
    drain_s: float = 10.0,
    max_tokens: int = 20,
    reuse: bool = True,
    sim: dict[str, Any] | None = None,
    target_extra: dict[str, Any] | None = None,
) -> Plan:
    """Write ``tmp/NAME.yaml`` (JSON is YAML) and return it with its worst-case duration."""
    target: dict[str, Any] = {"url": "sim", "model": "auto", **(target_extra or {})}
    if sim is not None:
        target["sim"] = sim
    doc: dict[str, Any] = {
        "name": name,
        "target": target,
        "users": {
            "count": users,
            "ramp_up": "0s",
            "think_time": {"distribution": "constant", "mean": f"{think_s}s"},
        },
        "conversation": {
            "ceiling_tokens": 3000,
            "turn": {"ask": ["Summarise this.", "What is the key point?"]},
        },
        "request": {"max_tokens": max_tokens},
        "timeouts": {
            "connect": f"{connect_s}s",
            "first_token": f"{first_token_s}s",
            "stall": f"{stall_s}s",
            "total": f"{total_s}s",
            "drain": f"{drain_s}s",
        },
        "telemetry": {"server_metrics": False, "gpus": "off"},
        "connection": {"reuse": reuse},
    }
    worst = []
    if rounds is not None:
        doc["rounds"] = rounds
        worst.append(rounds * (connect_s + total_s + think_s))
    if duration is not None:
        doc["duration"] = f"{duration}s"
        worst.append(duration + drain_s + connect_s)
    path = tmp / f"{name}.yaml"
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    return Plan(path, min(worst) + MARGIN_S)


@dataclass
class RunResult:
    rc: int
    stdout: str
    stderr: str
    out: Path

    @property
    def dir(self) -> Path:
        dirs = [p for p in self.out.iterdir() if p.is_dir()] if self.out.exists() else []
        assert len(dirs) == 1, f"expected one run directory in {self.out}, found {dirs}"
        return dirs[0]

    def records(self) -> list[dict[str, Any]]:
        return jsonl(self.dir / "requests.jsonl")

    def events(self) -> list[dict[str, Any]]:
        return jsonl(self.dir / "events.jsonl")

    def summary(self) -> dict[str, Any]:
        obj = orjson.loads((self.dir / "summary.json").read_bytes())
        assert isinstance(obj, dict)
        return obj

    def state(self) -> dict[str, Any]:
        path = self.dir / "state.json"
        assert path.exists(), "no state.json in the run directory"
        obj = orjson.loads(path.read_bytes())
        assert isinstance(obj, dict)
        return obj

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def jsonl(path: Path) -> list[dict[str, Any]]:
    """Every line of a JSONL file, each required to be a complete JSON object."""
    if not path.exists():
        return []
    data = path.read_bytes()
    assert not data or data.endswith(b"\n"), f"{path.name}: torn last line {data[-80:]!r}"
    out: list[dict[str, Any]] = []
    for i, line in enumerate(data.split(b"\n"), 1):
        if not line:
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            raise AssertionError(f"{path.name}:{i}: not JSON ({e}): {line[:120]!r}") from None
        assert isinstance(obj, dict), f"{path.name}:{i}: not an object"
        out.append(obj)
    return out


class Cli:
    """A running ``stress`` command whose output is read as it comes (the signal tests
    wait for a line before the next signal)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self._out = bytearray()
        self._err = bytearray()
        assert proc.stdout is not None and proc.stderr is not None
        self._readers = [
            asyncio.create_task(_drain(proc.stdout, self._out)),
            asyncio.create_task(_drain(proc.stderr, self._err)),
        ]

    @classmethod
    async def start(cls, *args: str, env: dict[str, str] | None = None) -> Cli:
        proc = await asyncio.create_subprocess_exec(
            *stress_command(),
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env or cli_env(),
            cwd=ROOT,
            start_new_session=True,  # its own process group: a kill takes any child too
        )
        return cls(proc)

    @property
    def stdout(self) -> str:
        return self._out.decode(errors="replace")

    @property
    def stderr(self) -> str:
        return self._err.decode(errors="replace")

    def signal(self, sig: int) -> None:
        if self.proc.returncode is None:
            self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL to the whole process group (a no-op once it has exited)."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    async def finish(self, bound_s: float, out: Path) -> RunResult:
        """Wait for the exit within ``bound_s``; past it, kill it and fail with its output."""
        try:
            await asyncio.wait_for(self.proc.wait(), timeout=bound_s)
        except TimeoutError:
            self.kill()
            await self.proc.wait()
            await asyncio.gather(*self._readers, return_exceptions=True)
            raise AssertionError(
                f"stress did not exit within {bound_s:.0f}s (the scenario's own timeouts + "
                f"{MARGIN_S:.0f}s); stdout tail: {self.stdout[-600:]!r} stderr tail: "
                f"{self.stderr[-600:]!r}"
            ) from None
        await asyncio.gather(*self._readers, return_exceptions=True)
        assert self.proc.returncode is not None
        return RunResult(self.proc.returncode, self.stdout, self.stderr, out)


async def _drain(stream: asyncio.StreamReader, into: bytearray) -> None:
    while chunk := await stream.read(65536):
        into += chunk


def run_args(plan: Plan, out: Path, target: str) -> list[str]:
    return ["run", str(plan.path), "--target", target, "--no-tui", "--out", str(out)]


async def run_cli(
    plan: Plan, out: Path, target: str, env: dict[str, str] | None = None
) -> RunResult:
    """``stress run SCENARIO --target URL --no-tui --out OUT`` to the end."""
    async with cli_process(plan, out, target, env) as cli:
        return await cli.finish(plan.bound_s, out)


@contextlib.asynccontextmanager
async def cli_process(
    plan: Plan, out: Path, target: str, env: dict[str, str] | None = None
) -> AsyncIterator[Cli]:
    """A running ``stress run``; killed on the way out whatever happens."""
    cli = await Cli.start(*run_args(plan, out, target), env=env)
    try:
        yield cli
    finally:
        cli.kill()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(cli.proc.wait(), timeout=10)


async def run_report(run_dir: Path) -> RunResult:
    cli = await Cli.start("report", str(run_dir))
    try:
        return await cli.finish(MARGIN_S, run_dir.parent)
    finally:
        cli.kill()


async def wait_until(what: str, check: Any, bound_s: float, proc: Any = None) -> None:
    """Poll ``check()`` until true; fail after ``bound_s`` or when ``proc`` has exited."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound_s
    while not check():
        if proc is not None and proc.returncode is not None:
            raise AssertionError(f"stress exited ({proc.returncode}) before: {what}")
        if loop.time() > deadline:
            raise AssertionError(f"not within {bound_s:.0f}s: {what}")
        await asyncio.sleep(0.05)


# --- checks every run must pass ---------------------------------------------------------


def assert_no_traceback(result: RunResult) -> None:
    assert "Traceback" not in result.output, f"a traceback reached the user:\n{result.output}"


def assert_all_jsonl_valid(run_dir: Path) -> None:
    for path in sorted(run_dir.glob("*.jsonl")):
        jsonl(path)


def assert_truthful(records: Iterable[dict[str, Any]]) -> None:
    """No fake successes: ``ok`` only with a 2xx status, an end time and a finish_reason;
    every error classified."""
    for r in records:
        where = f"user {r.get('user')} round {r.get('round')}: {r}"
        if r.get("outcome") == "ok":
            status = r.get("http_status")
            assert isinstance(status, int) and 200 <= status < 300, f"fake ok: {where}"
            assert r.get("e2e_s") is not None, f"ok without e2e_s: {where}"
            assert r.get("finish_reason"), f"ok without finish_reason: {where}"
        if r.get("outcome") == "error":
            assert r.get("error_class") in ERROR_CLASSES, f"unclassified error: {where}"
        assert r.get("e2e_s") is not None, f"record without e2e_s: {where}"


def verdict_status(run_dir: Path) -> str:
    """PASS / WARN / FAIL from ``summary.json``'s verdict."""
    summary = orjson.loads((run_dir / "summary.json").read_bytes())
    v = summary.get("verdict")
    assert v is not None, "summary.json has no verdict"
    if isinstance(v, dict):
        v = v.get("status")
    assert isinstance(v, str), f"summary.json verdict is not readable: {v!r}"
    return v.split(":")[0].strip().upper()


def assert_honest_verdict(result: RunResult) -> None:
    """Never PASS with a crashed user or a recorder/collector failure; FAIL with no request
    answered (none sent, or every one failed, empty or cancelled)."""
    kinds = {e.get("kind") for e in result.events()}
    bad = kinds & {"user_crashed", "recorder_failed", "collector_failed"}
    if bad:
        assert verdict_status(result.dir) != "PASS", f"PASS despite {bad}"
    if not any(r.get("outcome") == "ok" for r in result.records()):
        assert verdict_status(result.dir) == "FAIL", "not FAIL with no request answered"


def assert_sound_run(result: RunResult, *, exit_code: int | None = None) -> None:
    """What every run must show, whatever the server did: the promised exit code (by
    default the verdict's: 0 for PASS and WARN, ``EXIT_VERDICT_FAIL`` for FAIL), no
    traceback, valid files, truthful records, no crashed user."""
    assert_no_traceback(result)
    if exit_code is None:
        exit_code = EXIT_VERDICT_FAIL if verdict_status(result.dir) == "FAIL" else 0
    assert result.rc == exit_code, (
        f"exit {result.rc}, expected {exit_code}; stderr: {result.stderr[-800:]}"
    )
    assert_all_jsonl_valid(result.dir)
    bugs = [r for r in result.records() if r.get("error_class") == "client_error"]
    assert not bugs, f"stress's own bug in {len(bugs)} record(s): {bugs[0].get('error')}"
    assert_truthful(result.records())
    crashed = [e for e in result.events() if e.get("kind") == "user_crashed"]
    assert not crashed, f"a simulated user crashed: {crashed[0].get('message')}"


def assert_accounted(result: RunResult) -> None:
    """The run's own count: every request sent has its line (state.json), and an honest
    verdict."""
    state = result.state()
    assert set(state) >= STATE_KEYS, f"state.json lacks {STATE_KEYS - set(state)}"
    assert state["finished"] is True, f"state.json not finished: {state}"
    assert state["sent"] == state["recorded"] == len(result.records()), (
        f"sent {state['sent']}, recorded {state['recorded']}, lines {len(result.records())}"
    )
    assert_honest_verdict(result)


def by_start(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(records, key=lambda r: (r.get("t_start") or 0.0, r.get("user", 0)))
