"""The code stays ruff- and mypy-clean and its functions fit on a screen: part of the suite,
so CI enforces it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def tool(name: str) -> str:
    path = shutil.which(name, path=str(Path(sys.executable).parent))
    if path is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[test]'")
    return path


def test_ruff_check() -> None:
    out = subprocess.run(
        [tool("ruff"), "check", "stress", "tests", "benchmarks", "scripts"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.slow
def test_mypy_strict() -> None:
    out = subprocess.run([tool("mypy")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr


SCREEN_LINES = 80
"""A function fits on a screen: longer ones state why in a comment starting 'one function:'
on the line after their docstring (the hot path's per-chunk loop); none is over 150."""


def test_functions_fit_on_a_screen() -> None:
    import ast

    long: list[str] = []
    for path in sorted((ROOT / "stress").rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            body = node.body[1:] if ast.get_docstring(node) is not None else node.body
            after_doc = lines[body[0].lineno - 2].strip() if body else ""
            reason = after_doc.startswith("# one function:")
            if size > 150 or (size > SCREEN_LINES and not reason):
                long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({size} lines)")
    assert not long, long
