"""Inputs that must not wedge a run: key files that are devices, FIFOs or huge, traces that
are huge or name requests centuries away, replay prompts too costly to build, a damaged
run trace, and Ctrl-C while a long preparation step runs.

Each case drives the installed ``stress`` command as a subprocess on a real file (a real
FIFO, ``/dev/zero``, a trace of tens of MB written here). Every subprocess has a bound of
``BOUND_S`` (or its case's own) and is killed with its process group past it, under a 4 GiB
address-space limit, so a regression fails the test instead of filling the machine.
"""

from __future__ import annotations

import contextlib
import os
import random
import resource
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.reliability.harness import ROOT, cli_env, stress_command, write_scenario

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

BOUND_S = 30.0
"""Far more than a refusal takes (under 2 s on a loaded 2-core machine): only a bound."""
MEMORY_LIMIT = 4 << 30


@dataclass
class Done:
    rc: int
    stdout: str
    stderr: str
    wall_s: float
    max_rss_mib: float

    def lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _start(
    args: list[str], env: dict[str, str] | None, out: Any = subprocess.PIPE, err: Any = None
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*stress_command(), *args],
        stdout=out,
        stderr=subprocess.PIPE if err is None else err,
        cwd=ROOT,
        env=env or cli_env(),
        start_new_session=True,  # its own process group: a kill takes the simulator too
        preexec_fn=_limits,
    )


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def stress(*args: str, bound_s: float = BOUND_S, env: dict[str, str] | None = None) -> Done:
    """Run ``stress ARGS`` to its end within ``bound_s``; its own peak RSS.

    The peak is the kernel's high-water mark of the command's own memory (``VmHWM``),
    read while it runs: ``wait4``'s ``ru_maxrss`` would start from this test process's
    size, which a forked child inherits, so late in a long pytest session it would report
    the test runner's memory, not the command's."""
    t0 = time.monotonic()
    peak_kib = 0
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = _start(list(args), env, out, err)
        try:
            while (got := os.wait4(proc.pid, os.WNOHANG))[0] == 0:
                peak_kib = max(peak_kib, _hwm_kib(proc.pid))
                if time.monotonic() - t0 > bound_s:
                    err.seek(0)
                    raise AssertionError(
                        f"stress {' '.join(args)} did not exit within {bound_s:.0f}s: "
                        f"{err.read().decode(errors='replace')[-600:]!r}"
                    )
                time.sleep(0.02)
        finally:
            _kill(proc)
        _, status, _ = got
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return Done(
            proc.returncode,
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
            time.monotonic() - t0,
            peak_kib / 1024,
        )


def _hwm_kib(pid: int) -> int:
    """``VmHWM`` of ``pid`` in KiB (0 when it has just exited)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def assert_one_line(done: Done, rc: int, *words: str) -> str:
    """Exit ``rc``, no traceback, exactly one line on stderr holding each of ``words``."""
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    assert done.rc == rc, f"exit {done.rc}, expected {rc}: {done.stderr[-800:]}"
    lines = done.lines()
    assert len(lines) == 1, lines
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def run_args(scenario: Path, out: Path) -> list[str]:
    return ["run", str(scenario), "--no-tui", "--out", str(out)]


def replay_scenario(tmp: Path, trace: Path | str, block_size: int = 512) -> Path:
    doc: dict[str, Any] = {
        "name": "inputs",
        "target": {"url": "sim", "sim": {"time_scale": 4}},
        "replay": {"trace": str(trace), "corpus": "bundled:en", "block_size": block_size},
        "request": {"max_tokens": 8},
        "timeouts": {"drain": "5s"},
        "telemetry": {"server_metrics": False, "gpus": "off"},
    }
    path = tmp / "replay.yaml"
    path.write_bytes(orjson.dumps(doc))
    return path


def write_trace(path: Path, size: int, seed: int = 7) -> int:
    """A Mooncake trace of about ``size`` bytes (requests 512 tokens a block); its lines."""
    rng = random.Random(seed)
    t = 0
    lines = 0
    with path.open("w") as f:
        while f.tell() < size:
            t += rng.randint(0, 40)
            k = rng.randint(1, 40)
            ids = [rng.randrange(1_000_000) for _ in range(k)]
            f.write(
                f'{{"timestamp": {t}, "input_length": {k * 512}, "output_length": 8, '
                f'"hash_ids": {ids}}}\n'
            )
            lines += 1
    return lines


@pytest.fixture(scope="module")
def trace_24mb(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A trace of 24 MB and its line count, written once for the tests that read it."""
    trace = tmp_path_factory.mktemp("trace") / "trace.jsonl"
    return trace, write_trace(trace, 24_000_000)


@pytest.fixture(scope="module")
def trace_48mb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trace that takes a few seconds to read (long enough to interrupt)."""
    trace = tmp_path_factory.mktemp("trace") / "trace.jsonl"
    write_trace(trace, 48_000_000)
    return trace


# --- key files ------------------------------------------------------------------------


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "key.fifo"
    os.mkfifo(path)
    yield path


@pytest.mark.parametrize("kind", ["/dev/zero", "fifo", "oversized"])
def test_a_key_file_that_is_not_a_small_regular_file_is_one_line(
    tmp_path: Path, fifo: Path, kind: str
) -> None:
    """``/dev/zero`` passed ``validate`` and then grew the run by ~330 MB/s; a FIFO blocked
    it forever, Ctrl-C or not. Both commands now refuse it from its ``stat``, unopened."""
    if kind == "fifo":
        key = fifo
    elif kind == "oversized":
        key = tmp_path / "key.txt"
        key.write_text("sk-" + "k1" * 50_000)
    else:
        key = Path(kind)
    plan = write_scenario(tmp_path, target_extra={"api_key_file": str(key)})
    words = ("target.api_key_file", str(key), "fix:")
    why = {"/dev/zero": "character device", "fifo": "FIFO", "oversized": "at most 65,536"}[kind]
    checked = stress("validate", str(plan.path))
    assert_one_line(checked, 2, *words, why)
    ran = stress(*run_args(plan.path, tmp_path / "out"))
    assert_one_line(ran, 2, *words, why)
    assert ran.wall_s < BOUND_S and ran.max_rss_mib < 1024, (ran.wall_s, ran.max_rss_mib)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


# --- traces ---------------------------------------------------------------------------


def test_a_trace_over_the_size_limit_is_refused_unread(
    tmp_path: Path, trace_24mb: tuple[Path, int]
) -> None:
    """The limit (256 MiB) is lowered through ``STRESS_MAX_TRACE_MB`` so that a trace of
    tens of MB stands for one of hundreds: the refusal comes from the file's size, before
    a line is read, and names the variable that raises it."""
    trace = trace_24mb[0]
    scenario = replay_scenario(tmp_path, trace)
    env = cli_env(STRESS_MAX_TRACE_MB="16")
    for args in (["validate", str(scenario)], run_args(scenario, tmp_path / "out")):
        done = stress(*args, env=env)
        assert_one_line(done, 2, str(trace), "limit is 16 MiB", "STRESS_MAX_TRACE_MB")
        assert done.wall_s < 10, done.wall_s


def test_a_large_trace_validates_line_by_line_with_progress(
    tmp_path: Path, trace_24mb: tuple[Path, int]
) -> None:
    """A trace of 24 MB: ``validate`` says it is reading it, how to stop, and how many
    lines it read, and its memory stays that of the command (the old whole-file read held
    the file, its lines and every request: ~300 MiB for 38 MB)."""
    trace, lines = trace_24mb
    done = stress("validate", str(replay_scenario(tmp_path, trace)))
    assert done.rc == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "reading trace" in done.stderr and "Ctrl-C stops" in done.stderr, done.stderr
    assert f"{lines:,} lines" in done.stderr, done.stderr
    assert done.max_rss_mib < 120, f"validate peaked at {done.max_rss_mib:.0f} MiB"


def test_a_timestamp_centuries_away_is_refused(tmp_path: Path) -> None:
    """The run waited for it (285 years): now one line naming the line and the unit."""
    trace = tmp_path / "far.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 100, "output_length": 4, "hash_ids": [1]}\n'
        '{"timestamp": 9000000000000, "input_length": 100, "output_length": 4}\n'
    )
    scenario = replay_scenario(tmp_path, trace)
    for args in (["validate", str(scenario)], run_args(scenario, tmp_path / "out")):
        assert_one_line(stress(*args), 2, f"{trace}:2", "timestamp", "285 years", "7 days")


def test_a_prompt_too_costly_to_build_is_refused(tmp_path: Path) -> None:
    """2,000,000 tokens at ``block_size: 1`` is 2,000,000 blocks to build (minutes of CPU
    while the run stood "draining"): refused with the block size that would do."""
    trace = tmp_path / "huge.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 2000000, "output_length": 4}\n')
    scenario = replay_scenario(tmp_path, trace, block_size=1)
    for args in (["validate", str(scenario)], run_args(scenario, tmp_path / "out")):
        assert_one_line(stress(*args), 2, f"{trace}:1", "16,384", "replay.block_size", "123")


def test_a_run_trace_whose_user_is_not_a_number_is_one_line(tmp_path: Path) -> None:
    """A run directory's record with ``user: {...}`` crashed both commands (exit 70)."""
    run_dir = tmp_path / "previous"
    run_dir.mkdir()
    rows = [
        {"t_sched": 0.1, "user": 0, "conversation": 1, "phase": "main", "prompt_tokens": 90},
        {"t_sched": 0.2, "user": {"a": 1}, "conversation": 1, "phase": "main"},
    ]
    (run_dir / "requests.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    scenario = replay_scenario(tmp_path, run_dir, block_size=64)
    for args in (["validate", str(scenario)], run_args(scenario, tmp_path / "out")):
        assert_one_line(stress(*args), 2, "requests.jsonl:2", "user", "dict")


# --- Ctrl-C during preparation and prompt building --------------------------------------


def _interrupt_at(args: list[str], marker: str, nth: int, pause_s: float = 0.3) -> Done:
    """Start ``stress ARGS``, send SIGINT ``pause_s`` after the ``nth`` stderr line that
    holds ``marker``; the Done's ``wall_s`` is from the signal to the exit."""
    proc = _start(args, None)
    assert proc.stderr is not None and proc.stdout is not None
    seen: list[bytes] = []
    deadline = time.monotonic() + BOUND_S * 2
    try:
        while sum(marker.encode() in line for line in seen) < nth:
            line = proc.stderr.readline()
            assert line and time.monotonic() < deadline, (
                f"no {nth} x {marker!r} before the exit: {b''.join(seen)!r}"
            )
            seen.append(line)
        time.sleep(pause_s)
        t_signal = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=BOUND_S)
        wall = time.monotonic() - t_signal
    finally:
        _kill(proc)
    return Done(proc.returncode, out.decode(), err.decode(), wall, 0.0)


@pytest.mark.parametrize(("command", "nth"), [("validate", 1), ("run", 1), ("run", 2)])
def test_ctrl_c_while_a_trace_is_read_exits_within_a_second(
    tmp_path: Path, trace_48mb: Path, command: str, nth: int
) -> None:
    """``run`` reads the trace twice: once checked (``validate``'s read, on the main
    thread) and once for the run, in a thread before the run's signal handlers exist; the
    loop's exit waited for that thread to read the whole file (7.4 s for 67 MB). Now each
    read stops within milliseconds: exit 130, one line, no traceback."""
    scenario = replay_scenario(tmp_path, trace_48mb)
    args = ["validate", str(scenario)] if command == "validate" else run_args(scenario, tmp_path)
    done = _interrupt_at(args, "Ctrl-C stops", nth)
    assert done.rc == 130, f"exit {done.rc}: {done.stderr[-600:]}"
    assert "Traceback" not in done.stderr + done.stdout
    assert done.lines() == ["stress: interrupted"], done.stderr
    assert done.wall_s < 1.5, f"{done.wall_s:.2f}s from Ctrl-C to the exit"


def test_ctrl_c_while_a_prompt_is_built_stops_the_replay_at_once(tmp_path: Path) -> None:
    """Prompts of 16,384 tokens at ``block_size: 1`` (the most allowed, ~2-3 s each to
    build): a Ctrl-C during the first one stops the replay within a block, not when the
    prompt is done. Measured on the run's own clock: its "stopping" line to the
    ``replay_ended`` event."""
    trace = tmp_path / "slow.jsonl"
    trace.write_bytes(
        b"".join(
            orjson.dumps({"timestamp": i * 100, "input_length": 16_384, "output_length": 4}) + b"\n"
            for i in range(4)
        )
    )
    out = tmp_path / "out"
    proc = _start(run_args(replay_scenario(tmp_path, trace, block_size=1), out), None)
    assert proc.stdout is not None
    try:
        while not (line := proc.stdout.readline()).startswith(b"stress "):
            assert line, f"the run ended before it started: {proc.stderr}"
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=BOUND_S * 2)
    finally:
        _kill(proc)
    assert "Traceback" not in stdout.decode() + stderr.decode()
    stopped = [line for line in stdout.decode().splitlines() if "stopping (interrupted)" in line]
    assert stopped, stdout.decode()[-800:]
    t_stop = float(stopped[0].split("]")[0].strip("[ s"))
    (run_dir,) = out.iterdir()
    lines = (run_dir / "events.jsonl").read_bytes().splitlines()
    events = [orjson.loads(line) for line in lines if line]
    ended = [e for e in events if e["kind"] == "replay_ended"]
    assert ended and ended[0]["data"]["sent"] == 0, ended
    assert ended[0]["t"] - t_stop < 0.5, f"the replay ended {ended[0]['t'] - t_stop:.2f}s late"
