"""Signals during a run: Ctrl-C once (drain), twice (cancel), SIGTERM, and ``kill -9``.

The server streams slowly, so requests are really in flight when the signal lands; the
test waits for that from the server's side (its count of requests being answered), never
for a guessed number of seconds.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import orjson
import pytest

from stress.core.limits import EXIT_VERDICT_FAIL
from tests.reliability.harness import (
    MARGIN_S,
    RunResult,
    assert_accounted,
    assert_all_jsonl_valid,
    assert_no_traceback,
    assert_sound_run,
    cli_process,
    jsonl,
    run_report,
    wait_until,
    write_scenario,
)
from tests.reliability.hostile import hostile

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def exit_reason(result: RunResult) -> Any:
    return orjson.loads((result.dir / "manifest.json").read_bytes()).get("exit_reason")


def only_dir(out: Path) -> Path | None:
    dirs = [p for p in out.iterdir() if p.is_dir()] if out.exists() else []
    return dirs[0] if len(dirs) == 1 else None


async def test_ctrl_c_once_drains_in_flight_requests(tmp_path: Path, out: Path) -> None:
    drain = 20.0
    plan = write_scenario(tmp_path, users=2, rounds=None, duration=120.0, drain_s=drain)
    async with (
        hostile("ok", tokens=20, stream_delay_s=0.1) as server,
        cli_process(plan, out, server.url) as cli,
    ):
        await wait_until(
            "a finished request and one in flight",
            lambda: server.received >= 3 and server.active >= 1,
            MARGIN_S,
            cli.proc,
        )
        cli.signal(signal.SIGINT)
        result = await cli.finish(drain + MARGIN_S, out)
    assert_sound_run(result)
    recs = result.records()
    assert server.received == len(recs), f"server got {server.received}, lines {len(recs)}"
    assert not [r for r in recs if r["error_class"] == "cancelled"], "drain cancelled requests"
    assert [r["outcome"] for r in recs] == ["ok"] * len(recs)
    assert exit_reason(result) == "interrupted"
    verdict = result.summary()["verdict"]
    assert result.rc == 0 and verdict["status"] != "FAIL", verdict["findings"]
    assert "cancelled" not in verdict["summary"] and verdict["cancelled"] is None
    assert_accounted(result)


async def test_ctrl_c_twice_cancels_and_records_in_flight(tmp_path: Path, out: Path) -> None:
    """The streams would take 40 s; the second Ctrl-C cancels them: each is a ``cancelled``
    line saying so, none vanishes, and a run that answered nothing is a FAIL (exit 3)."""
    plan = write_scenario(tmp_path, users=2, rounds=None, duration=120.0, drain_s=60.0)
    async with (
        hostile("ok", tokens=400, stream_delay_s=0.1) as server,
        cli_process(plan, out, server.url) as cli,
    ):
        await wait_until(
            "two streams under way",
            lambda: server.active == 2 and server.streams_started == 2,
            MARGIN_S,
            cli.proc,
        )
        cli.signal(signal.SIGINT)
        await wait_until("the drain notice", lambda: "Ctrl-C" in cli.stdout, MARGIN_S, cli.proc)
        cli.signal(signal.SIGINT)
        result = await cli.finish(MARGIN_S, out)
    assert_sound_run(result)
    recs = result.records()
    assert server.received == len(recs) == 2
    assert [r["error_class"] for r in recs] == ["cancelled", "cancelled"]
    assert all(r["outcome"] == "error" and r["chunks_content"] >= 1 for r in recs)
    assert [r["cancelled_by"] for r in recs] == ["interrupt", "interrupt"]
    assert exit_reason(result) == "interrupted"
    assert result.rc == EXIT_VERDICT_FAIL
    verdict = result.summary()["verdict"]
    assert verdict["summary"].startswith("FAIL: 0 of 2 requests answered, 0 errors, 2 cancelled")
    assert verdict["cancelled"].startswith("2 (2 by a second Ctrl-C or SIGTERM)")
    assert_accounted(result)


async def test_sigterm_stops_cleanly(tmp_path: Path, out: Path) -> None:
    drain = 20.0
    plan = write_scenario(tmp_path, users=2, rounds=None, duration=120.0, drain_s=drain)
    async with (
        hostile("ok", tokens=20, stream_delay_s=0.1) as server,
        cli_process(plan, out, server.url) as cli,
    ):
        await wait_until(
            "a finished request and one in flight",
            lambda: server.received >= 3 and server.active >= 1,
            MARGIN_S,
            cli.proc,
        )
        cli.signal(signal.SIGTERM)
        result = await cli.finish(drain + MARGIN_S, out)
    assert_sound_run(result)
    recs = result.records()
    assert server.received == len(recs), f"server got {server.received}, lines {len(recs)}"
    assert exit_reason(result) in ("interrupted", "terminated")
    assert (result.dir / "summary.json").exists()
    assert_accounted(result)


async def test_kill_9_mid_stream_leaves_a_count_of_what_was_lost(tmp_path: Path, out: Path) -> None:
    """After ``kill -9``: every JSONL line valid, state.json says how many requests were in
    flight with no line, and ``stress report`` rebuilds the summary and states that count."""
    plan = write_scenario(tmp_path, users=2, rounds=None, duration=120.0)
    async with (
        hostile("ok", tokens=10, stream_delay_s=0.1) as server,
        cli_process(plan, out, server.url) as cli,
    ):

        def in_flight_on_record() -> bool:
            d = only_dir(out)
            path = d / "state.json" if d else None
            if path is None or not path.exists() or server.active < 1:
                return False
            try:
                state = orjson.loads(path.read_bytes())
            except orjson.JSONDecodeError:
                return False
            return bool(state.get("recorded", 0) >= 2 and state.get("in_flight_count", 0) >= 1)

        await wait_until(
            "state.json with 2 requests recorded and one in flight",
            in_flight_on_record,
            MARGIN_S,
            cli.proc,
        )
        cli.kill()
        await cli.proc.wait()
        received = server.received
    d = only_dir(out)
    assert d is not None
    assert_all_jsonl_valid(d)
    lines = len(jsonl(d / "requests.jsonl"))
    state = orjson.loads((d / "state.json").read_bytes())
    assert state["finished"] is False
    assert state["sent"] - state["recorded"] == state["in_flight_count"], state
    assert len(state["in_flight"]) <= state["in_flight_count"]
    assert state["recorded"] <= lines, (state, lines)
    assert state["recorded"] <= received, (state, received)
    assert not (d / "summary.json").exists()

    report = await run_report(d)
    assert_no_traceback(report)
    assert report.rc == 0, report.stderr
    lost = {state["sent"] - state["recorded"], state["sent"] - lines}
    summary = orjson.loads((d / "summary.json").read_bytes())
    assert summary.get("complete") is False
    found = list(counts_named(summary, ("no_record", "lost", "in_flight")))
    assert any(v in lost for _, v in found), f"summary.json: {found}, expected one of {lost}"
    assert "in flight" in report.stdout.lower(), report.stdout


def counts_named(obj: Any, names: tuple[str, ...], path: str = "") -> Any:
    """(path, value) of every integer under a key whose name contains one of ``names``."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            here = f"{path}.{k}"
            if isinstance(v, int) and not isinstance(v, bool) and any(n in k for n in names):
                yield here, v
            yield from counts_named(v, names, here)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from counts_named(v, names, f"{path}[{i}]")
