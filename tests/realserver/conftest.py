"""Fixtures for tests against real inference servers (llama.cpp, vLLM CPU).

The servers and the model are obtained, built and cached by the scripts in
``scripts/realserver/`` under ``${STRESS_CACHE_DIR:-~/.cache/stress-realserver}``: the first
run on a machine builds (llama.cpp ~9 min on 2 cores; vLLM CPU ~3 min install + ~35 s model
conversion), later runs reuse the cache. Servers bind 127.0.0.1 on a free port, every wait
is bounded, and each server's whole process group is killed at teardown.

Opt out with ``STRESS_SKIP_REALSERVER=1`` (the tests then skip and say so). Without it, a
server that cannot be obtained or started is a test failure with the reason, not a skip.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.realserver.servers import (
    BUILD_TIMEOUT_S,
    SKIP_VAR,
    ServerProcess,
    free_port,
    run_script,
    skip_if_opted_out,
    start_vllm,
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "realserver: needs a real inference server (llama.cpp / vLLM CPU) built and cached "
        "by scripts/realserver/; deselect with -m 'not realserver', opt out with "
        f"{SKIP_VAR}=1",
    )


def _explicitly_asked(config: pytest.Config) -> bool:
    """A mark expression that names them (`-m realserver`; `-m "not slow"` does not), or a
    path under tests/realserver named."""
    if "realserver" in (config.option.markexpr or ""):
        return True
    return any("realserver" in str(a) for a in config.args)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A bare `pytest` leaves the real servers out (they build for minutes on a new machine).

    CI runs them explicitly: `pytest -m realserver` (see docs/real-servers.md). Anyone
    else's plain `pytest` stays fast and never starts a build in the shared cache.
    """
    for item in items:  # the first run builds servers inside fixtures: far past 120 s
        if item.get_closest_marker("realserver") is not None:
            item.add_marker(pytest.mark.timeout(BUILD_TIMEOUT_S + 1200))
    if _explicitly_asked(config):
        return
    keep = [i for i in items if i.get_closest_marker("realserver") is None]
    dropped = [i for i in items if i.get_closest_marker("realserver") is not None]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
        config._realserver_deselected = len(dropped)  # type: ignore[attr-defined]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    n = getattr(terminalreporter.config, "_realserver_deselected", 0)
    if n:
        terminalreporter.write_line(
            f"{n} real-server tests deselected (plain `pytest`); run them with "
            "`pytest -m realserver` (first run builds llama.cpp and vLLM CPU, ~15 min)"
        )


# --- llama.cpp -----------------------------------------------------------------------


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    skip_if_opted_out()
    return Path(run_script("fetch_model.sh", timeout_s=600))


@pytest.fixture(scope="session")
def llama_server_bin() -> Path:
    skip_if_opted_out()
    return Path(run_script("build_llamacpp.sh", timeout_s=BUILD_TIMEOUT_S))


@pytest.fixture(scope="session")
def llamacpp(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """llama-server on SmolLM2-135M: 4 slots of 4,096 tokens, /metrics on, /slots default."""
    port = free_port()
    log = tmp_path_factory.mktemp("llamacpp") / "llama-server.log"
    cmd = [
        str(llama_server_bin),
        "-m",
        str(smollm2_gguf),
        "--parallel",
        "4",
        "-c",
        "16384",
        "--metrics",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--threads",
        str(min(4, os.cpu_count() or 2)),
    ]
    server = ServerProcess("llama-server", cmd, port, log, env={})
    try:
        server.wait_healthy(timeout_s=90)
        yield server
    finally:
        server.stop()


# --- vLLM (CPU) ----------------------------------------------------------------------


@pytest.fixture(scope="session")
def vllm_install() -> tuple[str, Path]:
    """(python of the vLLM venv, converted HF model dir), installed and cached once."""
    skip_if_opted_out()
    py, model = run_script("setup_vllm.sh", timeout_s=BUILD_TIMEOUT_S).split()
    return py, Path(model)


@pytest.fixture(scope="module")
def vllm(
    vllm_install: tuple[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """vLLM CPU: 1 GiB KV space (46,592 tokens), 4,096-token requests, cached-token details."""
    server = start_vllm(vllm_install, tmp_path_factory.mktemp("vllm"), "--max-model-len", "4096")
    try:
        yield server
    finally:
        server.stop()
