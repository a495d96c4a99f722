"""The manifest's package versions: read from the installed ``dist-info`` folders' names,
they are what ``importlib.metadata`` says, found in ``sys.path`` order."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import pytest

from stress.runtime.provenance import PACKAGES, platform_text, versions


def test_the_versions_are_the_installed_ones() -> None:
    got = versions()
    for name in PACKAGES:
        try:
            expected = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            assert name not in got
        else:
            assert got[name] == expected, name


def test_the_first_on_the_path_wins_and_names_compare_as_the_standard_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    (first / "nvidia_ml_py-99.1.dist-info").mkdir(parents=True)  # nvidia-ml-py, spelt so
    (first / "NumPy-9.9.9.dist-info").mkdir()
    (second / "numpy-1.0.dist-info").mkdir(parents=True)
    (second / "orjson-7.7.dist-info").mkdir()
    (first / "not-a-folder.txt").write_text("")
    egg = first / "uvloop.egg-info"  # a development install: the version is inside
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: uvloop\nVersion: 5.5.5\n")
    monkeypatch.setattr("sys.path", [str(first), str(tmp_path / "gone"), str(second)])
    got = versions()
    assert got["nvidia-ml-py"] == "99.1"
    assert got["numpy"] == "9.9.9"
    assert got["orjson"] == "7.7"
    assert got["uvloop"] == "5.5.5"
    assert "aiohttp" not in got  # not on this path
    assert list(got)[:2] == ["stress", "python"]


def test_the_platform_text_is_the_standard_librarys() -> None:
    """The manifest's ``host.platform``, read without scanning the Python binary: the text
    ``platform.platform()`` gives, but for the glibc version, which is the running one
    (``platform`` gives the newest one the binary was linked against)."""
    import os
    import platform

    text = platform_text()
    if sys.platform != "linux" or not os.confstr("CS_GNU_LIBC_VERSION"):
        assert text == platform.platform()
        return
    system, release, machine = platform.system(), platform.release(), platform.machine()
    version = os.confstr("CS_GNU_LIBC_VERSION").split()[1]
    assert text == f"{system}-{release}-{machine}-with-glibc{version}"
    assert platform.platform().startswith(f"{system}-{release}-{machine}-with-glibc")
