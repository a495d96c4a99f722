"""``--ray ADDRESS``: the workers as actors of a real two-node Ray cluster started on
loopback here (``tests/ray_two_nodes.py``), through the real CLI and the simulator's
ground truth (what the server saw, by ``X-Request-ID``).

The cluster's start-up is bounded by ``CLUSTER_START_S`` (about 5 s on an idle two-core
machine; Ray's GCS, two raylets and their object stores); a cluster that cannot start
here skips these tests with Ray's last words. Each run's timeout comes from its work
(``tests/runtime/test_workers.py``'s ``_scenario``) plus the Ray workers' start-up.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.runtime.test_workers import (
    STRESS,
    _jsonl,
    _one_record_per_request_seen,
    _run_dir,
    _scenario,
    _shape,
    kill_worker_1_mid_run,
)

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'stress[ray]')")

CLUSTER_START_S = 120.0
"""Two Ray nodes starting on a busy two-core machine (~5 s idle), with margin."""
RAY_START_S = 60.0
"""The Ray workers' interpreters starting (imports of Ray and stress) and connecting."""
LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}  # see tests/ray_two_nodes.py


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[str, Path]]:
    """A two-node Ray cluster on loopback: its address and its session folder."""
    temp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # short: Ray's socket paths
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).parents[1] / "ray_two_nodes.py"), str(temp)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **LOOPBACK},
        start_new_session=True,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    address: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip())
            if line.startswith("ADDRESS "):
                address.append(line.split()[1])

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + CLUSTER_START_S
    while not address and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        if not address:
            pytest.skip(f"a two-node Ray cluster could not start here: {lines[-3:]}")
        yield address[0], temp
    finally:
        with_stdin = proc.stdin
        if with_stdin is not None:
            with_stdin.close()  # the cluster shuts down
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(temp, ignore_errors=True)


def _stress(tmp: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*STRESS, "run", *args, "--no-tui", "--out", str(tmp / "out"), "--fail-on", "never"],
        capture_output=True,
        text=True,
        env={**os.environ, **LOOPBACK, "PYTHONUNBUFFERED": "1", "STRESS_TEST_KEY": KEY},
        timeout=timeout,
    )


KEY = "sk-ray-test-3f9c2a7e5b1d4c8a"


@pytest.mark.timeout(900)  # two runs, each bounded by its own subprocess timeout
def test_a_two_node_ray_run_records_what_one_process_records(
    cluster: tuple[str, Path], tmp_path: Path
) -> None:
    address, ray_dir = cluster
    users, rounds = 6, 3
    runs = {}
    for how in ("local", "ray"):
        tmp = tmp_path / how
        tmp.mkdir()
        scenario, timeout = _scenario(tmp, users, rounds)
        keyed = "  url: sim\n  api_key_env: STRESS_TEST_KEY\n"
        scenario.write_text(scenario.read_text().replace("  url: sim\n", keyed))
        args = ["--ray", address, "--workers", "2"] if how == "ray" else []
        proc = _stress(tmp, str(scenario), *args, timeout=timeout + RAY_START_S)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out
        assert "Traceback" not in out and KEY not in out
        run_dir = _run_dir(tmp)
        assert run_dir is not None
        records = _one_record_per_request_seen(run_dir, tmp / "gt.jsonl")
        assert len(records) == len(_jsonl(tmp / "gt.jsonl")) == users * rounds
        runs[how] = (run_dir, records)
    (one, rec1), (two, rec2) = runs["local"], runs["ray"]
    assert sorted(map(_shape, rec1)) == sorted(map(_shape, rec2))
    assert sorted(rec1[0]) == sorted(rec2[0])  # the same fields
    s1 = orjson.loads((one / "summary.json").read_bytes())
    s2 = orjson.loads((two / "summary.json").read_bytes())
    assert s1["verdict"]["status"] == s2["verdict"]["status"] == "PASS"
    assert sorted(s1) == sorted(s2)
    # one worker on each node, each clock synced to the driver's: on one machine the
    # true skew is 0, so the estimate is within the round trip it was measured with
    manifest = orjson.loads((two / "manifest.json").read_bytes())
    assert manifest["workers"] == 2 and manifest["ray"]["address"] == address
    details = manifest["worker_details"]
    assert len({d["node"] for d in details}) == 2
    assert {d["node"] for d in details} == {n["node"] for n in manifest["ray"]["nodes"]}
    assert all(abs(d["clock_skew_ns"]) <= d["clock_rtt_ns"] < 50e6 for d in details)
    # times on one axis: every record's send lies inside the run, in the order of its user's
    for u in range(users):
        mine = sorted((r["round"], r["t_start"]) for r in rec2 if r["user"] == u)
        starts = [t for _, t in mine]
        assert starts == sorted(starts) and 0 <= starts[0] <= starts[-1] <= s2["duration_s"]
    # the key travels on the workers' connections, never through Ray (its logs, its tasks)
    assert {h["worker"] for h in _jsonl(two / "workers.jsonl")} == {0, 1}
    for path in ray_dir.rglob("*"):
        if path.is_file() and path.stat().st_size < 50 << 20:
            assert KEY.encode() not in path.read_bytes(), path
    for path in two.rglob("*"):
        assert not path.is_file() or KEY.encode() not in path.read_bytes(), path


@pytest.mark.timeout(600)  # bounded by the run's own deadline
async def test_a_ray_worker_killed_mid_run_is_an_event_and_its_requests_have_records(
    cluster: tuple[str, Path], tmp_path: Path
) -> None:
    users, rounds = 4, 6
    scenario, timeout = _scenario(tmp_path, users, rounds, reply=(160, 200), think=1.5)
    deadline = time.monotonic() + timeout + RAY_START_S
    # worker 1's process is the Ray actor's, on the second node
    run_dir, records, _ = await kill_worker_1_mid_run(
        tmp_path, scenario, deadline, 2, "--ray", cluster[0], env=LOOPBACK
    )
    for u in range(0, users, 2):  # worker 0's users played every round
        assert sorted(r["round"] for r in records if r["user"] == u) == list(range(1, rounds + 1))
    summary = orjson.loads((run_dir / "summary.json").read_bytes())
    assert summary["verdict"]["status"] == "FAIL"


def test_ray_refusals_are_one_line(cluster: tuple[str, Path], tmp_path: Path) -> None:
    scenario, _ = _scenario(tmp_path, 4, 1)
    cases = [
        (["--ray", "127.0.0.1:1"], "no Ray cluster answers there"),
        (["--ray", cluster[0], "--workers", "3"], "3 workers need 3 CPUs of the Ray cluster"),
    ]
    for args, said in cases:
        proc = _stress(tmp_path, str(scenario), *args, timeout=RAY_START_S)
        lines = (proc.stdout + proc.stderr).strip().splitlines()
        assert proc.returncode == 1, lines  # stress's one-line errors (not a usage error)
        assert len(lines) == 1 and said in lines[0] and "fix:" in lines[0], lines
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
