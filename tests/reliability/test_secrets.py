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

import pytest

from tests.reliability.harness import (
    MARGIN_S,
    Cli,
    RunResult,
    assert_accounted,
    assert_no_traceback,
    assert_sound_run,
    cli_env,
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
