"""The typed read model: the row readers get has every field the run writes, and a line
from a newer stress is refused in one line, never misread."""

from __future__ import annotations

from pathlib import Path
from typing import get_type_hints

import pytest

from stress.analysis.rows import EventRow, RequestRow
from stress.analysis.rundata import load_run
from stress.core.errors import RunDirError
from stress.core.events import RunEvent
from stress.core.record import SCHEMA_VERSION, RequestRecord
from tests.report.synth import manifest, request, write_run

WRITTEN_BY_THE_RECORDER = {"unserializable"}


def test_request_row_has_exactly_the_record_fields() -> None:
    """A renamed or added RequestRecord field must be renamed or added in RequestRow too,
    so that mypy checks every reader against what is written."""
    row = set(get_type_hints(RequestRow)) - WRITTEN_BY_THE_RECORDER
    assert row == set(RequestRecord.__dataclass_fields__)


def test_event_row_has_exactly_the_event_fields() -> None:
    assert set(get_type_hints(EventRow)) == set(RunEvent.__dataclass_fields__)


def test_records_carry_the_schema_version() -> None:
    assert RequestRecord(0, 1, 1, 1).schema_version == SCHEMA_VERSION == 1


def test_old_lines_without_a_version_are_read(tmp_path: Path) -> None:
    reqs = [request(0, 1, 0.0)]
    assert "schema_version" not in reqs[0]
    assert len(load_run(write_run(tmp_path, manifest(), reqs)).requests) == 1


def test_a_newer_schema_is_refused_in_one_line(tmp_path: Path) -> None:
    reqs = [request(0, 1, 0.0), {**request(0, 2, 1.0), "schema_version": SCHEMA_VERSION + 1}]
    with pytest.raises(RunDirError) as e:
        load_run(write_run(tmp_path, manifest(), reqs))
    msg = str(e.value)
    assert "record 2 has schema_version 2" in msg and "upgrade stress" in msg
    assert "\n" not in msg


def test_collector_results_live_beside_the_manifest(tmp_path: Path) -> None:
    """collectors.json holds what the collectors measured; a run from before the split
    (results in the manifest) reads the same; a damaged file is one line."""
    import orjson

    old = write_run(tmp_path / "old", manifest(pool=50_000.0), [request(0, 1, 0.0)])
    assert load_run(old).collector("server")["kv_pool_tokens"] == 50_000.0
    new = write_run(tmp_path / "new", manifest(), [request(0, 1, 0.0)])
    (new / "collectors.json").write_bytes(orjson.dumps({"server": {"kv_pool_tokens": 7.0}}))
    assert load_run(new).collector("server") == {"kv_pool_tokens": 7.0}
    (new / "collectors.json").write_bytes(b'{"server": {"kv_pool_tokens": "lots"}}')
    with pytest.raises(RunDirError) as e:
        load_run(new)
    assert "collectors.json is damaged: collectors.server.kv_pool_tokens is str" in str(e.value)
