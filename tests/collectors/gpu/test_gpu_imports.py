"""The GPU collector and CLI import no UI and no NVML at import time."""

from __future__ import annotations

import subprocess
import sys


def test_no_textual_and_lazy_pynvml() -> None:
    code = (
        "import sys, stress.collectors.gpu, stress.cli.gpus; "
        "print(sorted(m for m in ('textual', 'pynvml') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
