"""NVML backend: unsupported calls detected once, throttle decoding, start-up failures."""

from __future__ import annotations

import pytest

from stress.collectors.gpu.backend import BackendUnavailable
from stress.collectors.gpu.fake import UUID_A, UUID_B, FakeCard, FakeNvml
from stress.collectors.gpu.nvml import NvmlBackend
from stress.collectors.gpu.throttle import decode


def test_not_supported_is_cached_per_card_and_call() -> None:
    a = FakeCard(
        UUID_A,
        "00000000:3B:00.0",
        unsupported={"nvmlDeviceGetFanSpeed", "nvmlDeviceGetTotalEccErrors"},
    )
    b = FakeCard(UUID_B, "00000000:AF:00.0")
    nv = FakeNvml([a, b])
    backend = NvmlBackend(nv)
    infos = backend.open()
    for t in range(5):
        samples = backend.sample(float(t))
    assert nv.calls[(UUID_A, "nvmlDeviceGetFanSpeed")] == 1
    # Two labels (corrected / uncorrected) each asked once.
    assert nv.calls[(UUID_A, "nvmlDeviceGetTotalEccErrors")] == 2
    assert nv.calls[(UUID_B, "nvmlDeviceGetFanSpeed")] == 6  # open + 5 samples
    assert samples[0].fan_pct is None and samples[1].fan_pct == 30.0
    assert "ecc_uncorrected" not in samples[0].error_counters
    assert "fan" in infos[0].unsupported and "fan" in infos[1].supported
    assert "ecc" in infos[0].unsupported
    assert any("nvmlDeviceGetFanSpeed" in x for x in backend.unsupported()[UUID_A])
    backend.close()
    assert nv.shutdowns == 1


def test_missing_memory_temperature_field_is_skipped() -> None:
    card = FakeCard(UUID_A, "00000000:3B:00.0", mem_temp=None)
    nv = FakeNvml([card])
    backend = NvmlBackend(nv)
    info = backend.open()[0]
    backend.sample(1.0)
    backend.sample(2.0)
    assert "temp_mem" in info.unsupported
    assert nv.calls[(UUID_A, "nvmlDeviceGetFieldValues")] == 1


def test_throttle_mask_read_and_decoded() -> None:
    card = FakeCard(UUID_A, "00000000:3B:00.0", reasons=0x4 | 0x80)
    backend = NvmlBackend(FakeNvml([card]))
    backend.open()
    s = backend.sample(1.0)[0]
    assert s.throttle_mask == 0x84
    assert decode(s.throttle_mask) == ["sw_power_cap", "hw_power_brake"]


@pytest.mark.parametrize(
    ("mask", "names"),
    [
        (0, []),
        (None, []),
        (0x1, ["gpu_idle"]),
        (0x8 | 0x40, ["hw_slowdown", "hw_thermal"]),
        (0x20, ["sw_thermal"]),
        (0x4 | 0x1000, ["sw_power_cap", "bit_0x1000"]),
    ],
)
def test_decode(mask: int | None, names: list[str]) -> None:
    assert decode(mask) == names


def test_no_driver_is_unavailable_with_a_reason() -> None:
    with pytest.raises(BackendUnavailable, match="no NVIDIA driver"):
        NvmlBackend(FakeNvml([], init_error=12)).open()
    with pytest.raises(BackendUnavailable, match="no NVIDIA GPU"):
        NvmlBackend(FakeNvml([])).open()


def test_gpu_lost_becomes_an_event_once() -> None:
    card = FakeCard(UUID_A, "00000000:3B:00.0")
    nv = FakeNvml([card])
    backend = NvmlBackend(nv)
    backend.open()

    def lost(_c: FakeCard) -> int:
        from stress.collectors.gpu.fake import FakeNVMLError

        raise FakeNVMLError(15)

    nv.nvmlDeviceGetPowerUsage = lost  # type: ignore[method-assign,assignment]
    backend.sample(1.0)
    backend.sample(2.0)
    events = backend.drain_events()
    assert [e.kind for e in events] == ["gpu_lost"]
    assert events[0].key == UUID_A


def test_processes_listed_for_the_probe() -> None:
    from types import SimpleNamespace

    card = FakeCard(
        UUID_A, "00000000:3B:00.0", procs=[SimpleNamespace(pid=4242, usedGpuMemory=7000 * 2**20)]
    )
    info = NvmlBackend(FakeNvml([card])).open()[0]
    assert info.processes is not None
    assert [(p.pid, p.used_mib) for p in info.processes] == [(4242, 7000.0)]
