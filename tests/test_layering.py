"""The core never imports the UI: engine, run, client, collectors, summary, live.

Checked in a fresh interpreter, since this test process may already have Textual loaded.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.interpreter import fresh_interpreter

CORE = (
    "stress.load.engine",
    "stress.runtime.run",
    "stress.net.client",
    "stress.collectors.server",
    "stress.report.summary",
    "stress.live.state",
    "stress.live.headless",
    "stress.live.view_process",
    "stress.cli.main",
    "stress.runtime.pool",
    "stress.runtime.worker",
    "stress.store.wire",
)


def test_core_modules_do_not_import_textual() -> None:
    code = (
        "import importlib, importlib.util, sys\n"
        f"for m in {CORE!r} + ('stress.collectors.gpu',):\n"
        "    if m in sys.modules or importlib.util.find_spec(m) is not None:\n"
        "        importlib.import_module(m)\n"
        "bad = sorted(m for m in sys.modules if m == 'textual' or m.startswith('textual.'))\n"
        "print(','.join(bad))\n"
    )
    out = fresh_interpreter(code)
    assert out.strip() == "", f"textual imported by the core: {out[:200]}"


HEAVY = (
    "aiohttp",
    "numpy",
    "pydantic",
    "prometheus_client",
    "yaml",
    "textual",
    "matplotlib",
    "ray",
)


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["capacity", "--help"]])
def test_the_parser_imports_no_heavy_package(argv: list[str]) -> None:
    """`stress --help` answers at once: building the parser (and printing any help but
    that of sim, probe and gpus, whose arguments live in their modules) loads none of the
    packages that take a tenth of a second or more to import."""
    code = (
        "import sys\n"
        "from stress.cli.main import build_parser\n"
        f"try:\n    build_parser({argv!r}).parse_args({argv!r})\n"
        "except SystemExit:\n    pass\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    out = fresh_interpreter(code)
    assert out.strip().splitlines()[-1] == "[]", out


@pytest.mark.parametrize("command", ["sim", "probe", "gpus"])
def test_lazily_loaded_commands_still_show_their_arguments(command: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "stress", command, "--help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert f"usage: stress {command}" in out and "--" in out.split("options:")[1]


def test_the_import_contracts_hold() -> None:
    """pyproject.toml's [tool.importlinter] contracts: the layers, the forbidden imports and
    no circles (CI's lint stage runs the same command)."""
    exe = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run(
        [str(exe)], capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[1]
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
