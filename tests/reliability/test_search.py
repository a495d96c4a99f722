"""A capacity search that does not finish: Ctrl-C, SIGTERM, a server that dies, ``kill -9``.

Each drives ``stress capacity`` as a subprocess. The search's SLO always holds (30 s of
TTFT for replies of 20 tokens), so left alone it would grow 1, 2, 4, ... users up to
``MAX_USERS``; the signal or the server's death is sent once a pass has started (read from
the search's own output), and each test then checks what capacity.json, capacity.md and
the exit code claim: how the search ended, the steps it ran, and no answer past them.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.reliability.harness import (
    MARGIN_S,
    Cli,
    RunResult,
    assert_no_traceback,
    run_report,
    wait_until,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

MAX_USERS = 16
MIN_REQUESTS = 20
DRAIN_S = 10.0
TOTAL_S = 10.0
CONNECT_S = 2.0
EXIT_INTERRUPTED = 130  # README's exit codes
EXIT_SERVER_LOST = 1
SIM = {
    "time_scale": 5,
    "decode_tokens_per_s": 100,
    "reply_tokens_min": 20,
    "reply_tokens_max": 20,
    "prefill_tokens_per_s": 50000,
}


def write_search(tmp: Path, name: str = "search_rel") -> Path:
    """A search scenario whose passes take a few seconds: 2 rounds (20 at 1 user, for
    ``MIN_REQUESTS``) of 20-token replies at 100 simulated tok/s, x5."""
    doc: dict[str, Any] = {
        "name": name,
        "target": {"url": "sim", "model": "auto", "sim": SIM},
        "users": {"count": 1, "ramp_up": "0s", "think_time": {"min": "0.01s", "max": "0.02s"}},
        "rounds": 2,
        "conversation": {"ceiling_tokens": 3000, "turn": {"ask": ["Summarise this."]}},
        "request": {"max_tokens": 20},
        "timeouts": {
            "connect": f"{CONNECT_S}s",
            "first_token": "8s",
            "stall": "4s",
            "total": f"{TOTAL_S}s",
            "drain": f"{DRAIN_S}s",
        },
        "telemetry": {"server_metrics": False, "gpus": "off"},
        "slo": {"ttft_p95": "30s"},
        "search": {"repeat": 1, "max_users": MAX_USERS, "min_requests": MIN_REQUESTS},
    }
    path = tmp / f"{name}.yaml"
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    return path


def pass_bound_s() -> float:
    """The longest pass at worst, wall time: every request of a 1-user pass to its total
    timeout (the simulator's clock does not shorten what the client waits)."""
    return math.ceil(MIN_REQUESTS / 1) * (CONNECT_S + TOTAL_S) / SIM["time_scale"]


def capacity_args(scenario: Path, out: Path, target: str = "sim") -> list[str]:
    return ["capacity", str(scenario), "--target", target, "--no-tui", "--out", str(out)]


@contextlib.asynccontextmanager
async def search_process(args: list[str]) -> AsyncIterator[Cli]:
    cli = await Cli.start(*args)
    try:
        yield cli
    finally:
        cli.kill()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(cli.proc.wait(), timeout=10)


def passes_started(cli: Cli) -> int:
    """Passes whose run has started (each run's first line names its directory)."""
    return len(re.findall(r"^stress \S+: .* writing ", cli.stdout, re.M))


def search_doc(out: Path) -> tuple[Path, dict[str, Any]]:
    (root,) = [p for p in out.iterdir() if p.is_dir()]
    doc = orjson.loads((root / "capacity.json").read_bytes())
    assert isinstance(doc, dict)
    return root, doc


def assert_no_answer(root: Path, doc: dict[str, Any], state: str) -> None:
    """Unfinished, says how, lists what ran, and claims nothing past what was judged."""
    assert doc["state"] == state, doc.get("state_text")
    assert doc["stop"] is None
    for text in (doc["answer"], doc["answer_line"]):
        assert text.startswith("no answer") or ": no answer" in text, text
        assert ">=" not in text and "held up to the most" not in text, text
    runs = sorted(p.name for p in root.iterdir() if (p / "summary.json").exists())
    listed = sorted(r for s in doc["steps"] for r in s["run_dirs"])
    assert listed == runs, f"steps list {listed}, directory holds {runs}"
    md = (root / "capacity.md").read_text()
    assert f"**{doc['answer_line']}**" in md and f"Not finished: {doc['state_text']}" in md


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
async def test_a_signal_in_a_pass_stops_the_search_after_it(
    tmp_path: Path, out: Path, sig: signal.Signals
) -> None:
    scenario = write_search(tmp_path)
    async with search_process(capacity_args(scenario, out)) as cli:
        await wait_until("the first pass started", lambda: passes_started(cli) == 1, MARGIN_S)
        cli.signal(sig)
        result = await cli.finish(pass_bound_s() + DRAIN_S + MARGIN_S, out)
    assert_no_traceback(result)
    assert result.rc == EXIT_INTERRUPTED, result.stderr[-800:]
    assert passes_started(cli) == 1, "the search started another pass after the signal"
    root, doc = search_doc(out)
    assert_no_answer(root, doc, "interrupted")
    (step,) = doc["steps"]
    assert step["value"] == 1 and step["status"] == "INTERRUPTED" and len(step["run_dirs"]) == 1
    manifest = orjson.loads((root / step["run_dirs"][0] / "manifest.json").read_bytes())
    assert manifest["exit_reason"] == "interrupted"  # drained and recorded, not killed
    assert "no step judged" in doc["answer"]


async def test_ctrl_c_between_passes_keeps_the_judged_steps(tmp_path: Path, out: Path) -> None:
    """Ctrl-C once step 1 is judged, as step 2 starts (outside any pass's own handler):
    step 1 stands, step 2 stops as it starts, and the answer says only what step 1 showed."""
    scenario = write_search(tmp_path)
    async with search_process(capacity_args(scenario, out)) as cli:
        await wait_until(
            "step 1 judged", lambda: "step 1: 1 user -> MET" in cli.stdout, 2 * MARGIN_S
        )
        cli.signal(signal.SIGINT)
        result = await cli.finish(pass_bound_s() + DRAIN_S + MARGIN_S, out)
    assert_no_traceback(result)
    assert result.rc == EXIT_INTERRUPTED, result.stderr[-800:]
    root, doc = search_doc(out)
    assert_no_answer(root, doc, "interrupted")
    assert [s["value"] for s in doc["steps"]][:1] == [1] and doc["steps"][0]["status"] == "MET"
    assert [s["status"] for s in doc["steps"][1:]] in ([], ["INTERRUPTED"])
    assert passes_started(cli) <= 2
    assert "MET up to 1 user, nothing above it judged" in doc["answer"]


@contextlib.asynccontextmanager
async def sim_server(tmp: Path) -> AsyncIterator[tuple[Cli, str]]:
    """``stress sim`` on a free loopback port, in its own process (so it can be killed)."""
    config = tmp / "sim.yaml"
    config.write_bytes(orjson.dumps(SIM))
    cli = await Cli.start("sim", "--port", "0", "--config", str(config))
    try:
        await wait_until("the simulator serving", lambda: " at http://" in cli.stdout, MARGIN_S)
        url = re.search(r" at (http://\S+)", cli.stdout)
        assert url is not None, cli.stdout
        yield cli, url.group(1)
    finally:
        cli.kill()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(cli.proc.wait(), timeout=10)


async def test_a_server_that_dies_mid_search_ends_it(tmp_path: Path, out: Path) -> None:
    scenario = write_search(tmp_path)
    async with (
        sim_server(tmp_path) as (server, url),
        search_process(capacity_args(scenario, out, url)) as cli,
    ):
        await wait_until("pass 2 started", lambda: passes_started(cli) == 2, 2 * MARGIN_S)
        server.kill()  # SIGKILL: its streams reset, its port refuses
        result = await cli.finish(2 * pass_bound_s() + MARGIN_S, out)
    assert_no_traceback(result)
    assert result.rc == EXIT_SERVER_LOST, result.stdout[-800:] + result.stderr[-800:]
    assert passes_started(cli) == 2, "the search went on against a dead server"
    root, doc = search_doc(out)
    assert_no_answer(root, doc, "server lost")
    assert "no longer takes connections" in doc["state_text"]
    first, second = doc["steps"]
    assert first["value"] == 1 and first["status"] == "MET"
    assert second["value"] == 2 and second["status"] == "SERVER LOST"  # never MISSED
    assert "MET up to 1 user" in doc["answer"]


async def test_a_search_killed_outright_is_rebuilt_as_killed(tmp_path: Path, out: Path) -> None:
    scenario = write_search(tmp_path)
    async with search_process(capacity_args(scenario, out)) as cli:
        await wait_until("the second pass started", lambda: passes_started(cli) == 2, 2 * MARGIN_S)
        cli.kill()
        await cli.proc.wait()
    root, doc = search_doc(out)
    assert doc["state"] == "running" and "no answer" in doc["answer"]  # as the kill left it
    report: RunResult = await run_report(root)
    assert_no_traceback(report)
    assert report.rc == 0, report.stderr
    root, doc = search_doc(out)
    assert_no_answer(root, doc, "killed")
    assert "during the pass at 2 users, pass 1/1" in doc["state_text"]
    assert "no answer" in report.stdout and "killed" in report.stdout
