"""The end of ``stress run`` in a fresh process image (``stress.runtime.conclude``): it
concludes from the run directory alone, without the run's modules, and scrubs the keys
it can read again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from stress.core.secrets import REDACTOR
from stress.runtime.conclude import CONCLUDE_COMMAND, register_keys
from tests.report.synth import manifest, request, write_run

ROOT = Path(__file__).resolve().parents[2]


def _run_dir(tmp_path: Path, ttft: float = 1.0) -> Path:
    man = manifest(users=4, slo={"ttft_p95": 2.0})
    reqs = [request(u, k, float(k * 10 + u), ttft=ttft) for u in range(4) for k in range(1, 7)]
    return write_run(tmp_path, man, reqs)


@pytest.mark.parametrize(("ttft", "fail_on", "code"), [(1.0, "fail", 0), (9.0, "fail", 3)])
def test_the_conclusion_writes_the_summary_and_report_and_exits_with_the_verdict(
    tmp_path: Path, ttft: float, fail_on: str, code: int
) -> None:
    """What ``stress run`` execs into: summary.json, report.html, the summary on stdout,
    and ``stress run``'s exit code for the verdict (3: FAIL under --fail-on fail)."""
    d = _run_dir(tmp_path, ttft)
    proc = subprocess.run(
        [sys.executable, "-m", "stress", CONCLUDE_COMMAND, str(d), fail_on],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == code, proc.stderr
    assert f"run directory: {d}" in proc.stdout
    assert f"report: {d / 'report.html'}" in proc.stdout
    assert (d / "summary.json").is_file() and (d / "report.html").is_file()


def test_the_conclusion_loads_none_of_the_run(tmp_path: Path) -> None:
    """The point of the fresh image: the load's modules (engine, client, scenario models,
    tokenizer) are never imported to conclude, so their memory is not in its peak."""
    d = _run_dir(tmp_path)
    code = (
        "import sys; from pathlib import Path; from stress.runtime.conclude import conclude_main; "
        f"conclude_main(Path({str(d)!r}), 'never'); "
        "bad = [m for m in ('stress.runtime.run', 'stress.load.engine', 'stress.net.client', "
        "'stress.config.scenario', 'stress.core.tokens') if m in sys.modules]; "
        "print('loaded:', bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stdout[-500:] + proc.stderr[-2000:]


def test_the_keys_the_scenario_names_are_scrubbed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key in target.api_key_env and the one in target.api_key_file are registered
    with the redactor in the concluding process, as the run registered them."""
    env_key, file_key = "sk-conclude-env-4f9a2c71", "sk-conclude-file-8b3e0d55"
    monkeypatch.setenv("STRESS_TEST_CONCLUDE_KEY", env_key)
    key_file = tmp_path / "key.txt"
    key_file.write_text(file_key + "\n")
    d = _run_dir(tmp_path)
    import json

    m = json.loads((d / "manifest.json").read_text())
    m["scenario"]["target"].update(api_key_env="STRESS_TEST_CONCLUDE_KEY")
    (d / "manifest.json").write_text(json.dumps(m))
    register_keys(d)
    m["scenario"]["target"].update(api_key_env=None, api_key_file=str(key_file))
    (d / "manifest.json").write_text(json.dumps(m))
    register_keys(d)
    text = REDACTOR.text(f"a {env_key} and a {file_key}")
    assert env_key not in text and file_key not in text
