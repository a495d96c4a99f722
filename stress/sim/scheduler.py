"""The engine: admission, chunked prefill, decode, preemption, in simulated time.

One asyncio task advances a simulated clock step by step. Each step schedules prompt
chunks and one decode token per running sequence, allocates KV blocks (evicting cached
blocks, least recently used first; preempting the most recently admitted sequence when
nothing can be evicted), waits until the step's end in wall time (simulated seconds /
time_scale), then hands the new tokens to each request's asyncio queue. Handlers only read
queues; they never touch the pool. When the loop runs behind (a busy CPU), it does not
sleep, so tokens leave in bursts but the simulated clock stays honest.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from dataclasses import dataclass, field

from stress.config.sim import SimConfig
from stress.sim.kv import ROOT_HASH, KVPool
from stress.sim.speed import SpeedModel

WAITING, RUNNING, DONE = 0, 1, 2

# What a request's queue carries: the number of tokens emitted so far, or the end.
END = -1


@dataclass(eq=False, slots=True)
class Seq:
    """One request inside the engine. ``ids`` holds the prompt and the planned output."""

    rid: str
    ids: list[int]
    prompt_len: int
    n_out: int
    finish_reason: str = "stop"
    queue: asyncio.Queue[int] = field(default_factory=asyncio.Queue)
    state: int = WAITING
    computed: int = 0  # tokens whose KV is in the pool
    emitted: int = 0
    hashes: list[int] = field(default_factory=list)  # cached blocks held, in prefix order
    private: int = 0  # uncached blocks held (after the hashed ones)
    chain: list[int] = field(default_factory=list)  # chain hashes computed so far
    cached_tokens: int | None = None  # prefix hit at first admission
    preemptions: int = 0
    t_arrival: float = 0.0  # simulated seconds
    t_first: float | None = None
    t_last: float | None = None
    prefill_s: float = 0.0  # simulated seconds spent in steps that computed its prompt
    decode_s: float = 0.0
    prompt_computed: int = 0  # prompt tokens computed (recomputes included)

    @property
    def blocks(self) -> int:
        return len(self.hashes) + self.private


@dataclass(slots=True)
class EngineStats:
    """Cumulative counters (reset by a restart) and the gauges the dialects expose."""

    requests: int = 0
    prompt_tokens: int = 0  # per request, cached included (vLLM prompt_tokens_total)
    prompt_tokens_computed: int = 0  # really computed, recomputes included (llama.cpp)
    cache_queries: int = 0  # tokens looked up at first admission
    cache_hits: int = 0
    generation_tokens: int = 0
    preemptions: int = 0
    preempted_input_tokens: int = 0
    preempted_output_tokens: int = 0
    finished: dict[str, int] = field(default_factory=lambda: {"stop": 0, "length": 0, "abort": 0})
    steps: int = 0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    max_seq_tokens: int = 0
    busy_slots_sum: int = 0


class Engine:
    """The simulated serving engine. Start with ``start()``, stop with ``stop()``."""

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.block_size = cfg.block_size
        self.pool = KVPool(cfg.num_blocks, caching=cfg.prefix_caching)
        self.speed = SpeedModel.from_config(cfg)
        self.stats = EngineStats()
        self.running: list[Seq] = []
        self.waiting: deque[Seq] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._wall0 = time.perf_counter()
        self._cursor = 0.0
        self._epoch = 0
        self._pause_s = 0.0  # a server-wide pause asked for, taken before the next step
        self.lag_s = 0.0  # how far (wall) the loop fell behind at worst
        self.last_batch_hit_rate = 0.0  # SGLang's per-batch gauge

    # --- clock -------------------------------------------------------------------------
    def sim_now(self) -> float:
        """Simulated seconds since the engine started."""
        return (time.perf_counter() - self._wall0) * self.cfg.time_scale

    # --- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop(), name="sim-engine")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for seq in [*self.running, *self.waiting]:
            self._end(seq, "abort")

    def reset(self) -> None:
        """A restart: every sequence ends, the cache and the counters are wiped."""
        self._epoch += 1
        for seq in [*self.running, *self.waiting]:
            self._end(seq, "abort")
        self.running.clear()
        self.waiting.clear()
        self.pool.reset()
        self.stats = EngineStats()

    def pause(self, seconds: float) -> None:
        """A server-wide pause (the ``pause`` fault): the engine takes no step for
        ``seconds`` simulated seconds from now, so every running stream goes silent at
        once and waiting requests wait (llama.cpp's host-RAM prompt cache copying a slot's
        prompt at a slot start does this)."""
        self._pause_s += seconds
        self._wake.set()

    # --- requests ----------------------------------------------------------------------
    def submit(
        self, rid: str, ids: list[int], prompt_len: int, n_out: int, finish_reason: str
    ) -> Seq:
        """Queue a request whose ``ids`` are its prompt followed by its planned output."""
        seq = Seq(
            rid=rid,
            ids=ids,
            prompt_len=prompt_len,
            n_out=n_out,
            finish_reason=finish_reason,
            t_arrival=self.sim_now(),
        )
        self.stats.requests += 1
        self.waiting.append(seq)
        self._wake.set()
        return seq

    def abort(self, seq: Seq) -> None:
        """The client went away: free the sequence's blocks now."""
        if seq.state == DONE:
            return
        if seq.state == RUNNING:
            self.running.remove(seq)
        else:
            with contextlib.suppress(ValueError):
                self.waiting.remove(seq)
        self._end(seq, "abort")

    # --- internals ---------------------------------------------------------------------
    def _end(self, seq: Seq, reason: str) -> None:
        if seq.state == DONE:
            return
        if seq.blocks:
            self.pool.release(seq.hashes, seq.private)
        seq.hashes = []
        seq.private = 0
        seq.state = DONE
        self.stats.finished[reason] = self.stats.finished.get(reason, 0) + 1
        seq.queue.put_nowait(END)

    def _chain(self, seq: Seq, n_blocks: int) -> list[int]:
        """Chain hashes of the first ``n_blocks`` full blocks of ``seq.ids`` (memoised)."""
        chain = seq.chain
        bs = self.block_size
        ids = seq.ids
        h = chain[-1] if chain else ROOT_HASH
        for b in range(len(chain), n_blocks):
            h = hash((h, tuple(ids[b * bs : (b + 1) * bs])))
            chain.append(h)
        return chain

    def _preempt(self, seq: Seq) -> None:
        self.running.remove(seq)
        self.pool.release(seq.hashes, seq.private)
        self.stats.preemptions += 1
        self.stats.preempted_input_tokens += seq.prompt_len
        self.stats.preempted_output_tokens += seq.emitted
        seq.hashes = []
        seq.private = 0
        seq.computed = 0
        seq.preemptions += 1
        seq.state = WAITING
        self.waiting.appendleft(seq)

    def _admit(self, budget: int, work: list[tuple[Seq, int]]) -> int:
        """Move waiting sequences into the batch while slots, budget and blocks allow.

        Each admitted sequence joins this step with its first prompt chunk; returns the
        prompt tokens scheduled that way.
        """
        bs = self.block_size
        scheduled = 0
        queried = hits = 0
        while self.waiting and len(self.running) < self.cfg.max_seqs and budget > 0:
            seq = self.waiting[0]
            target = seq.prompt_len + seq.emitted
            hit = 0
            if self.pool.caching:
                hit = self.pool.lookup(self._chain(seq, (target - 1) // bs))
            chunk = min(target - hit * bs, budget)
            extra = 1 if hit * bs + chunk >= target else 0
            need = (hit * bs + chunk + extra + bs - 1) // bs - hit
            hashes = seq.chain[:hit]
            if self.pool.available - self.pool.evictable_among(hashes) < need:
                break
            self.pool.acquire(hashes)
            self.pool.allocate(need)
            self.waiting.popleft()
            seq.hashes = list(hashes)
            seq.private = need
            seq.computed = hit * bs
            if seq.cached_tokens is None:
                seq.cached_tokens = hit * bs
                self.stats.prompt_tokens += seq.prompt_len
                self.stats.cache_queries += seq.prompt_len
                self.stats.cache_hits += hit * bs
                queried += seq.prompt_len
                hits += hit * bs
            seq.state = RUNNING
            self.running.append(seq)
            work.append((seq, chunk))
            budget -= chunk
            scheduled += chunk
        if queried:
            self.last_batch_hit_rate = hits / queried
        return scheduled

    def _plan_step(self) -> tuple[list[tuple[Seq, int]], int, int, int]:
        """Choose this step's work: (seq, new prompt tokens, or 0 for a decode token).

        Running sequences first (oldest first), preempting the newest when blocks run
        out; then, if nobody was preempted, waiting sequences with the budget left.
        """
        bs = self.block_size
        budget = self.cfg.max_batched_tokens
        work: list[tuple[Seq, int]] = []
        prefill_tokens = 0
        n_decode = 0
        context = 0
        preempted = False
        i = 0
        while i < len(self.running):
            seq = self.running[i]
            target = seq.prompt_len + seq.emitted
            if seq.computed < target:
                if budget <= 0:
                    i += 1
                    continue
                n = min(target - seq.computed, budget)
                extra = 1 if seq.computed + n >= target else 0
                new_total = seq.computed + n + extra
            else:
                n = 0
                new_total = seq.computed + 1
            need = max(0, (new_total + bs - 1) // bs - seq.blocks)
            preempted_self = False
            while not self.pool.allocate(need):
                victim = self.running[-1]
                self._preempt(victim)
                preempted = True
                if victim is seq:
                    preempted_self = True
                    break
            if preempted_self:
                break
            seq.private += need
            if n:
                budget -= n
                prefill_tokens += n
            else:
                budget -= 1
                n_decode += 1
                context += seq.computed
            work.append((seq, n))
            i += 1
        if not preempted:
            prefill_tokens += self._admit(budget, work)
        return work, prefill_tokens, n_decode, context

    def _apply(self, work: list[tuple[Seq, int]], dur: float, now: float) -> None:
        bs = self.block_size
        caching = self.pool.caching
        stats = self.stats
        for seq, n in work:
            if seq.state != RUNNING:
                continue
            target = seq.prompt_len + seq.emitted
            if n:
                seq.computed += n
                seq.prompt_computed += n
                seq.prefill_s += dur
                stats.prompt_tokens_computed += n
                if seq.computed < target:
                    self._commit(seq, caching, bs)
                    continue
            else:
                seq.decode_s += dur
            seq.computed += 1
            seq.emitted += 1
            stats.generation_tokens += 1
            if seq.t_first is None:
                seq.t_first = now
            seq.t_last = now
            self._commit(seq, caching, bs)
            if seq.computed > stats.max_seq_tokens:
                stats.max_seq_tokens = seq.computed
            if seq.emitted >= seq.n_out:
                self.running.remove(seq)
                self._end(seq, seq.finish_reason)
            else:
                seq.queue.put_nowait(seq.emitted)

    def _commit(self, seq: Seq, caching: bool, bs: int) -> None:
        if not caching:
            return
        full = min(seq.computed, len(seq.ids)) // bs
        if full <= len(seq.hashes):
            return
        chain = self._chain(seq, full)
        for b in range(len(seq.hashes), full):
            if self.pool.commit(chain[b]):
                seq.hashes.append(chain[b])
                seq.private -= 1

    async def _loop(self) -> None:
        scale = self.cfg.time_scale
        while True:
            if not self.running and not self.waiting:
                self._wake.clear()
                await self._wake.wait()
                self._cursor = max(self._cursor, self.sim_now())  # idle time passed
            now = self.sim_now()
            if self._pause_s:
                self._cursor = max(self._cursor, now) + self._pause_s
                self._pause_s = 0.0
            if self._cursor < now - scale * 0.25:
                # Idle, or more than a quarter of a wall second behind: resync the clock.
                self.lag_s = max(self.lag_s, (now - self._cursor) / scale) if self.running else 0
                self._cursor = now
            epoch = self._epoch
            work, prefill_tokens, n_decode, context = self._plan_step()
            if not work:
                # Nothing can run (e.g. only waiting sequences and no slots): wait a bit.
                await asyncio.sleep(0.001)
                continue
            dur = self.speed.step_s(prefill_tokens, n_decode, context)
            self._cursor += dur
            self.stats.steps += 1
            self.stats.busy_slots_sum += len(work)
            self.stats.prefill_seconds += self.speed.prefill_s(prefill_tokens)
            self.stats.decode_seconds += self.speed.decode_s(n_decode, context)
            delay = self._cursor / scale - (time.perf_counter() - self._wall0)
            if delay > 0.0005:
                await asyncio.sleep(delay)
            elif self.stats.steps % 32 == 0:
                await asyncio.sleep(0)
            if epoch != self._epoch:
                continue
            self._apply(work, dur, self._cursor)
