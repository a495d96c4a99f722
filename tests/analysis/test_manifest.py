"""manifest.json typed once (``stress.analysis.manifest``): each missing or null field has
one default, which every output shows."""

from __future__ import annotations

from pathlib import Path

import orjson

from stress.analysis.manifest import Manifest
from stress.analysis.runfiles import read_manifest_checked
from stress.report.archive import row_for
from stress.report.build import make_report
from stress.report.summary import build_summary
from tests.report.synth import manifest, request, write_run


def test_missing_fields_read_as_their_defaults() -> None:
    m = Manifest.of({}, Path("out/20261204-quick"))
    assert m.run_id == "20261204-quick"
    assert m.scenario_name == "?" and m.slo == {} and m.cache_mode is None
    assert m.probe == {} and m.plan_peak is None and m.time_scale == 1.0
    assert m.tokenizer == "" and not m.finished and m.models == ()


def test_fields_of_the_wrong_kind_are_not_taken_for_values() -> None:
    m = Manifest.of(
        {"plan": {"peak": True}, "models": ["x", {"id": "a"}], "run_id": "", "end_time": 5},
        Path("r"),
    )
    assert m.plan_peak is None and m.models == ({"id": "a"},) and m.run_id == "r"
    assert m.finished and m.end_time == 5.0


def test_a_null_run_id_is_the_directory_name_in_every_output(tmp_path: Path) -> None:
    """summary.json kept a null run id while the report and ls showed the folder's name."""
    d = write_run(tmp_path, manifest(), [request(0, i, float(i)) for i in range(1, 6)])
    man = orjson.loads((d / "manifest.json").read_bytes())
    man["run_id"] = None
    (d / "manifest.json").write_bytes(orjson.dumps(man))
    assert read_manifest_checked(d).run_id == d.name
    assert build_summary(d)["run_id"] == d.name
    assert make_report(d, charts=False).run_id == d.name
    assert row_for(d).run_id == d.name
