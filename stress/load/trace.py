"""Trace replay (``replay:``) as a load model: each request of a trace at its own time.

``stress.load.replay`` reads the trace and builds its prompts; this module sends them:
open loop, from the phase's start at the trace's timestamps (divided by ``replay.speed``),
none waiting for another, each a single-turn chat that asks for the trace's output length.
Request ``i`` of the trace is user ``i``.
"""

from __future__ import annotations

import asyncio
import time
from array import array

from stress.core.events import RunEvent
from stress.core.record import RequestRecord
from stress.load.replay import PromptBuilder, TraceRequest, implied_reuse
from stress.load.turns import START_BATCH, LoadModel, LoadSetup, build_body, request_id


class Replay(LoadModel):
    """A trace's requests, each its own task from its time."""

    def __init__(self, setup: LoadSetup) -> None:
        super().__init__(setup)
        self.trace = setup.trace or []
        self.time_scale = setup.time_scale

    def _begin(self, loop: asyncio.AbstractEventLoop) -> asyncio.TimerHandle | None:
        self._show("running")
        return None

    async def _start(self) -> None:
        """Send each request of the trace at its timestamp (divided by ``replay.speed``)
        from the start of the phase. A prompt is built (in a worker thread) before its
        send time comes; one built late is sent late, and the lateness is the record's
        ``queue_s``."""
        spec = self.sc.replay
        assert spec is not None and self.corpus is not None
        trace = self.trace
        salt = f"{self.sc.seed}:{self.nonce if spec.per_run else ''}"
        block = max(1, round(spec.block_size * self.paste_scale))
        builder = PromptBuilder(self.corpus, block, salt, self.stop_new.is_set)
        reuse = implied_reuse(trace, spec.block_size)
        self.live.open_loop = True
        t_first = trace[0].t_s if trace else 0.0
        sent = 0
        late_max = 0.0
        for u, req in enumerate(trace):
            if self.stop_new.is_set():
                break
            t = self._t_phase + (req.t_s - t_first) / spec.speed
            prompt = await asyncio.to_thread(builder.prompt, req)
            if t > time.perf_counter():  # never early: the lateness is the record's queue_s
                if not await self._sleep_until(t):
                    break
            elif u % START_BATCH == START_BATCH - 1:
                await asyncio.sleep(0)
            if self.stop_new.is_set():
                break
            late_max = max(late_max, time.perf_counter() - t)
            self.live.on_arrival(t - self.t0)
            self.live.start_session(u)
            warm = t < self._t_phase + spec.warmup
            self._tasks.append(
                asyncio.create_task(
                    self._replay_one(u, req, prompt, t, reuse[u], warm), name=f"replay-{u}"
                )
            )
            sent += 1
        self._replay_ended(sent, late_max)

    def _replay_ended(self, sent: int, late_max: float) -> None:
        """The ``replay_ended`` event: how much of the trace went out, how late at worst.
        The speed is the scenario's ``replay.speed``; a time-scaled simulator run's scale
        (which the engine's copy of the speed also carries) is said apart."""
        spec = self.sc.replay
        assert spec is not None
        trace, scale = self.trace, self.time_scale
        window = time.perf_counter() - self._t_phase
        span = (trace[-1].t_s - trace[0].t_s) / spec.speed if trace else 0.0
        speed = spec.speed / scale
        wall, scaled = (" of wall time", f", simulated time x{scale:g}") if scale != 1 else ("", "")
        self.recorder.event(
            RunEvent(
                self.now(),
                "replay_ended",
                f"replayed {sent}/{len(trace)} requests of the trace in {window:.1f}s{wall} "
                f"(trace span {span * scale:.1f}s at speed {speed:g}{scaled}; latest send "
                f"{late_max:.3f}s after its time)",
                "info",
                data={
                    "phase": self.phase,
                    "requests": len(trace),
                    "sent": sent,
                    "window_s": round(window, 6),
                    "span_s": round(span, 6),
                    "speed": speed,
                    "time_scale": scale,
                    "late_max_s": round(late_max, 6),
                    "started": round(self._t_phase - self.t0, 6),
                },
            )
        )

    async def _replay_one(
        self, u: int, req: TraceRequest, prompt: str, t_sched: float, reuse: int, warm: bool
    ) -> None:
        """One request of the trace: a single-turn chat, ``max_tokens`` its output_length."""
        rec = RequestRecord(
            user=u,
            conversation=1,
            round=1,
            turn=1,
            warmup=warm,
            prompt_tokens_est=req.input_length,
            reusable_tokens=reuse,
            conversation_tokens=req.input_length,
        )
        rec.phase = self.phase
        rec.request_id = request_id(self.nonce, u, 1)
        body = build_body(
            self.sc,
            self.model,
            [{"role": "user", "content": prompt}],
            max_tokens=req.output_length,
        )
        self.live.on_send(rec)
        self.recorder.request_started(rec)
        token_times: array[float] = array("d")
        try:
            await self.client.chat(body, rec, t_sched, token_times)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self._client_failed(rec, e)
        finally:
            self._finish(rec, token_times)
            self.live.end_session(u)
