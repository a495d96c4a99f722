"""Live Prometheus metrics (``--metrics-port``): the real CLI against the simulator, scraped
over HTTP while it runs; a port that cannot be used is one line, exit 2."""

from __future__ import annotations

import math
import queue
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from array import array
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from stress.core.record import RequestRecord
from stress.live.metrics_export import MetricsExporter, MetricsPortError, RunInfo
from tests.cli.test_cli import ROOT, cli, env, records, run_dir

KEY = 'sk-live-"metrics"\\key-5e1f'

# 16 simulated seconds at x4: about 4 s of wall time, long enough for several scrapes and a
# few client-health samples (one a second)
SIM_SECONDS, TIME_SCALE, DRAIN_S = 16.0, 4.0, 10.0
SCENARIO = f"""\
name: metrics_run
target: {{url: sim, api_key_env: MY_KEY, sim: {{time_scale: {TIME_SCALE:g}}}}}
users: {{count: 3, ramp_up: 1s, think_time: {{min: 0.5s, max: 1s}}}}
duration: {SIM_SECONDS:g}s
conversation:
  ceiling_tokens: 3000
  turn:
    paste: {{corpus: {ROOT / "corpora" / "en"}, tokens: [200, 400]}}
    ask: ["Summarise this.", "What is the key point?"]
request: {{max_tokens: 30}}
timeouts: {{drain: {DRAIN_S:g}s}}
"""
STARTUP_S = 60.0  # the interpreter, the simulator process, the tokenizer, the report at the end
RUN_TIMEOUT_S = SIM_SECONDS / TIME_SCALE + DRAIN_S + STARTUP_S

Families = dict[str, Any]


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        body: bytes = resp.read()
    return body.decode()


def parse(text: str) -> Families:
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(fams: Families, family: str, sample: str | None = None, **labels: str) -> float:
    """Sum of the family's samples named ``sample`` (default: the family's own, a
    counter's ``_total``) whose labels include ``labels``; 0 when there is none."""
    names = {sample} if sample else {family, family + "_total"}
    fam = fams.get(family)
    if fam is None:
        return 0.0
    return float(
        sum(
            s.value
            for s in fam.samples
            if s.name in names and all(s.labels.get(k) == v for k, v in labels.items())
        )
    )


def _lines(stream: Any, out: queue.Queue[str | None]) -> None:
    for line in iter(stream.readline, ""):
        out.put(line)
    out.put(None)


def _next_line(lines: queue.Queue[str | None], seen: list[str], deadline: float) -> str | None:
    try:
        line = lines.get(timeout=max(0.01, min(0.25, deadline - time.monotonic())))
    except queue.Empty:
        return ""
    if line is not None:
        seen.append(line)
    return line


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One ``stress run --metrics-port 0`` on the simulator, scraped every 0.2 s while it
    runs, then once more while it lingers (every request recorded), then ended by Ctrl-C."""
    base = tmp_path_factory.mktemp("metrics")
    path = base / "s.yaml"
    path.write_text(SCENARIO)
    out = base / "out"
    args = ("--out", str(out), "--no-tui", "--metrics-port", "0", "--metrics-linger", "60")
    proc = subprocess.Popen(
        cli("run", str(path), *args, "--fail-on", "never"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env(MY_KEY=KEY),
    )
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stdout, lines), daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + RUN_TIMEOUT_S
    try:
        url = ""
        while not url and time.monotonic() < deadline:
            line = _next_line(lines, seen, deadline)
            assert line is not None, "".join(seen)
            if line.startswith("live metrics: http://"):
                url = line.split()[2]
        assert url, f"no metrics address within {RUN_TIMEOUT_S:.0f}s:\n{''.join(seen)}"
        during: list[str] = []
        lingering = False
        next_scrape = 0.0
        while not lingering and time.monotonic() < deadline:
            if time.monotonic() >= next_scrape:
                during.append(scrape(url))
                next_scrape = time.monotonic() + 0.2
            line = _next_line(lines, seen, deadline)
            assert line is not None, "the run ended without lingering:\n" + "".join(seen)
            lingering = line.startswith("live metrics: final values")
        assert lingering, f"the run did not end within {RUN_TIMEOUT_S:.0f}s:\n{''.join(seen)}"
        final = scrape(url)
        proc.send_signal(signal.SIGINT)  # ends the linger at once
        rc = proc.wait(timeout=30)
        assert rc == 0, "".join(seen)
        d = run_dir(out)
        yield {"url": url, "during": during, "final": final, "dir": d, "output": "".join(seen)}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_counters_grow_during_the_run_and_end_equal_to_the_records(
    scraped: dict[str, Any],
) -> None:
    during = [parse(t) for t in scraped["during"]]
    active = [f for f in during if value(f, "stress_run_active") == 1.0]
    assert len(active) >= 3, "too few scrapes while the run was sending"
    totals = [value(f, "stress_requests") for f in during]
    assert totals == sorted(totals), "a counter went down"
    final = parse(scraped["final"])
    assert value(final, "stress_run_active") == 0.0
    assert value(final, "stress_in_flight") == 0.0
    assert any(0 < t < value(final, "stress_requests") for t in totals), "never seen mid-run"
    assert any(value(f, "stress_in_flight") > 0 for f in active), "in-flight never above 0"
    lag = [value(f, "stress_client_loop_lag_seconds") for f in active]
    assert "stress_client_loop_lag_seconds" in during[-1]
    assert all(0 <= x < 5 for x in lag)

    recs = records(scraped["dir"])
    assert recs
    by_key = Counter((str(r["user"]), r["outcome"]) for r in recs)
    fam = final["stress_requests"]
    scraped_by_key = {
        (s.labels["user"], s.labels["outcome"]): s.value
        for s in fam.samples
        if s.name == "stress_requests_total"
    }
    assert scraped_by_key == {k: float(n) for k, n in by_key.items()}
    assert value(final, "stress_cached_tokens") == sum(r["cached_tokens"] or 0 for r in recs)
    assert value(final, "stress_completion_tokens") == sum(r["completion_tokens"] for r in recs)
    with_ttft = [r for r in recs if r["ttft_s"] is not None]
    ttft_count = value(final, "stress_ttft_seconds", "stress_ttft_seconds_count")
    assert ttft_count == len(with_ttft)
    ttft_sum = value(final, "stress_ttft_seconds", "stress_ttft_seconds_sum")
    assert math.isclose(ttft_sum, sum(r["ttft_s"] for r in with_ttft) * TIME_SCALE, rel_tol=1e-6)
    user_ttft = value(final, "stress_user_ttft_requests")
    assert user_ttft == len(with_ttft)
    e2e_count = value(final, "stress_e2e_seconds", "stress_e2e_seconds_count")
    assert e2e_count == sum(1 for r in recs if r["e2e_s"] is not None)
    itl_count = value(final, "stress_itl_seconds", "stress_itl_seconds_count")
    text_chunks = [r["chunks_content"] + r["chunks_reasoning"] for r in recs]
    assert itl_count == sum(max(0, n - 1) for n in text_chunks) > 0  # one per gap


@pytest.mark.slow
def test_labels_join_with_the_server_and_the_address_is_recorded(
    scraped: dict[str, Any],
) -> None:
    import orjson

    d: Path = scraped["dir"]
    manifest = orjson.loads((d / "manifest.json").read_bytes())
    assert manifest["metrics_url"] == scraped["url"]
    assert scraped["url"].startswith("http://127.0.0.1:")
    final = parse(scraped["final"])
    [info] = final["stress_run_info"].samples
    assert info.labels == {
        "scenario": "metrics_run",
        "run": d.name,
        "model_name": manifest["model"],  # vLLM's and SGLang's label
        "server": "sim",
    }
    users = {s.labels["user"] for s in final["stress_requests"].samples}
    assert users <= {"0", "1", "2"}  # bounded by the scenario's users


@pytest.mark.slow
def test_no_api_key_in_the_scraped_text(scraped: dict[str, Any]) -> None:
    import json
    from urllib.parse import quote

    texts = [*scraped["during"], scraped["final"]]
    for form in (KEY, json.dumps(KEY)[1:-1], quote(KEY, safe=""), "key-5e1f"):
        for text in texts:
            assert form not in text
        assert form not in scraped["output"]


# --- a port that cannot be used ------------------------------------------------------------


def _bad_port_run(
    tmp_path: Path, *flags: str, command: str = "run"
) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    scenario = str(path if command == "run" else ROOT / "scenarios" / "find_capacity.yaml")
    return subprocess.run(
        cli(command, scenario, "--out", str(tmp_path / "out"), "--target", "sim", *flags),
        capture_output=True,
        text=True,
        timeout=STARTUP_S,
        env=env(MY_KEY=KEY),
        cwd=tmp_path,
    )


def _assert_one_line(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for needle in ("--metrics-port", "-- fix:", *needles):
        assert needle in lines[0], lines[0]


def test_a_port_in_use_is_one_line_exit_2_and_nothing_runs(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _bad_port_run(tmp_path, "--metrics-port", str(port))
    _assert_one_line(proc, str(port), "another port", "--metrics-port 0")
    out = tmp_path / "out"
    assert not out.exists() or not any(out.iterdir()), "a run started"


def test_a_port_out_of_range_is_one_line_exit_2(tmp_path: Path) -> None:
    _assert_one_line(_bad_port_run(tmp_path, "--metrics-port", "70000"), "70000", "1-65535")
    proc = _bad_port_run(tmp_path, "--metrics-port", "70000", command="capacity")
    _assert_one_line(proc, "stress capacity")


def test_a_port_that_is_not_a_number_is_one_line_exit_2(tmp_path: Path) -> None:
    proc = _bad_port_run(tmp_path, "--metrics-port", "abc")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert "--metrics-port" in line and "fix:" in line


# --- the exporter alone --------------------------------------------------------------------


def _rec(user: int, outcome: Any = "ok", **kw: Any) -> RequestRecord:
    return RequestRecord(user=user, conversation=0, round=0, turn=1, outcome=outcome, **kw)


def test_exporter_counts_each_record_once_and_bins_every_gap() -> None:
    ex = MetricsExporter()
    assert generate_latest(ex.registry) == b""  # nothing before a run starts
    ex.start_run(RunInfo("sc", "run-1", "m", "vllm", 2, in_flight=lambda: 1))
    times = array("d", [10.0, 10.02, 10.04, 10.30])  # gaps 0.02, 0.02, 0.26
    ex.observe(_rec(0, ttft_s=0.4, e2e_s=1.0, cached_tokens=64, max_gap_s=0.26), times)
    ex.observe(_rec(1, "error", error_class="http_5xx"))
    fams = parse(generate_latest(ex.registry).decode())
    assert value(fams, "stress_requests", user="0", outcome="ok") == 1
    assert value(fams, "stress_requests", user="1", outcome="error") == 1
    assert value(fams, "stress_request_errors", error_class="http_5xx") == 1
    assert value(fams, "stress_cached_tokens", user="0") == 64
    assert value(fams, "stress_itl_seconds", "stress_itl_seconds_count") == 3
    assert value(fams, "stress_itl_seconds", "stress_itl_seconds_bucket", le="0.02") == 2
    assert value(fams, "stress_itl_seconds", "stress_itl_seconds_bucket", le="0.2") == 2
    assert value(fams, "stress_itl_seconds", "stress_itl_seconds_bucket", le="0.3") == 3
    assert value(fams, "stress_ttft_seconds", "stress_ttft_seconds_bucket", le="0.5") == 1
    assert value(fams, "stress_ttft_seconds", "stress_ttft_seconds_bucket", le="0.3") == 0
    assert value(fams, "stress_in_flight") == 1
    assert "stress_client_loop_lag_seconds" not in fams  # no sample yet: left out, not 0
    ex.end_run()
    fams = parse(generate_latest(ex.registry).decode())
    assert value(fams, "stress_in_flight") == 0 and value(fams, "stress_run_active") == 0
    ex.start_run(RunInfo("sc", "run-2", "m", "vllm", 2))  # the next pass of a search
    fams = parse(generate_latest(ex.registry).decode())
    assert {s.labels["run"] for s in fams["stress_run_info"].samples} == {"run-2"}
    assert value(fams, "stress_requests") == 0


def test_serve_binds_loopback_and_closes() -> None:
    ex = MetricsExporter.serve("127.0.0.1", 0)
    try:
        assert ex.url.startswith("http://127.0.0.1:")
        ex.start_run(RunInfo("sc", "r", "m", "sim", 1))
        assert "stress_run_info" in scrape(ex.url)
    finally:
        ex.close()
    with pytest.raises(MetricsPortError, match="--metrics-port 70000"):
        MetricsExporter.serve("127.0.0.1", 70000)


def test_the_grafana_dashboard_queries_only_series_the_exporter_serves() -> None:
    import json
    import re

    dash = json.loads((ROOT / "docs" / "grafana" / "stress-dashboard.json").read_text())
    assert {v["name"] for v in dash["templating"]["list"]} >= {"datasource", "run"}
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in dash["templating"]["list"] if "definition" in v]
    used = {m for e in exprs for m in re.findall(r"\bstress_[a-z0-9_]+", e)}
    ex = MetricsExporter()
    ex.start_run(
        RunInfo(
            "sc",
            "r",
            "m",
            "sim",
            1,
            client_health=lambda: {"loop_lag_ms_max": 2, "loop_lag_ms_p50": 1},
        )
    )
    ex.observe(_rec(0, "error", ttft_s=0.1, e2e_s=0.2, max_gap_s=0.1, decode_tok_s=9.0))
    served = {
        s.name for f in parse(generate_latest(ex.registry).decode()).values() for s in f.samples
    }
    assert used and used <= served, used - served
    titles = " ".join(p["title"] for p in dash["panels"]).lower()
    for what in ("outcome", "ttft", "in flight", "cached", "loop lag", "per user"):
        assert what in titles, what
