"""``stress capacity`` end to end on the simulator, against a capacity known by
construction: 4 sequence slots, users that never think, so a fifth user always waits a
whole reply (0.6 simulated s) for a slot, past the 0.4 s TTFT SLO, while four never wait.
The search must answer 4 users [4-5]; every pass is an ordinary run directory that
``stress ls`` lists."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from stress.core.limits import EXIT_VERDICT_FAIL

ROOT = Path(__file__).resolve().parents[2]
SLOTS = 4
SCENARIO = f"""\
name: slots_{SLOTS}
target:
  url: sim
  sim: {{max_seqs: {SLOTS}, time_scale: 5, seed: 2, prefill_tokens_per_s: 20000,
         decode_tokens_per_s: 50, decode_batch_slowdown: 0,
         decode_context_slowdown_per_1k: 0, max_batched_tokens: 65536,
         reply_tokens_min: 30, reply_tokens_max: 30}}
users: {{count: 1, ramp_up: 0.2s, think_time: {{min: 0.01s, max: 0.02s}}}}
rounds: 8
conversation:
  cache: per_user
  ceiling_tokens: 6000
  turn:
    paste: {{corpus: {ROOT / "corpora" / "en"}, tokens: [200, 300]}}
    ask: ["Summarise this."]
request: {{max_tokens: 30}}
warmup: {{rounds: 1}}
slo: {{ttft_p95: 0.4s}}
"""


def stress(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stress", *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.slow
def test_search_brackets_the_slots(tmp_path: Path) -> None:
    path = tmp_path / "slots.yaml"
    path.write_text(SCENARIO)
    out = tmp_path / "out"
    # steps 2, 4, 8, 6, 5 users, one pass each: ~30 s on a quiet 2-core machine
    proc = stress("capacity", str(path), "--out", str(out), "--start", "2", "--repeat", "1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "capacity at SLO (TTFT p95 <= 0.4 s): 4 users [4-5]" in proc.stdout
    (root,) = out.iterdir()
    doc = orjson.loads((root / "capacity.json").read_bytes())
    assert doc["bracket"] == [SLOTS, SLOTS + 1] and doc["stop"] == "bracket"
    assert [s["value"] for s in doc["steps"]] == [2, 4, 8, 6, 5]
    assert [s["status"] for s in doc["steps"]] == ["MET", "MET", "MISSED", "MISSED", "MISSED"]
    # every pass is a complete run directory with its own summary and report
    for s in doc["steps"]:
        (run,) = s["run_dirs"]
        assert (root / run / "summary.json").exists() and (root / run / "report.html").exists()
    ls = stress("ls", str(root))
    assert ls.returncode == 0
    assert len([line for line in ls.stdout.splitlines() if "slots_4" in line]) == 5


def test_no_slo_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.replace("slo: {ttft_p95: 0.4s}\n", ""))
    proc = stress("capacity", str(path), "--out", str(tmp_path / "out"), timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "sets no limit" in proc.stderr


def test_missed_everywhere_exits_like_a_failed_verdict(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.replace("ttft_p95: 0.4s", "ttft_p95: 0.001s"))
    proc = stress("capacity", str(path), "--out", str(tmp_path / "out"), "--repeat", "1")
    assert proc.returncode == EXIT_VERDICT_FAIL, proc.stderr[-2000:]
    assert "no capacity found: the SLO was missed at 1 user" in proc.stdout


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--factor", "1"], "--factor: Input should be greater than 1"),
        (["--start", "8", "--max-users", "4"], "start (8) is above max_users (4)"),
    ],
)
def test_bad_search_flags_are_one_line(tmp_path: Path, args: list[str], text: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    proc = stress("capacity", str(path), "--out", str(tmp_path / "out"), *args, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and text in proc.stderr


def test_search_section_of_the_scenario_is_validated(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO + "search: {start: 0}\n")
    proc = stress("validate", str(path), timeout=60)
    assert proc.returncode == 2 and "search.start" in proc.stderr


# The length axis: 4 users whose conversations are each pre-filled with L tokens and then
# grow by ~2.2k tokens over 8 rounds, in a KV pool of 52,800 tokens. While 4 x (L + 2.2k)
# fits, every follow-up turn prefills only its new paste (~5 ms at 50,000 tok/s); past
# it, LRU eviction makes every turn recompute its whole history (>= 0.2 s): the capacity
# is L = 52,800 / 4 - 2,200 = 11,000 tokens by construction. Real time (no time scale),
# so the client's own milliseconds are not multiplied into the SLO's margin.
POOL = 52_800
GROWTH = 8 * (250 + 30)
LENGTH_SCENARIO = f"""\
name: pool_{POOL}
target:
  url: sim
  sim: {{kv_tokens: {POOL}, max_seqs: 16, seed: 2,
         prefill_tokens_per_s: 50000, decode_tokens_per_s: 300, decode_batch_slowdown: 0,
         decode_context_slowdown_per_1k: 0, max_batched_tokens: 65536,
         reply_tokens_min: 30, reply_tokens_max: 30}}
users: {{count: 4, ramp_up: 0.2s, think_time: {{min: 0.01s, max: 0.02s}}}}
rounds: 8
conversation:
  cache: per_user
  ceiling_tokens: 40000
  turn:
    paste: {{corpus: {ROOT / "corpora" / "en"}, tokens: [240, 260]}}
    ask: ["Summarise this."]
request: {{max_tokens: 30}}
warmup: {{rounds: 0}}
slo: {{ttft_p95: 0.1s}}
search: {{axis: length, length_start: 2000, length_width: 2000, repeat: 1, min_requests: 20}}
"""


@pytest.mark.slow
def test_length_search_brackets_the_pool(tmp_path: Path) -> None:
    path = tmp_path / "length.yaml"
    path.write_text(LENGTH_SCENARIO)
    out = tmp_path / "out"
    proc = stress("capacity", str(path), "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    (root,) = out.iterdir()
    doc = orjson.loads((root / "capacity.json").read_bytes())
    lo, hi = doc["bracket"]
    capacity = POOL / 4 - GROWTH
    assert lo <= capacity < hi and hi - lo <= 2000, doc["steps"]
    assert doc["axis"] == "length" and doc["unit"] == "tokens"
    assert f"{lo / 1000:g}k tokens [" in proc.stdout and "of history at 4 users" in proc.stdout


# The grid: the same pool and growth, the users search at two history lengths. At L
# tokens, K users fit while K x (L + 2.2k) <= 52,800: 12 users at 2,000 tokens
# (12 x 4,240 = 50,880) and 5 at 7,000 (5 x 9,240 = 46,200), by construction. Past K the
# pool overflows from the round where (K + 1) x (L + 280 r) > 52,800: at 7,000 tokens six
# users overflow from round 7 of 8 (a quarter of the turns recompute: a sure miss), at
# 2,000 tokens 14 users from round 7, but 13 only in the last round, where the few turns
# that recompute sit at the p95: the first row is 12 or 13 users by construction.
# The second row starts at the first row's answer.
GRID_SCENARIO = LENGTH_SCENARIO.replace(
    "search: {axis: length, length_start: 2000, length_width: 2000, repeat: 1, min_requests: 20}",
    "search: {axis: grid, lengths: [2000, 7000], start: 4, max_users: 16, repeat: 1, "
    "min_requests: 20}",
)


@pytest.mark.slow
def test_grid_search_maps_users_by_length(tmp_path: Path) -> None:
    path = tmp_path / "grid.yaml"
    path.write_text(GRID_SCENARIO)
    out = tmp_path / "out"
    proc = stress("capacity", str(path), "--out", str(out), timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (root,) = out.iterdir()
    doc = orjson.loads((root / "capacity.json").read_bytes())
    assert doc["axis"] == "grid"
    brackets = [r["bracket"] for r in doc["rows"]]
    first = brackets[0][0]
    assert first in (12, 13) and brackets == [[first, first + 1], [5, 6]], [
        (r["length"], [(s["value"], s["status"], s["factors"]) for s in r["steps"]])
        for r in doc["rows"]
    ]
    assert [r["length"] for r in doc["rows"]] == [2000, 7000]
    assert doc["rows"][1]["steps"][0]["value"] == first  # started at the shorter row's answer
    line = "capacity map at SLO (TTFT p95 <= 0.1 s), by tokens of history: 2,000 tokens: "
    assert line + f"{first} users [{first}-{first + 1}]" in proc.stdout
    assert "7,000 tokens: 5 users [5-6]" in proc.stdout
    assert "capacity map (users x tokens of history)" in proc.stdout
    # the map: a row per length, a cell per user count tried
    m = doc["map"]
    assert m["lengths"] == [2000, 7000] and first in m["users"] and 5 in m["users"]
    row2 = dict(zip(m["users"], m["cells"][1], strict=True))
    assert row2[5].startswith("MET") and row2[6].startswith("MISSED")
    html = (root / "capacity.html").read_text()
    assert "Capacity map" in html and 'class="MISSED"' in html and "report.html" in html
    # the search's report is rebuilt from capacity.json alone
    (root / "capacity.md").unlink()
    rebuilt = stress("report", str(root), timeout=120)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "7,000 tokens: 5 users [5-6]" in (root / "capacity.md").read_text()


# llama.cpp: a slot of 6,000 tokens (the simulator's llama.cpp dialect serves /props and
# /slots like llama-server) under a ceiling of 20,000 the user set too high. Each step of
# 10 users runs 3 rounds (2 judged, for 20 requests), adding up to 3 x (260 + 64 + 30)
# tokens to a conversation: past 6,000 - 1,062 - 64 = 4,874 tokens of history a step's
# last turns cannot fit their slot. The search must stop there, and say why, rather than
# go on to 8k and read context errors as the load's limit.
SLOT_SCENARIO = (
    LENGTH_SCENARIO.replace(
        f"sim: {{kv_tokens: {POOL}, max_seqs: 16,",
        "sim: {dialect: llamacpp, kv_tokens: 1000000, max_model_len: 6000, max_seqs: 16,",
    )
    .replace("users: {count: 4,", "users: {count: 10,")
    .replace("ceiling_tokens: 40000", "ceiling_tokens: 20000")
    .replace("rounds: 8", "rounds: 2")
    .replace("ttft_p95: 0.1s", "ttft_p95: 30s")
    .replace("length_start: 2000, length_width: 2000", "length_start: 1000, length_width: 500")
)


@pytest.mark.slow
def test_length_search_is_bounded_by_a_llamacpp_slot(tmp_path: Path) -> None:
    assert "dialect: llamacpp" in SLOT_SCENARIO and "rounds: 2" in SLOT_SCENARIO
    path = tmp_path / "slot.yaml"
    path.write_text(SLOT_SCENARIO)
    out = tmp_path / "out"
    proc = stress("capacity", str(path), "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    (root,) = out.iterdir()
    doc = orjson.loads((root / "capacity.json").read_bytes())
    tried = [s["value"] for s in doc["steps"]]
    assert tried == [1000, 2000, 4000, 4874], doc["steps"]
    assert all(s["status"] == "MET" for s in doc["steps"])  # no turn outgrew its slot
    assert doc["stop"] == "maximum" and doc["llamacpp_slot_context"] == 6000
    assert "a llama.cpp slot holds 6,000 tokens" in doc["stop_text"]
    assert "search bounded: a llama.cpp slot holds 6,000 tokens" in proc.stdout


# --- what a search refuses, and what it says before it starts --------------------------

REPLAY_SCENARIO = """\
name: replay_search
target: {url: sim, sim: {time_scale: 4}}
replay:
  trace: bundled:mooncake_sample.jsonl
  format: mooncake
  corpus: bundled:en
  block_size: 512
slo: {ttft_p95: 5s}
"""
ARRIVALS_SCENARIO = """\
name: arrivals_search
target: {url: sim, sim: {time_scale: 60}}
arrivals: {rate: 6, rounds: [2, 3], think_time: {min: 1s, max: 2s}}
duration: 10m
conversation: {turn: {ask: ["Summarise this."]}}
slo: {ttft_p95: 5s}
"""


@pytest.mark.parametrize(
    ("text", "field", "line"), [(REPLAY_SCENARIO, "replay", 3), (ARRIVALS_SCENARIO, "arrivals", 3)]
)
def test_a_scenario_whose_users_cannot_vary_is_refused_in_one_line(
    tmp_path: Path, text: str, field: str, line: int
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    assert stress("validate", str(path), timeout=60).returncode == 0  # a fine scenario to run
    proc = stress("capacity", str(path), "--out", str(tmp_path / "out"), timeout=60)
    assert proc.returncode == 2, proc.stdout[-1000:]
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"{path}:{line}: {field}: "), proc.stderr
    assert "cannot vary its users -- fix: " in proc.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_search_prints_its_bound_before_it_starts(tmp_path: Path) -> None:
    """At most 2 users: 1 then 2 (a miss at 1 has nothing below it, a miss at 2 a bracket
    of 1 already), so at most 2 steps; a 1-user pass runs 1 + 40 rounds for 40 judged
    requests, a 2-user one 1 + 20."""
    path = tmp_path / "slots.yaml"
    path.write_text(SCENARIO)
    out = tmp_path / "out"
    proc = stress("capacity", str(path), "--out", str(out), "--max-users", "2", "--repeat", "1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    (i,) = [n for n, line in enumerate(lines) if line.startswith("expected duration: ")]
    first_pass = next(n for n, line in enumerate(lines) if line.startswith("capacity search ·"))
    assert i < first_pass, "the bound comes after the search started"
    assert lines[i].startswith("expected duration: at most 2 steps x 1 passes; a pass "), lines[i]
    assert "(21-41 rounds a user, 41 at 1 user; " in lines[i]
    assert "the simulator's clock x5" in lines[i] and "; in all at most " in lines[i]
    (root,) = out.iterdir()
    doc = orjson.loads((root / "capacity.json").read_bytes())
    assert len(doc["steps"]) <= 2 and doc["state"] == "finished"
