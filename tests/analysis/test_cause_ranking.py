"""Causes ranked by how much of a TTFT miss each explains (issue 35): a cause that cannot
explain the miss is never the first limit. Synthetic runs built from the figures of the
wall-clock hour of ``eight_users_1h`` on the simulator: a working set at 131 % of the KV
pool, retention falling past the pool, 6 preemptions, TTFT missed from 40k tokens, and a
client that lagged <= 0.25 s in 2.5 % of its samples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stress.analysis.capacity import capacity_answer
from stress.analysis.causes import MIN_EXPLAINED, name_causes
from stress.analysis.rundata import RunData, load_run
from tests.report.synth import manifest, request, write_run

USERS, ROUNDS, STEP = 8, 12, 5000
LAGGY_CLIENT = {
    "samples": 3600,
    "overloaded_samples": 90,
    "overload_cause": "machine",
    "warnings": 3,
    "loop_lag_ms_max": 250.0,
}


def hour(lose_from: int = ROUNDS) -> list[dict[str, Any]]:
    """Each user's conversation grows by 5k tokens a round; TTFT 2 s up to 40k tokens, 12 s
    past it; the cache keeps every reusable token until round ``lose_from``, half after."""
    reqs = []
    for rnd in range(1, ROUNDS + 1):
        for u in range(USERS):
            conv = STEP * rnd
            reusable = 0 if rnd == 1 else STEP * (rnd - 1)
            kept = reusable if rnd < lose_from else reusable // 2
            reqs.append(
                request(
                    u,
                    rnd,
                    rnd * 300.0 + u,
                    ttft=12.0 if conv > 40_000 else 2.0,
                    e2e=30.0,
                    conv=conv,
                    cached=kept,
                    reusable=reusable,
                )
            )
    return reqs


def preempting(times: list[float]) -> list[dict[str, Any]]:
    """server.jsonl: a scrape every 10 s over the hour, a preemption in the windows ending
    at ``times``."""
    out = []
    for t in range(0, 3900, 10):
        n = 1.0 if float(t) in times else 0.0
        out.append({"t": float(t), "dialect": "vllm", "deltas": {"preemptions": n}})
    return out


def run_of(
    tmp_path: Path,
    reqs: list[dict[str, Any]],
    *,
    pool: float | None,
    client: dict[str, Any] | None = None,
    server: list[dict[str, Any]] | None = None,
) -> RunData:
    man = manifest(users=USERS, duration_s=3900.0, slo={"ttft_p95": 10.0}, pool=pool)
    if client is not None:
        man["collectors"]["client"] = client
    if server is not None and pool is not None:
        man["collectors"]["server"]["preemptions"] = sum(s["deltas"]["preemptions"] for s in server)
    return load_run(write_run(tmp_path, man, reqs, server=server))


def test_the_pool_and_preemptions_outrank_a_client_that_explains_a_fraction(
    tmp_path: Path,
) -> None:
    """Before: the cache held 92 % over the run, so the pool was not named, and the client
    (0.025) ranked against preemptions weighed per request: 6 over these 96 requests is
    0.06, over the real hour's ~500 it was 0.012, and that report ended "limited by a busy
    client machine"."""
    peak = USERS * (STEP * ROUNDS + 80)  # 80 reply tokens a turn
    server = preempting([3310.0, 3320.0, 3330.0, 3610.0, 3620.0, 3630.0])
    run = run_of(tmp_path, hour(), pool=peak / 1.31, client=LAGGY_CLIENT, server=server)
    causes = name_causes(run)
    codes = [c.code for c in causes]
    assert set(codes) == {"kv_pool", "preemption", "client_overload"}
    first = causes[0]
    assert first.code in ("kv_pool", "preemption") and first.can_lead
    client = next(c for c in causes if c.code == "client_overload")
    assert client.minor and not client.can_lead and codes[-1] == "client_overload"
    assert client.weight < MIN_EXPLAINED
    assert "It can explain at most 0.25 s of the median 12 s TTFT of the 32 requests" in (
        client.text
    )
    pool = next(c for c in causes if c.code == "kv_pool")
    assert "in requests sent with the pool over 80.0% full" in pool.text
    assert "8 of the 32 requests over the 10 s TTFT limit (25.0%)" in pool.text
    sentence = capacity_answer(run).sentence
    assert "limited by a busy client machine" not in sentence
    assert f"limited by {first.title}" in sentence


def test_a_client_cause_alone_that_cannot_explain_the_miss_is_no_limit(tmp_path: Path) -> None:
    """With nothing else found, a client lag of 0.25 s against a 12 s TTFT is said, marked
    minor, and the capacity sentence names no limit rather than the wrong one."""
    run = run_of(tmp_path, hour(lose_from=ROUNDS + 1), pool=None, client=LAGGY_CLIENT)
    [client] = name_causes(run)
    assert client.code == "client_overload" and client.minor
    assert "limited by" not in capacity_answer(run).sentence
    assert capacity_answer(run).as_dict()["causes"][0]["minor"] is True


def test_a_client_that_explains_the_miss_still_leads(tmp_path: Path) -> None:
    """A lag of seconds against the same TTFT can explain it: the client is the limit."""
    client = {**LAGGY_CLIENT, "overloaded_samples": 1800, "loop_lag_ms_max": 9000.0}
    run = run_of(tmp_path, hour(lose_from=ROUNDS + 1), pool=None, client=client)
    [cause] = name_causes(run)
    assert cause.can_lead and cause.weight == 0.5  # half its samples; the lag bound is 0.75
    assert "limited by a busy client machine" in capacity_answer(run).sentence


def test_without_a_ttft_limit_the_weights_are_the_runs_own(tmp_path: Path) -> None:
    """No SLO, no miss to explain: nothing is minor (the ranking is by each cause's loss)."""
    man = manifest(users=USERS, duration_s=3900.0, pool=USERS * STEP * ROUNDS / 1.31)
    man["collectors"]["client"] = LAGGY_CLIENT
    run = load_run(write_run(tmp_path, man, hour()))
    causes = name_causes(run)
    assert causes and not any(c.minor for c in causes)


def test_a_capacity_step_never_takes_a_minor_cause_as_its_limit(tmp_path: Path) -> None:
    """The search's "limit / why" column reads the pass's summary.json: a minor cause is
    skipped there as in the sentence."""
    from stress.search.runner import judge_step
    from stress.search.steps import Step

    run = run_of(tmp_path, hour(lose_from=ROUNDS + 1), pool=None, client=LAGGY_CLIENT)
    summary = {"capacity": capacity_answer(run).as_dict(), "verdict": {"slo": []}}
    step = Step(8)
    judge_step(step, [summary])
    assert step.limit == ""
    summary["capacity"]["causes"][0]["minor"] = False
    judge_step(step, [summary])
    assert step.limit == "a busy client machine"


def test_a_full_running_batch_is_named_from_the_servers_waiting_gauge(tmp_path: Path) -> None:
    """The simulator with 4 sequences (vLLM dialect) at 5 users: one request waits each
    round, TTFT p95 is over the limit, and no queue-time histogram splits it. Before, every
    capacity step's "limit / why" was '-'."""
    reqs = [
        request(u, rnd, rnd * 10.0 + (0.0 if u < 4 else 0.05), ttft=0.6 if u == 4 else 0.1)
        for rnd in range(1, 9)
        for u in range(5)
    ]
    server = [
        {"t": t / 2, "dialect": "vllm", "running": 4.0, "waiting": 1.0 if (t / 2) % 10 < 1 else 0.0}
        for t in range(0, 200)
    ]
    man = manifest(users=5, duration_s=100.0, slo={"ttft_p95": 0.4})
    run = load_run(write_run(tmp_path, man, reqs, server=server))
    [cause] = name_causes(run)
    assert cause.code == "queueing" and cause.title == "waiting for room in the running batch"
    assert cause.text.startswith(
        "The vLLM server reported requests waiting for a place in its running batch (at most "
        "4 running at once); 8 of the 8 requests over the 0.4 s TTFT limit (100.0%) waited"
    )
    assert "limited by waiting for room in the running batch" in capacity_answer(run).sentence
    # the same run with the gauge at 0: nothing to name
    for s in server:
        s["waiting"] = 0.0
    quiet = load_run(write_run(tmp_path / "b", man, reqs, server=server))
    assert name_causes(quiet) == []


@pytest.mark.parametrize(("decode_floor", "leads"), [(None, False), (15.0, True)])
def test_decode_interference_never_leads_a_ttft_only_miss(
    tmp_path: Path, decode_floor: float | None, leads: bool
) -> None:
    """Others' prefill slowed the chat user's decode by 75 %, the paster's TTFT missed on
    its own prefill: against that TTFT miss with decode met (or no floor) the interference
    explains none of it and follows as minor; with decode missed too it is a limit."""
    from tests.analysis.test_causes import interference, llamacpp_probe

    man = manifest(users=2, slo={"ttft_p95": 5.0, "decode_tok_s_p50": decode_floor})
    man["probe"] = llamacpp_probe(4)
    causes = name_causes(load_run(write_run(tmp_path, man, interference(5.0))))
    [hit] = [c for c in causes if c.code == "prefill_interference"]
    assert hit.weight == pytest.approx(0.75)
    assert hit.minor is not leads
    assert causes[0].code != "prefill_interference"  # prefill itself explains the miss
    assert causes[0].code == "prefill" and not causes[0].minor
