"""Card identity: which physical card is which, never by index.

NVML and nvidia-smi number cards in PCI bus order; CUDA numbers them fastest first unless
``CUDA_DEVICE_ORDER=PCI_BUS_ID``, and ``CUDA_VISIBLE_DEVICES`` renumbers what it lists. On a
box with two different GPUs, "GPU 0" is therefore two different cards depending on who
asks, and a script that read the idle one reported 15 W at 210 MHz (field notes, trap 10).
This module turns whatever the scenario names (UUIDs or prefixes, PCI bus ids, the
server's ``CUDA_VISIBLE_DEVICES``) into card keys.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from stress.collectors.gpu.model import CardInfo

_BDF = re.compile(
    r"^(?:(?P<dom>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):(?P<dev>[0-9a-fA-F]{1,2})"
    r"\.(?P<fn>[0-7])$"
)


def normalize_bus_id(raw: str | bytes) -> str | None:
    """``00000000:3B:00.0`` (NVML) or ``3b:00.0`` -> ``0000:3b:00.0`` (sysfs form).

    NVML prints an 8-digit domain; sysfs uses 4. Returns ``None`` for anything that is not
    a PCI address.
    """
    text = raw.decode() if isinstance(raw, bytes) else raw
    m = _BDF.match(text.strip().lower())
    if m is None:
        return None
    dom = int(m.group("dom") or "0", 16)
    bus = int(m.group("bus"), 16)
    dev = int(m.group("dev"), 16)
    return f"{dom:04x}:{bus:02x}:{dev:02x}.{m.group('fn')}"


def is_bus_id(text: str) -> bool:
    return normalize_bus_id(text) is not None


def cuda_order(cards: list[CardInfo], device_order: str | None) -> list[CardInfo]:
    """The NVIDIA cards in the order CUDA enumerates them.

    ``PCI_BUS_ID`` is exact. ``FASTEST_FIRST`` (CUDA's default) is CUDA's own heuristic,
    which NVML cannot read back; we approximate it by compute capability, then CUDA cores
    times max SM clock, ties broken by bus id (as CUDA does). On hosts with identical cards
    both orders agree.
    """
    nvidia = [c for c in cards if c.vendor == "nvidia"]
    by_bus = sorted(nvidia, key=lambda c: (c.bus_id or "", c.index or 0))
    if (device_order or "FASTEST_FIRST").strip().upper() == "PCI_BUS_ID":
        return by_bus

    def speed(c: CardInfo) -> tuple[int, int, int]:
        cc = c.cuda_cc or (0, 0)
        return (cc[0], cc[1], (c.cuda_cores or 0) * (c.max_sm_mhz or 0))

    # Stable sort keeps bus order among equals.
    return sorted(by_bus, key=speed, reverse=True)


def order_is_guess(cards: list[CardInfo], device_order: str | None) -> bool:
    """True when FASTEST_FIRST applies to cards that differ (our order is a heuristic)."""
    if (device_order or "FASTEST_FIRST").strip().upper() == "PCI_BUS_ID":
        return False
    names = {(c.name, c.cuda_cc) for c in cards if c.vendor == "nvidia"}
    return len(names) > 1


@dataclass(slots=True)
class Selection:
    """The cards that belong to the server under test, as card keys."""

    keys: list[str] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _match_uuid(token: str, cards: list[CardInfo]) -> list[CardInfo]:
    t = token.strip().lower()
    if not t.startswith("gpu-"):
        t = "gpu-" + t
    hits = [c for c in cards if c.uuid and c.uuid.lower().startswith(t)]
    return hits


def resolve_cuda_visible_devices(
    value: str, cards: list[CardInfo], device_order: str | None = None
) -> Selection:
    """Resolve a ``CUDA_VISIBLE_DEVICES`` value to card keys, with CUDA's semantics.

    Entries are indices (into CUDA's order, see ``cuda_order``) or UUIDs, prefixes allowed.
    As in CUDA, parsing stops at the first entry that names no device; an empty value hides
    every card. MIG entries are kept as unmatched (NVML cards are whole GPUs here).
    """
    sel = Selection()
    ordered = cuda_order(cards, device_order)
    seen: set[str] = set()
    used_index = False
    for raw in value.split(","):
        token = raw.strip()
        if not token:
            break
        card: CardInfo | None = None
        if re.fullmatch(r"\d+", token):
            used_index = True
            i = int(token)
            card = ordered[i] if i < len(ordered) else None
        elif token.lower().startswith("gpu-") or re.fullmatch(r"[0-9a-fA-F-]{4,}", token):
            hits = _match_uuid(token, cards)
            if len(hits) > 1:
                sel.notes.append(f"CUDA_VISIBLE_DEVICES entry {token!r} is an ambiguous prefix")
                sel.unmatched.append(token)
                break
            card = hits[0] if hits else None
        if card is None:
            sel.unmatched.append(token)
            sel.notes.append(
                f"CUDA_VISIBLE_DEVICES entry {token!r} names no card; CUDA ignores it and "
                "every entry after it"
            )
            break
        if card.key in seen:
            # CUDA rejects duplicates; keep the first and say so.
            sel.notes.append(f"CUDA_VISIBLE_DEVICES names {token!r} twice")
            continue
        seen.add(card.key)
        sel.keys.append(card.key)
    if used_index and order_is_guess(cards, device_order):
        sel.notes.append(
            "CUDA_VISIBLE_DEVICES uses indices on a host with different GPUs and "
            "CUDA_DEVICE_ORDER is not PCI_BUS_ID: the mapping is CUDA's FASTEST_FIRST "
            "heuristic approximated; name the cards by UUID or set CUDA_DEVICE_ORDER=PCI_BUS_ID"
        )
    return sel


def resolve_selection(
    spec: list[str] | None, cards: list[CardInfo], device_order: str | None = None
) -> Selection | None:
    """Turn the scenario's card list into keys. ``None`` means "no selection given".

    Each entry may be a UUID (or prefix), a PCI bus id in any common form, a
    ``CUDA_VISIBLE_DEVICES=...`` / ``CUDA_DEVICE_ORDER=...`` assignment, or a bare
    CUDA_VISIBLE_DEVICES-style list (``"1,0"``).
    """
    if spec is None:
        return None
    entries = [s.strip() for s in spec if s and s.strip()]
    for e in entries:
        if e.upper().startswith("CUDA_DEVICE_ORDER="):
            device_order = e.split("=", 1)[1]
    sel = Selection()
    for e in entries:
        if e.upper().startswith("CUDA_DEVICE_ORDER="):
            continue
        if e.upper().startswith("CUDA_VISIBLE_DEVICES="):
            e = e.split("=", 1)[1]
        bus = normalize_bus_id(e)
        if bus is not None:
            hits = [c for c in cards if c.bus_id == bus]
            if hits:
                _add(sel, hits[0].key)
            else:
                sel.unmatched.append(e)
                sel.notes.append(f"no card at PCI bus id {bus}")
            continue
        sub = resolve_cuda_visible_devices(e, cards, device_order)
        for k in sub.keys:
            _add(sel, k)
        sel.unmatched.extend(sub.unmatched)
        sel.notes.extend(n for n in sub.notes if n not in sel.notes)
    return sel


def _add(sel: Selection, key: str) -> None:
    if key not in sel.keys:
        sel.keys.append(key)
