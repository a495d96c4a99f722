"""Waits on an NVML event set in its own thread and queues Xid / ECC events.

Xid errors (a GPU fault, a fallen-off-the-bus card, a page fault from a bad kernel) are
the first thing an operator asks about after a soak: "zero Xid" is a headline. NVML only
delivers them to a waiter blocked in ``nvmlEventSetWait``, which must therefore live in a
thread of its own; it wakes every ``timeout_ms`` to check whether to stop.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from typing import Any

from stress.collectors.gpu.model import HwEvent

XID_CRITICAL = 0x8
DOUBLE_BIT_ECC = 0x2
GPU_UNAVAILABLE = 0x4000
WANTED = XID_CRITICAL | DOUBLE_BIT_ECC | GPU_UNAVAILABLE

_TIMEOUT = 10
_NOT_SUPPORTED = 3

#: The Xids an operator of an inference server meets most, with NVIDIA's one-line meaning.
XID_MEANING: dict[int, str] = {
    13: "graphics engine exception (often an application fault)",
    31: "GPU memory page fault (often an application fault)",
    43: "GPU stopped processing (a user application fault)",
    45: "preemptive cleanup (a process was killed)",
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint/warning",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}


def describe_xid(code: int) -> str:
    meaning = XID_MEANING.get(code)
    return f"Xid {code}" + (f" ({meaning})" if meaning else "")


class XidWatcher(threading.Thread):
    """Registers the cards' handles on one event set and forwards what arrives."""

    def __init__(
        self,
        nv: Any,
        handles: dict[str, Any],
        out: queue.SimpleQueue[HwEvent],
        timeout_ms: int = 500,
    ) -> None:
        super().__init__(name="stress-gpu-xid", daemon=True)
        self._nv = nv
        self._handles = handles
        self._out = out
        self._timeout_ms = timeout_ms
        self._stop_flag = threading.Event()
        self.registered: list[str] = []
        self.unsupported: list[str] = []
        self.failure: str | None = None
        self.ready = threading.Event()

    def stop(self, join_timeout_s: float = 2.0) -> None:
        self._stop_flag.set()
        if self.is_alive():
            self.join(join_timeout_s)

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # never let a watcher thread die with a traceback
            self.failure = f"{type(exc).__name__}: {exc}"
        finally:
            self.ready.set()

    def _run(self) -> None:
        nv = self._nv
        es = nv.nvmlEventSetCreate()
        try:
            for key, h in self._handles.items():
                try:
                    mask = int(nv.nvmlDeviceGetSupportedEventTypes(h)) & WANTED
                    if mask:
                        nv.nvmlDeviceRegisterEvents(h, mask, es)
                        self.registered.append(key)
                    else:
                        self.unsupported.append(key)
                except Exception:
                    self.unsupported.append(key)
            self.ready.set()
            if not self.registered:
                return
            failures = 0
            while not self._stop_flag.is_set():
                try:
                    data = nv.nvmlEventSetWait(es, self._timeout_ms)
                except Exception as exc:
                    if getattr(exc, "value", None) == _TIMEOUT:
                        failures = 0
                        continue
                    failures += 1
                    if failures >= 20:
                        self.failure = f"nvmlEventSetWait keeps failing: {exc}"
                        return
                    self._stop_flag.wait(0.1)
                    continue
                failures = 0
                self._out.put(self._to_event(data))
        finally:
            with contextlib.suppress(Exception):
                nv.nvmlEventSetFree(es)

    def _to_event(self, data: Any) -> HwEvent:
        key = self._key_of(getattr(data, "device", None))
        etype = int(getattr(data, "eventType", 0))
        code = int(getattr(data, "eventData", 0))
        if etype & XID_CRITICAL:
            return HwEvent(key, "xid", code, describe_xid(code))
        if etype & DOUBLE_BIT_ECC:
            return HwEvent(key, "ecc_dbe", code, "double-bit ECC error")
        if etype & GPU_UNAVAILABLE:
            return HwEvent(key, "gpu_unavailable", code, "GPU became unavailable")
        return HwEvent(key, "nvml_event", etype, f"NVML event type {etype:#x}")

    def _key_of(self, device: Any) -> str:
        if device is None:
            return "unknown"
        for key, h in self._handles.items():
            if h is device or h == device:
                return key
        try:
            uuid = self._nv.nvmlDeviceGetUUID(device)
            return uuid.decode() if isinstance(uuid, bytes) else str(uuid)
        except Exception:
            return "unknown"
