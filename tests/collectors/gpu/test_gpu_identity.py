"""Identity: bus-id normalisation and CUDA_VISIBLE_DEVICES / CUDA_DEVICE_ORDER mapping."""

from __future__ import annotations

import pytest

from stress.collectors.gpu.identity import (
    cuda_order,
    normalize_bus_id,
    resolve_cuda_visible_devices,
    resolve_selection,
)
from stress.collectors.gpu.model import CardInfo


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("00000000:3B:00.0", "0000:3b:00.0"),
        (b"00000000:AF:00.0", "0000:af:00.0"),
        ("0000:3b:00.0", "0000:3b:00.0"),
        ("3b:00.0", "0000:3b:00.0"),
        ("00000001:01:1F.3", "0001:01:1f.3"),
        ("GPU-1234", None),
        ("3b:00", None),
    ],
)
def test_normalize_bus_id(raw: str | bytes, want: str | None) -> None:
    assert normalize_bus_id(raw) == want


def _card(uuid: str, bus: str, name: str, cc: tuple[int, int], cores: int, idx: int) -> CardInfo:
    return CardInfo(
        vendor="nvidia",
        backend="nvml",
        name=name,
        uuid=uuid,
        bus_id=bus,
        index=idx,
        cuda_cc=cc,
        cuda_cores=cores,
        max_sm_mhz=1900,
    )


@pytest.fixture
def mixed() -> list[CardInfo]:
    # PCI bus order: a slow card first, the fast one second (the classic trap).
    return [
        _card("GPU-aaaa1111-0000", "0000:01:00.0", "NVIDIA GeForce RTX 3060", (8, 6), 3584, 0),
        _card("GPU-bbbb2222-0000", "0000:02:00.0", "NVIDIA GeForce RTX 4090", (8, 9), 16384, 1),
        _card("GPU-cccc3333-0000", "0000:03:00.0", "NVIDIA GeForce RTX 3060", (8, 6), 3584, 2),
    ]


def test_fastest_first_puts_the_fast_card_first(mixed: list[CardInfo]) -> None:
    order = [c.uuid for c in cuda_order(mixed, None)]
    assert order == ["GPU-bbbb2222-0000", "GPU-aaaa1111-0000", "GPU-cccc3333-0000"]
    by_bus = [c.uuid for c in cuda_order(mixed, "PCI_BUS_ID")]
    assert by_bus == ["GPU-aaaa1111-0000", "GPU-bbbb2222-0000", "GPU-cccc3333-0000"]


def test_cuda_visible_devices_index_depends_on_device_order(mixed: list[CardInfo]) -> None:
    fast = resolve_cuda_visible_devices("0", mixed)
    assert fast.keys == ["GPU-bbbb2222-0000"]
    assert any("FASTEST_FIRST" in n for n in fast.notes)
    bus = resolve_cuda_visible_devices("0", mixed, "PCI_BUS_ID")
    assert bus.keys == ["GPU-aaaa1111-0000"]
    assert bus.notes == []


def test_cuda_visible_devices_uuid_prefix_and_invalid_entry_stops(mixed: list[CardInfo]) -> None:
    sel = resolve_cuda_visible_devices("GPU-cccc,7,0", mixed, "PCI_BUS_ID")
    # CUDA stops at the first invalid entry: "0" after "7" is ignored.
    assert sel.keys == ["GPU-cccc3333-0000"]
    assert sel.unmatched == ["7"]


def test_selection_by_bus_id_and_assignment_forms(mixed: list[CardInfo]) -> None:
    sel = resolve_selection(["00000000:03:00.0", "CUDA_VISIBLE_DEVICES=1,0"], mixed)
    assert sel is not None
    # "1" under FASTEST_FIRST is the first 3060 by bus order; "0" is the 4090.
    assert sel.keys == ["GPU-cccc3333-0000", "GPU-aaaa1111-0000", "GPU-bbbb2222-0000"]
    sel2 = resolve_selection(["CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=1"], mixed)
    assert sel2 is not None and sel2.keys == ["GPU-bbbb2222-0000"]
    assert resolve_selection(None, mixed) is None


def test_identical_cards_need_no_guess() -> None:
    cards = [
        _card(f"GPU-{i}{i}{i}{i}", f"0000:0{i}:00.0", "NVIDIA H200", (9, 0), 16896, i)
        for i in range(1, 3)
    ]
    sel = resolve_cuda_visible_devices("1", cards)
    assert sel.keys == ["GPU-2222"]
    assert sel.notes == []
