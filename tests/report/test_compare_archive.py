"""``stress compare`` and ``stress ls`` on synthetic runs with known differences."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np
import pytest

from stress.report import cli
from stress.report.archive import archive, to_csv
from stress.report.compare import compare, render_compare_md
from tests.report.synth import manifest, request, write_run


def _run(
    root: Path,
    name: str,
    ttfts: list[float],
    *,
    pool: float,
    cached: float,
    start: float = 1_796_000_000.0,
    sim_kv: int | None = None,
    tiers: dict[str, dict[str, float]] | None = None,
) -> Path:
    reqs = [
        request(
            i % 4,
            i // 4 + 1,
            i * 2.0,
            ttft=t,
            conv=4000,
            prompt=4000,
            cached=int(cached * 4000),
            reusable=4000,
        )
        for i, t in enumerate(ttfts)
    ]
    man = manifest(
        "pooltest",
        users=4,
        pool=pool,
        start_time=start,
        sim={"kv_tokens": sim_kv} if sim_kv else None,
    )
    man["run_id"] = name
    man["collectors"]["server"]["hit_rate_run"] = cached
    if tiers:
        man["scenario"]["slo"]["tiers"] = tiers
    return write_run(root, man, reqs)


def _ttfts(seed: int, mean: float, n: int = 60) -> list[float]:
    return [float(x) for x in np.random.default_rng(seed).normal(mean, 0.3, n)]


def _row(md_rows: list[list[str]], label: str) -> list[str]:
    return next(r for r in md_rows if r[0].startswith(label))


def test_different_pools_differ_significantly(tmp_path: Path) -> None:
    a = _run(tmp_path, "small", _ttfts(1, 3.0), pool=100_000, cached=0.2, sim_kv=100_000)
    b = _run(tmp_path, "big", _ttfts(2, 1.0), pool=400_000, cached=0.8, sim_kv=400_000)
    c = compare([a, b])
    assert [g.label for g in c.groups] == ["A", "B"]
    assert _row(c.figures.rows, "TTFT")[-1] == "significant"
    assert _row(c.figures.rows, "prefix-cache hit")[-1] == "significant"
    assert "too few runs" in _row(c.figures.rows, "server hit rate")[-1]
    changed = {r[0] for r in c.fingerprints.rows}
    assert {"server.kv_pool_tokens", "sim.kv_tokens"} <= changed
    md = render_compare_md(c)
    assert "bootstrap 95% CI" in md and "correlated" in md


def test_identical_runs_are_within_noise_and_compared_run_by_run(tmp_path: Path) -> None:
    a = _run(tmp_path, "r1", _ttfts(1, 2.0), pool=100_000, cached=0.5)
    b = _run(tmp_path, "r2", _ttfts(2, 2.0), pool=100_000, cached=0.5)
    c = compare([a, b])
    assert "run-to-run noise" in c.notes[0]
    for label in ("TTFT", "decode", "prefix-cache hit"):
        assert _row(c.figures.rows, label)[-1] == "within noise"
    assert c.fingerprints.rows == []


def test_repeated_runs_are_pooled_and_judged_over_runs(tmp_path: Path) -> None:
    runs = [
        _run(tmp_path, f"s{i}", _ttfts(i, 3.0), pool=100_000, cached=0.2 + i / 100, sim_kv=100_000)
        for i in range(3)
    ] + [
        _run(
            tmp_path,
            f"b{i}",
            _ttfts(10 + i, 1.0),
            pool=400_000,
            cached=0.8 + i / 100,
            sim_kv=400_000,
        )
        for i in range(3)
    ]
    c = compare(runs)
    assert [len(g.runs) for g in c.groups] == [3, 3]
    assert "A = 3 runs" in c.notes[0]
    assert "over runs (Welch): significant" in _row(c.figures.rows, "TTFT")[-1]
    # 12 (run, user) clusters a side: runs drawn first, then users within them
    assert "; per run, then user: " in _row(c.figures.rows, "TTFT")[-1]
    assert "runs with replacement, then within each drawn run its users" in c.method
    assert _row(c.figures.rows, "server hit rate")[-1] == "significant"
    assert "(runs=3)" in _row(c.figures.rows, "server hit rate")[1]


def test_verdicts_show_each_runs_slo_tiers(tmp_path: Path) -> None:
    """The run-by-run verdicts grade each ``slo.tiers`` entry as ``stress ls`` does; a run
    without tiers shows "-". The method paragraph says how repeated runs are resampled."""
    tiers = {"interactive": {"ttft_p95": 2.0}, "batch": {"ttft_p95": 30.0}}
    slow = _run(tmp_path, "slow", _ttfts(1, 3.0), pool=100_000, cached=0.2, tiers=tiers)
    fast = _run(tmp_path, "fast", _ttfts(2, 1.0), pool=400_000, cached=0.8, tiers=tiers)
    plain = _run(tmp_path, "plain", _ttfts(3, 1.0), pool=200_000, cached=0.5)
    c = compare([slow, fast, plain])
    col = c.verdicts.columns.index("SLO tiers")
    cells = {r[0]: r[col] for r in c.verdicts.rows}
    assert re.fullmatch(r"interactive MISSED x1\.\d\d, batch MET", cells["slow"]), cells
    assert cells["fast"] == "interactive MET, batch MET"
    assert cells["plain"] == "-"
    md = render_compare_md(c)
    assert "| SLO tiers |" in md and "interactive MISSED x1." in md
    assert "per run, then user" in c.method and "(per user)" in c.method
    assert "One run's interval cannot see run-to-run noise" in md


def test_flag_without_effect_is_called_out(tmp_path: Path) -> None:
    a = _run(tmp_path, "x", _ttfts(1, 2.0), pool=100_000, cached=0.5)
    b = _run(tmp_path, "y", _ttfts(2, 2.0), pool=100_000, cached=0.5)
    import orjson

    m = orjson.loads((b / "manifest.json").read_bytes())
    m["scenario_sha256"] = "cd" * 32  # the scenario asked for something else...
    (b / "manifest.json").write_bytes(orjson.dumps(m))
    c = compare([a, b])  # ...but the server reports the same configuration
    assert any("may not have taken effect" in n for n in c.notes)


def test_archive_rows_filter_sort_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _run(tmp_path, "early", _ttfts(1, 3.0), pool=1e5, cached=0.2, start=1_796_000_000.0)
    _run(tmp_path, "late", _ttfts(2, 1.0), pool=1e5, cached=0.8, start=1_796_100_000.0)
    other = manifest("other")
    other["run_id"] = "other-run"
    write_run(tmp_path, other, [request(0, 1, 0.0)])
    (tmp_path / "not-a-run").mkdir()
    rows, problems = archive(tmp_path, scenario="pool*", sort="ttft_p95")
    assert [r.run_id for r in rows] == ["late", "early"] and not problems
    assert rows[0].verdict == "PASS" and rows[0].users == 4 and rows[0].hit_rate == 0.8
    assert rows[0].output_tok_s == pytest.approx(60 * 80 / 100.0)
    csv_text = to_csv(rows)
    assert csv_text.splitlines()[0].startswith("date,run_id,scenario,target,model,users")
    assert len(csv_text.splitlines()) == 3
    p = argparse.ArgumentParser()
    cli.add_ls_arguments(p)
    out_csv = tmp_path / "runs.csv"
    assert cli.ls_main(p.parse_args([str(tmp_path), "--csv", str(out_csv)])) == 0
    shown = capsys.readouterr().out
    assert "other" in shown and "pooltest" in shown and "TTFT p95 s" in shown
    assert len(out_csv.read_text().splitlines()) == 4


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from stress.core.errors import StressError

    p = argparse.ArgumentParser()
    cli.add_compare_arguments(p)
    assert cli.compare_main(p.parse_args([str(tmp_path)])) == 2
    assert "at least two" in capsys.readouterr().err
    with pytest.raises(StressError, match="not a run directory"):
        cli.compare_main(p.parse_args([str(tmp_path), str(tmp_path)]))
    p = argparse.ArgumentParser()
    cli.add_ls_arguments(p)
    with pytest.raises(StressError, match="not a folder"):
        cli.ls_main(p.parse_args([str(tmp_path / "missing")]))
