"""Deterministic snapshots for the TUI tests: eight users, two GPUs, a busy vLLM server."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from stress.core.events import RunEvent
from stress.live.state import Snapshot, TurnSummary, UserRow

HEADER: dict[str, Any] = {
    "scenario": "eight_users_1h",
    "target": "http://10.0.0.5:8000",
    "model": "Qwen3-30B-A3B",
    "server": "vllm",
    "users": 8,
    "duration_s": 3600.0,
    "rounds": None,
    "cache": "per_user",
    "run_dir": "out/eight_users_1h-20260101-120000",
}
STATES = ("thinking", "waiting", "reasoning", "streaming", "thinking", "streaming", "done", "x")


def turn(user: int, r: int, outcome: str = "ok") -> TurnSummary:
    err = "http_5xx" if outcome == "error" else None
    return TurnSummary(
        round=r,
        conversation=1,
        t_end=60.0 * r + user,
        outcome=outcome,
        error_class=err,
        prompt_tokens=4000 * r + 100 * user,
        cached_tokens=None if outcome == "error" else 3000 * r,
        completion_tokens=0 if outcome != "ok" else 400 + user,
        ttft_s=None if outcome == "error" else 1.5 + 0.25 * r,
        decode_tok_s=None if outcome != "ok" else 20.0 - user,
        e2e_s=30.0 + r,
        max_gap_s=None if outcome == "error" else 0.05 * r,
    )


def user_row(u: int, tick: int = 0) -> UserRow:
    state = STATES[u] if STATES[u] != "x" else "thinking"
    recent = tuple(turn(u, r) for r in range(1, 4))
    if u == 7:
        recent = (*recent, turn(u, 4, "error"))
    return UserRow(
        user=u,
        state=state,
        round=4 + tick,
        conversation=1,
        conversation_tokens=12_000 + 1500 * u + 1000 * tick,
        last_ttft_s=1.5 + 0.5 * u,
        live_tok_s=(18.0 - u) if state in ("reasoning", "streaming") else None,
        last_decode_tok_s=19.5 - u,
        last_cached_pct=75.0 - u,
        last_retention=1.0 - 0.05 * u,
        ok=3 + tick,
        errors=1 if u == 7 else 0,
        empty=1 if u == 4 else 0,
        last_error="http_5xx" if u == 7 else None,
        recent=recent,
        first_token_wait_s=23.4 if state == "waiting" else None,
        silent_s={2: 0.1, 3: 0.4, 5: 12.7}.get(u),
        think_left_s=4.2 if u == 0 else None,
        stalls=1 if u == 7 else 0,
    )


def card(i: int, **over: Any) -> dict[str, Any]:
    c: dict[str, Any] = {
        "key": f"GPU-{i:04d}",
        "name": "NVIDIA GeForce RTX 3090",
        "bus_id": f"0000:0{i}:00.0",
        "util": 97.0,
        "power_w": 219.6 + i,
        "power_limit_w": 220.0,
        "temp_c": 79.0 + i,
        "sm_mhz": 1695.0,
        "mem_used_mib": 23_100.0,
        "throttle": ["sw_power_cap"],
        "energy_j": 512_000.0 + i,
        "flagged": False,
    }
    c.update(over)
    return c


SERVER: dict[str, Any] = {
    "hit_rate_window": 0.41,
    "hit_rate_run": 0.38,
    "preemptions": 12,
    "preemptions_per_min": 3.0,
    "kv_usage": 0.93,
    "running": 7,
    "waiting": 1,
    "prompt_tok_s": 2200.0,
    "gen_tok_s": 60.0,
    "spec_accept": None,
    "restarts": 0,
    "up": True,
    "kv_pool_tokens": 431_000,
    "dialect": "vllm",
}


def events() -> tuple[RunEvent, ...]:
    return (
        RunEvent(0.0, "run_started", "eight_users_1h: 8 users"),
        RunEvent(245.0, "empty_reply", "empty reply after reasoning", "warning", user=4),
        RunEvent(301.5, "http_5xx", "HTTP 503 from server", "error", "client", user=7),
    )


def snapshot(tick: int = 0, *, gpus: bool = True, n_users: int = 8) -> Snapshot:
    users = tuple(replace(user_row(u % 8, tick), user=u) for u in range(n_users))
    gpu = {
        "available": True,
        "cards": [
            card(0),
            card(1, util=0.0, power_w=15.0, sm_mhz=210.0, flagged=True, throttle=[], temp_c=None),
        ],
    }
    return Snapshot(
        t=1805.0 + tick,
        phase="running",
        users=users,
        outcomes={"ok": 30 + tick, "error": 1, "empty": 1, "reasoning_only": 0, "truncated": 0},
        error_classes={"http_5xx": 1},
        in_flight=4,
        rounds_done=32 + tick,
        prompt_tokens=1_200_000,
        completion_tokens=14_000,
        ttft_p50_recent=2.25,
        ttft_recent=tuple(1.0 + 0.1 * (i % 17) for i in range(60)),
        out_tok_s_recent=61.0 + tick,
        out_tok_s_history=tuple(40.0 + (i * 7) % 30 for i in range(120)),
        cached_share_recent=0.41,
        working_set_tokens=sum(r.conversation_tokens for r in users),
        reconnects=0,
        events=events(),
        collectors={"server": dict(SERVER), **({"gpu": gpu} if gpus else {})},
    )
