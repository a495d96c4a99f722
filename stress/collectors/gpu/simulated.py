"""The built-in simulator's simulated GPUs as a collector backend (``GET /sim/gpus``).

The simulator runs in its own process, so its cards reach the client over HTTP, read in
the GPU collector's sampler thread like any other backend (a blocking GET with a short
timeout). The rule that keeps simulated and real cards apart: when the run's target is the
built-in simulator, this is the *only* backend (``stress.runtime.run`` picks it), so NVML and hwmon
are never opened and a real card can never appear beside a simulated one; against a real
server this backend is never used. A simulator without simulated GPUs (``sim.gpus: 0``)
makes ``open`` raise ``BackendUnavailable`` and the run has no GPU telemetry, as on a host
without GPUs.

Every card is ``vendor: simulated``, ``backend: sim``, ``simulated: true`` and named as
the simulator names it (``Simulated H100 (sim)``); its bus id is ``sim:<index>``, never a
PCI address. Energy is the simulator's counter, in joules of *simulated* time (see
``stress.sim.gpus``): the collector folds it on the run's simulated clock.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from stress.collectors.gpu.backend import BackendUnavailable
from stress.collectors.gpu.model import CardInfo, CardSample, HwEvent

PATH = "/sim/gpus"
TIMEOUT_S = 2.0


def _num(d: dict[str, Any], key: str) -> float | None:
    v = d.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _int(d: dict[str, Any], key: str) -> int | None:
    v = d.get(key)
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


class SimGpuBackend:
    """Simulated cards read from the simulator at ``url`` (server root, no ``/v1``)."""

    name = "sim"

    def __init__(self, url: str, timeout_s: float = TIMEOUT_S) -> None:
        self.url = url.rstrip("/") + PATH
        self.timeout_s = timeout_s
        self._keys: dict[int, str] = {}

    def _get(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(self.url, timeout=self.timeout_s) as resp:
            body = json.loads(resp.read())
        cards = body.get("cards") if isinstance(body, dict) else None
        if not isinstance(cards, list):
            raise ValueError(f"{PATH} did not answer a list of cards")
        return [c for c in cards if isinstance(c, dict)]

    def open(self) -> list[CardInfo]:
        try:
            cards = self._get()
        except (OSError, ValueError) as exc:
            raise BackendUnavailable(f"simulated GPUs not readable ({exc})") from None
        if not cards:
            raise BackendUnavailable(
                "the built-in simulator has no simulated GPUs (set target.sim.gpus)"
            )
        out = []
        for i, c in enumerate(cards):
            index = _int(c, "index")
            info = CardInfo(
                vendor="simulated",
                backend="sim",
                name=str(c.get("name") or "Simulated GPU (sim)"),
                uuid=str(c.get("uuid") or f"SIM-{i}"),
                bus_id=str(c.get("bus_id") or f"sim:{i}"),
                index=index if index is not None else i,
                driver="simulated",
                mem_used_mib=_num(c, "mem_used_mib"),
                mem_total_mib=_num(c, "mem_total_mib"),
                power_limit_w=_num(c, "power_limit_w"),
                simulated=True,
            )
            info.supported = ["power", "energy", "temperature", "clocks", "utilisation"]
            self._keys[i] = info.key
            out.append(info)
        return out

    def sample(self, t: float) -> list[CardSample]:
        try:
            cards = self._get()
        except (OSError, ValueError):  # the simulator restarting (a fault): no reading
            return [CardSample(key=k, t=t) for k in self._keys.values()]
        out = []
        for i, c in enumerate(cards):
            key = self._keys.get(i)
            if key is None:
                continue
            out.append(
                CardSample(
                    key=key,
                    t=t,
                    power_w=_num(c, "power_w"),
                    power_limit_w=_num(c, "power_limit_w"),
                    energy_counter_j=_num(c, "energy_j"),
                    temp_c=_num(c, "temp_c"),
                    temp_mem_c=_num(c, "temp_mem_c"),
                    sm_mhz=_int(c, "sm_mhz"),
                    mem_mhz=_int(c, "mem_mhz"),
                    util_gpu=_num(c, "util_gpu"),
                    util_mem=_num(c, "util_mem"),
                    mem_used_mib=_num(c, "mem_used_mib"),
                    mem_total_mib=_num(c, "mem_total_mib"),
                    throttle_mask=_int(c, "throttle_mask"),
                )
            )
        return out

    def start_events(self) -> None:
        return None

    def drain_events(self) -> list[HwEvent]:
        return []

    def unsupported(self) -> dict[str, list[str]]:
        return {}

    def close(self) -> None:
        return None
