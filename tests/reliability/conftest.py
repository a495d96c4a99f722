"""Every test in this folder is part of the reliability suite and starts subprocesses."""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.reliability)


@pytest.fixture
def out(tmp_path: Path) -> Path:
    """The ``--out`` folder of the run under test."""
    return tmp_path / "out"
