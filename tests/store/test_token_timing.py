"""Token timing against the simulator's ground truth, through the real CLI.

A ``stress sim`` process on loopback paces every token by its engine's step time: with no
batch or context slowdown, one user's steps all last ``1 / decode_tokens_per_s``, so the
ITL distribution ``stress run`` records in ``tokens.bin`` must sit on that step; with
several users the steps vary, and each request's mean ITL must equal the simulator's
own (first to last token in simulated seconds, over the gaps), matched by request id.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from stress.analysis.analyze import analyze
from stress.store.token_times import ReadReport, read_frames
from tests.sim.helpers import SimProcess

SCENARIO = """\
name: itl
target: {{url: "{url}", model: auto}}
users: {{count: {users}, ramp_up: {ramp_up}, think_time: {{min: 0s, max: 0s}}}}
rounds: {rounds}
warmup: {{rounds: 0}}
conversation:
  turn:
    ask: ["Summarise this.", "What is the key point?"]
request: {{max_tokens: 100}}
slo: {{ttft_p95: 5s, itl_p95: {itl_limit}}}
telemetry: {{gpus: "off"}}
"""


def _lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(x) for x in path.read_bytes().splitlines() if x.strip()]


def run_against_sim(tmp_path: Path, sim_yaml: str, **scenario: Any) -> tuple[Path, Path]:
    """``stress run`` against a ``stress sim`` process; (run dir, ground-truth file)."""
    cfg = tmp_path / "sim.yaml"
    cfg.write_text(sim_yaml)
    truth = tmp_path / "truth.jsonl"
    sim = SimProcess("--config", str(cfg), "--ground-truth", str(truth))
    try:
        path = tmp_path / "s.yaml"
        path.write_text(SCENARIO.format(url=sim.url, **scenario))
        out = tmp_path / "out"
        done = subprocess.run(
            [sys.executable, "-m", "stress", "run", str(path), "--no-tui", "--out", str(out)],
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        sim.kill()
    assert done.returncode in (0, 3), done.stdout + done.stderr  # 3: verdict, not a crash
    [run_dir] = [p for p in out.iterdir() if p.is_dir()]
    return run_dir, truth


@pytest.mark.slow
def test_itl_distribution_equals_the_simulators_step_time(tmp_path: Path) -> None:
    step = 1 / 50  # one user, no slowdowns: every decode step of the simulator is 20 ms
    sim = (
        "decode_tokens_per_s: 50\ndecode_batch_slowdown: 0\ndecode_context_slowdown_per_1k: 0\n"
        "reply_tokens_min: 40\nreply_tokens_max: 60\nreasoning_tokens: 10\n"
    )
    run_dir, truth = run_against_sim(
        tmp_path, sim, users=1, rounds=5, ramp_up="0s", itl_limit="30ms"
    )
    recs = _lines(run_dir / "requests.jsonl")
    assert len(recs) == 5 and all(r["outcome"] == "ok" for r in recs)
    report = ReadReport()
    frames = dict(read_frames(run_dir / "tokens.bin", report))
    assert report.damaged is None and report.frames == 5
    for r in recs:  # one value per text chunk (reasoning ones included), the first = TTFT
        values = frames[r["request_id"]]
        assert len(values) == r["chunks_content"] + r["chunks_reasoning"] == r["completion_tokens"]
        assert values[0] == pytest.approx(r["ttft_s"], rel=1e-5)
    gaps = np.concatenate([v[1:] for v in frames.values()])
    assert np.median(gaps) == pytest.approx(step, rel=0.03)
    assert np.mean(gaps) == pytest.approx(step, rel=0.02)  # the simulator's clock is honest
    summary = orjson.loads((run_dir / "summary.json").read_bytes())
    tt = summary["token_timing"]
    assert tt["available"] is True and tt["itl_s"]["n"] == gaps.size
    assert tt["itl_s"]["p50"] == pytest.approx(float(np.median(gaps)), rel=0.01)  # log bins
    assert tt["itl_s"]["mean"] == pytest.approx(float(np.mean(gaps)), rel=1e-4)
    assert tt["tpot_s"]["p50"] == pytest.approx(step, rel=0.02)
    for t in _lines(truth):  # the simulator's own pacing: first to last token
        assert (t["sim_e2e_s"] - t["sim_ttft_s"]) / (t["completion_tokens"] - 1) == (
            pytest.approx(step, rel=1e-6)
        )
    assert tt["goodput_ttft_itl"] == 1.0  # every p95 gap is far under 30 ms
    assert summary["token_timing"]["per_user"]["0"]["itl_s"]["n"] == gaps.size


@pytest.mark.slow
def test_each_requests_itl_equals_the_simulators_under_batching(tmp_path: Path) -> None:
    """Four users share the batch: step times grow with the batch and the context (the
    simulator's speed model), so each request's gaps differ; matched by request id, the
    mean ITL recorded equals the simulator's (simulated seconds / time scale 4: a
    ``stress sim`` process's clock is its own, the run records wall seconds)."""
    sim = (
        "time_scale: 4\ndecode_tokens_per_s: 40\ndecode_batch_slowdown: 0.2\n"
        "reply_tokens_min: 10\nreply_tokens_max: 80\n"
    )
    run_dir, truth_file = run_against_sim(
        tmp_path, sim, users=4, rounds=3, ramp_up="1s", itl_limit="1ms"
    )
    truth = {t["request_id"]: t for t in _lines(truth_file)}
    analysis = analyze(run_dir)
    tokens = analysis.tokens
    assert len(tokens.per_request) == 12
    steps = []
    for rid, itl in tokens.per_request.items():
        t = truth[rid]
        want = (t["sim_e2e_s"] - t["sim_ttft_s"]) / (t["tokens_sent"] - 1) / 4
        assert itl.mean == pytest.approx(want, rel=0.05), rid
        steps.append(want)
    assert max(steps) > 1.1 * min(steps)  # the batch really changed the step time
    assert tokens.overall.itl.n == sum(t["tokens_sent"] - 1 for t in truth.values())
    # every request's ITL p95 is above 1 ms: nothing is good on ITL
    assert tokens.goodput == 0.0 and set(tokens.goodput_by_user.values()) == {0.0}
    summary = orjson.loads((run_dir / "summary.json").read_bytes())
    assert sum(b["requests"] for b in summary["token_timing"]["by_length"]) == 12


def test_a_frame_is_the_float32_gaps_numpy_would_write() -> None:
    """``encode_frame`` builds its float32 values in plain Python (the run path loads no
    numpy): the bytes equal numpy's little-endian float32 of the float64 gaps."""
    import random
    from array import array

    from stress.store.token_times import _HEAD, encode_frame

    rng = random.Random(3)
    for n, ttft in ((0, None), (1, 0.25), (2, None), (300, 1.5)):
        t = 1e5 + rng.random()
        times = array("d")
        for _ in range(n):
            times.append(t)
            t += rng.expovariate(100.0)
        frame = encode_frame("n-u0-r1", ttft, times)
        values = np.empty(n, dtype="<f4")
        if n:
            values[0] = np.nan if ttft is None else ttft
            values[1:] = np.diff(np.frombuffer(times, dtype=np.float64))
        assert frame == _HEAD.pack(b"TK", 7, n) + b"n-u0-r1" + values.tobytes()
