"""The registered check rules: each documented and named once, each fired by its own
minimal input and by nothing unrelated, each silent just short of its condition, and the
warnings reported in the registry's order."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, cast

import pytest

from stress.analysis.checks import (
    FAIL_CODES,
    HEALTH_RULES,
    NOTE_CODES,
    REQUEST_RULES,
    Rule,
    health_warnings,
    warnings_for,
)
from stress.analysis.manifest import Manifest
from stress.analysis.rows import EventRow, RequestRow
from stress.analysis.runfiles import Quality, RunFiles

ALL_RULES: list[Rule[Any]] = [*HEALTH_RULES, *REQUEST_RULES]


def reply(**fields: Any) -> dict[str, Any]:
    """A healthy streamed first-turn reply, changed by ``fields``."""
    return {
        "http_status": 200,
        "outcome": "ok",
        "finish_reason": "stop",
        "chunks_content": 5,
        "turn": 1,
        "streamed": True,
    } | fields


FAILED = {"http_status": 500, "outcome": "error", "error_class": "http_5xx"}
PER_USER = {"scenario": {"conversation": {"cache": "per_user"}}}


def rows(records: list[dict[str, Any]]) -> list[RequestRow]:
    return cast(list[RequestRow], records)


def codes(records: list[dict[str, Any]], manifest: Any = None, collectors: Any = None) -> list[str]:
    return [w["code"] for w in warnings_for(rows(records), _manifest(manifest), collectors or {})]


def _manifest(obj: dict[str, Any] | None = None) -> Manifest:
    return Manifest.of(obj or {}, Path("run"))


def run_files(
    requests: list[dict[str, Any]] | None = None,
    events: list[dict[str, Any]] | None = None,
    sent: int | None = None,
    finished: bool = True,
    collectors: dict[str, Any] | None = None,
) -> RunFiles:
    """A finished run's files: one healthy reply unless told otherwise, all of it recorded."""
    requests = [reply()] if requests is None else requests
    state = {"sent": len(requests) if sent is None else sent, "finished": finished}
    return RunFiles(
        Path("run"),
        _manifest(),
        collectors or {},
        rows(requests),
        cast(list[EventRow], events or []),
        [],
        [],
        state,
        1.0,
        1.0,
        Quality(),
    )


def health_codes(files: RunFiles) -> list[str]:
    return [w["code"] for w in health_warnings(files)]


def test_every_rule_is_documented_and_named_once() -> None:
    for rule in ALL_RULES:
        doc = inspect.getdoc(rule.check) or ""
        assert "Population" in doc, f"{rule.code}: its docstring names no population"
    names = [rule.code for rule in ALL_RULES]
    assert len(names) == len(set(names))
    assert len({rule.check.__name__ for rule in ALL_RULES}) == len(ALL_RULES)
    assert set(names) >= FAIL_CODES | NOTE_CODES, "a graded code no rule produces"


def test_the_registries_keep_the_report_order() -> None:
    assert [r.code for r in HEALTH_RULES] == [
        "no_requests",
        "users_crashed",
        "record_failed",
        "workers_died",
        "recorder_failed",
        "collector_failed",
        "in_flight_lost",
        "records_lost",
        "unreadable_lines",
        "data_quality",
        "model_mismatch",
    ]
    assert [r.code for r in REQUEST_RULES] == [
        "measuring_noise",
        "all_replies_budget",
        "replies_budget",
        "reasoning_no_answer",
        "all_replies_empty",
        "empty_replies",
        "errors",
        "truncated",
        "reconnects",
        "cache_unreported",
        "zero_hit_rate",
        "not_streamed",
        "token_estimate",
        "client_overloaded",
    ]


def test_a_healthy_run_passes_every_rule() -> None:
    assert codes([reply(), reply(turn=2, cached_tokens=100)], PER_USER) == []
    assert health_codes(run_files()) == []


@pytest.mark.parametrize(
    ("records", "manifest", "collectors", "code"),
    [
        ([reply(chunks_content=0)], {}, {}, "measuring_noise"),
        ([reply(outcome="reasoning_only", finish_reason="length")], {}, {}, "all_replies_budget"),
        (
            [reply(), reply(outcome="reasoning_only", finish_reason="length")],
            {},
            {},
            "replies_budget",
        ),
        ([reply(), reply(outcome="empty", chunks_content=0)], {}, {}, "empty_replies"),
        ([reply(), FAILED], {}, {}, "errors"),
        ([reply(turn=2, cached_tokens=0)], PER_USER, {}, "zero_hit_rate"),
        ([reply(turn=2)], PER_USER, {}, "cache_unreported"),
        ([reply(streamed=False)], {}, {}, "not_streamed"),
        ([reply()], {"tokenizer": "estimate (chars/4)"}, {}, "token_estimate"),
        ([reply()], {}, {"client": {"distorted": True}}, "client_overloaded"),
    ],
)
def test_a_request_rule_fires_alone(
    records: list[dict[str, Any]], manifest: dict[str, Any], collectors: Any, code: str
) -> None:
    assert codes(records, manifest, collectors) == [code]


@pytest.mark.parametrize(
    ("files", "code"),
    [
        (run_files(requests=[]), "no_requests"),
        (run_files(requests=[reply(warmup=True)]), "no_requests"),
        (run_files(events=[{"kind": "user_crashed", "user": 2, "t": 9.0}]), "users_crashed"),
        (run_files(sent=3), "records_lost"),
        (run_files(sent=3, finished=False), "in_flight_lost"),
        (run_files(collectors={"gpu": {"error": "NVML gone"}}), "collector_failed"),
        (run_files(events=[{"kind": "model_mismatch", "message": "serves b"}]), "model_mismatch"),
    ],
)
def test_a_health_rule_fires_alone(files: RunFiles, code: str) -> None:
    assert health_codes(files) == [code]


def test_the_warning_text_is_the_rules() -> None:
    [w] = warnings_for(rows([reply(), FAILED, FAILED]), _manifest(), {})
    assert w == {"code": "errors", "message": "2 requests failed (http_5xx: 2)"}
    [w] = health_warnings(run_files(requests=[reply(warmup=True)]))
    assert w["message"].startswith("NO REQUESTS FINISHED after warm-up (1 warm-up request only)")


def test_rules_fail_just_short_of_their_condition() -> None:
    # one content chunk among silent replies: something was measured
    assert codes([reply(chunks_content=0), reply(chunks_content=0, chunks_reasoning=1)]) == []
    # one answered reply: not every reply ran out of max_tokens
    budget = reply(outcome="reasoning_only", finish_reason="length")
    assert "all_replies_budget" not in codes([budget, reply()])
    # one cached token on a follow-up: the prefix cache works
    assert codes([reply(turn=2, cached_tokens=0), reply(turn=3, cached_tokens=1)], PER_USER) == []
    # a cold cache promises no reuse: nothing to warn about
    assert (
        codes([reply(turn=2, cached_tokens=0)], {"scenario": {"conversation": {"cache": "cold"}}})
        == []
    )
    # stress's own cancellations are not failures
    assert codes([reply(), FAILED | {"error_class": "cancelled"}]) == []
    assert codes([reply()], {}, {"client": {"distorted": False}}) == []
    # every request sent has its record / a kill with nothing in flight
    assert health_codes(run_files(sent=1)) == []
    assert health_codes(run_files(sent=1, finished=False)) == []


def test_warnings_come_in_registry_order() -> None:
    records = [
        reply(streamed=False, reconnects=1),
        reply(outcome="truncated", finish_reason=None),
        FAILED,
    ]
    assert codes(records, {"tokenizer": "estimate"}) == [
        "errors",
        "truncated",
        "reconnects",
        "not_streamed",
        "token_estimate",
    ]
    events = [{"kind": "model_mismatch"}, {"kind": "user_crashed"}]
    assert health_codes(run_files(requests=[], events=events)) == [
        "no_requests",
        "users_crashed",
        "model_mismatch",
    ]
