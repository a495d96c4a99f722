"""Request ids against the simulator's ground truth, through the real CLI.

``stress run`` sends every request with ``X-Request-ID`` and records it as ``request_id``;
the simulator (a ``stress sim`` process on loopback) records the header it received. The
two sets must be equal, one id per request, and the vLLM dialect's reply id must be
``chatcmpl-<request_id>``, as vLLM builds it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from stress.load.engine import request_id
from tests.sim.helpers import SimProcess

SIM = """\
dialect: {dialect}
decode_tokens_per_s: 400
reply_tokens_min: 8
reply_tokens_max: 16
"""

SCENARIO = """\
name: ids
target: {{url: "{url}", model: auto}}
users: {{count: 3, ramp_up: 0s, think_time: {{min: 0s, max: 0s}}}}
rounds: 3
conversation:
  turn:
    ask: ["Summarise this.", "What is the key point?"]
request: {{max_tokens: 16}}
telemetry: {{gpus: "off"}}
"""


def _lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(x) for x in path.read_bytes().splitlines() if x.strip()]


@pytest.mark.slow
@pytest.mark.parametrize("dialect", ["vllm", "llamacpp"])
def test_ids_seen_by_the_server_equal_the_recorded_ones(tmp_path: Path, dialect: str) -> None:
    cfg = tmp_path / "sim.yaml"
    cfg.write_text(SIM.format(dialect=dialect))
    truth = tmp_path / "truth.jsonl"
    sim = SimProcess("--config", str(cfg), "--ground-truth", str(truth))
    try:
        scenario = tmp_path / "s.yaml"
        scenario.write_text(SCENARIO.format(url=sim.url))
        out = tmp_path / "out"
        done = subprocess.run(
            [sys.executable, "-m", "stress", "run", str(scenario), "--no-tui", "--out", str(out)],
            capture_output=True,
            text=True,
            timeout=180,
        )
    finally:
        sim.kill()
    assert done.returncode == 0, done.stdout + done.stderr
    [run_dir] = [p for p in out.iterdir() if p.is_dir()]
    recs = _lines(run_dir / "requests.jsonl")
    seen = [t["request_id"] for t in _lines(truth)]
    assert len(recs) == 9 and all(r["outcome"] == "ok" for r in recs)
    recorded = [r["request_id"] for r in recs]
    assert sorted(seen) == sorted(recorded)
    assert len(set(recorded)) == 9  # one id per request
    nonce = next(
        e["data"]["run_nonce"]
        for e in _lines(run_dir / "events.jsonl")
        if e["kind"] == "run_started"
    )
    assert set(recorded) == {request_id(nonce, r["user"], r["round"]) for r in recs}
    for r in recs:
        if dialect == "vllm":  # vLLM names a request after its X-Request-ID
            assert r["response_id"] == f"chatcmpl-{r['request_id']}"
        else:  # llama.cpp ignores the header: its reply id is its own
            assert isinstance(r["response_id"], str)
            assert r["response_id"].startswith("chatcmpl-")
            assert r["request_id"] not in r["response_id"]
