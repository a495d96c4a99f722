"""The real CLI in a subprocess against real HTTP servers on loopback.

Covers the quick start, Ctrl-C once and twice, kill -9 then ``stress report``, and that an
API key given through the environment appears in no file and no output.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from stress.core.fmt import times
from stress.core.limits import EXIT_VERDICT_FAIL
from stress.core.record import RequestRecord
from tests.fakes import DONE, FakeServer, chunk, serve, stream, usage_chunk
from tests.interpreter import fresh_interpreter

ROOT = Path(__file__).resolve().parents[2]
REQUIRED_KEYS = set(RequestRecord.__dataclass_fields__)

SCENARIO = """\
name: cli_test
target: {{url: "{url}"{extra}}}
users: {{count: {users}, ramp_up: 0.5s, think_time: {{min: 0.1s, max: 0.3s}}}}
duration: {duration}
conversation:
  ceiling_tokens: 3000
  turn:
    paste: {{corpus: {corpus}, tokens: [200, 400]}}
    ask: ["Summarise this.", "What is the key point?"]
request: {{max_tokens: {max_tokens}}}
timeouts: {{drain: {drain}}}
"""


def scenario(
    tmp_path: Path,
    *,
    url: str = "sim",
    users: int = 2,
    duration: str = "4s",
    max_tokens: int = 20,
    drain: str = "10s",
    extra: str = "",
) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(
        SCENARIO.format(
            url=url,
            users=users,
            duration=duration,
            max_tokens=max_tokens,
            drain=drain,
            extra=extra,
            corpus=ROOT / "corpora" / "en",
        )
    )
    return p


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "stress", *args]


def env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", **extra}


def run_dir(out: Path) -> Path:
    [d] = [p for p in out.iterdir() if p.is_dir()]
    return d


def wait_for_requests(out: Path, n: int, timeout: float = 30) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        dirs = [p for p in out.iterdir()] if out.exists() else []
        if dirs and (dirs[0] / "requests.jsonl").exists():
            lines = (dirs[0] / "requests.jsonl").read_bytes().count(b"\n")
            if lines >= n:
                return dirs[0]
        time.sleep(0.1)
    raise AssertionError(f"no {n} requests recorded within {timeout}s")


def records(d: Path) -> list[dict[str, Any]]:
    return [orjson.loads(x) for x in (d / "requests.jsonl").read_bytes().splitlines() if x]


@pytest.mark.slow
def test_quickstart_scenario_runs_against_the_simulator(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(
        cli(
            "run",
            str(ROOT / "scenarios" / "quickstart.yaml"),
            "--duration",
            "6s",
            "--out",
            str(out),
            "--progress-interval",
            "2s",
            "--fail-on",
            "never",  # 6 s is all warm-up: FAIL (no requests) is the right verdict here
        ),
        capture_output=True,
        text=True,
        timeout=90,
        env=env(),
    )
    assert proc.returncode == 0, proc.stderr
    d = run_dir(out)
    assert d.name.endswith("-quickstart")
    manifest = orjson.loads((d / "manifest.json").read_bytes())
    assert manifest["exit_reason"] == "duration" and manifest["end_time"] is not None
    assert manifest["scenario"]["conversation"]["cache"] == "per_user"
    assert manifest["model"] == "sim-llm" and manifest["tokenizer"].startswith("tiktoken")
    recs = records(d)
    assert recs and all(set(r) >= REQUIRED_KEYS for r in recs)
    assert {r["outcome"] for r in recs} == {"ok"}
    assert all(r["chunks_content"] > 0 and r["ttft_s"] > 0 for r in recs)
    summary = orjson.loads((d / "summary.json").read_bytes())
    assert summary["overall"]["requests"] == sum(1 for r in recs if not r["warmup"])
    assert "TTFT s" in proc.stdout and "run directory" in proc.stdout
    assert (d / "report.html").exists() and "report:" in proc.stdout


@pytest.mark.slow
def test_ctrl_c_once_finishes_in_flight_and_writes_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.Popen(
        cli("run", str(scenario(tmp_path, duration="60s", max_tokens=40)), "--out", str(out)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
    )
    d = wait_for_requests(out, 2)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    manifest = orjson.loads((d / "manifest.json").read_bytes())
    assert manifest["exit_reason"] == "interrupted"
    recs = records(d)
    assert not [r for r in recs if r["error_class"] == "cancelled"]
    assert (d / "summary.json").exists() and "Ctrl-C" in stdout


@pytest.mark.slow
def test_ctrl_c_twice_cancels_and_records_in_flight(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.Popen(
        cli(
            "run",
            str(scenario(tmp_path, users=3, duration="60s", max_tokens=4000)),
            "--out",
            str(out),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
    )
    deadline = time.monotonic() + 30
    d = None
    while time.monotonic() < deadline:  # wait until streams are under way
        if out.exists() and any(out.iterdir()):
            d = run_dir(out)
            if (d / "events.jsonl").exists():
                break
        time.sleep(0.1)
    time.sleep(2.0)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert d is not None
    recs = records(d)
    # the user's cut is a WARN, unless nothing was answered by then (a busy machine): FAIL
    answered = any(r["outcome"] == "ok" for r in recs)
    assert proc.returncode == (0 if answered else EXIT_VERDICT_FAIL), stderr
    cancelled = [r for r in recs if r["error_class"] == "cancelled"]
    assert cancelled and all(r["outcome"] == "error" for r in cancelled)
    assert {r["user"] for r in recs} == {0, 1, 2}  # every request sent ended in a record
    assert orjson.loads((d / "manifest.json").read_bytes())["exit_reason"] == "interrupted"


@pytest.mark.slow
def test_kill_9_then_report_rebuilds_the_summary(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.Popen(
        cli("run", str(scenario(tmp_path, duration="60s")), "--out", str(out)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env(),
    )
    d = wait_for_requests(out, 3)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    n_lines = len(records(d))  # every line parses: the file is valid up to the last flush
    assert n_lines >= 3
    assert not (d / "summary.json").exists()
    rep = subprocess.run(
        cli("report", str(d)), capture_output=True, text=True, timeout=30, env=env()
    )
    assert rep.returncode == 0, rep.stderr
    summary = orjson.loads((d / "summary.json").read_bytes())
    assert summary["requests_total"] == n_lines and summary["complete"] is False
    assert "did not finish" in rep.stdout and "TTFT (s)" in rep.stdout
    assert (d / "report.html").exists() and (d / "report.md").exists()


def test_report_on_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    rep = subprocess.run(
        cli("report", str(tmp_path)), capture_output=True, text=True, timeout=30, env=env()
    )
    assert rep.returncode == 1 and "not a run directory" in rep.stderr
    assert "Traceback" not in rep.stderr


def test_validate_reports_problems_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: x\nusers: {count: -2, colour: red}\nduration: 1m\n"
        "conversation: {turn: {ask: [hi]}}\n"
    )
    proc = subprocess.run(cli("validate", str(bad)), capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith(f"{bad}:2: users.") for line in lines)
    good = subprocess.run(
        cli("validate", *map(str, sorted((ROOT / "scenarios").glob("*.yaml")))),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert good.returncode == 0, good.stderr


def test_unreachable_target_is_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        cli(
            "run",
            str(scenario(tmp_path)),
            "--target",
            "http://127.0.0.1:9",
            "--out",
            str(tmp_path / "out"),
        ),
        capture_output=True,
        text=True,
        timeout=60,
        env=env(),
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("stress: cannot reach http://127.0.0.1:9")


SECRET = "sk-test-DO-NOT-LEAK-4f9c2a7e1b"


@pytest.mark.slow
async def test_api_key_from_environment_never_reaches_files_or_output(tmp_path: Path) -> None:
    async def echoing(request: web.Request, body: dict[str, Any], n: int) -> web.StreamResponse:
        auth = request.headers.get("Authorization", "")
        assert auth == f"Bearer {SECRET}"
        if n % 2:  # a careless server that echoes the key in an error message
            return web.json_response({"error": {"message": f"bad key {auth}"}}, status=500)
        parts = [chunk(f"you sent {auth}"), chunk(".", finish="stop"), usage_chunk(10, 2), DONE]
        return await stream(request, parts)

    async with serve(FakeServer(script=echoing)) as server:
        path = scenario(tmp_path, url=server.url, duration="3s", extra=", api_key_env: MY_KEY")
        proc = await asyncio.create_subprocess_exec(
            *cli("run", str(path), "--out", str(tmp_path / "out")),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env(MY_KEY=SECRET),
        )
        stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == EXIT_VERDICT_FAIL, stderr  # half the requests failed: FAIL
    assert server.requests, "the server saw no request"
    d = run_dir(tmp_path / "out")
    recs = records(d)
    assert any(r["error_class"] == "http_5xx" and "***" in r["error"] for r in recs)
    files = [f for f in d.rglob("*") if f.is_file()]
    assert any(f.name == "report.html" for f in files)
    for f in files:
        assert SECRET.encode() not in f.read_bytes(), f"key leaked into {f.name}"
    assert SECRET.encode() not in stdout + stderr


def test_missing_key_variable_is_one_line(tmp_path: Path) -> None:
    path = scenario(tmp_path, extra=", api_key_env: NOT_SET_ANYWHERE_X, api_key_required: true")
    proc = subprocess.run(
        cli("run", str(path), "--out", str(tmp_path / "out")),
        capture_output=True,
        text=True,
        timeout=60,
        env=env(),
    )
    assert proc.returncode == 1 and "NOT_SET_ANYWHERE_X" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_internal_error_is_one_line_unless_debugging(tmp_path: Path) -> None:
    """A bug of ours must still not print a traceback at a user (STRESS_DEBUG shows it)."""
    code = (
        "import sys, stress.cli.main as c\n"
        "def boom(args): raise RuntimeError('boom')\n"
        "c.cmd_validate = boom\n"
        "sys.exit(c.main(['validate', 'x']))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, env=env()
    )
    assert proc.returncode == 70 and "Traceback" not in proc.stderr
    assert "internal error: RuntimeError: boom" in proc.stderr
    debug = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=30,
        env=env(STRESS_DEBUG="1"),
    )
    assert "Traceback" in debug.stderr


# --- issue 12: one exit code per failure, in every command; no secret in any output ---

WEIRD_KEY = 'sk-"quo\\ted"\tkey-5e8d1c'
"""A key with a quote, a backslash and a TAB: each has a JSON-escaped form."""


def secret_forms(secret: str) -> list[bytes]:
    import html
    import json
    from urllib.parse import quote, quote_plus

    once = json.dumps(secret)[1:-1]
    forms = {secret, once, json.dumps(once)[1:-1], quote(secret, safe=""), quote_plus(secret)}
    forms.add(html.escape(secret))
    return [f.encode() for f in forms]


def assert_nowhere(secret: str, d: Path, *outputs: bytes) -> None:
    files = [f for f in d.rglob("*") if f.is_file()]
    assert any(f.name == "manifest.json" for f in files)
    for form in secret_forms(secret):
        for f in files:
            assert form not in f.read_bytes(), f"{form!r} leaked into {f.name}"
        for out in outputs:
            assert form not in out, f"{form!r} leaked into the terminal"


SIM_SCENARIO = """\
name: sim_run
target: {url: sim, api_key_env: MY_KEY, sim: {time_scale: 20}}
users: {count: 2, ramp_up: 0.2s, think_time: {min: 0.1s, max: 0.2s}}
duration: 3s
conversation:
  ceiling_tokens: 3000
  turn:
    paste: {corpus: ../corpora/en, tokens: [200, 400]}
    ask: ["Summarise this."]
request: {max_tokens: 20}
timeouts: {drain: 10s}
"""


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    """One real ``stress run`` against the simulator with a key full of escapable characters.

    The scenario reaches its corpus by a relative path (``../corpora``), as a scenario kept
    beside its own documents does, written to a temporary copy of that layout.
    """
    base = tmp_path_factory.mktemp("simrun")
    (base / "scenarios").mkdir()
    (base / "corpora").symlink_to(ROOT / "corpora")
    path = base / "scenarios" / "s.yaml"
    path.write_text(SIM_SCENARIO)
    proc = subprocess.run(
        cli("run", str(path), "--out", str(base / "out"), "--no-tui"),
        capture_output=True,
        timeout=120,
        env=env(MY_KEY=WEIRD_KEY, STRESS_CORPUS_ROOTS=str(ROOT / "corpora")),
    )
    assert proc.returncode == 0, proc.stderr.decode()
    return run_dir(base / "out"), proc.stdout + proc.stderr


@pytest.mark.slow
def test_weird_key_appears_in_no_file_and_no_output_of_a_sim_run(
    sim_run: tuple[Path, bytes],
) -> None:
    d, output = sim_run
    assert records(d), "the run recorded nothing"
    assert_nowhere(WEIRD_KEY, d, output)


@pytest.mark.slow
async def test_echoed_key_and_url_credentials_never_leak(tmp_path: Path) -> None:
    """A server that echoes the key in JSON errors (so the record holds it JSON-escaped
    twice) and a --target with user:password in it."""
    password = 'hunter2-"pw\\x'

    async def echoing(request: web.Request, body: dict[str, Any], n: int) -> web.StreamResponse:
        auth = request.headers.get("Authorization", "")
        if n % 2:
            return web.json_response({"error": {"message": f"bad key {auth}"}}, status=500)
        return await stream(request, [chunk(f"you sent {auth}", finish="stop"), DONE])

    from urllib.parse import quote

    async with serve(FakeServer(script=echoing)) as server:
        host = server.url.removeprefix("http://")
        target = f"http://bob:{quote(password, safe='')}@{host}"
        path = scenario(tmp_path, url="sim", duration="3s", extra=", api_key_env: MY_KEY")
        proc = await asyncio.create_subprocess_exec(
            *cli("run", str(path), "--target", target, "--out", str(tmp_path / "out")),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env(MY_KEY=WEIRD_KEY),
        )
        stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == EXIT_VERDICT_FAIL, stderr  # half the requests failed: FAIL
    assert server.headers_seen[0]["Authorization"] == f"Bearer {WEIRD_KEY}"
    d = run_dir(tmp_path / "out")
    assert any(r["error_class"] == "http_5xx" for r in records(d))
    manifest = orjson.loads((d / "manifest.json").read_bytes())
    assert manifest["target_url"] == server.url
    for secret in (WEIRD_KEY, password, f"bob:{password}"):
        assert_nowhere(secret, d, stdout, stderr)


@pytest.mark.slow
async def test_url_credentials_are_sent_as_basic_auth(tmp_path: Path) -> None:
    import base64

    async with serve(FakeServer()) as server:
        host = server.url.removeprefix("http://")
        path = scenario(tmp_path, url=f"http://alice:0pen-sesame@{host}", duration="2s")
        proc = await asyncio.create_subprocess_exec(
            *cli("run", str(path), "--out", str(tmp_path / "out")),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env(),
        )
        stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout=60)
        validate = await asyncio.create_subprocess_exec(
            *cli("validate", str(path)), stdout=asyncio.subprocess.PIPE, env=env()
        )
        vout, _ = await asyncio.wait_for(validate.communicate(), timeout=30)
    assert proc.returncode == 0, stderr
    token = base64.b64encode(b"alice:0pen-sesame").decode()
    assert server.headers_seen and server.headers_seen[0]["Authorization"] == f"Basic {token}"
    assert f"target {server.url})".encode() in vout
    for secret in ("0pen-sesame", token):
        assert_nowhere(secret, run_dir(tmp_path / "out"), stdout, stderr, vout)


def _write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def _bomb() -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    return "\n".join(lines) + "\nname: t\n"


def _damaged_run(tmp: Path, name: str, text: str | bytes) -> Path:
    d = tmp / "runs" / "r1"
    _write(d / "manifest.json", '{"run_id": "r1", "scenario": {"name": "x"}}')
    _write(d / "requests.jsonl", "")
    _write(d / name, text)
    return d


# (command line with {s} = a good scenario, {tmp} = a scratch folder, setup, exit code)
EXIT_CODES: list[Any] = [
    ("validate ok", "validate {s}", 0),
    ("validate missing", "validate {tmp}/nope.yaml", 2),
    ("validate a folder", "validate {tmp}", 2),
    ("validate a device", "validate /dev/null", 2),
    ("validate alias bomb", "validate {tmp}/bomb.yaml", 2),
    ("validate recursive alias", "validate {tmp}/recursive.yaml", 2),
    ("validate too big", "validate {tmp}/big.yaml", 2),
    ("validate NaN", "validate {tmp}/nan.yaml", 2),
    ("validate corpus escape", "validate {tmp}/environ.yaml", 2),
    ("validate unknown option", "validate {s} --frobnicate", 2),
    ("run bad scenario", "run {tmp}/nan.yaml --out {tmp}/out", 2),
    ("run alias bomb", "run {tmp}/bomb.yaml --out {tmp}/out", 2),
    ("run --users 100000", "run {s} --users 100000 --out {tmp}/out", 2),
    ("run --users true", "run {s} --users true --out {tmp}/out", 2),
    ("run --duration nan", "run {s} --duration nan --out {tmp}/out", 2),
    ("run --rounds 0", "run {s} --rounds 0 --out {tmp}/out", 2),
    ("run --out is a file", "run {s} --out {tmp}/afile", 1),
    ("run --out under a file", "run {s} --out {tmp}/afile/sub", 1),
    ("run unreachable target", "run {s} --target http://127.0.0.1:9 --out {tmp}/out", 1),
    ("run key variable unset", "run {tmp}/needkey.yaml --out {tmp}/out", 1),
    ("report not a run", "report {tmp}", 1),
    ("report missing", "report {tmp}/nope", 1),
    ("report damaged manifest", "report {tmp}/bad-manifest/runs/r1", 1),
    ("report requests is a folder", "report {tmp}/req-dir/runs/r1", 1),
    ("compare damaged", "compare {tmp}/bad-manifest/runs/r1 {tmp}/bad-manifest/runs/r1", 1),
    ("ls missing folder", "ls {tmp}/nope", 1),
    ("probe unreachable", "probe --target http://127.0.0.1:9 --timeout 2", 1),
    ("sim bad port", "sim --port 99999", 2),
]


@pytest.fixture
def exit_case_files(tmp_path: Path) -> Path:
    good = scenario(tmp_path)
    text = good.read_text()
    _write(tmp_path / "bomb.yaml", _bomb())
    _write(tmp_path / "recursive.yaml", "name: t\nx: &a [1, *a]\n")
    _write(tmp_path / "big.yaml", text + "description: " + "x" * (1 << 20) + "\n")
    _write(tmp_path / "nan.yaml", text.replace("duration: 4s", "duration: .nan"))
    environ = text.replace(str(ROOT / "corpora" / "en"), "/proc/self/environ")
    _write(tmp_path / "environ.yaml", environ)
    need = text.replace('"sim"}', '"sim", api_key_env: NOT_SET_X_12, api_key_required: true}')
    _write(tmp_path / "needkey.yaml", need)
    _write(tmp_path / "afile", "not a folder")
    _damaged_run(tmp_path / "bad-manifest", "manifest.json", b"{\xff not json")
    d = _damaged_run(tmp_path / "req-dir", "manifest.json", '{"run_id": "r1"}')
    (d / "requests.jsonl").unlink()
    (d / "requests.jsonl").mkdir()
    return good


@pytest.mark.parametrize(
    ("name", "line", "code"),
    [c if hasattr(c, "marks") else pytest.param(*c, id=c[0]) for c in EXIT_CODES],
)
def test_every_command_exit_code(
    tmp_path: Path,
    exit_case_files: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    line: str,
    code: int,
) -> None:
    """The same failure gets the same code everywhere: 0 done, 1 unusable target or run
    directory, 2 bad input; the message is one line, never a traceback."""
    from stress.cli.main import main

    monkeypatch.delenv("STRESS_CORPUS_ROOTS", raising=False)
    argv = line.format(s=exit_case_files, tmp=tmp_path).split()
    try:
        got = main(argv)
    except SystemExit as e:  # argparse's own exit
        got = int(e.code or 0)
    err = capsys.readouterr().err
    assert got == code, err
    assert "Traceback" not in err
    if code:
        lines = err.strip().splitlines()
        assert len(lines) == 1, lines
        if argv[0] in ("run", "validate"):
            assert " -- fix: " in lines[0] or "--help" in lines[0], lines[0]


def test_unexpected_errors_reading_a_run_are_exit_1_with_the_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever the report code misses while reading damaged files is still exit 1, with
    the run directory named, not 70 (an internal error)."""
    import stress.report.cli as report_cli
    from stress.cli.main import main

    def damaged(args: Any) -> int:
        raise ValueError("Input is a zero-length, empty document: line 1 column 1 (char 0)")

    def gone(args: Any) -> int:
        raise FileNotFoundError(2, "No such file or directory", f"{args.run_dir}/gpu.jsonl")

    for fake, says in [(damaged, "damaged run files"), (gone, "gpu.jsonl: No such file")]:
        monkeypatch.setattr(report_cli, "report_main", fake)
        assert main(["report", str(tmp_path)]) == 1
        err = capsys.readouterr().err
        assert str(tmp_path) in err and says in err and len(err.strip().splitlines()) == 1


# --- issue 13: the exit code follows the verdict, graded by one judge ---

VERDICT_SCENARIO = """\
name: verdict_exit
target: {{url: sim, sim: {{time_scale: 20}}}}
users: {{count: 8, ramp_up: 0.2s, think_time: {{min: 0.1s, max: 0.2s}}}}
rounds: 3
warmup: {{rounds: 0}}
conversation:
  ceiling_tokens: 3000
  turn:
    paste: {{corpus: {corpus}, tokens: [200, 400]}}
    ask: ["Summarise this."]
request: {{max_tokens: 20}}
slo: {{ttft_p95: {ttft}}}
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("ttft", "fail_on", "status", "code"),
    [
        ("60s", "fail", "PASS", 0),
        ("60s", "warn", "PASS", 0),
        ("0.001s", "fail", "FAIL", EXIT_VERDICT_FAIL),  # missed by far more than 2x
        ("0.001s", "warn", "FAIL", EXIT_VERDICT_FAIL),
        ("0.001s", "never", "FAIL", 0),
    ],
)
def test_exit_code_follows_the_verdict(
    tmp_path: Path, ttft: str, fail_on: str, status: str, code: int
) -> None:
    """0 for PASS and WARN, EXIT_VERDICT_FAIL for FAIL; ``--fail-on`` moves the gate. The
    real CLI against the simulator, judged from summary.json as every output is."""
    path = tmp_path / "s.yaml"
    path.write_text(VERDICT_SCENARIO.format(corpus=ROOT / "corpora" / "en", ttft=ttft))
    out = tmp_path / "out"
    proc = subprocess.run(
        cli("run", str(path), "--out", str(out), "--no-tui", "--fail-on", fail_on),
        capture_output=True,
        text=True,
        timeout=120,
        env=env(),
    )
    summary = orjson.loads((run_dir(out) / "summary.json").read_bytes())
    verdict = summary["verdict"]
    assert verdict["status"] == status, verdict["findings"]
    assert proc.returncode == code, proc.stderr
    assert f"verdict: {status}" in proc.stdout
    if status == "FAIL":
        (check,) = verdict["slo"]
        assert check["status"] == "MISSED" and check["factor"] > 2 and check["n"] >= 20
        assert verdict["findings"][0] == {
            "level": "FAIL",
            "code": "slo",
            "short": f"TTFT p95 {times(check['factor'])} SLO",
        }


def test_the_runs_loop_gets_the_interpreter_back_within_stress_s_switch_interval() -> None:
    """Every loop stress runs (`stress run`, `stress search`, a worker, a Ray actor) goes
    through `run_async`, which shortens the interpreter's switch interval: a thread of the
    run (NVML calls, a /metrics body parsed) no longer keeps the loop, and the instant a
    stream's bytes are stamped, waiting 5 ms (benchmarks/thread_wake.py)."""
    code = (
        "import sys\n"
        "from stress.runtime.loop import SWITCH_INTERVAL_S, run_async\n"
        "async def inside(): return sys.getswitchinterval()\n"
        "before = sys.getswitchinterval()\n"
        "print(before, run_async(inside()), SWITCH_INTERVAL_S)\n"
    )
    before, inside, wanted = map(float, fresh_interpreter(code).split())
    assert before == 0.005 and inside == pytest.approx(wanted, abs=1e-9) and wanted <= 0.0005


def test_init_overwrites_no_existing_file_without_force(tmp_path: Path) -> None:
    """`stress init` keeps a schema file that is not this version's (the user's edit, or an
    older stress's) as it keeps an existing scenario: nothing is written, one line names the
    file and the fix; `--force` overwrites; a schema equal to this version's needs no
    --force."""
    from stress.config.bundled import SCHEMA_FILE, SCHEMA_NAME

    def init(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            cli("init", *args), cwd=tmp_path, capture_output=True, text=True, timeout=30, env=env()
        )

    schema = tmp_path / SCHEMA_NAME
    schema.write_text('{"edited": true}\n')
    refused = init("quickstart")
    assert refused.returncode == 2, refused.stderr
    [line] = refused.stderr.splitlines()
    assert f"{SCHEMA_NAME} already exists" in line and "--force" in line, line
    assert schema.read_text() == '{"edited": true}\n'
    assert not (tmp_path / "quickstart.yaml").exists(), "half of the copy was written"

    # both files there: both named, in one line
    (tmp_path / "quickstart.yaml").write_text("name: mine\n")
    both = init("quickstart")
    assert both.returncode == 2
    [line] = both.stderr.splitlines()
    assert f"quickstart.yaml and {SCHEMA_NAME} already exist" in line, line
    assert (tmp_path / "quickstart.yaml").read_text() == "name: mine\n"

    forced = init("quickstart", "--force")
    assert forced.returncode == 0, forced.stderr
    assert schema.read_bytes() == SCHEMA_FILE.read_bytes()
    assert (tmp_path / "quickstart.yaml").read_text() != "name: mine\n"

    # another scenario into the same folder: the schema is this version's, left as it is
    again = init("eight_users_1h")
    assert again.returncode == 0, again.stderr
    assert f"{SCHEMA_NAME} next to it is up to date" in again.stdout
