"""The built wheel is a tool that runs its own soak from any directory.

The wheel is built from a copy of the package alone (pyproject, README, LICENSE, stress/:
no repository `scenarios/` or `corpora/` beside it), installed into a fresh venv without
system site-packages, and run from an empty directory outside the repository. Only its
third-party dependencies come from this test's own environment, through a ``.pth`` line
naming that environment's site-packages (added after the venv's own site-packages, and a
plain path: the editable install's finder there is not loaded), so ``stress`` itself, its
scenarios and its corpora can only come from the installed wheel, which the test checks.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from typing import Any

import orjson
import pytest

from stress.bundled import CORPORA, SCENARIOS, scenario_names

ROOT = Path(__file__).resolve().parents[1]

# Limits from measured work on a 2-core machine, with room for a busy one: building the
# wheel took 2.4 s (pip's isolated build environment installs setuptools and wheel from
# the package index once, then from its cache), installing it 0.7 s, a 3 s simulator run of
# eight_users_1h 5 s (start-up, the corpora tokenized, a 3 s run, one reply drained), the
# other commands under 2 s each.
BUILD_S = 180
INSTALL_S = 60
RUN_S = 90
COMMAND_S = 30


def _sh(cmd: list[str], timeout: float, **kw: Any) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    assert proc.returncode == 0, f"{cmd}: rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.mark.slow
@pytest.mark.timeout(BUILD_S + INSTALL_S + RUN_S + 6 * COMMAND_S)
def test_the_installed_wheel_runs_its_own_soak_from_an_empty_directory(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(
        ROOT / "stress", src / "stress", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    dist = tmp_path / "dist"
    _sh([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(dist), str(src)], BUILD_S)
    [wheel] = dist.glob("stress-*.whl")

    # the wheel holds every bundled scenario, the schema, and every corpus file
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in scenario_names():
        assert f"stress/data/scenarios/{name}.yaml" in names
    assert "stress/data/scenarios/stress-scenario.schema.json" in names
    corpus = {
        f"stress/data/corpora/{p.relative_to(CORPORA).as_posix()}" for p in CORPORA.rglob("*")
    }
    assert {n for n in corpus if (ROOT / n).is_file()} <= names
    assert "stress/data/corpora/NOTICE" in names

    venv = tmp_path / "venv"
    _sh([sys.executable, "-m", "venv", "--without-pip", str(venv)], INSTALL_S)
    python = venv / "bin" / "python"
    _sh(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        INSTALL_S,
    )
    site = Path(
        _sh(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            COMMAND_S,
        ).stdout.strip()
    )
    (site / "zz_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    work = tmp_path / "empty"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "STRESS_"))}
    env |= {"PYTHONUNBUFFERED": "1", "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"}
    stress = str(venv / "bin" / "stress")

    where = _sh(
        [str(python), "-c", "import stress.bundled as b; print(b.SCENARIOS); print(b.CORPORA)"],
        COMMAND_S,
        cwd=work,
        env=env,
    ).stdout.split()
    assert where == [str(site / "stress/data/scenarios"), str(site / "stress/data/corpora")]
    assert str(SCENARIOS) not in where  # not the repository's
    # the installed corpora's token ids are read, not encoded, on the way to a first request
    cached = "from stress.corpus import BUNDLED, Corpus; print(Corpus(BUNDLED / 'en').ids_cached)"
    assert _sh([str(python), "-c", cached], COMMAND_S, cwd=work, env=env).stdout.strip() == "True"

    listed = _sh([stress, "scenarios"], COMMAND_S, cwd=work, env=env).stdout
    assert all(name in listed for name in scenario_names()) and str(site) in listed

    run = _sh(
        # 3 s of an hour's soak is all warm-up: nothing to judge, so no verdict exit code
        [
            stress,
            "run",
            "eight_users_1h",
            "--target",
            "sim",
            "--duration",
            "3s",
            "--no-tui",
            "--fail-on",
            "never",
        ],
        RUN_S,
        cwd=work,
        env=env,
    )
    assert f"the bundled scenario {site}" in run.stderr
    [run_dir] = (work / "out").iterdir()
    manifest = orjson.loads((run_dir / "manifest.json").read_bytes())
    assert manifest["scenario_file"] == str(site / "stress/data/scenarios/eight_users_1h.yaml")
    assert manifest["exit_reason"] == "duration"
    records = [orjson.loads(x) for x in (run_dir / "requests.jsonl").read_bytes().splitlines()]
    assert records and all(r["paste_tokens"] > 0 for r in records), "nothing pasted"

    _sh([stress, "init", "eight_users_1h"], COMMAND_S, cwd=work, env=env)
    assert (work / "eight_users_1h.yaml").is_file()
    assert (work / "stress-scenario.schema.json").is_file()
    checked = _sh([stress, "validate", "eight_users_1h.yaml"], COMMAND_S, cwd=work, env=env)
    assert "eight_users_1h.yaml: ok" in checked.stdout

    missing = subprocess.run(
        [stress, "run", "nosuch"],
        capture_output=True,
        text=True,
        timeout=COMMAND_S,
        cwd=work,
        env=env,
    )
    assert missing.returncode == 2 and "no such scenario" in missing.stderr
    assert "Traceback" not in missing.stderr
