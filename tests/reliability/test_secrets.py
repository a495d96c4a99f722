"""No secret in any output: not the API key (raw, JSON-escaped, URL-encoded, HTML-escaped),
not the credentials of a target URL, whatever the key holds and whatever the server echoes.

The server requires the key and echoes it back in error messages and replies, as careless
servers do. Every file of the run directory, stdout and stderr are scanned.
"""

from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path
from urllib.parse import quote, quote_plus

import orjson
import pytest

from tests.reliability.harness import (
    MARGIN_S,
    Cli,
    RunResult,
    assert_accounted,
    assert_no_traceback,
    assert_sound_run,
    cli_env,
    run_args,
    run_cli,
    write_scenario,
)
from tests.reliability.hostile import hostile

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

# built at run time so that secret scanners do not flag the repository
WEIRD_KEY = "sk-" + 'rel"Q9VXwZLm\\8HfKpRtY\tT0-' + "Ng4e1bQz"
SHORT_KEY = '"\t\\'


def forms(secret: str) -> set[str]:
    """Every way the secret could be written: raw, escaped, encoded, and (for a key with
    letters) each run of 8+ letters or digits, which survives any encoding."""
    out = {
        secret,
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        json.dumps(json.dumps(secret)[1:-1])[1:-1],
        quote(secret, safe=""),
        quote_plus(secret, safe=""),
        html.escape(secret),
        html.escape(secret, quote=False),
    }
    out |= set(re.findall(r"[A-Za-z0-9]{8,}", secret))
    return out


def leaks(result: RunResult, secret: str) -> list[str]:
    """Where any form of ``secret`` appears: file names under the run folder, or output."""
    found: list[str] = []
    needles = [f.encode() for f in forms(secret)]
    if result.out.exists():
        for path in (p for p in result.out.rglob("*") if p.is_file()):
            data = path.read_bytes()
            found += [f"{path.name}: {n!r}" for n in needles if n in data]
    for name, text in (("stdout", result.stdout), ("stderr", result.stderr)):
        found += [f"{name}: {n!r}" for n in needles if n in text.encode()]
    return found


async def test_api_key_with_quote_backslash_and_tab_never_leaks(tmp_path: Path, out: Path) -> None:
    plan = write_scenario(tmp_path, rounds=2, target_extra={"api_key_env": "STRESS_API_KEY"})
    async with hostile("ok", api_key=WEIRD_KEY) as server:
        result = await run_cli(plan, out, server.url, env=cli_env(STRESS_API_KEY=WEIRD_KEY))
    assert_sound_run(result)
    assert server.auth_failures == 0, "the key did not reach the server intact"
    recs = result.records()
    assert server.received == len(recs) == 2
    assert [r["error_class"] for r in recs] == ["http_5xx", None], "the echoing server"
    assert "***" in (recs[0]["error"] or ""), "the echoed key was not masked"
    assert not leaks(result, WEIRD_KEY), leaks(result, WEIRD_KEY)
    assert_accounted(result)


async def test_short_key_is_refused_or_scrubbed(tmp_path: Path, out: Path) -> None:
    """A 3-character key cannot be scrubbed from text: it is refused in one line that names
    the variable (never the key), or, if the run goes ahead, it appears nowhere."""
    plan = write_scenario(tmp_path, rounds=2, target_extra={"api_key_env": "STRESS_API_KEY"})
    async with hostile("ok", api_key=SHORT_KEY) as server:
        result = await run_cli(plan, out, server.url, env=cli_env(STRESS_API_KEY=SHORT_KEY))
    assert_no_traceback(result)
    if result.rc != 0:
        assert result.rc in (1, 2), f"exit {result.rc}: {result.stderr}"
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "STRESS_API_KEY" in lines[0], lines
        assert server.received == 0
    assert not leaks(result, SHORT_KEY), leaks(result, SHORT_KEY)


async def test_target_url_credentials_never_leak(tmp_path: Path, out: Path) -> None:
    """``http://user:password@host``: stripped from manifest, report and output, and not
    printed by ``validate`` either; the Basic token they make is not written anywhere."""
    user, password = "stressuser", "pw-" + "URLCREDqZ5d2a9fX"
    async with hostile("ok") as server:
        url = f"http://{user}:{password}@127.0.0.1:{server.port}"
        plan = write_scenario(tmp_path, rounds=2, target_extra={"url": url})
        validate = await Cli.start("validate", str(plan.path))
        checked = await validate.finish(MARGIN_S, out)
        result = await run_cli(plan, out, url)
    assert_sound_run(result)
    assert server.received == len(result.records()) == 2
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    for secret in (password, f"{user}:{password}", token):
        assert not leaks(result, secret), leaks(result, secret)
        assert secret not in checked.stdout + checked.stderr, "validate printed it"
    assert_accounted(result)


async def test_the_key_echoed_to_a_worker_never_leaks(tmp_path: Path, out: Path) -> None:
    """``--workers 2``: each worker masks the key before a frame leaves it (the frames
    themselves: ``tests/runtime/test_workers.py::test_a_workers_frames_carry_no_key_the_
    server_echoed``), and no file or output of the run holds it."""
    plan = write_scenario(
        tmp_path, users=2, rounds=2, target_extra={"api_key_env": "STRESS_API_KEY"}
    )
    async with hostile("ok", api_key=WEIRD_KEY) as server:
        cli = await Cli.start(
            *run_args(plan, out, server.url), "--workers", "2",
            env=cli_env(STRESS_API_KEY=WEIRD_KEY),
        )  # fmt: skip
        try:
            result = await cli.finish(plan.bound_s, out)
        finally:
            cli.kill()
    assert_sound_run(result)
    assert server.auth_failures == 0
    recs = result.records()
    assert server.received == len(recs) == 4
    assert any("***" in (r["error"] or "") for r in recs), "the server did not echo the key"
    assert not leaks(result, WEIRD_KEY), leaks(result, WEIRD_KEY)
    assert_accounted(result)


def keys_of(obj: object) -> set[str]:
    """Every object key in a JSON document, at any depth."""
    if isinstance(obj, dict):
        return set(obj) | {k for v in obj.values() for k in keys_of(v)}
    if isinstance(obj, list):
        return {k for v in obj for k in keys_of(v)}
    return set()


@pytest.mark.parametrize("password", ["requests", "%20" * 8], ids=["requests", "8 spaces"])
async def test_a_secret_that_is_ordinary_text_leaves_the_json_files_whole(
    tmp_path: Path, out: Path, password: str
) -> None:
    """A URL password that is also ordinary text, ``requests`` or eight spaces, is still
    scrubbed, but only from string values: ``summary.json`` keeps its ``requests`` keys
    and ``manifest.json`` its indentation (the scrubber renamed the one and broke the
    other)."""
    async with hostile("ok") as server:
        url = f"http://stressuser:{password}@127.0.0.1:{server.port}"
        plan = write_scenario(tmp_path, rounds=2, target_extra={"url": url})
        result = await run_cli(plan, out, url)
    assert_sound_run(result)
    summary, manifest = result.summary(), orjson.loads((result.dir / "manifest.json").read_bytes())
    assert {"requests_total", "warmup_requests"} <= keys_of(summary), sorted(keys_of(summary))
    assert "requests" in summary["overall"], summary["overall"]
    assert "min_requests" in manifest["scenario"]["limits"]
    for doc in (summary, manifest):
        assert not [k for k in keys_of(doc) if "***" in k]
    assert "stressuser:" not in (result.dir / "manifest.json").read_text()
    assert_accounted(result)


async def test_a_key_that_is_only_letters_is_refused_naming_the_variable(
    tmp_path: Path, out: Path
) -> None:
    """``requests`` as the key would be masked in every word of every report: refused in
    one line that names the variable, never the key, before a request is sent."""
    plan = write_scenario(tmp_path, rounds=2, target_extra={"api_key_env": "STRESS_API_KEY"})
    async with hostile("ok", api_key="requests") as server:
        result = await run_cli(plan, out, server.url, env=cli_env(STRESS_API_KEY="requests"))
    assert_no_traceback(result)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.rc == 1 and len(lines) == 1, (result.rc, lines)
    assert "STRESS_API_KEY" in lines[0] and "only letters" in lines[0], lines
    assert "requests" not in lines[0]
    assert server.received == 0
