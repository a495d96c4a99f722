"""A new Python interpreter for a test: what a module loads, or how the interpreter is set,
must be seen from a process that has not loaded the test suite's modules already."""

from __future__ import annotations

import subprocess
import sys


def fresh_interpreter(code: str) -> str:
    """What ``code`` prints when run by a new interpreter (the suite's own Python)."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
