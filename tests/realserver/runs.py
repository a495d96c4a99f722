"""Drive the real ``stress run`` CLI against a real server and read its run directory."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from stress.core.limits import EXIT_VERDICT_FAIL

ROOT = Path(__file__).resolve().parents[2]

SCENARIO = """\
name: {name}
target: {{url: "{url}", model: auto}}
users: {{count: {users}, ramp_up: 1s, think_time: {{min: {think[0]}, max: {think[1]}}}}}
rounds: {rounds}
conversation:
  system_prompt: You are a careful assistant. Answer questions about the pasted text.
  cache: {cache}
  ceiling_tokens: {ceiling}
  turn:
    paste: {{corpus: {corpus}, tokens: [{paste_lo}, {paste_hi}]}}
    ask: ["Summarise this in two sentences.", "What is the key point?"]
request: {{max_tokens: {max_tokens}, temperature: 0.2{extra_body}}}
timeouts: {{connect: 10s, first_token: {first_token}, stall: {stall}, total: 10m, drain: 60s}}
telemetry: {{interval: 1s, gpus: "off"}}
seed: 7
"""


@dataclass
class Run:
    dir: Path
    stdout: str
    manifest: dict[str, Any]
    collectors: dict[str, Any]
    """collectors.json: what each collector measured over the run."""
    summary: dict[str, Any]
    requests: list[dict[str, Any]]
    server: list[dict[str, Any]]
    events: list[dict[str, Any]]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [orjson.loads(x) for x in path.read_bytes().splitlines() if x.strip()]


def stress_run(tmp: Path, url: str, *, timeout_s: float = 600, **scenario: Any) -> Run:
    """Run the CLI to the end on a scenario from ``write_scenario(**scenario)``."""
    name = scenario["name"]
    scenario_file = write_scenario(tmp, url, **scenario)
    out = tmp / f"out-{name}"
    proc = subprocess.run(
        [sys.executable, "-m", "stress", "run", str(scenario_file), "--out", str(out), "--no-tui"],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode in (0, EXIT_VERDICT_FAIL), (
        f"stress run failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    )
    run = read_run(out, proc.stdout)
    assert_exit_follows_verdict(proc.returncode, run)
    return run


def assert_exit_follows_verdict(code: int, run: Run) -> None:
    """A completed run exits 0 for PASS and WARN, EXIT_VERDICT_FAIL for FAIL."""
    status = run.summary["verdict"]["status"]
    assert code == (EXIT_VERDICT_FAIL if status == "FAIL" else 0), (code, status)


def write_scenario(
    tmp: Path,
    url: str,
    *,
    name: str,
    users: int,
    rounds: int,
    cache: str = "per_user",
    paste: tuple[int, int] = (450, 600),
    ceiling: int = 3500,
    max_tokens: int = 48,
    first_token: str = "180s",
    stall: str = "180s",
    think: tuple[str, str] = ("0.2s", "0.5s"),
    ignore_eos: bool = False,
) -> Path:
    """The scenario file. The stall limit is generous: on a busy 2-core machine a
    preempted or queued request can be silent for a minute, which these tests do not test."""
    scenario = tmp / f"{name}.yaml"
    scenario.write_text(
        SCENARIO.format(
            name=name,
            url=url,
            users=users,
            rounds=rounds,
            cache=cache,
            ceiling=ceiling,
            corpus=ROOT / "corpora" / "en",
            paste_lo=paste[0],
            paste_hi=paste[1],
            max_tokens=max_tokens,
            first_token=first_token,
            stall=stall,
            think=think,
            extra_body=", extra_body: {ignore_eos: true}" if ignore_eos else "",
        )
    )
    return scenario


def read_run(out: Path, stdout: str = "") -> Run:
    """The one run directory under ``out``."""
    [d] = [p for p in out.iterdir() if p.is_dir()]
    return Run(
        dir=d,
        stdout=stdout,
        manifest=orjson.loads((d / "manifest.json").read_bytes()),
        collectors=orjson.loads((d / "collectors.json").read_bytes()),
        summary=orjson.loads((d / "summary.json").read_bytes()),
        requests=read_jsonl(d / "requests.jsonl"),
        server=read_jsonl(d / "server.jsonl"),
        events=read_jsonl(d / "events.jsonl"),
    )


def describe(r: dict[str, Any]) -> str:
    keys = ("user", "round", "turn", "outcome", "error", "prompt_tokens", "cached_tokens")
    return ", ".join(f"{k}={r.get(k)}" for k in keys)
