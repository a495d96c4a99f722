"""Which hardware-error counter increments are run events, and how serious each is.

Backends report monotonic counters (ECC, remapped rows, PCIe replays, AER) as plain
numbers; the collector compares each reading with the previous one and turns an increase
into a run event through ``classify``. Whether it counts in the run's verdict follows the
field notes: "zero Xid / AER" is a headline, so Xid, uncorrected ECC / remapping trouble
and every AER error count; corrected ECC and PCIe replays are warnings only.
"""

from __future__ import annotations

from dataclasses import dataclass

from stress.core.events import Severity


@dataclass(frozen=True, slots=True)
class CounterKind:
    kind: str
    severity: Severity
    in_verdict: bool


def classify(counter: str) -> CounterKind:
    if counter in ("ecc_corrected", "remapped_rows_corrected"):
        return CounterKind("ecc_corrected", "warning", False)
    if counter.startswith(("ecc_", "remap", "retired_pages")):
        return CounterKind("ecc", "error", True)
    if counter == "pcie_replay":
        return CounterKind("pcie_replay", "warning", False)
    if counter.startswith("aer_"):
        severity: Severity = "warning" if counter.endswith("cor") else "error"
        return CounterKind("aer", severity, True)
    return CounterKind("hw_counter", "warning", False)


#: Asynchronous event kinds (from ``HwEvent.kind``) and whether they count in the verdict.
EVENT_SEVERITY: dict[str, tuple[Severity, bool]] = {
    "xid": ("error", True),
    "ecc_dbe": ("error", True),
    "gpu_unavailable": ("error", True),
    "gpu_lost": ("error", True),
}
