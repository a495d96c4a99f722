"""The built wheel is a tool that runs its own soak from any directory.

The wheel is built from a copy of the package alone (pyproject, README, LICENSE, stress/:
no repository `scenarios/` or `corpora/` beside it), installed into a fresh venv without
system site-packages, and run from an empty directory outside the repository. Only its
third-party dependencies come from this test's own environment, through a ``.pth`` line
naming that environment's site-packages (added after the venv's own site-packages, and a
plain path: the editable install's finder there is not loaded), so ``stress`` itself, its
scenarios and its corpora can only come from the installed wheel, which the test checks.

One wheel is built and installed for the whole module. Besides the soak: the wheel's files
are listed against ``git ls-files stress/`` (a data file that the package-data globs miss
is caught here, not on a user's machine), and the quick start runs with the live view in a
real pseudo-terminal, where ``q`` must stop it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from stress.config.bundled import CORPORA, SCENARIOS, scenario_names
from tests.terminal import Terminal

ROOT = Path(__file__).resolve().parents[1]

# Limits from measured work on a 2-core machine, with room for a busy one: building the
# wheel took 2.4 s (pip's isolated build environment installs setuptools and wheel from
# the package index once, then from its cache), installing it 0.7 s, a 3 s simulator run of
# eight_users_1h 5 s (start-up, the corpora tokenized, a 3 s run, one reply drained), the
# other commands under 2 s each. With the machine's two cores shared (load 2.4) the build
# and install took 20 s, and the quick start in a pseudo-terminal drew its live view 6.5 s
# after the start, had its fourth request recorded at 16 s, and `q` ended it 12 s later
# (the graceful stop lets the replies in flight finish: up to 256 tokens at the simulator's
# ~30 tok/s, 8.5 s; then the analysis and the report).
BUILD_S = 180
INSTALL_S = 60
RUN_S = 90
COMMAND_S = 30
SETUP_S = BUILD_S + INSTALL_S + COMMAND_S
"""The module's build and install, counted in the limit of whichever test runs first."""
VIEW_S = 60
STOP_S = 60

EXCLUDED: dict[str, str] = {}
"""Tracked files under stress/ kept out of the wheel on purpose, each with the reason.
None: every tracked file there is code or data the installed tool reads."""
VIEW = "stress.tui.child"
HEADER = "stress quickstart → sim (built-in simulator)"
LEFT_ALT_SCREEN = b"\x1b[?1049l"


def _sh(cmd: list[str], timeout: float, **kw: Any) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    assert proc.returncode == 0, f"{cmd}: rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@dataclass(frozen=True, slots=True)
class Installed:
    """The wheel, and the fresh venv it is installed in."""

    wheel: Path
    python: str
    site: Path
    """The venv's site-packages, where the wheel's ``stress`` lies."""
    stress: str
    """The venv's ``stress`` script."""
    env: dict[str, str]
    """No ``PYTHON*`` or ``STRESS_*`` variable, the venv's bin first on ``PATH``."""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """One build and one install for every test here (the build is most of their time)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(
        ROOT / "stress", src / "stress", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    dist = tmp / "dist"
    _sh([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(dist), str(src)], BUILD_S)
    [wheel] = dist.glob("stress-*.whl")

    venv = tmp / "venv"
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
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "STRESS_"))}
    env |= {"PYTHONUNBUFFERED": "1", "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"}
    return Installed(wheel, str(python), site, str(venv / "bin" / "stress"), env)


@pytest.mark.slow
@pytest.mark.timeout(SETUP_S + RUN_S + 6 * COMMAND_S)
def test_the_installed_wheel_runs_its_own_soak_from_an_empty_directory(
    installed: Installed, tmp_path: Path
) -> None:
    # the wheel holds every bundled scenario, the schema, and every corpus file
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    for name in scenario_names():
        assert f"stress/data/scenarios/{name}.yaml" in names
    assert "stress/data/scenarios/stress-scenario.schema.json" in names
    corpus = {
        f"stress/data/corpora/{p.relative_to(CORPORA).as_posix()}" for p in CORPORA.rglob("*")
    }
    assert {n for n in corpus if (ROOT / n).is_file()} <= names
    assert "stress/data/corpora/NOTICE" in names

    python, site, env, stress = installed.python, installed.site, installed.env, installed.stress
    work = tmp_path / "empty"
    work.mkdir()
    where = _sh(
        [python, "-c", "import stress.config.bundled as b; print(b.SCENARIOS); print(b.CORPORA)"],
        COMMAND_S,
        cwd=work,
        env=env,
    ).stdout.split()
    assert where == [str(site / "stress/data/scenarios"), str(site / "stress/data/corpora")]
    assert str(SCENARIOS) not in where  # not the repository's
    # the installed corpora's token ids are read, not encoded, on the way to a first request
    cached = (
        "from stress.load.corpus import BUNDLED, Corpus; print(Corpus(BUNDLED / 'en').ids_cached)"
    )
    assert _sh([python, "-c", cached], COMMAND_S, cwd=work, env=env).stdout.strip() == "True"

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


@pytest.mark.slow
@pytest.mark.timeout(SETUP_S + COMMAND_S)
def test_the_wheel_holds_every_file_of_the_package_tree(installed: Installed) -> None:
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "stress/"],
        capture_output=True,
        text=True,
        timeout=COMMAND_S,
    )
    if listed.returncode != 0:
        pytest.skip(f"not a git checkout, nothing to list the wheel against: {listed.stderr}")
    # a tracked file deleted in the working tree is not in the copy the wheel is built from
    tracked = {n for n in listed.stdout.split("\0") if n and (ROOT / n).is_file()}
    assert "stress/tui/stress.tcss" in tracked and "stress/py.typed" in tracked
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    missing = sorted(tracked - names - EXCLUDED.keys())
    assert not missing, f"not in the wheel ([tool.setuptools.package-data]): {missing}"
    shipped = sorted(EXCLUDED.keys() & names)
    assert not shipped, f"in the wheel though excluded: {shipped}"
    # what ships besides code is what the repository holds: no cache or editor file
    stray = sorted(
        n for n in names if n.startswith("stress/") and not n.endswith(".py") and n not in tracked
    )
    assert not stray, f"in the wheel but not tracked under stress/: {stray}"


def _recorded(out: Path) -> int:
    files = list(out.glob("*/requests.jsonl"))
    return files[0].read_bytes().count(b"\n") if files else 0


@pytest.mark.slow
@pytest.mark.timeout(SETUP_S + VIEW_S + RUN_S + STOP_S)
def test_the_quick_start_from_the_wheel_draws_the_live_view_and_q_stops_it(
    installed: Installed, tmp_path: Path
) -> None:
    """`stress run quickstart` as the README gives it for an installed tool, in a real
    terminal, from an empty directory: the view (its own process, styled by the packaged
    stylesheet) is drawn, `q` ends the run gracefully with exit 0 and its files written."""
    work = tmp_path / "empty"
    work.mkdir()
    out = work / "out"
    term = Terminal(["run", "quickstart"], work, program=[installed.stress], env=installed.env)

    def drawn() -> bool:
        text = term.text()
        assert "Traceback" not in text and "StylesheetError" not in text, term.tail()
        assert "continuing with plain output" not in text, term.tail()
        return HEADER in term.screen() and "conv tok" in term.screen()

    try:
        term.wait_for(drawn, VIEW_S, "the live view's header and users table")
        assert len(term.children(VIEW)) == 1, "the view draws from its own process"
        # one request past the three users' warm-up rounds: the verdict has one to judge
        term.wait_for(lambda: _recorded(out) >= 4, RUN_S, "four requests recorded")
        drawn()
        term.send(b"q")
        assert term.wait(STOP_S) == 0, term.tail()
    finally:
        term.close()
    text = term.text()
    assert "Traceback" not in text and "StylesheetError" not in text, term.tail()
    raw = term.raw()
    # the view gave the terminal back before the summary was printed
    assert raw.rindex(LEFT_ALT_SCREEN) < raw.index(b"run directory:")
    [run_dir] = out.iterdir()
    manifest = orjson.loads((run_dir / "manifest.json").read_bytes())
    assert manifest["exit_reason"] == "interrupted" and manifest["end_time"] is not None
    assert manifest["scenario_file"] == str(
        installed.site / "stress/data/scenarios/quickstart.yaml"
    )
    for name in ("summary.json", "report.md", "report.html"):
        assert (run_dir / name).is_file(), name
