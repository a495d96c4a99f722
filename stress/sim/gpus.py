"""Simulated GPUs: cards whose power, heat and clocks follow the simulated engine's load.

The built-in simulator has no GPU, so the quick start would never show the GPU panel or
the report's GPU sections. With ``gpus: N`` in the simulator's settings it serves N
simulated cards at ``GET /sim/gpus`` (JSON, the units of
:mod:`stress.collectors.gpu.model`), and ``stress run`` against the simulator reads those
cards instead of any real one (see ``stress.collectors.gpu.simulated``). Every card is
named ``Simulated H100 (sim)`` and carries ``"simulated": true``, so no report can pass a
simulated watt off as a measured one.

The model, in simulated time (the engine's clock, ``time_scale`` included):

- utilisation: the fraction of simulated time the engine spent in steps (prefill or
  decode) since the last reading; the cards serve one model in tensor parallel, so they
  share it (card ``i`` draws a little less, as real cards of one server do);
- power: ``idle + (full - idle) x utilisation``, constant over the interval (a reading's
  power is the mean since the previous reading, as NVML averages its own); ``full`` (the
  draw of a card busy all the time, 650 W) stays under the 700 W limit, as a decode-bound
  server's cards do;
- energy: a cumulative counter, power integrated over simulated time, so a reading's
  energy increment is exactly its interval's power times its simulated length;
- temperature: first order towards ``ambient + k x power`` with a time constant, so it
  lags the power;
- SM clock: idle clock when idle, boost under load (a lower clock with ``sw_power_cap``
  set were the power ever within 5 % of the limit); ``gpu_idle`` set when idle.

The state advances lazily on every reading; nothing here runs between readings.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from typing import Any

from stress.sim.scheduler import Engine, EngineStats

NAME = "Simulated H100 (sim)"
POWER_LIMIT_W = 700.0
FULL_W = 650.0
"""Draw of a card whose engine is busy all the time."""
IDLE_W = 70.0
AMBIENT_C = 30.0
C_PER_W = 0.075
"""Steady temperature above ambient per watt: 700 W settles at 82.5 °C."""
TEMP_TAU_S = 20.0
"""Time constant of the temperature (simulated seconds)."""
MEM_TOTAL_MIB = 81_559.0
MEM_USED_FRACTION = 0.9
"""Memory in use: weights plus the KV pool, preallocated at start as vLLM does."""
SM_IDLE_MHZ, SM_BOOST_MHZ, SM_CAPPED_MHZ, MEM_MHZ = 345, 1980, 1755, 2619
CARD_DERATE = 0.03
"""Card ``i`` draws ``(1 - i x CARD_DERATE)`` of the dynamic power of card 0."""
AT_LIMIT = 0.95
GPU_IDLE, SW_POWER_CAP = 0x1, 0x4
"""NVML's clock-event reason bits (``stress.collectors.gpu.throttle``)."""


def power_w(util: float, index: int = 0) -> float:
    """A card's power at ``util`` (0..1): idle plus its share of the dynamic range."""
    factor = max(0.0, 1.0 - CARD_DERATE * index)
    return IDLE_W + (FULL_W - IDLE_W) * min(1.0, max(0.0, util)) * factor


@dataclass(slots=True)
class SimCard:
    index: int
    uuid: str
    power_w: float = IDLE_W
    energy_j: float = 0.0
    temp_c: float = AMBIENT_C + C_PER_W * IDLE_W

    def advance(self, dt: float, util: float) -> None:
        """Hold ``util`` for ``dt`` simulated seconds."""
        self.power_w = power_w(util, self.index)
        self.energy_j += self.power_w * dt
        target = AMBIENT_C + C_PER_W * self.power_w
        self.temp_c = target + (self.temp_c - target) * math.exp(-dt / TEMP_TAU_S)


@dataclass(slots=True)
class SimGpus:
    """The simulated cards of one simulator; ``reading`` advances and renders them."""

    count: int
    seed: int = 0
    cards: list[SimCard] = field(default_factory=list)
    util: float = 0.0
    _t: float = 0.0
    _stats: EngineStats | None = None
    _busy_seen: float = 0.0
    _busy_owed: float = 0.0

    def __post_init__(self) -> None:
        self.cards = [
            SimCard(i, "SIM-" + str(uuid.UUID(int=(self.seed * 1000 + i + 1) & (2**128 - 1))))
            for i in range(self.count)
        ]

    def advance(self, engine: Engine) -> None:
        """Bring every card to the engine's simulated now."""
        now = engine.sim_now()
        stats = engine.stats
        busy = stats.prefill_seconds + stats.decode_seconds
        if stats is not self._stats:  # the first reading, or a restart reset the counters
            self._stats, self._busy_seen = stats, 0.0
        # Step time is counted when a step starts: what runs past now is owed to the next
        # reading, so the total of busy time is kept while each interval stays <= 100 %.
        self._busy_owed += max(0.0, busy - self._busy_seen)
        self._busy_seen = busy
        dt = now - self._t
        if dt <= 0.0:
            return
        credited = min(self._busy_owed, dt)
        self._busy_owed -= credited
        self.util = credited / dt
        for c in self.cards:
            c.advance(dt, self.util)
        self._t = now

    def reading(self, engine: Engine) -> dict[str, Any]:
        """The JSON body of ``GET /sim/gpus``."""
        self.advance(engine)
        idle = self.util < 0.01
        cards = []
        for c in self.cards:
            capped = c.power_w >= AT_LIMIT * POWER_LIMIT_W
            mask = (GPU_IDLE if idle else 0) | (SW_POWER_CAP if capped else 0)
            dynamic = (c.power_w - IDLE_W) / (FULL_W - IDLE_W)
            cards.append(
                {
                    "index": c.index,
                    "uuid": c.uuid,
                    "bus_id": f"sim:{c.index}",
                    "name": NAME,
                    "simulated": True,
                    "power_w": round(c.power_w, 3),
                    "power_limit_w": POWER_LIMIT_W,
                    "energy_j": round(c.energy_j, 3),
                    "temp_c": round(c.temp_c, 2),
                    "temp_mem_c": round(c.temp_c + 4.0, 2),
                    "sm_mhz": SM_IDLE_MHZ if idle else SM_CAPPED_MHZ if capped else SM_BOOST_MHZ,
                    "mem_mhz": MEM_MHZ,
                    "util_gpu": round(100.0 * self.util, 2),
                    "util_mem": round(60.0 * dynamic, 2),
                    "mem_used_mib": round(MEM_TOTAL_MIB * MEM_USED_FRACTION, 1),
                    "mem_total_mib": MEM_TOTAL_MIB,
                    "throttle_mask": mask,
                }
            )
        return {"simulated": True, "sim_time_s": round(self._t, 6), "cards": cards}
