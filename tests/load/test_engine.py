"""The engine end to end against a scripted server: cache modes, growth, ceiling, limits."""

from __future__ import annotations

import asyncio
import random
import time
from array import array
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from stress.config.scenario import load_scenario
from stress.core.record import RequestRecord
from stress.core.tokens import get_tokenizer
from stress.live.state import Live
from stress.load.corpus import Corpus, Excerpt
from stress.load.engine import Engine, EngineResult
from stress.net.client import ChatClient
from stress.net.deadlines import TimeoutPolicy
from stress.net.reply import Reply
from stress.runtime.run import execute
from stress.store.recorder import Recorder
from tests.fakes import DONE, FakeServer, chunk, serve, stream, usage_chunk

ROOT = Path(__file__).resolve().parents[2]


def make(
    tmp_path: Path,
    url: str,
    *,
    cache: str = "per_user",
    users: int = 2,
    rounds: int = 3,
    ceiling: int = 20000,
    tokens: str = "[300, 500]",
    extra: str = "",
    paste_on: str = "every",
    start: str | None = None,
    warmup: int = 1,
    think: str = "{min: 0s, max: 0.01s}",
) -> Any:
    start_line = f"\n  start_tokens: {start}" if start is not None else ""
    p = tmp_path / "s.yaml"
    p.write_text(f"""\
name: engine_test
target: {{url: "{url}"}}
users: {{count: {users}, think_time: {think}}}
rounds: {rounds}
conversation:
  cache: {cache}
  ceiling_tokens: {ceiling}{start_line}
  turn:
    paste: {{corpus: {ROOT / "corpora" / "en"}, tokens: {tokens}}}
    paste_on: {paste_on}
    ask: ["Q1?", "Q2?"]
warmup: {{rounds: {warmup}}}
{extra}
""")
    return load_scenario(p)


async def reply_script(request: web.Request, body: dict[str, Any], n: int) -> web.StreamResponse:
    # usage.prompt_tokens is what a server would count: roughly 4 characters a token
    prompt = sum(len(m["content"]) for m in body["messages"]) // 4
    parts = [chunk(f"reply-{n}"), chunk(" done", finish="stop"), usage_chunk(prompt, 2), DONE]
    return await stream(request, parts)


def first_content(body: dict[str, Any]) -> str:
    return str(body["messages"][0]["content"])


def lines(d: Path) -> list[dict[str, Any]]:
    return [orjson.loads(x) for x in (d / "requests.jsonl").read_bytes().splitlines()]


async def test_per_user_prefixes_are_unique_and_history_grows(tmp_path: Path) -> None:
    async with serve(FakeServer(script=reply_script)) as server:
        outcome = await execute(make(tmp_path, server.url), tmp_path / "out")
    reqs = server.requests
    assert len(reqs) == 6
    by_user: dict[str, list[dict[str, Any]]] = {}
    for body in reqs:
        by_user.setdefault(first_content(body)[:40], []).append(body)
    assert len(by_user) == 2  # one opening per user, shared by none
    a, b = (first_content(v[0]) for v in by_user.values())
    assert a[1:11] != b[1:11]  # the opening marker (first tokens) is unique per user
    for bodies in by_user.values():
        sizes = [len(b["messages"]) for b in bodies]
        assert sizes == [2, 4, 6]  # system + user, then each reply is appended
        assert bodies[1]["messages"][2]["role"] == "assistant"
        assert bodies[1]["messages"][2]["content"].startswith("reply-")
    recs = lines(outcome.run_dir)
    assert [r["warmup"] for r in recs].count(True) == 2
    assert all(r["reusable_tokens"] > 0 for r in recs if r["turn"] > 1)
    assert all(b["stream"] and b["stream_options"] == {"include_usage": True} for b in reqs)


async def test_cold_mode_every_request_starts_differently(tmp_path: Path) -> None:
    async with serve(FakeServer(script=reply_script)) as server:
        await execute(make(tmp_path, server.url, cache="cold"), tmp_path / "out")
    starts = [first_content(b)[:30] for b in server.requests]
    assert len(starts) == 6 and len(set(starts)) == 6


async def test_shared_mode_shares_the_system_prompt_only(tmp_path: Path) -> None:
    async with serve(FakeServer(script=reply_script)) as server:
        await execute(make(tmp_path, server.url, cache="shared"), tmp_path / "out")
    systems = {first_content(b) for b in server.requests}
    assert len(systems) == 1
    first_user_msgs = {b["messages"][1]["content"][:12] for b in server.requests}
    assert len(first_user_msgs) == 2  # per-user content right after the shared prompt


async def test_ceiling_starts_a_new_conversation(tmp_path: Path) -> None:
    async with serve(FakeServer(script=reply_script)) as server:
        outcome = await execute(
            make(tmp_path, server.url, users=1, rounds=6, ceiling=1200, tokens="[400, 500]"),
            tmp_path / "out",
        )
    recs = lines(outcome.run_dir)
    assert max(r["conversation"] for r in recs) >= 2
    assert all(r["conversation_tokens"] <= 1200 for r in recs)
    assert {r["turn"] for r in recs if r["conversation"] == 2} >= {1}


async def test_paste_budgets_are_respected(tmp_path: Path) -> None:
    async with serve(FakeServer(script=reply_script)) as server:
        outcome = await execute(make(tmp_path, server.url, tokens="[300, 500]"), tmp_path / "out")
    pastes = [r["paste_tokens"] for r in lines(outcome.run_dir)]
    assert all(290 <= p <= 500 for p in pastes), pastes


async def test_reasoning_switch_and_extra_body_are_sent(tmp_path: Path) -> None:
    extra = "request: {reasoning: 'off', max_tokens: 77, extra_body: {top_k: 5}}"
    async with serve(FakeServer(script=reply_script)) as server:
        await execute(make(tmp_path, server.url, users=1, rounds=1, extra=extra), tmp_path / "o")
    [body] = server.requests
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["max_tokens"] == 77 and body["top_k"] == 5


async def test_error_rate_limit_stops_the_run(tmp_path: Path) -> None:
    async def failing(request: web.Request, body: dict[str, Any], n: int) -> web.StreamResponse:
        return web.json_response({"error": {"message": "down"}}, status=503)

    extra = "limits: {max_error_rate: 0.5, min_requests: 4}"
    async with serve(FakeServer(script=failing)) as server:
        outcome = await execute(
            make(tmp_path, server.url, rounds=50, extra=extra), tmp_path / "out"
        )
    assert outcome.exit_reason == "limit: max_error_rate"
    assert len(lines(outcome.run_dir)) < 20


@pytest.mark.parametrize("mode", ["per_user", "cold"])
async def test_reruns_do_not_share_prefixes(tmp_path: Path, mode: str) -> None:
    """The run nonce keeps a second run from hitting the first run's cache."""
    async with serve(FakeServer(script=reply_script)) as server:
        await execute(make(tmp_path, server.url, users=1, rounds=1, cache=mode), tmp_path / "a")
        await execute(make(tmp_path, server.url, users=1, rounds=1, cache=mode), tmp_path / "b")
    first, second = (first_content(b)[:40] for b in server.requests)
    assert first != second


async def test_phases_run_in_order_with_their_own_users_and_warmup(tmp_path: Path) -> None:
    extra = """phases:
  - {name: one, users: 1, rounds: 2}
  - {name: two, users: 2, rounds: 2, warmup_rounds: 0, repeat: 2}
"""
    async with serve(FakeServer(script=reply_script)) as server:
        outcome = await execute(make(tmp_path, server.url, extra=extra), tmp_path / "out")
    recs = lines(outcome.run_dir)
    assert [r["phase"] for r in recs].count("one") == 2
    assert {r["phase"] for r in recs} == {"one", "two#1", "two#2"}
    assert sum(r["warmup"] for r in recs if r["phase"] == "one") == 1  # inherits warmup: 1
    assert not any(r["warmup"] for r in recs if r["phase"].startswith("two"))
    assert len({r["user"] for r in recs if r["phase"] == "two#2"}) == 2
    # phases never share a prefix: every (phase, user) opens with its own marker
    openings = {first_content(b)[:12] for b in server.requests}
    assert len(openings) == 1 + 2 + 2
    summary = orjson.loads((outcome.run_dir / "summary.json").read_bytes())
    assert list(summary["phases"]) == ["one", "two#1", "two#2"]
    assert summary["phases"]["one"]["requests"] == 1
    assert summary["phases"]["one"]["warmup_requests"] == 1
    assert summary["phases"]["two#1"]["users"] == 2
    # every request is sent with its id, unique across phases, and recorded with it
    sent = [h["X-Request-ID"] for h in server.headers_seen]
    assert sorted(sent) == sorted(r["request_id"] for r in recs)
    assert len(set(sent)) == len(recs)
    for r in recs:
        assert r["request_id"].endswith(f"-{r['phase']}-u{r['user']}-r{r['round']}")


async def test_paste_on_first_turn_only(tmp_path: Path) -> None:
    async with serve(FakeServer(script=reply_script)) as server:
        sc = make(tmp_path, server.url, users=1, rounds=3, paste_on="first")
        outcome = await execute(sc, tmp_path / "out")
    recs = lines(outcome.run_dir)
    assert [r["paste_tokens"] > 0 for r in recs] == [True, False, False]
    assert [len(b["messages"][-1]["content"]) < 10 for b in server.requests] == [False, True, True]


async def test_paste_budgets_use_the_servers_token_count(tmp_path: Path) -> None:
    """A server whose tokenizer counts twice as many tokens: budgets are in its tokens."""
    async with serve(FakeServer(script=reply_script, tokenize_ratio=2.0)) as server:
        outcome = await execute(make(tmp_path, server.url, tokens="[400, 600]"), tmp_path / "o")
    manifest = orjson.loads((outcome.run_dir / "manifest.json").read_bytes())
    assert manifest["paste_scale"] == pytest.approx(0.5, rel=0.02)
    assert "server /tokenize" in manifest["token_budget"]
    pastes = [r["paste_tokens"] for r in lines(outcome.run_dir)]  # local (tiktoken) counts
    assert all(190 <= p <= 300 for p in pastes), pastes


def events(d: Path) -> list[dict[str, Any]]:
    return [orjson.loads(x) for x in (d / "events.jsonl").read_bytes().splitlines()]


LLAMA_CONTEXT_ERROR = {
    "error": {
        "code": 400,
        "message": "the request exceeds the available context size, try increasing it",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": 1079,
        "n_ctx": 1024,
    }
}


async def test_each_failed_empty_or_stalled_request_has_an_event(tmp_path: Path) -> None:
    async def mixed(request: web.Request, body: dict[str, Any], n: int) -> web.StreamResponse:
        if n == 2:
            return web.json_response({"error": {"message": "overloaded"}}, status=503)
        if n == 3:  # a reply with no content at all
            return await stream(request, [chunk(None, finish="stop"), usage_chunk(50, 0), DONE])
        if n == 4:
            return web.json_response(LLAMA_CONTEXT_ERROR, status=400)
        if n == 5:  # no first token within timeouts.first_token
            await asyncio.sleep(5)
        return await reply_script(request, body, n)

    extra = "timeouts: {first_token: 1s}"
    async with serve(FakeServer(script=mixed)) as server:
        outcome = await execute(
            make(tmp_path, server.url, users=1, rounds=6, extra=extra), tmp_path / "out"
        )
    evs = [e for e in events(outcome.run_dir) if e["source"] == "engine"]
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for e in evs:
        by_kind.setdefault(e["kind"], []).append(e)
    failed = by_kind["request_failed"]
    assert [f["data"] for f in failed] == [
        {"error_class": "http_5xx", "http_status": 503},
        {"error_class": "context_exceeded", "http_status": 400},
    ]  # the first-token timeout is a `stall` event alone, not also a failure
    assert failed[0]["message"].startswith("user 0 round 2: http_5xx (HTTP 503)")
    assert all(f["severity"] == "warning" and f["user"] == 0 for f in failed)
    [empty] = by_kind["empty_reply"]
    assert empty["data"] == {"finish_reason": "stop", "outcome": "empty"}
    assert empty["message"].startswith("user 0 round 3: ")
    [stall] = by_kind["stall"]
    assert stall["severity"] == "error" and stall["message"].startswith("user 0 round 5: ")
    assert stall["data"]["error_class"] == "first_token_timeout"
    [ctx] = by_kind["context_exceeded"]
    assert "1,079-token (server's count)" in ctx["message"]  # not stress's own estimate
    assert "round 1:" not in " ".join(e["message"] for e in evs)  # the good ones are quiet


class _BrokenClient(ChatClient):
    """A client that breaks its never-raise promise after the request went out."""

    async def chat(
        self,
        body: bytes,
        rec: RequestRecord,
        t_sched: float,
        token_times: array[float] | None = None,
    ) -> Reply:
        await super().chat(body, rec, t_sched, token_times)
        raise RuntimeError("bug in the client")


async def test_a_crashed_user_still_leaves_one_true_record(tmp_path: Path) -> None:
    """Engine and recorder for real against a real server; only the client is broken."""
    async with serve(FakeServer(script=reply_script)) as server:
        sc = make(tmp_path, server.url, users=1, rounds=3).scenario
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        recorder = Recorder(run_dir)
        client = _BrokenClient(
            server.url, {}, TimeoutPolicy(5, 5, 5, 30), limit=4, clock_t0=time.perf_counter()
        )
        engine = Engine(
            sc, client, recorder, Live(1), None, "fake-model", "nonce", time.perf_counter()
        )
        await engine.run()
        await client.close()
        recorder.close()
    [rec] = lines(run_dir)
    assert rec["outcome"] == "error" and rec["error_class"] == "client_error"
    assert rec["error"] == "RuntimeError: bug in the client"
    kinds = [e["kind"] for e in events(run_dir) if e["severity"] != "info"]
    assert kinds == ["request_failed", "user_crashed"]
    state = orjson.loads((run_dir / "state.json").read_bytes())
    assert (state["sent"], state["recorded"], state["in_flight_count"]) == (1, 1, 0)


class _OrderedRecorder(Recorder):
    """The real recorder, noting the order the engine calls it in."""

    def __init__(self, run_dir: Path) -> None:
        super().__init__(run_dir)
        self.calls: list[tuple[str, int, int]] = []

    def request_started(self, rec: RequestRecord) -> None:
        self.calls.append(("sent", rec.user, rec.round))
        super().request_started(rec)

    def write_request(self, rec: RequestRecord, token_times: array[float] | None = None) -> None:
        self.calls.append(("written", rec.user, rec.round))
        super().write_request(rec, token_times)


async def run_engine(
    sc: Any, url: str, recorder: Recorder, live: Live, corpus: Corpus | None = None
) -> tuple[Engine, EngineResult]:
    """One phase of the real engine with the real client against ``url``; the run clock
    starts here (records' times and ``Engine.now`` share it)."""
    t0 = time.perf_counter()
    client = ChatClient(url, {}, TimeoutPolicy(5, 5, 5, 30), limit=4, clock_t0=t0)
    engine = Engine(sc, client, recorder, live, corpus, "fake-model", "n", t0)
    result = await engine.run()
    await client.close()
    recorder.close()
    return engine, result


async def test_with_no_think_time_the_next_request_leaves_before_the_last_is_written(
    tmp_path: Path,
) -> None:
    """An ``ok`` request's record, events and live state are written once the loop turns:
    with no think time the user's next request is already out, and at the run's end every
    record is on disk and the live state agrees (no request left in flight)."""
    async with serve(FakeServer(script=reply_script)) as server:
        sc = make(tmp_path, server.url, users=2, rounds=4, think="{min: 0s, max: 0s}").scenario
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        recorder = _OrderedRecorder(run_dir)
        live = Live(2)
        engine, result = await run_engine(sc, server.url, recorder, live)
    calls = recorder.calls
    for u in (0, 1):
        for r in (1, 2, 3):
            assert calls.index(("sent", u, r + 1)) < calls.index(("written", u, r)), calls
    assert sorted(c for c in calls if c[0] == "written") == sorted(
        ("written", u, r) for u in (0, 1) for r in (1, 2, 3, 4)
    )
    assert result.requests == 8 and len(lines(run_dir)) == 8
    state = orjson.loads((run_dir / "state.json").read_bytes())
    assert (state["sent"], state["recorded"], state["in_flight_count"]) == (8, 8, 0)
    snap = live.snapshot(engine.now())
    assert snap.in_flight == 0 and snap.outcomes["ok"] == sum(snap.outcomes.values()) == 8
    assert [(row.round, row.ok) for row in snap.users] == [(4, 4), (4, 4)]


class _FailingRecorder(Recorder):
    """The real recorder with a bug planted: user 1's second record cannot be written."""

    def write_request(self, rec: RequestRecord, token_times: array[float] | None = None) -> None:
        if (rec.user, rec.round) == (1, 2):
            self._in_flight.pop(id(rec), None)
            raise TypeError("planted: this record cannot be serialised")
        super().write_request(rec, token_times)


class _FailingLive(Live):
    """The real live state with a bug planted: user 0's third record cannot be shown."""

    def on_record(self, rec: RequestRecord, t_end: float) -> None:
        if (rec.user, rec.round) == (0, 3):
            raise KeyError("planted")
        super().on_record(rec, t_end)


async def test_a_record_that_cannot_be_written_is_an_event_and_the_others_are_kept(
    tmp_path: Path,
) -> None:
    """Records are written when the loop next turns, from a callback no user's task would
    see fail: a bug writing one request (its line, or its live state) is one
    ``record_failed`` event naming what failed, the records after it in the same turn are
    still written, and both users go on to their last round (no ``user_crashed``)."""
    async with serve(FakeServer(script=reply_script)) as server:
        sc = make(tmp_path, server.url, users=2, rounds=4, think="{min: 0s, max: 0s}").scenario
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        live = _FailingLive(2)
        engine, result = await run_engine(sc, server.url, _FailingRecorder(run_dir), live)
    assert result.requests == 8 and len(server.requests) == 8
    written = sorted((r["user"], r["round"]) for r in lines(run_dir))
    assert written == sorted((u, r) for u in (0, 1) for r in (1, 2, 3, 4) if (u, r) != (1, 2))
    failed = sorted(
        (e for e in events(run_dir) if e["severity"] != "info"), key=lambda e: e["user"]
    )
    got = [(e["kind"], e["user"], e["data"]["round"], e["data"]["step"]) for e in failed]
    assert got == [("record_failed", 0, 3, "live"), ("record_failed", 1, 2, "record")]
    live_msg, record_msg = failed[0]["message"], failed[1]["message"]
    assert "failed counting the request in the live state (its record and events" in live_msg
    assert record_msg.endswith(
        "failed writing the request's record: TypeError: planted: this record cannot be serialised"
    )
    assert [row.round for row in live.snapshot(engine.now()).users] == [4, 4]


class _TimedCorpus(Corpus):
    """The real corpus, noting when each paste was drawn (perf time) and its text."""

    drawn: list[tuple[float, str]]

    def excerpt(self, rng: random.Random, lo: int, hi: int) -> Excerpt:
        e = super().excerpt(rng, lo, hi)
        self.drawn.append((time.perf_counter(), e.text))
        return e


async def slow_reply(request: web.Request, body: dict[str, Any], n: int) -> web.StreamResponse:
    prompt = sum(len(m["content"]) for m in body["messages"]) // 4
    parts = [chunk(f"reply-{n}"), chunk(" done", finish="stop"), usage_chunk(prompt, 2), DONE]
    return await stream(request, parts, delay=0.05)  # ~0.2 s a reply


async def test_the_next_paste_is_drawn_while_the_reply_streams(tmp_path: Path) -> None:
    """With no think time, a user's next paste is drawn once its request went out, while
    the reply streams, not between the reply's end and the next request; each user's
    pastes are its own stream's draws in order (the same text on every run with the seed),
    and nothing is drawn for a turn that will not come."""
    async with serve(FakeServer(script=slow_reply)) as server:
        sc = make(tmp_path, server.url, users=2, rounds=3, think="{min: 0s, max: 0s}").scenario
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        corpus = _TimedCorpus(ROOT / "corpora" / "en")
        corpus.drawn = []
        engine, _ = await run_engine(sc, server.url, Recorder(run_dir), Live(2), corpus)
    when = {text: t - engine.t0 for t, text in corpus.drawn}
    assert len(corpus.drawn) == len(when) == 6  # three turns a user, no draw for a fourth
    recs = {(r["user"], r["round"]): r for r in lines(run_dir)}
    sent = [b["messages"][-1]["content"].rsplit("\n\n", 1)[0] for b in server.requests]
    by_user: dict[int, list[str]] = {}
    for body, paste in zip(server.requests, sent, strict=True):
        u = int(first_content(body).split(" user ")[1].split()[0])
        by_user.setdefault(u, []).append(paste)
    assert sorted(by_user) == [0, 1]
    for u, pastes in by_user.items():
        own = random.Random(f"{sc.seed}:{u}:paste")
        budget = sc.conversation.turn.paste.tokens
        assert pastes == [Corpus.excerpt(corpus, own, *budget).text for _ in range(3)]
        for rnd in (2, 3):  # drawn before the reply of the turn before it ended
            assert when[pastes[rnd - 1]] < recs[(u, rnd - 1)]["t_last_byte"], (u, rnd)
            assert when[pastes[rnd - 1]] > recs[(u, rnd - 1)]["t_start"], (u, rnd)


# --- issue 14: conversations that start at a given length --------------------------------


def history_tokens(body: dict[str, Any]) -> int:
    """Local tokens of the messages between the system prompt and the new turn."""
    tok = get_tokenizer()
    return sum(tok.count(m["content"]) + 4 for m in body["messages"][1:-1])


async def test_start_tokens_opens_the_first_conversation_with_unique_history(
    tmp_path: Path,
) -> None:
    async with serve(FakeServer(script=reply_script)) as server:
        sc = make(tmp_path, server.url, users=2, rounds=3, start="1500", warmup=0)
        outcome = await execute(sc, tmp_path / "out")
    by_user: dict[str, list[dict[str, Any]]] = {}
    for body in server.requests:
        by_user.setdefault(first_content(body)[:40], []).append(body)
    firsts = [bodies[0] for bodies in by_user.values()]
    for bodies in by_user.values():
        sizes = [len(b["messages"]) for b in bodies]
        assert sizes[0] > 4 and sizes[1:] == [sizes[0] + 2, sizes[0] + 4]  # then it grows
        assert 1485 <= history_tokens(bodies[0]) <= 1520
        roles = [m["role"] for m in bodies[0]["messages"]]
        assert roles[-2:] == ["assistant", "user"]
    a, b = ([m["content"] for m in body["messages"][1:-1]] for body in firsts)
    assert not set(a) & set(b)  # no turn of one user's history is in the other's
    recs = lines(outcome.run_dir)
    for r in recs:
        if r["turn"] == 1:
            assert r["warmup"] and r["reusable_tokens"] == 0
            assert r["prefilled_tokens"] == pytest.approx(1500, rel=0.02)
            assert r["conversation_tokens"] > 1500 + 300
        else:
            assert not r["warmup"] and r["prefilled_tokens"] == 0
            assert r["reusable_tokens"] > 1500
    [built] = [e for e in events(outcome.run_dir) if e["kind"] == "histories_built"]
    assert built["data"]["users"] == 2
    summary = orjson.loads((outcome.run_dir / "summary.json").read_bytes())
    assert summary["overall"]["requests"] == 4  # the two pre-filled turns are warm-up


async def test_conversations_after_the_ceiling_start_empty(tmp_path: Path) -> None:
    async with serve(FakeServer(script=reply_script)) as server:
        sc = make(tmp_path, server.url, users=1, rounds=4, ceiling=2200, start="1500", warmup=0)
        outcome = await execute(sc, tmp_path / "out")
    recs = lines(outcome.run_dir)
    assert [r["conversation"] for r in recs][:2] == [1, 2]
    assert [r["prefilled_tokens"] > 0 for r in recs] == [True, False, False, False]
    assert [r["warmup"] for r in recs] == [True, False, False, False]
    assert len(server.requests[1]["messages"]) == 2  # system + the first turn: empty


async def test_phases_sweep_start_tokens_in_the_servers_tokens(tmp_path: Path) -> None:
    """A server counting twice as many tokens: start_tokens is in its tokens, as pastes."""
    extra = """phases:
  - {name: empty, users: 1, rounds: 2, start_tokens: 0}
  - {name: long, users: 2, rounds: 2}
"""
    async with serve(FakeServer(script=reply_script, tokenize_ratio=2.0)) as server:
        sc = make(tmp_path, server.url, start="[1200, 1200]", warmup=0, extra=extra)
        outcome = await execute(sc, tmp_path / "out")
    recs = lines(outcome.run_dir)
    empty = [r for r in recs if r["phase"] == "empty"]
    assert len(empty) == 2 and not any(r["warmup"] or r["prefilled_tokens"] for r in empty)
    long = [r for r in recs if r["phase"] == "long"]
    assert [r["turn"] for r in long if r["warmup"]] == [1, 1]
    assert all(r["prefilled_tokens"] == pytest.approx(1200, rel=0.03) for r in long if r["warmup"])
    firsts: dict[str, dict[str, Any]] = {}
    for body in server.requests:
        if len(body["messages"]) > 4:
            firsts.setdefault(first_content(body)[:40], body)
    histories = [history_tokens(b) for b in firsts.values()]
    assert len(histories) == 2 and all(580 <= h <= 610 for h in histories)  # local tokens


async def test_a_turn_tokenizes_its_paste_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tokenizing is the hot path's largest cost (~65 us per thousand characters; issue 15's
    benchmark: 320 of 360 us per request). Once the run is going, a turn tokenizes the
    excerpt it builds and nothing it already counted: not the message again for the
    estimate, not the message and reply again for the history (the server's usage gives
    the reply's count). The real tokenizer is wrapped, not replaced: every call still runs."""
    tok = get_tokenizer()
    seen: list[int] = []
    sending = [False]
    for name in ("count", "encode"):
        real = getattr(tok, name)

        def spy(text: str, _real: Any = real) -> Any:
            if sending[0]:
                seen.append(len(text))
            return _real(text)

        monkeypatch.setattr(tok, name, spy)

    async def script(request: web.Request, body: dict[str, Any], n: int) -> web.StreamResponse:
        sending[0] = True  # the corpus is loaded: count from here on
        return await reply_script(request, body, n)

    async with serve(FakeServer(script=script)) as server:
        await execute(make(tmp_path, server.url, rounds=8, tokens="[800, 1000]"), tmp_path / "out")
    pasted = [len(b["messages"][-1]["content"]) for b in server.requests]
    per_turn = sum(seen) / len(server.requests)
    # the excerpt is measured once as a whole (a few turns twice, to top it up)
    assert per_turn <= 1.5 * (sum(pasted) / len(pasted)), (per_turn, sum(pasted) / len(pasted))
