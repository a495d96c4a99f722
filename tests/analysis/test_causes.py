"""Causes named from a run's data: synthetic runs whose cause is known by construction."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stress.analysis.causes import Cause, name_causes, working_set
from stress.analysis.rundata import RunData, load_run
from tests.report.synth import event, manifest, request, write_run


def llamacpp_probe(slots: int, n_ctx: int = 8192) -> dict[str, Any]:
    return {
        "kind": "llamacpp",
        "slots": slots,
        "slot_n_ctx": [n_ctx] * slots,
        "kv_pool_tokens": slots * n_ctx,
    }


def timed(r: dict[str, Any], prompt_ms: float, prompt_n: int = 1000) -> dict[str, Any]:
    """A record with llama.cpp's per-request ``timings``."""
    r["server_timings"] = {"prompt_ms": prompt_ms, "prompt_n": prompt_n, "cache_n": 0}
    return r


def run_of(
    tmp_path: Path,
    reqs: list[dict[str, Any]],
    *,
    users: int = 2,
    probe: dict[str, Any] | None = None,
    collectors: dict[str, Any] | None = None,
    **kw: Any,
) -> RunData:
    man = manifest(users=users)
    if probe is not None:
        man["probe"] = probe
    man["collectors"].update(collectors or {})
    return load_run(write_run(tmp_path, man, reqs, **kw))


def by_code(causes: list[Cause]) -> dict[str, Cause]:
    return {c.code: c for c in causes}


# --- llama.cpp: users vs slots, waiting vs prefill ----------------------------------


def slot_soak(users: int, retained: list[float]) -> list[dict[str, Any]]:
    """Each user's turns over rounds; round ``k`` keeps ``retained[k-2]`` of what it could
    reuse; TTFT 13 s of which 0.2 s is prefill (the field notes' H200 soak)."""
    reqs = []
    for rnd in range(1, len(retained) + 2):
        for u in range(users):
            reusable = 0 if rnd == 1 else 4000
            share = retained[rnd - 2] if rnd > 1 else 0.0
            r = request(
                u,
                rnd,
                (rnd - 1) * 60.0 + u,
                ttft=13.0,
                e2e=20.0,
                conv=4000 * rnd,
                cached=round(reusable * share),
                reusable=reusable,
            )
            reqs.append(timed(r, 200.0))
    return reqs


def test_more_users_than_slots_collapses_the_cache_and_ttft_is_waiting(tmp_path: Path) -> None:
    reqs = slot_soak(8, [0.38, 0.13, 0.0, 0.0])
    causes = name_causes(run_of(tmp_path, reqs, users=8, probe=llamacpp_probe(4)))
    assert [c.code for c in causes] == ["queueing", "llamacpp_slots"]
    wait, slots = causes
    assert wait.text == (
        "Median TTFT 13 s is 12.8 s of waiting before prefill started (for a free slot) over "
        "0.2 s of prefill (llama.cpp timings.prompt_ms, 40 requests)."
    )
    assert wait.weight == pytest.approx(12.8 / 13)
    assert f"limited by {wait.title}" == "limited by waiting for a free slot"
    assert slots.text.startswith("8 users on 4 llama.cpp slots: a slot keeps one")
    assert "cache retention by round 38.0% → 13.0% → 0.0% → 0.0% (rounds 2-5)" in slots.text
    assert "under 5.0% from round 4 on" in slots.text
    assert "--parallel 8" in slots.text and "at most 4 users" in slots.text
    # retention over the run: (0.38 + 0.13) x 4000 of 4 x 4000 reusable tokens per user
    assert slots.weight == pytest.approx(1 - 0.51 / 4)
    # the probe's pool (4 x 8,192) is full too, but the slots already explain the loss
    assert "kv_pool" not in by_code(causes)


def test_enough_slots_or_a_cache_that_held_names_no_slot_cause(tmp_path: Path) -> None:
    enough = run_of(tmp_path / "a", slot_soak(4, [0.1, 0.0]), users=4, probe=llamacpp_probe(4))
    assert "llamacpp_slots" not in by_code(name_causes(enough))
    held = run_of(tmp_path / "b", slot_soak(8, [1.0, 0.95]), users=8, probe=llamacpp_probe(4))
    assert "llamacpp_slots" not in by_code(name_causes(held))
    vllm = run_of(tmp_path / "c", slot_soak(8, [0.1, 0.0]), users=8, probe={"kind": "vllm"})
    assert "llamacpp_slots" not in by_code(name_causes(vllm))


def test_prefill_dominates_ttft(tmp_path: Path) -> None:
    reqs = [
        timed(request(u, 1, u * 30.0, ttft=8.0, e2e=9.0), 7600.0, prompt_n=15_000) for u in range(6)
    ]
    [cause] = name_causes(run_of(tmp_path, reqs, users=6, probe=llamacpp_probe(8)))
    assert cause.code == "prefill"
    assert cause.text == (
        "Median TTFT 8 s is 7.6 s of prefill over 0.4 s of waiting (llama.cpp "
        "timings.prompt_ms, 6 requests): a median 15,000 uncached prompt tokens per request "
        "at 1,974 tok/s."
    )
    assert cause.weight == pytest.approx(7.6 / 8)


def test_a_fast_run_names_nothing(tmp_path: Path) -> None:
    reqs = [timed(request(u, 1, u * 10.0, ttft=0.5), 450.0) for u in range(6)]
    assert name_causes(run_of(tmp_path / "a", reqs, users=6, probe=llamacpp_probe(8))) == []
    plain = [request(u, r, r * 10.0 + u) for u in range(2) for r in (1, 2, 3)]
    assert name_causes(run_of(tmp_path / "b", plain)) == []


# --- the working set against the KV pool ----------------------------------------------


def growing(pool_users: int = 4) -> list[dict[str, Any]]:
    """Four users whose conversations grow to 9,000 tokens; half of what they could reuse
    is found in the cache."""
    reqs = []
    for rnd, conv in enumerate([1000, 3000, 5000, 7000, 9000], start=1):
        for u in range(pool_users):
            t = (rnd - 1) * 40.0 + u * 10.0
            reqs.append(request(u, rnd, t, conv=conv, cached=conv // 4, reusable=conv // 2))
    return reqs


def test_working_set_near_the_pool_with_lost_retention(tmp_path: Path) -> None:
    server = {"dialect": "vllm", "kv_pool_tokens": 40_000.0, "hit_rate_run": 0.4}
    run = run_of(tmp_path, growing(), users=4, collectors={"server": server})
    # every user ends at 9,000 tokens + 80 reply tokens: 4 x 9,080 = 36,320 live tokens
    assert float(working_set(run.requests)[1].max()) == 36_320
    [cause] = name_causes(run)
    assert cause.code == "kv_pool" and cause.title == "a nearly full KV pool"
    assert cause.text == (
        "Peak working set 36,320 tokens against a KV pool of 40,000 (90.8% of it): users "
        "evict each other's cached blocks before they return; cache retention 50.0% of "
        "reusable tokens, server hit rate 40.0%."
    )
    assert cause.weight == pytest.approx(0.5)


def test_a_pool_with_room_or_a_cache_that_held_is_not_a_cause(tmp_path: Path) -> None:
    roomy = {"dialect": "vllm", "kv_pool_tokens": 400_000.0}
    run = run_of(tmp_path / "a", growing(), users=4, collectors={"server": roomy})
    assert name_causes(run) == []
    held = growing()
    for r in held:
        r["cached_tokens"] = r["reusable_tokens"]
    full = {"dialect": "vllm", "kv_pool_tokens": 30_000.0}
    assert name_causes(run_of(tmp_path / "b", held, users=4, collectors={"server": full})) == []


# --- vLLM / SGLang: the server's queue and prefill histograms ---------------------------


def test_vllm_queue_time_dominates_ttft(tmp_path: Path) -> None:
    reqs = [request(u, 1, u * 5.0, ttft=9.0, e2e=12.0) for u in range(20)]
    server = {"dialect": "vllm", "queue_time_s_mean": 8.0, "prefill_time_s_mean": 0.9}
    [cause] = name_causes(run_of(tmp_path, reqs, users=20, collectors={"server": server}))
    assert cause.code == "queueing" and cause.title == "server queueing"
    assert cause.text == (
        "Mean TTFT 9 s (20 requests) against the vllm server's own means per request: 8 s "
        "queued before scheduling and 0.9 s of prefill: requests wait for room in the "
        "running batch."
    )
    assert cause.weight == pytest.approx(8 / 9)


def test_killed_run_reads_the_histograms_from_server_deltas(tmp_path: Path) -> None:
    reqs = [request(u, 1, u * 5.0, ttft=4.0, e2e=6.0) for u in range(10)]
    server = [
        {"t": float(t), "dialect": "sglang", "deltas": {"queue_time_s": 1.0, "queue_time_n": 2.0}}
        for t in range(5)
    ]  # 5 s over 10 requests: 0.5 s mean queueing, an eighth of the TTFT
    run = run_of(tmp_path / "a", reqs, users=10, server=server)
    assert name_causes(run) == []
    server = [{**s, "deltas": {"queue_time_s": 7.0, "queue_time_n": 2.0}} for s in server]
    [cause] = name_causes(run_of(tmp_path / "b", reqs, users=10, server=server))
    assert cause.code == "queueing"
    assert "Mean TTFT 4 s (10 requests)" in cause.text and "3.5 s queued" in cause.text
    assert "prefill" not in cause.text  # SGLang has no prefill-time histogram


# --- preemptions ------------------------------------------------------------------------


def test_preemptions_outrank_the_pool_they_come_from(tmp_path: Path) -> None:
    reqs = growing()
    for r in reqs:
        r["ttft_s"] = 92.0
    server = {
        "dialect": "vllm",
        "kv_pool_tokens": 38_000.0,
        "preemptions": 120.0,
        "preemptions_per_min": 2.0,
    }
    causes = name_causes(run_of(tmp_path, reqs, users=4, collectors={"server": server}))
    assert [c.code for c in causes] == ["preemption", "kv_pool"]
    assert causes[0].text == (
        "The server preempted running requests 120 times (2 a minute): its KV pool ran out "
        "mid-request, and each one waits and is prefilled again; median TTFT 92 s with zero "
        "errors."
    )
    assert causes[0].weight == 1.0  # 120 preemptions over 20 requests
    assert causes[1].title == "a nearly full KV pool"  # 36,320 of 38,000


def test_sglang_retractions_from_deltas(tmp_path: Path) -> None:
    reqs = [request(u, 1, u * 5.0, ttft=0.5) for u in range(10)]
    server = [
        {"t": float(t), "dialect": "sglang", "deltas": {"preemptions": 1.0}} for t in (0, 1, 2)
    ]
    [cause] = name_causes(run_of(tmp_path, reqs, users=10, server=server))
    # no summary (a killed run): the rate is over the run's 100 s
    assert cause.text.startswith("The server retracted running requests 3 times (1.8 a minute):")
    assert cause.weight == pytest.approx(0.3)


# --- others' prefill slowing decode -------------------------------------------------


def interference(slow_decode: float) -> list[dict[str, Any]]:
    """User 0 pastes a long prompt (9 s of prefill) every 100 s; user 1 starts decoding
    just before each of those prefills and streams through 90 % of it."""
    reqs = []
    for i in range(6):
        t = 100.0 * i
        paste = request(0, i + 1, t, ttft=10.0, e2e=12.0, decode=20.0)  # decode 10..12: clean
        reqs.append(timed(paste, 9000.0, prompt_n=18_000))  # prefill 1..10
        chat = request(1, i + 1, t, ttft=0.5, e2e=10.5, decode=slow_decode)  # decode 0.5..10.5
        reqs.append(timed(chat, 100.0))
    return reqs


def test_decode_overlapping_others_prefill_is_slower(tmp_path: Path) -> None:
    run = run_of(tmp_path, interference(5.0), probe=llamacpp_probe(4))
    causes = by_code(name_causes(run))
    cause = causes["prefill_interference"]
    assert cause.text.startswith(
        "Median decode 5 tok/s in streams whose decode overlapped others' prefill for at "
        "least 25.0% of it (6 requests), against 20 tok/s with no overlap (6):"
    )
    assert cause.weight == pytest.approx(0.75)
    assert "not a long-context slowdown" in cause.text


def test_no_decode_loss_or_no_prefill_windows_names_no_interference(tmp_path: Path) -> None:
    run = run_of(tmp_path / "a", interference(19.0), probe=llamacpp_probe(4))
    assert "prefill_interference" not in by_code(name_causes(run))
    untimed = interference(5.0)
    for r in untimed:  # vLLM-style records: no per-request prefill window
        r.pop("server_timings")
    assert "prefill_interference" not in by_code(name_causes(run_of(tmp_path / "b", untimed)))


# --- the client and the telemetry -----------------------------------------------------


def test_client_overload_from_the_collector_summary(tmp_path: Path) -> None:
    client = {
        "samples": 100,
        "overloaded_samples": 30,
        "overload_cause": "stress",
        "warnings": 2,
        "loop_lag_ms_max": 250.0,
    }
    [cause] = name_causes(run_of(tmp_path, [request(0, 1, 0.0)], collectors={"client": client}))
    assert cause.code == "client_overload" and cause.title == "an overloaded load generator"
    assert cause.text.startswith(
        "The client lagged in 30 of 100 client samples (30.0%), event-loop lag up to 250 ms: "
        "stress itself was near a full core"
    )
    assert cause.weight == pytest.approx(0.3)


def test_client_overload_from_events_of_a_killed_run(tmp_path: Path) -> None:
    events = [
        event("client_overloaded", t, source="client", severity="warning", cause="machine")
        for t in (100.0, 200.0)
    ]
    # 2 warnings, at most one a minute, over the run's 100 s: at least all of it
    [cause] = name_causes(run_of(tmp_path, [request(0, 1, 0.0)], events=events))
    assert cause.title == "a busy client machine"
    assert cause.text.startswith("The client lagged 2 warnings: other processes kept")
    assert cause.weight == 1.0


def test_telemetry_gaps_come_last_with_the_figures_they_weaken(tmp_path: Path) -> None:
    server = {
        "dialect": "llamacpp",
        "metrics_available": True,
        "scrapes": 134,
        "scrape_errors": 30,
        "slots_requests": 133,
        "slots_errors": 18,
        "late_ticks": 0,
    }
    client = {"samples": 100, "overloaded_samples": 10, "overload_cause": "loop", "warnings": 1}
    run = run_of(tmp_path, [request(0, 1, 0.0)], collectors={"server": server, "client": client})
    causes = name_causes(run)
    assert [c.code for c in causes] == ["client_overload", "telemetry_gaps"]
    gaps = causes[-1]
    assert gaps.weight == pytest.approx(48 / 267)
    assert gaps.weight > causes[0].weight  # heavier than the client's 10 %, still last
    assert gaps.text.startswith(
        "48 of 267 telemetry requests failed (30 of 134 /metrics, 18 of 133 /slots)"
    )
    assert "hit rate by window" in gaps.weakens
    assert "KV usage (llama.cpp /slots estimate)" in gaps.weakens
    assert "stay exact" in gaps.text


def test_telemetry_gaps_of_a_killed_run_and_below_the_threshold(tmp_path: Path) -> None:
    server: list[dict[str, Any]] = [{"t": float(t), "values": {}, "slots": {}} for t in range(40)]
    for s in server[:4]:
        s["error"] = "/metrics timeout"
    for s in server[4:8]:
        del s["slots"]
        s["slots_error"] = "/slots timeout"
    [gaps] = name_causes(run_of(tmp_path / "a", [request(0, 1, 0.0)], server=server))
    assert gaps.text.startswith("8 of 80 telemetry requests failed (4 of 40 /metrics, 4 of 40")
    few = server[6:]  # 2 failed /slots of 68 requests: under 5 %
    assert name_causes(run_of(tmp_path / "b", [request(0, 1, 0.0)], server=few)) == []


def test_a_server_without_metrics_is_one_gap(tmp_path: Path) -> None:
    server = {"dialect": None, "metrics_available": False, "scrapes": 50, "scrape_errors": 50}
    [gaps] = name_causes(run_of(tmp_path, [request(0, 1, 0.0)], collectors={"server": server}))
    assert gaps.title == "no server metrics"
    assert gaps.text.startswith("/metrics never answered (50 scrapes)")
    assert "preemptions" in gaps.weakens


def test_waiting_with_free_slots_and_nothing_deferred_is_a_server_stall(tmp_path: Path) -> None:
    """The H200 validation's first run: 16 users on 16 slots, the server deferring nothing,
    yet seconds before each prefill (llama.cpp's host-RAM prompt cache); not a slot wait."""
    reqs = slot_soak(4, [1.0, 1.0])
    stalled = run_of(
        tmp_path / "a",
        reqs,
        users=4,
        probe=llamacpp_probe(4),
        collectors={"server": {"waiting_max": 0}},
    )
    (cause,) = [c for c in name_causes(stalled) if c.code in ("queueing", "server_stall")]
    assert cause.code == "server_stall"
    assert "with 4 users on 4 slots and no request deferred by the server" in cause.text
    assert "--cache-ram 0" in cause.text
    # deferred requests, or more users than slots, make it a slot wait again
    deferred = run_of(
        tmp_path / "b",
        reqs,
        users=4,
        probe=llamacpp_probe(4),
        collectors={"server": {"waiting_max": 3}},
    )
    assert "queueing" in by_code(name_causes(deferred))
    # no queue figure from the server: say both
    unknown = run_of(tmp_path / "c", reqs, users=4, probe=llamacpp_probe(4))
    wait = by_code(name_causes(unknown))["queueing"]
    assert "(for a free slot, or a server stall)" in wait.text
