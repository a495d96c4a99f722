"""``stress run`` against a real llama.cpp ``llama-server`` (CPU) serving SmolLM2-135M.

One server for the module (4 slots x 4,096 tokens, --metrics). Prompts stay near 1k
tokens: on 2 cores prefill runs ~200 tok/s, so the module takes 2-4 minutes once the
server is built and cached.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from tests.realserver.runs import Run, describe, stress_run
from tests.realserver.servers import ServerProcess

pytestmark = [pytest.mark.realserver, pytest.mark.timeout(2700)]


@pytest.fixture(scope="module")
def per_user_run(llamacpp: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return stress_run(
        tmp_path_factory.mktemp("per_user"), llamacpp.url, name="rs_per_user", users=3, rounds=3
    )


def test_server_identified_from_props_and_slots(per_user_run: Run) -> None:
    probe = per_user_run.manifest["probe"]
    assert per_user_run.manifest["server_kind"] == "llamacpp"
    assert probe["kind"] == "llamacpp" and probe["version"], probe
    assert probe["slots"] == 4
    assert probe["slot_n_ctx"] == [4096] * 4, probe["slot_n_ctx"]
    assert probe["context_length"] == 4096
    assert probe["metrics_available"] is True
    assert probe["cached_tokens_reported"] is True


def test_per_user_every_follow_up_turn_hits_the_cache(per_user_run: Run) -> None:
    recs = per_user_run.requests
    assert len(recs) == 9, [describe(r) for r in recs]
    assert {r["outcome"] for r in recs} == {"ok"}, [describe(r) for r in recs]
    by_user: dict[int, list[dict[str, object]]] = defaultdict(list)
    for r in recs:
        by_user[r["user"]].append(r)
    assert sorted(by_user) == [0, 1, 2]
    for user, rs in by_user.items():
        turns = sorted(int(r["turn"]) for r in rs)  # type: ignore[call-overload]
        assert turns == [1, 2, 3], f"user {user}: {turns}"
    for r in recs:
        timings = r["server_timings"]
        assert timings, describe(r)
        # the streamed usage carries cached_tokens, equal to the server's timings.cache_n
        assert r["cache_source"] == "usage", describe(r)
        assert r["cached_tokens"] == timings["cache_n"], (describe(r), timings)
        assert r["prompt_tokens"] == timings["cache_n"] + timings["prompt_n"], describe(r)
        if r["turn"] >= 2:
            assert r["cached_tokens"] > 0, describe(r)
            # the previous turn's prompt (system + paste) is reused, not just the template
            assert r["cached_tokens"] >= 0.5 * r["reusable_tokens"] > 0, describe(r)
    share = per_user_run.summary["overall"]["cached_share"]
    assert share is not None and share > 0.3, share
    assert "zero_hit_rate" not in {w["code"] for w in per_user_run.summary["warnings"]}


def test_latency_figures_are_consistent(per_user_run: Run) -> None:
    for r in per_user_run.requests:
        assert r["outcome"] == "ok" and r["error_class"] is None, describe(r)
        assert 0 < r["ttft_s"] < r["e2e_s"], describe(r)
        assert r["completion_tokens"] >= 2 and r["tokens_source"] == "usage", describe(r)
        assert r["decode_tok_s"] is not None and r["decode_tok_s"] > 0, describe(r)
        assert r["chunks_content"] > 0 and r["saw_done"], describe(r)
    o = per_user_run.summary["overall"]
    assert o["outcomes"]["error"] == 0 and not o["error_classes"]
    assert o["ttft_s"]["n"] == 9 and o["decode_tok_s"]["n"] == 9


def test_metrics_and_slots_were_collected(per_user_run: Run) -> None:
    """/metrics and /slots were scraped during the run and agree with the requests.

    llama-server answers /metrics and /slots from its main loop, so on 2 busy cores a scrape
    can time out during a long prefill: a few scrape errors are allowed, not missing data.
    """
    server = per_user_run.server
    assert len(server) >= 3, server
    with_values = [s for s in server if s.get("values")]
    assert len(with_values) >= 2 and all(s["dialect"] == "llamacpp" for s in with_values)
    last = with_values[-1]["values"]
    generated = sum(r["completion_tokens"] for r in per_user_run.requests)
    assert last["gen_tokens"] >= 0.9 * generated, (last, generated)
    # llamacpp:prompt_tokens_total counts processed (uncached) prompt tokens
    processed = sum(r["server_timings"]["prompt_n"] for r in per_user_run.requests)
    assert last["prompt_computed_tokens"] >= 0.9 * processed, (last, processed)
    slots = [s["slots"] for s in server if s.get("slots")]
    assert slots and all(s["total"] == 4 and s["n_ctx_min"] == 4096 for s in slots)
    assert max(s["tokens_in_use"] for s in slots) > 0
    assert any(s.get("kv_usage_source") == "slots_estimate" for s in server)
    coll = per_user_run.collectors["server"]
    assert coll["dialect"] == "llamacpp" and coll["metrics_available"], coll
    assert coll["restarts"] == 0 and coll["scrape_errors"] <= coll["scrapes"] // 2, coll
    assert coll["kv_usage_max"] is not None and coll["kv_usage_max"] > 0
    if "prefix_hits" in last:  # builds with llamacpp:prompt_tokens_cached_total
        assert coll["hit_rate_run"] is not None and coll["hit_rate_run"] > 0.2, coll


def test_cold_mode_reports_almost_no_cached_tokens(llamacpp: ServerProcess, tmp_path: Path) -> None:
    run = stress_run(tmp_path, llamacpp.url, name="rs_cold", users=2, rounds=2, cache="cold")
    recs = run.requests
    assert len(recs) == 4 and {r["outcome"] for r in recs} == {"ok"}, [describe(r) for r in recs]
    for r in recs:
        assert r["cached_tokens"] == r["server_timings"]["cache_n"], describe(r)
        # only the chat template's opening tokens precede the per-request marker
        assert r["cached_tokens"] <= 16, describe(r)
        assert r["cached_tokens"] < 0.02 * r["prompt_tokens"], describe(r)
    assert run.summary["overall"]["cached_share"] < 0.02


def test_over_context_prompt_is_its_own_error_class(
    llamacpp: ServerProcess, tmp_path: Path
) -> None:
    """A conversation that outgrows the 4,096-token slot: HTTP 400 exceed_context_size."""
    run = stress_run(
        tmp_path,
        llamacpp.url,
        name="rs_overflow",
        users=1,
        rounds=1,
        paste=(5000, 5200),
        ceiling=6000,
        max_tokens=8,
    )
    [r] = run.requests
    assert r["outcome"] == "error" and r["http_status"] == 400, describe(r)
    assert r["error_class"] == "context_exceeded", describe(r)
    assert "context" in (r["error"] or ""), describe(r)
    # the pre-flight compared the scenario with the real per-slot context
    assert any("4,096" in w or "4096" in w for w in run.manifest["probe_warnings"]), run.manifest[
        "probe_warnings"
    ]
