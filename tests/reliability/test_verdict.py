"""A verdict that cannot pass on nothing, through the real CLI against a real server.

Every request of a run can end ``cancelled``: the replies outlast the duration and its
drain, or the user cancels them. Such a run answered nothing and must read FAIL (exit 3),
saying how many requests were cancelled and by what, with the same count of errors and
cancellations in the headline, the verdict's list, summary.json, the report and
``stress ls``. A run the user cut short after answers is not the server's failure: WARN,
exit 0.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from stress.core.limits import EXIT_VERDICT_FAIL
from tests.reliability.harness import (
    MARGIN_S,
    Cli,
    RunResult,
    assert_accounted,
    assert_sound_run,
    cli_process,
    run_cli,
    wait_until,
    write_scenario,
)
from tests.reliability.hostile import hostile

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SLOW = {"tokens": 400, "stream_delay_s": 0.1}
"""Streams of 40 s: far longer than any duration and drain below."""


def causes(result: RunResult) -> list[str]:
    """Each record's ``cancelled_by``, "-" for a request not cancelled, sorted."""
    return sorted(str(r.get("cancelled_by") or "-") for r in result.records())


async def report_and_ls(result: RunResult) -> tuple[str, str]:
    """``stress report`` (rebuilding summary.json) and ``stress ls`` of the run."""
    outputs = []
    for args in (["report", str(result.dir)], ["ls", str(result.out)]):
        cli = await Cli.start(*args)
        try:
            done = await cli.finish(MARGIN_S, result.out)
        finally:
            cli.kill()
        assert done.rc == 0, done.output
        outputs.append(done.stdout)
    return outputs[0], outputs[1]


async def test_every_request_cancelled_at_the_drain_deadline_is_a_fail(tmp_path: Path) -> None:
    out = tmp_path / "out"
    plan = write_scenario(
        tmp_path, users=2, rounds=None, duration=2.0, drain_s=1.0, total_s=120.0, stall_s=30.0
    )
    async with hostile("ok", **SLOW) as server:
        result = await run_cli(plan, out, server.url)
    assert_sound_run(result, exit_code=EXIT_VERDICT_FAIL)
    assert causes(result) == ["drain_deadline"] * 2
    verdict = result.summary()["verdict"]
    assert verdict["status"] == "FAIL", verdict
    head = "FAIL: 0 of 2 requests answered, 0 errors, 2 cancelled,"
    assert verdict["summary"].startswith(head), verdict["summary"]
    assert "Errors: none." in verdict["items"]
    cancelled = "2 (2 at the drain deadline: still running timeouts.drain after the run stopped"
    assert verdict["cancelled"].startswith(cancelled), verdict["cancelled"]
    assert f"Cancelled: {verdict['cancelled']}." in verdict["items"]
    assert {"none_answered", "cancelled"} <= {f["code"] for f in verdict["findings"]}
    assert f"verdict: {verdict['summary']}" in result.stdout
    assert f"cancelled: {verdict['cancelled']}" in result.stdout
    report, ls = await report_and_ls(result)
    assert report.startswith(head) and cancelled in report, report
    assert "FAIL" in next(line for line in ls.splitlines() if result.dir.name in line)
    md = (result.dir / "report.md").read_text()
    assert head in md and cancelled in md
    assert_accounted(result)


async def test_ctrl_c_twice_after_answers_warns_and_names_the_cut(
    tmp_path: Path, out: Path
) -> None:
    """Two answered, the next two cut by a second Ctrl-C: the user's choice, not the
    server's failure (WARN, exit 0), and the verdict says what was cut and by what."""
    plan = write_scenario(
        tmp_path, users=2, rounds=None, duration=120.0, drain_s=60.0, total_s=120.0
    )
    async with (
        hostile("ok", tokens=80, stream_delay_s=0.1) as server,
        cli_process(plan, out, server.url) as cli,
    ):
        await wait_until(
            "two answered and two streams under way",
            lambda: server.received >= 4 and server.streams_started >= 4,
            MARGIN_S,
            cli.proc,
        )
        cli.signal(signal.SIGINT)
        await wait_until("the drain notice", lambda: "Ctrl-C" in cli.stdout, MARGIN_S, cli.proc)
        cli.signal(signal.SIGINT)
        result = await cli.finish(MARGIN_S, out)
    assert_sound_run(result, exit_code=0)
    assert [r["outcome"] for r in result.records()].count("ok") == 2
    assert causes(result) == ["-", "-", "interrupt", "interrupt"]
    verdict = result.summary()["verdict"]
    assert verdict["status"] == "WARN", verdict
    assert verdict["summary"].startswith("WARN: 2 of 4 requests answered, 0 errors, 2 cancelled")
    assert "2 cut by Ctrl-C" in verdict["reasons"], verdict["reasons"]
    assert not [f for f in verdict["findings"] if f["level"] == "FAIL"], verdict["findings"]
    assert verdict["cancelled"].startswith("2 (2 by a second Ctrl-C or SIGTERM)")
    assert_accounted(result)
