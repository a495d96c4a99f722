"""Memory: `stress run` loads what the end of the run needs only when the run ends.

The analysis, the summary, the report (matplotlib), the live metrics exporter and the TUI
take memory a headless run does not need while it sends requests (issue 15: RSS at 256
streams). Checked in a fresh interpreter, since this test process may have them loaded.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import orjson

from tests.interpreter import fresh_interpreter

ROOT = Path(__file__).resolve().parents[2]

END_OF_RUN = (
    "aiohttp",  # never in the run's process: the probe and scrapes go through stress.net.fetch
    "numpy",  # the live view's percentiles, the client's health and tokens.bin need none
    "pynvml",  # the GPU pre-flight runs in a child process; the GPU collector loads it
    "matplotlib",
    "textual",
    "stress.report.build",
    "stress.report.charts",
    "stress.analysis.analyze",
    "stress.report.summary",
    "stress.live.metrics_export",
    "stress.tui",
    "ray",  # --ray only: a one-process or --workers run never loads it
    "stress.runtime.ray_pool",
)


def test_the_run_path_loads_no_end_of_run_module() -> None:
    code = (
        "import sys\n"
        "from stress.cli.main import build_parser\n"
        "import stress.runtime.run, stress.load.engine, stress.live.state\n"
        "import stress.store.recorder, stress.live.headless\n"
        "import stress.live.view_process  # the live view's own process draws; this side sends\n"
        "from stress.core.tokens import get_tokenizer\n"
        "build_parser(['run', 'x.yaml', '--no-tui']).parse_args(['run', 'x.yaml', '--no-tui'])\n"
        "get_tokenizer()\n"
        f"print(sorted(m for m in {END_OF_RUN!r} if m in sys.modules))\n"
    )
    out = fresh_interpreter(code)
    assert out.strip().splitlines()[-1] == "[]", out


def test_prometheus_client_loads_at_the_first_metrics_parsed() -> None:
    """Its import brings an HTTP server, wsgiref and email (~35 modules, 15-34 ms on 2
    cores): a run whose server has no /metrics never pays it on the way to its first
    request; the first body parsed loads it."""
    code = (
        "import sys\n"
        "import stress.runtime.run, stress.collectors.probe\n"
        "import stress.collectors.server, stress.collectors.prometheus\n"
        "print('prometheus_client' in sys.modules)\n"
        "stress.collectors.prometheus.parse_metrics('# TYPE x counter\\nx_total 1\\n')\n"
        "print('prometheus_client' in sys.modules)\n"
    )
    out = fresh_interpreter(code)
    assert out.split() == ["False", "True"], out


def test_the_tokenizer_keeps_no_python_copy_of_its_ranks() -> None:
    """tiktoken's Rust tables hold the ranks; the Python dict (~13 MiB) is dropped."""
    from stress.core.tokens import TiktokenTokenizer, get_tokenizer

    tok = get_tokenizer()
    assert isinstance(tok, TiktokenTokenizer)
    assert "_mergeable_ranks" not in vars(tok._enc)
    text = "Summarise the main points of this document, naïvely: 12345 ✓"
    assert tok.decode(tok.encode(text)) == text
    assert tok.count("hello world") == 2


def test_a_buffered_record_line_takes_its_own_size() -> None:
    """orjson 3.12+ rounds its output buffer up (16 KiB for a 1 KiB record) and keeps it;
    the recorder buffers up to a second of lines, so each is copied to its own size."""
    from stress.store.recorder import _dumps_line

    record = {f"field_{i}": i * 1.000001 for i in range(40)} | {"text": "x" * 300}
    size = len(_dumps_line(record))
    tracemalloc.start()
    try:
        lines = [_dumps_line(record) for _ in range(200)]
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert lines[0] == orjson.dumps(
        record, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
    )
    assert held < 200 * (size + 256), f"{held / 200:.0f} B per {size}-byte line"


def test_gpu_discovery_runs_in_a_child_process() -> None:
    """NVML's memory and start-up (34 MiB and 0.25 s on an H200 host) stay out of the load
    generator: the pre-flight's GPU part answers from a child process."""
    code = (
        "import asyncio, sys\n"
        "from stress.runtime.preflight import gpu_info\n"
        "found = asyncio.run(gpu_info())\n"
        "print(isinstance(found.get('summary'), str), 'pynvml' in sys.modules)\n"
    )
    out = fresh_interpreter(code)
    assert out.split() == ["True", "False"], out


def test_the_scenario_loads_without_scanning_every_package_for_pydantic_plugins() -> None:
    """pydantic reads every installed package's entry points for plugins when it builds a
    model (14 ms in a PyTorch venv, on the way to the first request); `stress` turns that
    off unless the user set ``PYDANTIC_DISABLE_PLUGINS`` themselves."""
    code = (
        "import importlib.metadata as md, sys\n"
        "calls = []\n"
        "scan = md.entry_points\n"
        "md.entry_points = lambda *a, **k: calls.append(k) or scan(*a, **k)\n"
        "from stress.cli.main import main\n"
        "try:\n"
        "    main(['validate', 'scenarios/quickstart.yaml'])\n"
        "except SystemExit as e:\n"
        "    assert not e.code, e.code\n"
        "print(calls)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    run = functools.partial(
        subprocess.run, capture_output=True, text=True, check=True, timeout=60, cwd=ROOT
    )
    assert run([sys.executable, "-c", code], env=env).stdout.splitlines()[-1] == "[]"
    # the user's own setting is kept: plugins on, pydantic scans for them
    on = run([sys.executable, "-c", code], env=env | {"PYDANTIC_DISABLE_PLUGINS": ""})
    assert "'group': 'pydantic'" in on.stdout.splitlines()[-1]
