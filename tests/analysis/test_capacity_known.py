"""The capacity answer brackets a capacity known by construction.

The simulator's KV pool holds K = kv_tokens / ceiling_tokens = 26,400 / 6,000 = 4.4 users'
conversations; decode speed does not depend on the batch (no batch or context slowdown),
there are more sequence slots than users, and prefill is fast enough that a turn whose
history is cached answers well within the SLO while a turn whose history was evicted
(recomputed from scratch) does not. A phase sweep of 2, 4 and 6 users must therefore meet
the SLO at 2 and 4 users and miss it at 6: the answer's bracket [4, 6) holds K. The real
CLI runs it; the answer is read from summary.json, as every output reads it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

ROOT = Path(__file__).resolve().parents[2]
KV_TOKENS = 26_400
CEILING = 6_000
K = KV_TOKENS / CEILING

SCENARIO = f"""\
name: pool_holds_{K:g}
target:
  url: sim
  sim:
    kv_tokens: {KV_TOKENS}
    max_seqs: 16
    time_scale: 5
    seed: 2
    prefill_tokens_per_s: 5000
    decode_tokens_per_s: 50
    decode_batch_slowdown: 0
    decode_context_slowdown_per_1k: 0
    max_batched_tokens: 65536
    reply_tokens_min: 30
    reply_tokens_max: 30
users: {{count: 2, ramp_up: 0.05s, think_time: {{min: 1s, max: 2s}}}}
rounds: 14
conversation:
  cache: per_user
  ceiling_tokens: {CEILING}
  turn:
    paste: {{corpus: {ROOT / "corpora" / "en"}, tokens: [400, 500]}}
    ask: ["Summarise this."]
request: {{max_tokens: 30}}
warmup: {{rounds: 1}}
slo: {{ttft_p95: 0.5s}}
phases:
  - {{name: u2, users: 2}}
  - {{name: u4, users: 4}}
  - {{name: u6, users: 6}}
"""


@pytest.mark.slow
def test_capacity_answer_brackets_the_pool_by_construction(tmp_path: Path) -> None:
    path = tmp_path / "pool.yaml"
    path.write_text(SCENARIO)
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "stress", "run", str(path), "--out", str(out), "--no-tui"],
        capture_output=True,
        text=True,
        timeout=300,  # ~150 simulated s at x5 = 30 s of wall time, on a loaded 2-core box
    )
    assert proc.returncode in (0, 3), proc.stderr
    (run_dir,) = [p for p in out.iterdir() if (p / "summary.json").exists()]
    capacity = orjson.loads((run_dir / "summary.json").read_bytes())["capacity"]
    by_users = {b["lo"]: b for b in capacity["by_users"]}
    assert sorted(by_users) == [2, 4, 6]
    assert by_users[2]["status"] == "MET" and by_users[4]["status"] == "MET"
    assert by_users[6]["status"] == "MISSED", by_users[6]
    assert capacity["within"]["users"] == "met up to 4, missed at 6"
    assert 4 <= K < 6
    # the pool's own estimate of the users it holds agrees with the construction
    assert 4 <= capacity["users_fit_pool"] < 6
    assert abs(capacity["users_fit_pool"] - K) < 0.5
    assert "within SLO up to ~4 users" in capacity["sentence"]
    assert f"capacity: {capacity['sentence']}" in proc.stdout
