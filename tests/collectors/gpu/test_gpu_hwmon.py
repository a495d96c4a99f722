"""hwmon (xe, amdgpu) readers and PCIe AER over fake sysfs trees in tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from stress.collectors.gpu.aer import AerReader, parse_aer, upstream_port
from stress.collectors.gpu.backend import BackendUnavailable
from stress.collectors.gpu.hwmon import HwmonBackend, link_gen


def _write(base: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        p = base / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text + "\n")


def _card(
    root: Path, hwmon: str, bdf: str, upstream: str, hw: dict[str, str], dev: dict[str, str]
) -> None:
    """A PCI device under its upstream port, linked from bus/pci/devices and hwmon."""
    devdir = root / "sys/devices/pci0000:00" / upstream / bdf
    _write(devdir, {"uevent": f"DRIVER=x\nPCI_SLOT_NAME={bdf}", **dev})
    (root / "sys/devices/pci0000:00" / upstream).mkdir(parents=True, exist_ok=True)
    links = root / "sys/bus/pci/devices"
    links.mkdir(parents=True, exist_ok=True)
    (links / bdf).symlink_to(devdir)
    if not (links / upstream).exists():
        (links / upstream).symlink_to(root / "sys/devices/pci0000:00" / upstream)
    hwdir = root / "sys/class/hwmon" / hwmon
    _write(hwdir, hw)
    (hwdir / "device").symlink_to(devdir)


LINK = {
    "current_link_speed": "16.0 GT/s PCIe",
    "max_link_speed": "32.0 GT/s PCIe",
    "current_link_width": "8",
    "max_link_width": "16",
}


@pytest.fixture
def xe_tree(tmp_path: Path) -> Path:
    _card(
        tmp_path,
        "hwmon3",
        "0000:03:00.0",
        "0000:00:01.0",
        {
            "name": "xe",
            "energy1_input": "1000000000",
            "energy1_label": "card",
            "energy2_input": "800000000",
            "energy2_label": "pkg",
            "power1_max": "220000000",
            "power1_label": "card",
            "power1_crit": "400000000",
            "temp2_input": "61000",
            "temp2_label": "pkg",
            "temp3_input": "70500",
            "temp3_label": "vram",
            "temp4_input": "55000",
            "temp4_label": "pcie",
            "fan1_input": "1450",
        },
        {"device": "0xe20b", **LINK},
    )
    _write(tmp_path / "sys/class/hwmon/hwmon0", {"name": "coretemp", "temp1_input": "40000"})
    return tmp_path


def test_xe_card_read_in_si_units(xe_tree: Path) -> None:
    b = HwmonBackend(xe_tree)
    (info,) = b.open()
    assert (info.vendor, info.bus_id, info.key) == ("intel", "0000:03:00.0", "pci:0000:03:00.0")
    assert info.power_limit_w == pytest.approx(220.0)
    assert (info.pcie_gen, info.pcie_gen_max, info.pcie_width, info.pcie_width_max) == (4, 5, 8, 16)
    assert info.link_degraded()
    s1 = b.sample(10.0)[0]
    assert s1.energy_counter_j == pytest.approx(1000.0)
    assert s1.extra["pkg_energy_counter_j"] == pytest.approx(800.0)
    assert (s1.temp_c, s1.temp_mem_c, s1.extra["temp_pcie_c"]) == (61.0, 70.5, 55.0)
    assert s1.fan_rpm == 1450.0 and s1.extra["power1_crit_w"] == pytest.approx(400.0)
    # xe has no power input: power is the energy slope between samples.
    (xe_tree / "sys/class/hwmon/hwmon3/energy1_input").write_text("1180000000\n")
    s2 = b.sample(11.0)[0]
    assert s2.power_w == pytest.approx(180.0)
    assert "energy_counter" in info.supported and "fan" in info.supported


def test_amdgpu_card(tmp_path: Path) -> None:
    _card(
        tmp_path,
        "hwmon1",
        "0000:0c:00.0",
        "0000:00:03.1",
        {
            "name": "amdgpu",
            "power1_average": "250500000",
            "power1_cap": "300000000",
            "temp1_input": "58000",
            "temp1_label": "edge",
            "temp2_input": "75000",
            "temp2_label": "junction",
            "temp3_input": "80000",
            "temp3_label": "mem",
            "freq1_input": "2400000000",
            "freq1_label": "sclk",
            "freq2_input": "1250000000",
            "freq2_label": "mclk",
        },
        {
            "gpu_busy_percent": "87",
            "mem_busy_percent": "40",
            "mem_info_vram_used": str(10 * 2**30),
            "mem_info_vram_total": str(24 * 2**30),
            **LINK,
        },
    )
    (info,) = HwmonBackend(tmp_path).open()
    assert info.vendor == "amd" and info.mem_total_mib == pytest.approx(24 * 1024)
    s = HwmonBackend(tmp_path)
    s.open()
    r = s.sample(1.0)[0]
    assert r.power_w == pytest.approx(250.5) and r.power_limit_w == pytest.approx(300.0)
    assert (r.temp_c, r.temp_mem_c, r.extra["temp_junction_c"]) == (58.0, 80.0, 75.0)
    assert (r.util_gpu, r.util_mem, r.sm_mhz, r.mem_mhz) == (87.0, 40.0, 2400, 1250)
    assert r.mem_used_mib == pytest.approx(10 * 1024)
    assert r.energy_counter_j is None  # amdgpu hwmon has none: the collector integrates


def test_no_hwmon_gpu_is_unavailable(tmp_path: Path) -> None:
    _write(tmp_path / "sys/class/hwmon/hwmon0", {"name": "nvme"})
    with pytest.raises(BackendUnavailable):
        HwmonBackend(tmp_path).open()


def test_link_gen() -> None:
    assert [link_gen(s) for s in ("2.5 GT/s PCIe", "8.0 GT/s", "64.0 GT/s PCIe", None, "x")] == [
        1,
        3,
        6,
        None,
        None,
    ]


AER_COR = """RxErr 0
BadTLP 2
BadDLLP 1
Rollover 0
Timeout 0
NonFatalErr 0
CorrIntErr 0
HeaderOF 0
TOTAL_ERR_COR 3
"""


def test_parse_aer() -> None:
    parsed = parse_aer(AER_COR + "garbage line here\n")
    assert parsed["BadTLP"] == 2 and parsed["TOTAL_ERR_COR"] == 3
    assert "garbage" not in parsed


def test_aer_reader_card_and_upstream_port(xe_tree: Path) -> None:
    dev = xe_tree / "sys/devices/pci0000:00/0000:00:01.0/0000:03:00.0"
    port = xe_tree / "sys/devices/pci0000:00/0000:00:01.0"
    _write(
        dev,
        {
            "aer_dev_correctable": AER_COR,
            "aer_dev_nonfatal": "Undefined 0\nTOTAL_ERR_NONFATAL 0",
            "aer_dev_fatal": "Undefined 0\nTOTAL_ERR_FATAL 0",
        },
    )
    _write(
        port,
        {"aer_dev_correctable": "RxErr 5\nTOTAL_ERR_COR 5", "aer_rootport_total_err_fatal": "1"},
    )
    assert upstream_port(xe_tree, "0000:03:00.0") == "0000:00:01.0"
    r = AerReader(xe_tree, "0000:03:00.0")
    assert r.counters() == {
        "aer_cor": 3,
        "aer_nonfatal": 0,
        "aer_fatal": 0,
        "aer_upstream_cor": 5,
        "aer_upstream_rootport_fatal": 1,
    }
    assert not AerReader(xe_tree, "0000:09:00.0").available()


async def test_aer_increment_is_a_run_event_in_the_verdict(xe_tree: Path) -> None:
    import asyncio

    from stress.collectors.base import RunClock
    from stress.collectors.gpu.collector import GpuCollector
    from stress.collectors.gpu.fake import RecordingSink

    dev = xe_tree / "sys/devices/pci0000:00/0000:00:01.0/0000:03:00.0"
    _write(dev, {"aer_dev_correctable": AER_COR, "aer_dev_fatal": "TOTAL_ERR_FATAL 0"})
    sink = RecordingSink()
    col = GpuCollector(
        sink, RunClock.start(), 0.02, backends=[HwmonBackend(xe_tree)], sysfs_root=xe_tree
    )
    stop = asyncio.Event()
    task = asyncio.create_task(col.run(stop))
    await asyncio.sleep(0.1)
    _write(dev, {"aer_dev_fatal": "TOTAL_ERR_FATAL 1"})
    await asyncio.sleep(0.1)
    stop.set()
    await asyncio.wait_for(task, timeout=5)
    aer = [e for e in sink.events if e.kind == "aer"]
    assert len(aer) == 1 and aer[0].severity == "error" and aer[0].data["counter"] == "aer_fatal"
    s = col.summary()
    assert s["hw_errors"] == {"aer": 1}
    assert s["cards"][0]["energy_source"] == "counter"
    assert "pcie_link_degraded" in sink.kinds()
