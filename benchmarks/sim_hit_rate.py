"""Hit rate vs users on the built-in simulator when the KV pool is too small.

Each user has their own conversation (a unique marker at its start, so users never share
cache), pastes a fresh document every round, asks a question, and keeps the reply in the
history; past the ceiling the conversation starts over. Run with:

    .venv/bin/python benchmarks/sim_hit_rate.py            # the table in docs/simulator.md
    .venv/bin/python benchmarks/sim_hit_rate.py --users 1 2 4 8 --kv-tokens 65536

The hit rate is read from the simulator's own vLLM counters (hits / queries, tokens),
preemptions likewise; TTFT p50 is measured by this client in simulated seconds
(wall x time_scale).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from stress.sim import SimConfig, start_sim

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "river",
    "mountain",
    "window",
    "garden",
    "engine",
    "signal",
    "market",
    "paper",
    "planet",
    "rocket",
    "silver",
    "forest",
    "castle",
    "bridge",
    "harbor",
    "island",
    "valley",
    "winter",
    "summer",
    "autumn",
    "spring",
    "thunder",
    "candle",
    "mirror",
    "pencil",
    "ladder",
    "carpet",
    "basket",
    "jacket",
    "bottle",
    "button",
    "orange",
    "purple",
    "yellow",
    "violet",
    "copper",
    "marble",
    "cotton",
    "velvet",
]


@dataclass
class UserStats:
    requests: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    ttft_s: list[float] = field(default_factory=list)


def paste(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


async def one_turn(
    session: aiohttp.ClientSession, url: str, messages: list[dict[str, str]], max_tokens: int
) -> tuple[str, dict[str, Any] | None, float | None]:
    t0 = time.perf_counter()
    ttft: float | None = None
    text = []
    usage = None
    payload = {
        "model": "sim-llm",
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": max_tokens,
    }
    async with session.post(url + "/v1/chat/completions", json=payload) as resp:
        if resp.status != 200:
            await resp.read()
            return "", None, None
        async for raw in resp.content:
            if not raw.startswith(b"data: ") or raw.startswith(b"data: [DONE]"):
                continue
            obj = orjson.loads(raw[6:])
            for ch in obj["choices"]:
                piece = ch["delta"].get("content")
                if piece:
                    if ttft is None:
                        ttft = time.perf_counter() - t0
                    text.append(piece)
            if obj.get("usage"):
                usage = obj["usage"]
    return "".join(text), usage, ttft


async def user_loop(
    uid: int,
    session: aiohttp.ClientSession,
    url: str,
    rounds: int,
    paste_words: int,
    ceiling_tokens: int,
    think_s: float,
    max_tokens: int,
    seed: int,
    stats: UserStats,
) -> None:
    rng = random.Random(seed * 7919 + uid)
    marker = f"[user {uid} conversation {{}} {rng.getrandbits(64):x}]"
    conv = 0
    messages = [{"role": "system", "content": marker.format(conv) + " You answer briefly."}]
    for _ in range(rounds):
        messages.append(
            {"role": "user", "content": paste(rng, paste_words) + "\n\nSummarise the above."}
        )
        text, usage, ttft = await one_turn(session, url, messages, max_tokens)
        stats.requests += 1
        if usage is None:
            stats.errors += 1
            messages.pop()
            continue
        stats.prompt_tokens += usage["prompt_tokens"]
        stats.cached_tokens += usage["prompt_tokens_details"]["cached_tokens"]
        stats.completion_tokens += usage["completion_tokens"]
        if ttft is not None:
            stats.ttft_s.append(ttft)
        messages.append({"role": "assistant", "content": text})
        if usage["prompt_tokens"] + usage["completion_tokens"] > ceiling_tokens:
            conv += 1
            messages = [{"role": "system", "content": marker.format(conv) + " Brief."}]
        await asyncio.sleep(rng.uniform(0.5, 1.5) * think_s)


async def run_point(users: int, args: argparse.Namespace) -> dict[str, float]:
    cfg = SimConfig(
        kv_tokens=args.kv_tokens,
        block_size=args.block_size,
        max_seqs=args.max_seqs,
        time_scale=args.time_scale,
        reply_tokens_min=args.max_tokens,
        reply_tokens_max=args.max_tokens,
        seed=args.seed,
    )
    sim = await start_sim(cfg)
    stats = [UserStats() for _ in range(users)]
    t0 = time.perf_counter()
    try:
        conn = aiohttp.TCPConnector(limit=0, force_close=True)
        async with aiohttp.ClientSession(connector=conn) as session:
            await asyncio.gather(
                *(
                    user_loop(
                        u, session, sim.url, args.rounds, args.paste_words,
                        args.ceiling_tokens, args.think_s / args.time_scale,
                        args.max_tokens, args.seed, stats[u],
                    )
                    for u in range(users)
                )
            )  # fmt: skip
        st = sim.engine.stats
        hit = st.cache_hits / st.cache_queries if st.cache_queries else 0.0
        ttfts = [t * args.time_scale for s in stats for t in s.ttft_s]
        return {
            "users": users,
            "requests": sum(s.requests for s in stats),
            "errors": sum(s.errors for s in stats),
            "hit_rate": hit,
            "usage_hit_rate": sum(s.cached_tokens for s in stats)
            / max(1, sum(s.prompt_tokens for s in stats)),
            "preemptions": st.preemptions,
            "ttft_p50_s": statistics.median(ttfts) if ttfts else float("nan"),
            "wall_s": time.perf_counter() - t0,
            "sim_s": sim.engine.sim_now(),
        }
    finally:
        await sim.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--users", type=int, nargs="+", default=[1, 2, 4, 6, 8, 12])
    ap.add_argument("--kv-tokens", type=int, default=65_536)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--max-seqs", type=int, default=16)
    ap.add_argument("--time-scale", type=float, default=100.0)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--paste-words", type=int, default=1500)
    ap.add_argument("--ceiling-tokens", type=int, default=16_000)
    ap.add_argument("--think-s", type=float, default=20.0, help="simulated seconds")
    ap.add_argument("--max-tokens", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    print(
        f"pool {args.kv_tokens} tokens, block {args.block_size}, {args.rounds} rounds/user, "
        f"paste ~{args.paste_words} words, ceiling {args.ceiling_tokens} tokens"
    )
    print("| users | working set (tok) | requests | hit rate | preemptions | TTFT p50 (sim s) |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n in args.users:
        r = asyncio.run(run_point(n, args))
        ws = n * args.ceiling_tokens
        print(
            f"| {n} | ~{ws:,} | {r['requests']:.0f} | {r['hit_rate']:.0%} | "
            f"{r['preemptions']:.0f} | {r['ttft_p50_s']:.1f} |",
            f"  <!-- wall {r['wall_s']:.1f}s, sim {r['sim_s']:.0f}s, errors {r['errors']:.0f},"
            f" usage hit {r['usage_hit_rate']:.0%} -->",
            flush=True,
        )


if __name__ == "__main__":
    main()
