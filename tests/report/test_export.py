"""``stress export RUN --csv|--parquet``: requests with the derived figures, documented.

The columns come from one table (``stress.report.export.COLUMNS``), which docs/export.md repeats
(generated; a test holds it equal). The values come through the one analysis layer, so an
exported figure is the report's: a real simulator run's TTFT p95 from the CSV equals
``summary.json``'s.
"""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import orjson
import pytest

from stress.analysis import figures
from stress.cli.main import main
from stress.report import export
from tests.report.synth import manifest, request, write_run

ROOT = Path(__file__).resolve().parents[2]


def _csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def _synthetic(tmp_path: Path, scale: float | None = None) -> Path:
    m = manifest("exp")
    if scale is not None:
        m["time_scale"] = scale
    reqs = [
        request(0, 1, 0.0, ttft=0.5, decode=20.0, e2e=4.0, warmup=True),
        request(0, 2, 5.0, ttft=1.0, decode=25.0, e2e=5.0, conv=2000, cached=1500, reusable=1200),
        request(1, 1, 1.0, outcome="error", error_class="http_5xx", e2e=0.2),
        request(1, 2, 7.0, ttft=2.0, decode=10.0, e2e=6.0, cached=None, reusable=800),
    ]
    return write_run(tmp_path, m, reqs)


def test_docs_table_of_columns_is_generated_from_the_one_table() -> None:
    docs = (ROOT / "docs" / "export.md").read_text(encoding="utf-8")
    marker = "python -m stress.report.export -->\n"
    start = docs.index(marker) + len(marker)
    end = docs.index("<!-- end generated -->")
    assert docs[start:end] == export.columns_markdown(), (
        "docs/export.md is out of date: regenerate its table with `python -m stress.report.export`"
    )
    names = [c.name for c in export.COLUMNS]
    assert len(names) == len(set(names))


def test_csv_has_every_request_and_the_derived_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _synthetic(tmp_path)
    assert main(["export", str(run), "--csv", "-"]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0] == ",".join(c.name for c in export.COLUMNS)
    rows = _csv(text)
    assert len(rows) == 4
    warm, cached, failed, unknown = rows
    assert warm["warmup"] == "true" and warm["in_latency_figures"] == "false"
    assert cached["run_id"] == "run-exp" and cached["in_latency_figures"] == "true"
    assert float(cached["tpot_s"]) == pytest.approx(1 / 25.0)
    assert float(cached["t_end"]) == pytest.approx(10.0)
    assert float(cached["cached_share"]) == pytest.approx(0.75)
    assert cached["kept_tokens"] == "1200"  # min(cached, reusable): block alignment clamped
    assert failed["outcome"] == "error" and failed["error_class"] == "http_5xx"
    assert (
        failed["ttft_s"] == ""
        and failed["tpot_s"] == ""
        and failed["in_latency_figures"] == "false"
    )
    assert unknown["kept_tokens"] == "" and unknown["cached_share"] == ""
    # the CSV gives the report's figures back
    ttfts = [float(r["ttft_s"]) for r in rows if r["in_latency_figures"] == "true"]
    records = [orjson.loads(x) for x in (run / "requests.jsonl").read_bytes().splitlines()]
    assert figures.percentile(ttfts, 95) == pytest.approx(figures.ttft_p95(records))


def test_csv_goes_into_the_run_directory_by_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _synthetic(tmp_path)
    assert main(["export", str(run), "--csv"]) == 0
    assert f"CSV: {run / 'requests.csv'} (4 requests" in capsys.readouterr().out
    assert len(_csv((run / "requests.csv").read_text(encoding="utf-8"))) == 4
    out = tmp_path / "elsewhere.csv"
    assert main(["export", str(run), "--csv", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == (run / "requests.csv").read_text(encoding="utf-8")


def test_a_time_scaled_run_exports_simulated_seconds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _synthetic(tmp_path, scale=10.0)
    assert main(["export", str(run), "--csv", "-"]) == 0
    row = _csv(capsys.readouterr().out)[1]
    assert float(row["ttft_s"]) == pytest.approx(10.0)  # 1 wall s x 10
    assert float(row["decode_tok_s"]) == pytest.approx(2.5)  # 25 per wall s / 10
    assert float(row["t_start"]) == pytest.approx(50.0)


def test_export_needs_exactly_one_format(tmp_path: Path) -> None:
    run = _synthetic(tmp_path)
    for argv in (["export", str(run)], ["export", str(run), "--csv", "--parquet"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2


def test_a_missing_run_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(tmp_path / "nope"), "--csv", "-"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("stress: ") and len(err.strip().splitlines()) == 1, err


def test_parquet_without_pyarrow_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _synthetic(tmp_path)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow -> ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    assert main(["export", str(run), "--parquet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install '.[parquet]'" in err[0], err
    assert not (run / "requests.parquet").exists()


def test_the_parquet_extra_is_pinned() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    extra = meta["project"]["optional-dependencies"]["parquet"]
    assert len(extra) == 1 and extra[0].startswith("pyarrow==")
    assert "pyarrow" not in str(meta["project"]["dependencies"])  # optional only


def test_parquet_has_typed_documented_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    run = _synthetic(tmp_path)
    assert main(["export", str(run), "--parquet"]) == 0
    assert "Parquet:" in capsys.readouterr().out
    table = pq.read_table(run / "requests.parquet")
    assert table.column_names == [c.name for c in export.COLUMNS]
    assert table.num_rows == 4
    kinds = {"int": "int64", "float": "double", "str": "string", "bool": "bool"}
    for c in export.COLUMNS:
        field = table.schema.field(c.name)
        assert str(field.type) == kinds[c.kind], c.name
        assert field.metadata[b"meaning"].decode() == c.meaning
    d: dict[str, list[Any]] = table.to_pydict()
    assert d["tpot_s"][1] == pytest.approx(0.04) and d["ttft_s"][2] is None
    assert d["warmup"] == [True, False, False, False]


SCENARIO = """\
name: export_sim
target: {url: sim, sim: {time_scale: 20, reply_tokens_min: 16, reply_tokens_max: 48}}
users: {count: 3, think_time: {min: 0s, max: 0.5s}}
duration: 20s
conversation:
  ceiling_tokens: 4000
  turn:
    ask: ["Summarise this.", "What is the key point?"]
warmup: {rounds: 1}
"""


@pytest.mark.slow
def test_a_real_run_exports_the_reports_figures(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    stress = [sys.executable, "-m", "stress"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(
        [*stress, "run", str(scenario), "--no-tui", "--out", str(tmp_path), "--fail-on", "never"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = next(p for p in tmp_path.iterdir() if p.is_dir())
    out = subprocess.run(
        [*stress, "export", str(run), "--csv", "-"], capture_output=True, text=True, env=env
    )
    assert out.returncode == 0, out.stderr
    rows = _csv(out.stdout)
    recorded = (run / "requests.jsonl").read_bytes().splitlines()
    assert len(rows) == len(recorded) > 5
    summary = orjson.loads((run / "summary.json").read_bytes())
    counted = [r for r in rows if r["in_latency_figures"] == "true"]
    p95 = figures.percentile([float(r["ttft_s"]) for r in counted], 95)
    assert p95 == pytest.approx(summary["overall"]["ttft_s"]["p95"], rel=1e-6)
    # per-request ITL from tokens.bin, in simulated seconds like the rest
    itl = [r for r in rows if r["in_itl_figures"] == "true"]
    assert itl and all(r["itl_chunks"] and r["itl_p95_s"] for r in itl)
    assert all(r["itl_chunks"] == "" for r in rows if r["warmup"] == "true")
    tpot = sorted(float(r["tpot_s"]) for r in itl)
    assert 0.01 < tpot[len(tpot) // 2] < 0.5  # ~1/40 simulated s at 40 tok/s
