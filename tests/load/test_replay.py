"""Trace replay (``replay:``), through the real CLI against the built-in simulator.

The bundled (synthetic) Mooncake sample is replayed on a simulator whose KV pool holds the
whole trace (nothing evicted) and whose prefill is fast enough that each request's blocks
are cached before the next one arrives; its ground truth (what the server saw, per
request id) is then checked against the trace: each request's cached tokens equal the
reuse its hash ids imply, within one of the simulator's blocks; its prompt and reply sizes
are the trace's; and it was sent at its timestamp.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from stress.config.bundled import bundled_corpus
from stress.config.scenario import load_scenario, time_scaled
from stress.core.errors import ScenarioError
from stress.core.tokens import get_tokenizer
from stress.load.corpus import Corpus
from stress.load.replay import PromptBuilder, TraceRequest, implied_reuse, load_mooncake

STRESS = [sys.executable, "-m", "stress"]
TRACE = Path(__file__).resolve().parents[2] / "stress" / "data" / "traces" / "mooncake_sample.jsonl"
SCALE = 4
SPEED = 2
SIM_BLOCK = 16
TEMPLATE = 8
"""Tokens the simulator's chat template adds around the one user message."""
LEAD = 3
"""Of those, before the message's text (shared by every request)."""

SIM_TARGET = """\
target:
  url: sim
  sim:
    time_scale: {scale}
    block_size: {sim_block}
    kv_tokens: 1000000
    max_model_len: 65536
    prefill_tokens_per_s: 1000000
    max_batched_tokens: 65536
    decode_tokens_per_s: 2000
    ground_truth_path: {gt}
"""
"""A simulator whose pool holds everything and whose prefill caches a request's blocks
before the next one arrives."""

SCENARIO = (
    "name: replay_test\n"
    + SIM_TARGET
    + """\
replay:
  trace: {trace}
  block_size: 512
  speed: {speed}
request: {{extra_body: {{ignore_eos: true}}}}
telemetry: {{gpus: "off"}}
seed: 3
"""
)


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def _write(tmp_path: Path, trace: Path = TRACE, speed: float = SPEED) -> Path:
    p = tmp_path / "replay.yaml"
    p.write_text(
        SCENARIO.format(
            scale=SCALE,
            sim_block=SIM_BLOCK,
            gt=tmp_path / "gt.jsonl",
            trace=trace,
            speed=speed,
        )
    )
    return p


def _run(tmp_path: Path, scenario: Path) -> tuple[subprocess.CompletedProcess[str], Path | None]:
    out = tmp_path / "out"
    proc = subprocess.run(
        [*STRESS, "run", str(scenario), "--no-tui", "--out", str(out), "--fail-on", "never"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        timeout=180,
    )
    dirs = [p for p in out.iterdir() if p.is_dir()] if out.exists() else []
    return proc, dirs[0] if dirs else None


def test_mooncake_replay_prefix_reuse_sizes_and_times(tmp_path: Path) -> None:
    trace = load_mooncake(TRACE)
    proc, run_dir = _run(tmp_path, _write(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert run_dir is not None
    records = sorted(_jsonl(run_dir / "requests.jsonl"), key=lambda r: r["user"])
    assert [r["user"] for r in records] == list(range(len(trace)))
    assert all(r["outcome"] == "ok" for r in records)
    truth = {g["request_id"]: g for g in _jsonl(tmp_path / "gt.jsonl")}
    reuse = implied_reuse(trace, 512)
    assert sum(1 for x in reuse if x > 0) > len(trace) // 2  # the sample does reuse
    for req, rec, want in zip(trace, records, reuse, strict=True):
        g = truth[rec["request_id"]]  # the id the server saw is the recorded one
        # sizes: the prompt is input_length tokens (plus the template), the reply
        # output_length (max_tokens with ignore_eos)
        assert g["prompt_tokens"] == req.input_length + TEMPLATE, req.line
        assert g["completion_tokens"] == req.output_length
        assert rec["completion_tokens"] == req.output_length
        assert rec["reusable_tokens"] == want
        # prefix reuse: what the hash ids imply, at the simulator's block granularity (it
        # always computes the last prompt token itself)
        expect = min(want + LEAD, g["prompt_tokens"] - 1) // SIM_BLOCK * SIM_BLOCK
        assert abs(g["cached_tokens"] - expect) <= SIM_BLOCK, (req.line, g["cached_tokens"], want)
        assert rec["cached_tokens"] == g["cached_tokens"]
    total = sum(g["cached_tokens"] for g in truth.values())
    assert abs(total - sum(reuse)) <= SIM_BLOCK * len(trace) // 4

    # send times: scheduled exactly at the trace's timestamps (wall clock: / speed / time
    # scale), sent within the time it takes to build a prompt (a worker thread) plus loop lag
    wall = SPEED * SCALE
    t0 = records[0]["t_sched"]
    for req, rec in zip(trace, records, strict=True):
        assert rec["t_sched"] - t0 == pytest.approx((req.t_s - trace[0].t_s) / wall, abs=1e-3)
    builder = PromptBuilder(Corpus(bundled_corpus("bundled:en")), 512, "timing")
    start = time.perf_counter()
    builder.prompt(max(trace, key=lambda r: r.input_length))
    tolerance = 0.1 + 5 * (time.perf_counter() - start)
    late = [r["queue_s"] for r in records]
    assert max(late) <= tolerance, (max(late), tolerance)
    assert min(late) >= 0
    (ended,) = [e for e in _jsonl(run_dir / "events.jsonl") if e["kind"] == "replay_ended"]
    assert ended["data"]["sent"] == len(trace)


def test_shared_hash_ids_share_prefix_tokens() -> None:
    tok = get_tokenizer()
    builder = PromptBuilder(Corpus(bundled_corpus("bundled:en")), 64, "s")
    a = tok.encode(builder.prompt(TraceRequest(1, 0.0, 200, 1, (1, 2, 3, 4))))
    b = tok.encode(builder.prompt(TraceRequest(2, 0.0, 150, 1, (1, 2, 5))))
    c = tok.encode(builder.prompt(TraceRequest(3, 0.0, 100, 1, (9, 2))))
    assert (len(a), len(b), len(c)) == (200, 150, 100)
    assert a[:128] == b[:128] and a[128:136] != b[128:136]
    # a different id, different text; an id is the same text wherever it stands (a prefix
    # cache still misses it after a different first block: its chain differs)
    assert a[:8] != c[:8] and a[64:96] == c[64:96]  # c cuts block 2 to 36 tokens
    again = PromptBuilder(Corpus(bundled_corpus("bundled:en")), 64, "s")
    assert tok.encode(again.prompt(TraceRequest(1, 0.0, 200, 1, (1, 2, 3, 4)))) == a
    other = PromptBuilder(Corpus(bundled_corpus("bundled:en")), 64, "another run")
    assert tok.encode(other.prompt(TraceRequest(1, 0.0, 200, 1, (1, 2, 3, 4))))[:8] != a[:8]


def test_implied_reuse() -> None:
    trace = [
        TraceRequest(1, 0.0, 1000, 1, (1, 2)),
        TraceRequest(2, 0.0, 1200, 1, (1, 2, 3)),  # block 2 was sent cut (488 tokens)
        TraceRequest(3, 0.0, 1536, 1, (1, 3, 4)),  # same id 3 after another chain: no hit
        TraceRequest(4, 0.0, 300, 1, (1,)),
    ]
    assert implied_reuse(trace, 512) == [0, 512 + 488, 512, 300]


@pytest.mark.parametrize(
    ("line", "field"),
    [
        (
            '{"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": [1]}\n{"x": 1',
            "(line)",
        ),
        (
            '{"timestamp": 0, "input_length": "5", "output_length": 2, "hash_ids": [1]}',
            "input_length",
        ),
        ('{"timestamp": 0, "input_length": 5, "hash_ids": [1]}', "output_length"),
        ('{"timestamp": -1, "input_length": 5, "output_length": 2, "hash_ids": [1]}', "timestamp"),
        ('{"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": ["a"]}', "hash_ids"),
        ("[1, 2]", "(line)"),
    ],
)
def test_bad_trace_is_one_line_naming_file_line_field(
    tmp_path: Path, line: str, field: str
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(line + "\n")
    with pytest.raises(ScenarioError) as e:
        load_scenario(_write(tmp_path, trace=bad))
    (problem,) = e.value.problems
    assert problem.file == str(bad) and problem.field == field and problem.line is not None
    proc, _ = _run(tmp_path, _write(tmp_path, trace=bad))
    assert proc.returncode == 2
    err = proc.stdout + proc.stderr
    assert "Traceback" not in err and f"{bad}:{problem.line}: {field}:" in err


def test_replay_excludes_users_and_scales_with_time(tmp_path: Path) -> None:
    scenario = load_scenario(_write(tmp_path)).scenario
    assert scenario.replay is not None and scenario.replay.speed == SPEED
    assert time_scaled(scenario, SCALE).replay.speed == SPEED * SCALE  # type: ignore[union-attr]
    p = tmp_path / "both.yaml"
    p.write_text(_write(tmp_path).read_text() + "users: {count: 3}\n")
    with pytest.raises(ScenarioError, match="users"):
        load_scenario(p)
    p.write_text("name: x\nduration: 1m\n")
    with pytest.raises(ScenarioError, match="conversation is required"):
        load_scenario(p)


RUN_SCENARIO = (
    "name: replay_source\n"
    + SIM_TARGET
    + """\
users: {{count: 3, ramp_up: 6s, think_time: {{min: 2s, max: 5s}}}}
rounds: 4
conversation:
  turn:
    paste: {{corpus: bundled:en, tokens: [200, 500]}}
    ask: ["Summarise this."]
request: {{max_tokens: 24, extra_body: {{ignore_eos: true}}}}
telemetry: {{gpus: "off"}}
seed: 5
"""
)


def test_replay_of_a_previous_run_keeps_times_sizes_and_conversation_reuse(
    tmp_path: Path,
) -> None:
    """A run's requests.jsonl replayed (format auto): the same requests at the same times on
    the scenario's clock, with the same prompt and reply sizes, and each turn of a
    conversation finding in the server's cache what the original turn found (to a block)."""
    src_gt = tmp_path / "src_gt.jsonl"
    src = tmp_path / "src.yaml"
    src.write_text(RUN_SCENARIO.format(scale=SCALE, sim_block=SIM_BLOCK, gt=src_gt))
    proc, src_dir = _run(tmp_path / "a", src)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert src_dir is not None
    original = sorted(_jsonl(src_dir / "requests.jsonl"), key=lambda r: r["t_sched"])
    assert len(original) == 12 and all(r["outcome"] == "ok" for r in original)
    assert sum(r["reusable_tokens"] > 0 for r in original) == 9  # rounds 2-4 of each user

    scenario = tmp_path / "replay.yaml"
    scenario.write_text(
        SCENARIO.format(
            scale=SCALE, sim_block=SIM_BLOCK, gt=tmp_path / "gt.jsonl", trace=src_dir, speed=1
        ).replace("block_size: 512", f"block_size: {SIM_BLOCK}")
    )
    proc, run_dir = _run(tmp_path / "b", scenario)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert run_dir is not None
    replayed = sorted(_jsonl(run_dir / "requests.jsonl"), key=lambda r: r["user"])
    assert len(replayed) == len(original)
    truth = {g["request_id"]: g for g in _jsonl(tmp_path / "gt.jsonl")}
    t0, r0 = original[0]["t_sched"], replayed[0]["t_sched"]
    previous: dict[tuple[int, int], int] = {}  # (user, conversation) -> its last prompt
    for orig, rec in zip(original, replayed, strict=True):
        g = truth[rec["request_id"]]
        # times: the original's schedule, both on the same (time-scaled) wall clock
        assert rec["t_sched"] - r0 == pytest.approx(orig["t_sched"] - t0, abs=1e-3)
        assert g["prompt_tokens"] == orig["prompt_tokens"] + TEMPLATE
        assert g["completion_tokens"] == orig["completion_tokens"] == 24
        # reuse: the whole blocks of what the original turn could reuse, up to the previous
        # turn's prompt (the original could also reuse the reply the server wrote; a
        # replayed reply is other text, so the next replayed prompt cannot contain it)
        key = (orig["user"], orig["conversation"])
        want = min(orig["reusable_tokens"] // SIM_BLOCK * SIM_BLOCK, previous.get(key, 0))
        previous[key] = orig["prompt_tokens"]
        assert rec["reusable_tokens"] == want
        assert want > 0 or orig["turn"] == 1
        # and the server's cache found it (to the simulator's block; it always computes
        # the last prompt token itself)
        expect = min(want + LEAD, g["prompt_tokens"] - 1) // SIM_BLOCK * SIM_BLOCK
        assert abs(g["cached_tokens"] - expect) <= SIM_BLOCK, (orig, g, want)


def _implied_reuse_by_prefix(trace: list[TraceRequest], block_size: int) -> list[int]:
    """The rule as first written: a dict keyed by every prefix tuple (quadratic)."""
    sent: dict[tuple[int, ...], int] = {}
    out = []
    for req in trace:
        reuse = 0
        for i in range(len(req.hash_ids)):
            need = min(block_size, req.input_length - i * block_size)
            got = min(sent.get(req.hash_ids[: i + 1], 0), need)
            reuse += got
            if need <= 0 or got < block_size:
                break
        out.append(reuse)
        for i in range(len(req.hash_ids)):
            n = min(block_size, req.input_length - i * block_size)
            if n <= 0:
                break
            sent[req.hash_ids[: i + 1]] = max(sent.get(req.hash_ids[: i + 1], 0), n)
    return out


def test_implied_reuse_is_linear_and_agrees_with_the_prefix_rule() -> None:
    import random

    rng = random.Random(5)
    trace = [
        TraceRequest(
            i, 0.0, rng.randint(1, 40 * 64), 1, tuple(rng.randint(0, 6) for _ in range(40))
        )
        for i in range(300)
    ]
    assert implied_reuse(trace, 64) == _implied_reuse_by_prefix(trace, 64)
    long = [TraceRequest(i, 0.0, 16_384, 1, tuple(range(16_384))) for i in range(20)]
    t0 = time.perf_counter()
    assert implied_reuse(long, 1)[1:] == [16_384] * 19
    assert time.perf_counter() - t0 < 2, "quadratic in the blocks of a prompt"


def test_a_prompt_build_stops_when_its_caller_stops() -> None:
    """A stopped replay does not wait for a prompt of 16,384 one-token blocks (~3 s)."""
    calls = []

    def stop() -> bool:
        calls.append(1)
        return len(calls) > 10

    builder = PromptBuilder(Corpus(bundled_corpus("bundled:en")), 1, "s", stop)
    t0 = time.perf_counter()
    assert builder.prompt(TraceRequest(1, 0.0, 16_384, 1, ())) == ""
    assert time.perf_counter() - t0 < 0.5 and len(calls) == 11


def test_trace_and_corpus_reads_stop_when_asked(tmp_path: Path) -> None:
    from stress.core.errors import Interrupted
    from stress.load.replay import load_trace

    trace = tmp_path / "t.jsonl"
    line = '{"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": [1]}\n'
    trace.write_text(line * 5000)
    with pytest.raises(Interrupted):
        load_trace(trace, "mooncake", 512, stop=lambda: True, progress=print)
    assert len(load_trace(trace, "auto", 512, stop=lambda: False)) == 5000
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("\n\n".join(f"Paragraph {i} of text." for i in range(200)))
    with pytest.raises(Interrupted):
        Corpus(docs, get_tokenizer(), stop=lambda: True)
    assert Corpus(docs, get_tokenizer(), stop=lambda: False).docs


@pytest.mark.parametrize(
    ("record", "field"),
    [
        ({"user": {"a": 1}}, "user"),
        ({"conversation": "x"}, "conversation"),
        ({"phase": 3}, "phase"),
    ],
)
def test_a_run_trace_with_a_field_of_the_wrong_type_is_one_problem(
    tmp_path: Path, record: dict[str, Any], field: str
) -> None:
    from stress.load.replay import load_run_trace

    good = {"t_sched": 0.5, "user": 0, "conversation": 1, "phase": "main", "prompt_tokens": 9}
    rows = [good, {**good, **record}]
    (tmp_path / "requests.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    with pytest.raises(ScenarioError) as e:
        load_run_trace(tmp_path, 64)
    (problem,) = e.value.problems
    assert (problem.line, problem.field) == (2, field), problem
