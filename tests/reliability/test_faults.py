"""The fault schedule: hostile servers and every simulator fault kind, through the real CLI.

Each case runs ``stress run --no-tui`` against a server that really misbehaves on loopback
and checks what the issue promises: the exit code, one truthful line per request the server
received, the right error class, no traceback, the run's own count (state.json) and an
honest verdict.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from stress.config.sim import FAULT_KINDS
from tests.reliability.harness import (
    assert_accounted,
    assert_sound_run,
    by_start,
    run_cli,
    verdict_status,
    write_scenario,
)
from tests.reliability.hostile import GIANT_BYTES, hostile

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def classes(records: list[dict[str, Any]]) -> list[str | None]:
    return [r.get("error_class") for r in by_start(records)]


def failed_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e.get("kind") == "request_failed"]


# --- a dropped keep-alive connection (the worst bug: fake ok, dead users) ---------------


async def test_idle_connection_closed_by_server_is_resent_once(tmp_path: Path, out: Path) -> None:
    """The server closes a used keep-alive connection as the next request arrives (what
    llama-server's idle timeout does in a race): the request is re-sent once on a fresh
    connection, recorded ok with ``reconnects`` 1, and every user goes on to its last round."""
    plan = write_scenario(tmp_path, users=2, rounds=3)
    async with hostile("close_idle") as server:
        result = await run_cli(plan, out, server.url)
    assert_sound_run(result)
    recs = result.records()
    assert server.dropped >= 1, "the server never dropped a pooled connection"
    assert server.received == len(recs), f"server got {server.received}, lines {len(recs)}"
    assert [r["outcome"] for r in recs] == ["ok"] * 6, classes(recs)
    assert sorted(r["user"] for r in recs) == [0, 0, 0, 1, 1, 1], "a user stopped early"
    assert sum(r["reconnects"] for r in recs) == server.dropped
    assert all(r["reconnects"] in (0, 1) for r in recs)
    assert_accounted(result)


async def test_connection_reuse_off_works(tmp_path: Path, out: Path) -> None:
    """``connection: {reuse: false}`` (documented) runs: a fresh connection per request."""
    plan = write_scenario(tmp_path, users=2, rounds=2, reuse=False)
    async with hostile("close_idle") as server:
        result = await run_cli(plan, out, server.url)
    assert_sound_run(result)
    recs = result.records()
    assert server.received == len(recs) == 4
    assert server.dropped == 0, "a request went out on a reused connection"
    assert [r["outcome"] for r in recs] == ["ok"] * 4
    assert all(r["reconnects"] == 0 for r in recs)
    assert_accounted(result)


async def test_server_restart_mid_run_users_go_on(tmp_path: Path, out: Path) -> None:
    """The server dies with a request in prefill and comes back on the same port: the lost
    request is a truthful error (or was re-sent), requests while it is down are ``connect``
    errors, and the user goes on with ok replies once it is back."""
    down_s = 1.0
    plan = write_scenario(tmp_path, rounds=None, duration=down_s + 3.0, think_s=0.2)
    async with hostile("restart", down_s=down_s, restart_on=2) as server:
        result = await run_cli(plan, out, server.url)
    assert_sound_run(result)
    recs = by_start(result.records())
    assert server.restarts == 1
    non_connect = [r for r in recs if r["error_class"] != "connect"]
    # every request the server answered has its line; the one it died on may have been
    # re-sent (then its line is the re-send's)
    assert server.received - server.lost_to_restart <= len(non_connect) <= server.received
    assert {r["error_class"] for r in recs} & {"reset", "connect"}, classes(recs)
    assert recs[-1]["outcome"] == "ok", f"the user did not recover: {classes(recs)}"
    assert verdict_status(result.dir) != "PASS"
    assert_accounted(result)


# --- broken streams ---------------------------------------------------------------------


async def test_reset_mid_stream_is_a_reset(tmp_path: Path, out: Path) -> None:
    plan = write_scenario(tmp_path, rounds=2)
    async with hostile("reset_mid_stream") as server:
        result = await run_cli(plan, out, server.url)
    assert_sound_run(result)
    recs = result.records()
    assert server.received == len(recs) == 2
    assert classes(recs) == ["reset", "reset"]
    assert all(r["http_status"] == 200 and r["chunks_content"] == 2 for r in recs)
    assert len(failed_events(result.events())) == 2, "no request_failed event per error"
    assert verdict_status(result.dir) == "FAIL"
    assert_accounted(result)


async def test_slow_headers_is_a_first_token_timeout(tmp_path: Path, out: Path) -> None:
    first_token = 1.5
    plan = write_scenario(tmp_path, rounds=1, first_token_s=first_token)
    async with hostile("slow_headers", pause_s=first_token + 3.0) as server:
        result = await run_cli(plan, out, server.url)
    assert_sound_run(result)
    recs = result.records()
    assert server.received == len(recs) == 1
    assert classes(recs) == ["first_token_timeout"]
    assert any(e.get("kind") == "stall" for e in result.events()), "no stall event"
    assert_accounted(result)


async def test_silence_after_the_first_token_is_a_stall(tmp_path: Path, out: Path) -> None:
    """The watchdog re-arms on every byte: a silence longer than ``timeouts.stall`` after the
    first token is a stall, not an ok (the issue: 200 s of silence recorded ok)."""
    stall = 1.5
    plan = write_scenario(tmp_path, rounds=1, stall_s=stall, first_token_s=8.0)
    async with hostile("stall_mid_stream", pause_s=stall + 3.5) as server:
        result = await run_cli(plan, out, server.url)
    assert_sound_run(result)
    recs = result.records()
    assert server.received == len(recs) == 1
    assert classes(recs) == ["stall"]
    assert recs[0]["ttft_s"] is not None and recs[0]["chunks_content"] == 1
    stalls = [e for e in result.events() if e.get("kind") == "stall"]
    assert stalls, "no stall event"
    assert result.summary()["overall"]["error_classes"].get("stall") == 1
    assert_accounted(result)


@pytest.mark.parametrize("mode", ["garbage", "bad_status_line", "html_200"])
async def test_not_http_or_not_sse_is_a_protocol_error(
    tmp_path: Path, out: Path, mode: Any
) -> None:
    """Random bytes, a bad status line, an HTML page with status 200: ``protocol``, never
    ``connect`` (the server was reached) nor ``truncated``."""
    plan = write_scenario(tmp_path, rounds=2)
    async with hostile(mode) as server:
        result = await run_cli(plan, out, server.url)
    assert_sound_run(result)
    recs = result.records()
    assert server.received == len(recs) == 2
    assert classes(recs) == ["protocol", "protocol"]
    if mode == "html_200":
        assert all(r["http_status"] == 200 for r in recs)
    assert verdict_status(result.dir) == "FAIL"
    assert_accounted(result)


async def test_cr_only_line_endings_are_valid_sse(tmp_path: Path, out: Path) -> None:
    plan = write_scenario(tmp_path, rounds=2)
    async with hostile("cr_only", tokens=4) as server:
        result = await run_cli(plan, out, server.url)
    assert_sound_run(result)
    recs = result.records()
    assert server.received == len(recs) == 2
    assert [r["outcome"] for r in recs] == ["ok", "ok"], classes(recs)
    assert all(r["chunks_content"] == 4 and r["finish_reason"] == "stop" for r in recs)
    assert_accounted(result)


async def test_empty_reply_is_not_a_success(tmp_path: Path, out: Path) -> None:
    """HTTP 200 with no text: ``empty``, an ``empty_reply`` event each, never PASS."""
    plan = write_scenario(tmp_path, rounds=2)
    async with hostile("empty") as server:
        result = await run_cli(plan, out, server.url)
    assert_sound_run(result)
    recs = result.records()
    assert server.received == len(recs) == 2
    assert [r["outcome"] for r in recs] == ["empty", "empty"]
    empties = [e for e in result.events() if e.get("kind") == "empty_reply"]
    assert len(empties) == 2, "no empty_reply event per empty reply"
    assert verdict_status(result.dir) != "PASS"
    assert_accounted(result)


async def test_giant_line_does_not_block_the_neighbour(tmp_path: Path, out: Path) -> None:
    """One 10 MB data line on one stream; the other user's streams, slow and steady, must
    keep being answered (the issue: a quadratic parser stalled the loop 15-22 s and a
    neighbour timed out)."""
    plan = write_scenario(tmp_path, users=2, rounds=3, first_token_s=5.0, stall_s=3.0)
    async with hostile("giant_line", tokens=10, stream_delay_s=0.05) as server:
        result = await run_cli(plan, out, server.url)
    assert_sound_run(result)
    recs = result.records()
    assert server.received == len(recs) == 6
    giant = [r for r in recs if r["content_chars"] >= GIANT_BYTES]
    giant += [r for r in recs if r["error_class"] == "malformed_stream"]
    assert len(giant) == 1, f"the giant line's request: {classes(recs)}"
    rest = [r for r in recs if r is not giant[0]]
    assert [r["outcome"] for r in rest] == ["ok"] * 5, classes(rest)
    assert_accounted(result)


async def test_redirect_is_not_followed_and_leaks_no_credentials(tmp_path: Path, out: Path) -> None:
    password = "pw-" + "REDIRECT-7c1d9e"  # built at run time: secret scanners stay quiet
    plan = write_scenario(tmp_path, rounds=2)
    async with hostile("ok", host="127.0.0.2") as other:
        location = f"http://stressuser:{password}@127.0.0.2:{other.port}/v1/chat/completions"
        async with hostile("redirect", redirect_to=location) as server:
            result = await run_cli(plan, out, server.url)
    assert_sound_run(result)
    recs = result.records()
    assert other.received == 0, "the redirect was followed to another host"
    assert server.received == len(recs) == 2
    assert classes(recs) == ["redirect", "redirect"]
    assert all(r["http_status"] == 307 for r in recs)
    for f in (p for p in result.dir.rglob("*") if p.is_file()):
        assert password.encode() not in f.read_bytes(), f"credentials leaked into {f.name}"
    assert password not in result.output
    assert_accounted(result)


async def test_usage_numbers_out_of_range_are_rejected(tmp_path: Path, out: Path) -> None:
    """2**64-1, 2**70, negative and non-integer usage counts: ignored, the record stays
    valid JSON, the user goes on, and no figure of the summary is negative or over 100 %
    cached."""
    plan = write_scenario(tmp_path, rounds=3)
    async with hostile("overflow_usage") as server:
        result = await run_cli(plan, out, server.url)
    assert_sound_run(result)
    recs = result.records()
    assert server.received == len(recs) == 3, "a record was dropped"
    assert [r["outcome"] for r in recs] == ["ok"] * 3, classes(recs)
    for r in recs:
        for key in ("prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens"):
            v = r.get(key)
            assert v is None or (isinstance(v, int) and 0 <= v < 2**53), f"{key}={v!r}"
        if r.get("cached_tokens") is not None and r.get("prompt_tokens"):
            assert r["cached_tokens"] <= r["prompt_tokens"], r
    summary = result.summary()
    assert not list(negatives(summary)), f"negative figures: {list(negatives(summary))}"
    share = summary["overall"].get("cached_share")
    assert share is None or 0 <= share <= 1, f"cached share {share}"
    assert_accounted(result)


def negatives(obj: Any, path: str = "") -> Any:
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from negatives(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from negatives(v, f"{path}[{i}]")
    elif isinstance(obj, int | float) and not isinstance(obj, bool) and obj < 0:
        yield path, obj


# --- the simulator's fault kinds --------------------------------------------------------

# kind -> (extra rule fields, what the faulted request's record shows)
SIM_FAULTS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "http_500": ({}, {"error_class": "http_5xx", "http_status": 500}),
    "http_503": ({}, {"error_class": "http_5xx", "http_status": 503}),
    "http_429": ({}, {"error_class": "http_429", "http_status": 429, "retry_after_s": 1}),
    "reset": ({}, {"error_class": "reset"}),
    "stall": ({"duration_s": 6.0}, {"error_class": "stall"}),
    "malformed_chunk": ({}, {"error_class": "malformed_stream"}),
    "no_done": ({}, {"outcome": "truncated", "error_class": None}),
    "slow_headers": ({"duration_s": 6.0}, {"error_class": "first_token_timeout"}),
    "huge_chunk": ({"size_bytes": 262_144}, {"outcome": "ok"}),
    "wrong_content_type": ({}, {"error_class": "protocol", "http_status": 200}),
    "hang": ({"duration_s": 0.0}, {"error_class": "first_token_timeout"}),
    "pause": ({"duration_s": 0.5}, {"outcome": "ok", "error_class": None}),
}
"""Every kind but ``restart`` (its own test: the downtime takes an unknown number of
requests), in one schedule."""


def test_every_simulator_fault_kind_is_in_the_schedule() -> None:
    assert set(SIM_FAULTS) | {"restart"} == set(FAULT_KINDS)


@pytest.mark.timeout(600)
async def test_simulator_fault_schedule_is_accounted_for(tmp_path: Path, out: Path) -> None:
    """One user; every other request gets the next fault kind, the ones between are ok.
    Each faulted request's line shows its fault; every mismatch is listed at once."""
    kinds = sorted(SIM_FAULTS)
    faults = [
        {"kind": kind, "on_requests": [2 * i + 2], **SIM_FAULTS[kind][0]}
        for i, kind in enumerate(kinds)
    ]
    sim = {"faults": faults, "seed": 1, "reply_tokens_min": 6, "reply_tokens_max": 10}
    rounds = 2 * len(kinds) + 1
    plan = write_scenario(
        tmp_path, rounds=rounds, sim=sim, first_token_s=2.0, stall_s=2.0, max_tokens=10
    )
    result = await run_cli(plan, out, "sim")
    assert_sound_run(result)
    recs = by_start(result.records())
    assert len(recs) == rounds, classes(recs)
    wrong: list[str] = []
    for i, kind in enumerate(kinds):
        faulted = recs[2 * i + 1]
        for key, want in SIM_FAULTS[kind][1].items():
            if faulted.get(key) != want:
                wrong.append(f"{kind}: {key} {faulted.get(key)!r} != {want!r}")
        if kind == "huge_chunk" and faulted["content_chars"] < 262_144:
            wrong.append(f"huge_chunk: content_chars {faulted['content_chars']}")
    wrong += [
        f"request {i + 1} between faults: {r['outcome']} {r['error_class']}"
        for i, r in enumerate(recs)
        if i % 2 == 0 and r["outcome"] != "ok"
    ]
    assert not wrong, wrong
    assert verdict_status(result.dir) == "FAIL"
    assert_accounted(result)


async def test_simulator_restart_users_go_on(tmp_path: Path, out: Path) -> None:
    """The simulator restarts on the second request (every connection dropped, the port
    refused for a second): truthful errors while it is down, then ok again."""
    rule = {"kind": "restart", "on_requests": [2], "duration_s": 1.0}
    sim = {"faults": [rule], "seed": 1, "reply_tokens_min": 6, "reply_tokens_max": 10}
    plan = write_scenario(tmp_path, rounds=None, duration=4.0, think_s=0.2, sim=sim, max_tokens=10)
    result = await run_cli(plan, out, "sim")
    assert_sound_run(result)
    recs = by_start(result.records())
    assert {r["error_class"] for r in recs} & {"reset", "connect"}, classes(recs)
    assert recs[-1]["outcome"] == "ok", f"the user did not recover: {classes(recs)}"
    manifest = orjson.loads((result.dir / "manifest.json").read_bytes())
    assert manifest.get("exit_reason") == "duration", manifest.get("exit_reason")
    assert_accounted(result)
