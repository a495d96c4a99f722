"""Synthetic run directories with known values, written from code.

Each helper writes the same files ``stress run`` writes (manifest.json, requests.jsonl,
server.jsonl, gpu.jsonl, events.jsonl), so the report is tested on numbers a test can
check by hand, without running anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson


def request(
    user: int,
    round_: int,
    t_start: float,
    *,
    ttft: float = 1.0,
    decode: float = 20.0,
    e2e: float = 5.0,
    completion: int = 80,
    conv: int = 1000,
    prompt: int | None = None,
    cached: int | None = 0,
    reusable: int = 0,
    warmup: bool = False,
    outcome: str = "ok",
    error_class: str | None = None,
    diagnosis: str | None = None,
    finish: str | None = "stop",
    phase: str = "main",
) -> dict[str, Any]:
    answered = outcome in ("ok", "reasoning_only")
    return {
        "user": user,
        "conversation": 1,
        "round": round_,
        "turn": round_,
        "phase": "warmup" if warmup else phase,
        "warmup": warmup,
        "t_sched": t_start,
        "t_start": t_start,
        "queue_s": 0.001,
        "ttft_s": ttft if answered else None,
        "ttfc_s": ttft if outcome == "ok" else None,
        "e2e_s": e2e,
        "decode_tok_s": decode if answered else None,
        "prompt_tokens": prompt if prompt is not None else conv,
        "cached_tokens": cached,
        "reusable_tokens": reusable,
        "completion_tokens": completion if outcome != "error" else 0,
        "chunks_content": completion if outcome == "ok" else 0,
        "chunks_reasoning": completion if outcome == "reasoning_only" else 0,
        "finish_reason": finish,
        "outcome": outcome,
        "error_class": error_class,
        "http_status": 200 if outcome != "error" else None,
        "reconnects": 0,
        "diagnosis": diagnosis,
        "conversation_tokens": conv,
        "streamed": True,
    }


def manifest(
    name: str = "synthetic",
    *,
    users: int = 2,
    duration_s: float | None = 100.0,
    slo: dict[str, float] | None = None,
    pool: float | None = None,
    start_time: float = 1_796_000_000.0,
    sim: dict[str, Any] | None = None,
) -> dict[str, Any]:
    m: dict[str, Any] = {
        "run_id": f"run-{name}",
        "scenario": {
            "name": name,
            "users": {"count": users},
            "conversation": {"cache": "per_user", "ceiling_tokens": 50000},
            "request": {"max_tokens": 2000},
            "target": {"url": "http://gpu-box:8000", "server": "auto", "sim": sim or {}},
            "slo": slo or {"ttft_p95": None, "decode_tok_s_p50": None},
        },
        "scenario_sha256": "ab" * 32,
        "versions": {"stress": "0.1.0", "python": "3.11.7"},
        "target_url": "http://gpu-box:8000",
        "model": "test-model",
        "models": [{"id": "test-model", "max_model_len": 131072}],
        "tokenizer": "tiktoken:cl100k_base",
        "start_time": start_time,
        "end_time": None if duration_s is None else start_time + duration_s,
        "duration_s": duration_s,
        "exit_reason": None if duration_s is None else "duration",
        "host": {"hostname": "box", "cpus": 16},
        "collectors": {},
    }
    if pool is not None:
        m["collectors"]["server"] = {"dialect": "vllm", "kv_pool_tokens": pool, "restarts": 0}
    return m


def write_run(
    root: Path,
    man: dict[str, Any],
    requests: list[dict[str, Any]],
    *,
    server: list[dict[str, Any]] | None = None,
    gpu: list[dict[str, Any]] | None = None,
    events: list[dict[str, Any]] | None = None,
    torn_tail: bool = False,
) -> Path:
    d: Path = root / str(man["run_id"])
    d.mkdir(parents=True, exist_ok=True)
    (d / "manifest.json").write_bytes(orjson.dumps(man))

    def jsonl(name: str, recs: list[dict[str, Any]]) -> None:
        data = b"".join(orjson.dumps(r) + b"\n" for r in recs)
        if torn_tail and name == "requests":
            data += b'{"user": 0, "round": 9'
        (d / f"{name}.jsonl").write_bytes(data)

    jsonl("requests", requests)
    if server is not None:
        jsonl("server", server)
    if gpu is not None:
        jsonl("gpu", gpu)
    jsonl("events", events or [])
    return d


def event(kind: str, t: float, message: str = "", **kw: Any) -> dict[str, Any]:
    """An events.jsonl line as the run writes it."""
    return {
        "t": t,
        "kind": kind,
        "message": message or kind,
        "severity": kw.pop("severity", "error"),
        "source": kw.pop("source", "engine"),
        "user": kw.pop("user", None),
        "data": kw,
    }


def kill(run_dir: Path, *, lived_s: float, sent: int, recorded: int) -> None:
    """Leave ``run_dir`` as ``kill -9`` does: the manifest never got its end, and the last
    ``state.json`` says how long the run lived and what was in flight."""
    path = run_dir / "manifest.json"
    man = orjson.loads(path.read_bytes())
    man.update(end_time=None, duration_s=None, exit_reason=None)
    path.write_bytes(orjson.dumps(man))
    state = {
        "t": lived_s,
        "sent": sent,
        "recorded": recorded,
        "in_flight_count": sent - recorded,
        "in_flight": [],
        "finished": False,
    }
    (run_dir / "state.json").write_bytes(orjson.dumps(state) + b"\n")


def server_records(
    duration_s: float, pool: float, hit_rate: float, *, step: float = 1.0, preempt_every: int = 0
) -> list[dict[str, Any]]:
    out = []
    t = 0.0
    i = 0
    while t <= duration_s:
        deltas = {"prefix_queries": 1000.0, "prefix_hits": 1000.0 * hit_rate, "preemptions": 0.0}
        if preempt_every and i % preempt_every == 0 and i:
            deltas["preemptions"] = 1.0
        out.append(
            {
                "t": t,
                "up": True,
                "values": {"kv_pool_tokens": pool, "kv_usage": 0.5},
                "deltas": deltas,
                "kv_usage": 0.5,
                "hit_rate_window": hit_rate,
            }
        )
        t += step
        i += 1
    return out


def gpu_records(duration_s: float, cards: int = 2, *, step: float = 1.0) -> list[dict[str, Any]]:
    keys = [f"GPU-0000-{i:04d}" for i in range(cards)]
    out: list[dict[str, Any]] = [
        {
            "t": 0.0,
            "type": "cards",
            "cards": [
                {
                    "key": k,
                    "name": "NVIDIA RTX 3090",
                    "bus_id": f"0000:0{i + 1}:00.0",
                    "driver": "570.86",
                    "power_limit_w": 220.0,
                    "pcie": {"gen": 4, "gen_max": 4, "width": 16, "width_max": 16},
                }
                for i, k in enumerate(keys)
            ],
            "server_cards": keys,
        }
    ]
    t = 0.0
    n = 0
    while t <= duration_s:
        throttled = (n // 10) % 2 == 1
        out.append(
            {
                "t": t,
                "type": "sample",
                "cards": [
                    {
                        "key": k,
                        "t": t,
                        "power_w": 200.0,
                        "power_limit_w": 220.0,
                        "energy_j": 200.0 * t,
                        "temp_c": 70.0 + (n % 10),
                        "sm_mhz": 1700 if not throttled else 1500,
                        "throttle": ["sw_power_cap"] if throttled else [],
                    }
                    for k in keys
                ],
            }
        )
        t += step
        n += 1
    return out


def long_run(root: Path, *, users: int = 8, duration_s: float = 3600.0) -> Path:
    """A one-hour, eight-user soak: a request every ~10 s per user, telemetry every second."""
    reqs = []
    for u in range(users):
        t = u * 1.3
        rnd = 1
        conv = 0
        while t < duration_s - 20:
            conv = conv + 4000 if conv < 46_000 else 4000
            reqs.append(
                request(
                    u,
                    rnd,
                    t,
                    ttft=0.5 + conv / 10_000 + (u % 3) * 0.1,
                    decode=30.0 - conv / 5000,
                    e2e=6.0 + conv / 20_000,
                    conv=conv,
                    cached=max(0, conv - 4000) // 2,
                    reusable=max(0, conv - 4000),
                    warmup=rnd == 1,
                )
            )
            t += 10.0 + (rnd % 3)
            rnd += 1
    man = manifest(
        "eight_users_1h",
        users=users,
        duration_s=duration_s,
        pool=431_000.0,
        slo={"ttft_p95": 5.0, "decode_tok_s_p50": 25.0},
    )
    return write_run(
        root,
        man,
        reqs,
        server=server_records(duration_s, 431_000.0, 0.4, preempt_every=60),
        gpu=gpu_records(duration_s, cards=4),
    )
