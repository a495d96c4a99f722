"""The core never imports the UI: engine, run, client, collectors, summary, live.

Checked in a fresh interpreter, since this test process may already have Textual loaded.
"""

from __future__ import annotations

import subprocess
import sys

CORE = (
    "stress.engine",
    "stress.run",
    "stress.client",
    "stress.collectors.server",
    "stress.summary",
    "stress.live",
    "stress.headless",
    "stress.cli",
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
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "", f"textual imported by the core: {out.stdout[:200]}"
