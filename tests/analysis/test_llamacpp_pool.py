"""llama.cpp's slots are separate contexts, never one shared KV pool (issue 35).

A real ``stress run`` against the built-in simulator speaking the llama.cpp dialect (4
slots of 16,384 tokens, 6 users): the probe's kv_pool_tokens is the slots' n_ctx summed
(65,536), and no output may tell the user that is a pool holding N users. The capacity is
stated in slots and per-slot context instead.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from stress.analysis.rundata import load_run
from stress.analysis.server_kind import SlotLayout, server_kind, shared_pool_tokens, slot_layout
from stress.report.fingerprint import fingerprint

REPO = Path(__file__).resolve().parents[2]
SCENARIO = f"""\
name: llamacpp_slots
target:
  url: sim
  model: auto
  sim: {{dialect: llamacpp, kv_tokens: 65536, max_seqs: 4, time_scale: 8, seed: 3,
         reply_tokens_min: 16, reply_tokens_max: 48}}
users:
  count: 6
  ramp_up: 0.5s
  think_time: {{min: 0.1s, max: 0.3s}}
duration: 8s
conversation:
  system_prompt: You answer questions about pasted documents.
  cache: per_user
  ceiling_tokens: 8000
  turn:
    paste: {{corpus: {REPO / "corpora" / "en"}, tokens: [1200, 2000]}}
    ask: [Summarise this document.]
request: {{max_tokens: 64, temperature: 0.7}}
telemetry: {{interval: 0.5s}}
slo: {{ttft_p95: 2s, decode_tok_s_p50: 5}}
seed: 7
"""
SLOTS = (
    "4 slots of 16,384 tokens: 4 conversations at once, each up to 16,384 tokens (prompt + reply)"
)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    tmp = tmp_path_factory.mktemp("llamacpp")
    (tmp / "s.yaml").write_text(SCENARIO)
    proc = subprocess.run(
        [sys.executable, "-m", "stress", "run", str(tmp / "s.yaml"), "--out", str(tmp / "out"),
         "--no-tui", "--fail-on", "never"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:]
    (found,) = [p for p in (tmp / "out").iterdir() if (p / "manifest.json").exists()]
    return found, proc.stdout


def test_the_probe_sums_the_slots_but_the_analysis_has_no_pool(run_dir: tuple[Path, str]) -> None:
    run = load_run(run_dir[0])
    assert run.manifest.probe["kv_pool_tokens"] == 65536  # the raw sum is still recorded
    assert server_kind(run) == "llamacpp"
    assert slot_layout(run) == SlotLayout(4, 16384)
    assert shared_pool_tokens(run) is None
    assert "server.kv_pool_tokens" not in fingerprint(run)
    assert "16384" in fingerprint(run)["server.slot_n_ctx"]


def test_the_report_states_slots_and_never_a_pool_of_users(run_dir: tuple[Path, str]) -> None:
    report = (run_dir[0] / "report.md").read_text()
    capacity = report[report.index("## Capacity") :].split("\n## ")[0]
    assert SLOTS in capacity
    assert "6 users on 4 slots" in capacity
    for wrong in ("users' conversations", "pool holds", "KV pool of", "65,536", "of the pool"):
        assert wrong not in capacity, wrong


def test_summary_json_carries_slots_not_a_pool(run_dir: tuple[Path, str]) -> None:
    summary = json.loads((run_dir[0] / "summary.json").read_text())
    cap, server = summary["capacity"], summary["server"]
    assert cap["kv_pool_tokens"] is None and cap["users_fit_pool"] is None
    assert (cap["slots"], cap["slot_context_tokens"]) == (4, 16384)
    assert server["kv_pool_tokens"] is None and "probe_kv_pool_tokens" not in server
    assert (server["slots"], server["slot_context_tokens"]) == (4, 16384)
    assert "pool" not in run_dir[1].split("capacity:")[1].split("\n")[0]


def test_the_live_view_shows_no_pool_on_llamacpp() -> None:
    from stress.tui.widgets.server import server_text

    live = {"dialect": "llamacpp", "kv_usage": 0.2, "kv_pool_tokens": None}
    assert "/" not in server_text(live, 15_000).plain.split("working set")[1].split("\n")[0]
    vllm = server_text({"dialect": "vllm", "kv_pool_tokens": 100_000}, 15_000).plain
    assert "/" in vllm.split("working set")[1].split("\n")[0]  # vLLM: against its pool


def _llamacpp_run(tmp: Path, users: int, kept: float) -> Path:
    """Rounds of ``users`` turns one after another on 4 slots; every follow-up could reuse
    1,000 tokens and found ``kept`` of them cached."""
    from tests.report.synth import manifest, request, write_run

    man = manifest("slots", users=users)
    man["probe"] = {"kind": "llamacpp", "slots": 4, "slot_n_ctx": [16384] * 4}
    reqs = [
        request(
            u,
            k,
            float((k * users + u) * 6),
            cached=0 if k == 1 else int(1000 * kept),
            reusable=0 if k == 1 else 1000,
        )
        for k in range(1, 5)
        for u in range(users)
    ]
    return write_run(tmp, man, reqs)


def test_turns_back_after_their_slot_was_taken_show_the_host_cache_tier(tmp_path: Path) -> None:
    """8 users on 4 slots, one turn at a time: 7 others run between a user's turns, so each
    follow-up's slot was taken and what it still found came from the host-RAM prompt cache;
    the report states that tier, its retention and that llama.cpp does not size it."""
    from stress.analysis.analyze import analyze
    from stress.analysis.server_kind import PastSlots, past_slots

    d = _llamacpp_run(tmp_path / "many", 8, 0.25)
    run = load_run(d)
    assert past_slots(run) == PastSlots(24, 0.25, 0, None)
    a = analyze(d)
    assert a.capacity.as_dict()["past_slots"]["retention"] == 0.25
    proc = subprocess.run(
        [sys.executable, "-m", "stress", "report", str(d)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    capacity = (d / "report.md").read_text().split("## Capacity")[1].split("\n## ")[0]
    assert "the host-RAM prompt cache is a tier of its own" in capacity
    assert "24 follow-up turns came back after turns of 4 or more other users" in capacity
    assert "the cache still held 25" in capacity


def test_with_no_more_users_than_slots_every_turn_kept_its_slot(tmp_path: Path) -> None:
    """3 users on 4 slots: two others between a user's turns, never a slot's worth."""
    from stress.analysis.server_kind import past_slots

    assert past_slots(load_run(_llamacpp_run(tmp_path / "few", 3, 1.0))) is None
