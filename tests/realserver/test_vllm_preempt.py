"""vLLM CPU with a deliberately tiny KV pool: the run must show real preemptions.

9 blocks of 128 tokens (``--num-gpu-blocks-override 9``, 1,152 tokens) and 4 concurrent
streams that each grow to ~550 tokens cannot all fit: the scheduler preempts and
recomputes. A separate module so the roomier server of test_vllm.py is stopped first.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.realserver.runs import ROOT, describe, stress_run
from tests.realserver.servers import ServerProcess, start_vllm

pytestmark = [pytest.mark.realserver, pytest.mark.timeout(2700)]


@pytest.fixture(scope="module")
def small_vllm(
    vllm_install: tuple[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    server = start_vllm(
        vllm_install,
        tmp_path_factory.mktemp("vllm_small"),
        "--num-gpu-blocks-override",
        "9",
        "--max-model-len",
        "1024",
    )
    try:
        yield server
    finally:
        server.stop()


def test_small_kv_pool_shows_preemptions(small_vllm: ServerProcess, tmp_path: Path) -> None:
    run = stress_run(
        tmp_path,
        small_vllm.url,
        name="rs_vllm_preempt",
        users=4,
        rounds=1,
        paste=(100, 150),
        ceiling=800,
        max_tokens=400,
        # every reply runs to max_tokens: how soon the model says EOS depends on the pasted
        # text and the sampling, and three short replies fit the pool without a preemption
        ignore_eos=True,
    )
    assert run.manifest["probe"]["kv_pool_tokens"] == 9 * 128
    recs = run.requests
    assert len(recs) == 4 and all(r["outcome"] == "ok" for r in recs), [describe(r) for r in recs]
    assert all(r["completion_tokens"] == 400 for r in recs), [describe(r) for r in recs]
    coll = run.collectors["server"]
    assert coll["preemptions"] and coll["preemptions"] > 0, coll
    assert any((s.get("preemptions") or 0) > 0 for s in run.server)
    # the pre-flight warned that a conversation at the ceiling (800 + 400) exceeds the pool
    assert any("KV pool" in w for w in run.manifest["probe_warnings"])
    # the report says so (when the HTML/Markdown report module is wired into `report`)
    rep = subprocess.run(
        [sys.executable, "-m", "stress", "report", str(run.dir)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        check=False,
    )
    assert rep.returncode == 0, rep.stderr
    report_md = run.dir / "report.md"
    if report_md.exists():
        assert "preempt" in report_md.read_text().lower()
