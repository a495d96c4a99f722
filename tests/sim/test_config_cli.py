"""Config files and flags: clear one-line errors, flags over file, a working `stress sim`."""

from __future__ import annotations

import argparse
import contextlib
import http.client
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import orjson
import pytest
from pydantic import ValidationError

from stress.config.sim import SimConfigError, load_config_file
from stress.sim import SimConfig
from stress.sim.cli import add_arguments, build_config, main
from tests.sim.helpers import SimProcess


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(list(argv))


def test_defaults_are_pleasant() -> None:
    cfg = SimConfig()
    assert cfg.model == "sim-llm" and cfg.dialect == "vllm"
    assert cfg.prefill_tokens_per_s == 4000 and cfg.decode_tokens_per_s == 40
    assert cfg.reasoning_tokens == 0 and cfg.faults == []


def test_scenario_dict_validates_and_rejects_unknown() -> None:
    cfg = SimConfig.model_validate({"kv_tokens": 65536, "faults": [{"kind": "reset", "rate": 0.1}]})
    assert cfg.faults[0].kind == "reset"
    with pytest.raises(ValidationError):
        SimConfig.model_validate({"kv_tokenz": 1})
    with pytest.raises(ValidationError):
        SimConfig.model_validate({"kv_tokens": 1000, "max_model_len": 4000})


def test_file_with_faults_and_flag_override(tmp_path: Path) -> None:
    f = tmp_path / "sim.yaml"
    f.write_text(
        "kv_tokens: 65536\ndialect: sglang\nfaults:\n"
        "  - kind: stall\n    at_seconds: [30]\n    duration_s: 20\n"
        "  - kind: http_429\n    rate: 0.05\n    retry_after_s: 2\n"
    )
    cfg = build_config(parse("--config", str(f), "--kv-tokens", "1024"))
    assert cfg.kv_tokens == 1024 and cfg.dialect == "sglang"
    assert [r.kind for r in cfg.faults] == ["stall", "http_429"]


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("kv_tokens: 100\nblok_size: 16\n", ":2: blok_size: unknown field -- fix: remove it"),
        ("kv_tokens: lots\n", ":1: kv_tokens: Input should be a valid integer"),
        ("faults:\n  - kind: explode\n", ":2: faults.0.kind:"),
        ("kv_tokens: [1\n", "(file):"),
        ("- 1\n- 2\n", "expected a mapping"),
    ],
)
def test_bad_file_gives_one_clear_line(tmp_path: Path, text: str, expect: str) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(SimConfigError) as exc:
        load_config_file(str(f))
    msg = str(exc.value)
    assert expect in msg, msg
    assert msg.startswith(str(f)) and "Traceback" not in msg and "-- fix:" in msg


def test_main_reports_bad_input_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(parse("--config", str(tmp_path / "missing.yaml"))) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing.yaml" in err and "fix:" in err
    assert main(parse("--block-size", "0")) == 2
    err = capsys.readouterr().err
    assert "command line: block_size" in err


def test_cli_serves_until_interrupted() -> None:
    sim = SimProcess("--time-scale", "10")
    try:
        # The listening line is printed once the socket listens: no retry loop needed.
        with urllib.request.urlopen(sim.url + "/v1/models", timeout=sim.bound()) as r:
            assert b"sim-llm" in r.read()
        rc, _out, err = sim.stop(signal.SIGINT)
    finally:
        sim.kill()
    assert rc == 0, err
    assert "Traceback" not in err


def _open_stream(url: str, timeout: float) -> http.client.HTTPResponse:
    """POST a streamed chat and return once its first SSE line has arrived."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    body = {"model": "sim-llm", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    conn.request("POST", "/v1/chat/completions", orjson.dumps(body), {"Content-Type": "x"})
    resp = conn.getresponse()
    assert resp.status == 200
    assert resp.readline().startswith(b"data: ")
    return resp


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_cli_stops_at_once_with_streams_in_flight(tmp_path: Path, sig: int) -> None:
    """Two streams stalled mid-reply do not hold the exit, and both leave a record."""
    cfg = tmp_path / "sim.yaml"
    cfg.write_text(
        "faults:\n  - kind: stall\n    on_requests: [1, 2]\n    after_tokens: 1\n"
        "    duration_s: 100000\n"
    )
    truth = tmp_path / "truth.jsonl"
    sim = SimProcess("--config", str(cfg), "--ground-truth", str(truth))
    try:
        streams = [_open_stream(sim.url, sim.bound()) for _ in range(2)]
        rc, _out, err = sim.stop(sig)
    finally:
        sim.kill()
    assert rc == 0, err
    assert "Traceback" not in err
    for resp in streams:  # the server dropped them rather than leaving them hanging
        with contextlib.suppress(OSError, http.client.HTTPException):
            resp.read()
    recs = [orjson.loads(line) for line in truth.read_bytes().splitlines()]
    assert sorted(r["request_no"] for r in recs) == [1, 2]


@pytest.mark.parametrize("port", ["99999", "-1", "abc"])
def test_cli_rejects_a_bad_port_in_one_line(port: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "stress", "sim", f"--port={port}"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "--port" in proc.stderr and "fix:" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_simulator_does_not_import_textual() -> None:
    code = "import sys, stress.sim, stress.sim.cli; print('textual' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
