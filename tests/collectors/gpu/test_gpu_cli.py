"""``stress gpus``: one line and exit 0 without a GPU; cards listed by identity otherwise."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest

import stress.cli.gpus as cli
from stress.collectors.gpu.discover import Discovery, discover_report, held_memory
from stress.collectors.gpu.fake import UUID_A, FakeCard, FakeNvml
from stress.collectors.gpu.model import CardInfo, ProcessInfo
from stress.collectors.gpu.nvml import NvmlBackend


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    return p.parse_args(list(argv))


def test_no_gpu_one_line_exit_zero(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    notes = ["nvml: no NVIDIA driver (NVML library not found)", "hwmon: no xe hwmon"]
    monkeypatch.setattr(cli, "discover_report", lambda **_: Discovery([], notes))
    assert cli.main(_args()) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("No GPU found (nvml: no NVIDIA driver")


def test_discovery_exception_is_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def boom(**_: object) -> Discovery:
        raise RuntimeError("bad")

    monkeypatch.setattr(cli, "discover_report", boom)
    assert cli.main(_args()) == 0
    assert capsys.readouterr().out == "GPU discovery failed: bad\n"


def test_lists_cards_with_support_and_json(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    card = FakeCard(UUID_A, "00000000:3B:00.0", unsupported={"nvmlDeviceGetFanSpeed"})
    found = discover_report(backends=[NvmlBackend(FakeNvml([card]))])
    monkeypatch.setattr(cli, "discover_report", lambda **_: found)
    assert cli.main(_args()) == 0
    out = capsys.readouterr().out
    assert UUID_A in out and "bus 0000:3b:00.0" in out and "driver 580.159.04" in out
    assert "power limit 700 W" in out and "PCIe gen 5 x16 (max gen 5 x16)" in out
    assert "not supported: fan" in out
    assert cli.main(_args("--json")) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["cards"][0]["uuid"] == UUID_A and "energy_counter" in doc["cards"][0]["supported"]


def test_held_memory_lines() -> None:
    def card(uuid: str, bus: str, **kw: Any) -> CardInfo:
        return CardInfo("nvidia", "nvml", "NVIDIA H200", uuid, bus, **kw)

    cards = [
        card("GPU-a", "0000:01:00.0", processes=[ProcessInfo(11, 7000.0)]),
        card(
            "GPU-b",
            "0000:02:00.0",
            processes=[],
            mem_used_mib=60_000.0,
            mem_total_mib=143_771.0,
        ),
        # An idle H200 shows ~615 MiB used by the driver: not a holder.
        card("GPU-c", "0000:03:00.0", processes=[], mem_used_mib=615.0),
    ]
    lines = held_memory(cards)
    assert len(lines) == 2
    assert "pid 11 7,000 MiB" in lines[0]
    assert "60,000 of 143,771 MiB in use and no process listed" in lines[1]
