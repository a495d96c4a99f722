"""Pre-built history (``conversation.start_tokens``): its size, its cost, its uniqueness."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from stress.core.tokens import count_tokens, get_tokenizer
from stress.load.conversation import MESSAGE_OVERHEAD, Conversation, build_history
from stress.load.corpus import Corpus

ROOT = Path(__file__).resolve().parents[2]
ASKS = ["Summarise the main points.", "What is the key argument?"]


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return Corpus(ROOT / "corpora" / "en")


def exact_tokens(conv: Conversation) -> int:
    tok = get_tokenizer()
    return sum(tok.count(m["content"]) + MESSAGE_OVERHEAD for m in conv.messages[1:])


@pytest.mark.parametrize("target", [40, 3000, 30000])
def test_history_is_about_the_asked_length_and_its_count_holds(corpus: Corpus, target: int) -> None:
    history = build_history(corpus, random.Random(1), target, (500, 1500), ASKS, 300)
    assert target - min(32, target // 100) <= history.tokens <= target + 40
    conv = Conversation(0, 1, "per_user", "nonce", "You help.")
    conv.prefill(history)
    # the count made once at build time is the real length, within the joins' rounding
    assert exact_tokens(conv) == pytest.approx(history.tokens, rel=0.02, abs=8)
    roles = [m["role"] for m in conv.messages]
    assert roles[0] == "system" and roles[-1] == "assistant"
    assert roles[1:] == ["user", "assistant"] * len(history.turns)
    assert all(q in ASKS and reply for _, q, reply in history.turns)
    assert all(len(get_tokenizer().encode(r)) <= 300 + 2 for _, _, r in history.turns)


def test_prefilled_conversation_sends_it_as_its_first_turn(corpus: Corpus) -> None:
    history = build_history(corpus, random.Random(2), 2000, (300, 600), ASKS, 200)
    conv = Conversation(3, 1, "per_user", "nonce", "You help.")
    before = conv.tokens_est
    conv.prefill(history)
    assert conv.turns == 0 and conv.reusable_tokens() == 0  # the server has seen none of it
    assert conv.prefilled_tokens == history.tokens and conv.tokens_est == before + history.tokens
    msgs = conv.request_messages(conv.user_message("doc", "Q?"))
    assert len(msgs) == 2 + 2 * len(history.turns) and msgs[-1]["content"] == "doc\n\nQ?"
    conv.commit_turn("doc\n\nQ?", "answer", "", prompt_tokens=2100)
    assert conv.turns == 1 and conv.reusable_tokens() > 2000


def test_histories_are_unique_per_user_and_tagged_once_when_shared(corpus: Corpus) -> None:
    a = build_history(corpus, random.Random("0:0:start"), 1500, (300, 600), ASKS, 200)
    b = build_history(corpus, random.Random("0:1:start"), 1500, (300, 600), ASKS, 200)
    assert a.turns != b.turns
    conv = Conversation(7, 1, "shared", "nonce", "You help.")
    conv.prefill(a)
    tagged = [m for m in conv.messages if m["content"].startswith("[user u007-c001]")]
    assert tagged == [conv.messages[1]]  # the first user message only
    assert not conv.user_message(None, "Q?").startswith("[user")


START_SCENARIO = """\
name: start_e2e
target: {{url: sim, sim: {{time_scale: 50}}}}
users: {{count: 3, think_time: {{min: 0s, max: 0.1s}}}}
rounds: 3
conversation:
  ceiling_tokens: 20000
  start_tokens: 8000
  turn:
    paste: {{corpus: {corpus}, tokens: [200, 400]}}
    ask: ["Summarise this.", "What is the key point?"]
request: {{max_tokens: 20}}
"""


@pytest.mark.slow
def test_cli_run_on_the_simulator_starts_each_user_at_8000_tokens(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(START_SCENARIO.format(corpus=ROOT / "corpora" / "en"))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "stress", "run", str(path), "--target", "sim", "--no-tui"]
    proc = subprocess.run(
        [*cmd, "--out", str(out), "--fail-on", "never"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    [run] = [p for p in out.iterdir() if p.is_dir()]
    recs = [orjson.loads(x) for x in (run / "requests.jsonl").read_bytes().splitlines() if x]
    assert {r["outcome"] for r in recs} == {"ok"}
    users = sorted({r["user"] for r in recs})
    assert users == [0, 1, 2]
    firsts = []
    for u in users:
        first, second, third = sorted((r for r in recs if r["user"] == u), key=lambda r: r["round"])
        assert (first["turn"], second["turn"], third["turn"]) == (1, 2, 3)
        assert first["prompt_tokens"] >= 8000 and first["prompt_source"] != "estimate"
        assert first["warmup"] and first["prefilled_tokens"] >= 7900
        assert first["cached_tokens"] < 100  # nobody else's history was cached for this user
        assert not second["warmup"] and second["prefilled_tokens"] == 0
        # the simulator caches prefixes: the second turn reuses the whole pre-filled prompt
        assert second["cached_tokens"] >= first["prompt_tokens"] - 32
        assert second["reusable_tokens"] >= first["prompt_tokens"]
        firsts.append(first["prompt_tokens"])
    assert len(set(firsts)) == 3  # histories drawn per user, not one history for all
    summary = orjson.loads((run / "summary.json").read_bytes())
    assert summary["overall"]["requests"] == 6  # the pre-filled turns are warm-up


def test_a_reply_the_usage_undercounts_is_counted_as_it_is() -> None:
    """The server's completion_tokens sizes the kept reply, unless the text holds far more
    than that many tokens can (a 262 KB reply under a usage of 10 tokens kept the history
    'small' past its ceiling, and every later prompt carried 60k tokens)."""
    conv = Conversation(0, 1, "per_user", "nonce", "You help.")
    conv.commit_turn("Q?", "word " * 40, "", prompt_tokens=20, user_tokens=2, reply_tokens=40)
    honest = conv.tokens_est
    conv.commit_turn("Q?", "x" * 262_144, "", prompt_tokens=80, user_tokens=2, reply_tokens=10)
    assert conv.last_reply_tokens > 10_000 and conv.tokens_est - honest > 10_000


@pytest.mark.parametrize(
    "prompt",
    [
        "You help.",
        "",
        " starts with a space",
        "\nstarts with a newline",
        "Ünïcödé: 你好, мир — and 12345 numbers.",
        "'s a contraction first",
        "--- a rule\n\nThen two paragraphs.",
    ],
)
@pytest.mark.parametrize("cache", ["per_user", "shared", "cold"])
def test_the_system_message_count_is_exact(prompt: str, cache: str) -> None:
    # counted as marker + the prompt's count (once per run): must equal the whole count
    for user, index in [(0, 1), (7, 3), (123, 45)]:
        conv = Conversation(user, index, cache, "a1b2c3d4e5", prompt)  # type: ignore[arg-type]
        assert conv.tokens_est == count_tokens(conv.messages[0]["content"]) + MESSAGE_OVERHEAD


def test_digits_never_change_a_count() -> None:
    """What ``_marker_tokens`` relies on: every group of one to three digits is one token,
    so a marker's count depends on its shape only (the digits read as 0)."""
    from stress.core.tokens import get_tokenizer
    from stress.load.conversation import _marker_tokens

    tok = get_tokenizer()
    groups = [str(i).zfill(n) for n in (1, 2, 3) for i in range(10**n)]
    assert [g for g in groups if len(tok.encode(g)) != 1] == []
    rng = random.Random(7)
    for _ in range(2000):
        user, index = rng.randrange(10 ** rng.randint(1, 5)), rng.randrange(10 ** rng.randint(1, 6))
        conv = Conversation(user, index, "per_user", "n0nce", "")
        marker = conv.messages[0]["content"]
        assert _marker_tokens(marker) == count_tokens(marker), marker
