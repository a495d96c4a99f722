"""``stress sim``: run the simulator as a standalone server until Ctrl-C.

The lead's ``stress/cli/main.py`` registers the sub-command with ``add_arguments`` and calls
``main``. Flags cover the main knobs; ``--config FILE`` (YAML of SimConfig fields, faults
included) covers the rest, and flags given on the command line win over the file.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from typing import Any

from pydantic import ValidationError

from stress.config.sim import SimConfig, SimConfigError, format_validation_error, load_config_file
from stress.sim.server import start_sim

# flag dest -> SimConfig field
_FLAGS: dict[str, str] = {
    "kv_tokens": "kv_tokens",
    "block_size": "block_size",
    "max_seqs": "max_seqs",
    "time_scale": "time_scale",
    "dialect": "dialect",
    "reasoning_tokens": "reasoning_tokens",
    "seed": "seed",
    "model": "model",
    "max_model_len": "max_model_len",
    "ground_truth": "ground_truth_path",
    "gpus": "gpus",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    # Checked in ``main`` (not by argparse) so a bad port is one line, not a usage block.
    parser.add_argument(
        "--port", metavar="PORT", default="8000", help="port (default 8000; 0 = any free one)"
    )
    parser.add_argument("--config", metavar="FILE", help="YAML file of simulator settings")
    parser.add_argument("--kv-tokens", type=int, help="KV pool size in tokens")
    parser.add_argument("--block-size", type=int, help="tokens per KV block")
    parser.add_argument("--max-seqs", type=int, help="most sequences running at once")
    parser.add_argument("--max-model-len", type=int, help="per-request context limit (tokens)")
    parser.add_argument(
        "--time-scale", type=float, help="simulated seconds per wall second (60 = 1 h in 1 min)"
    )
    parser.add_argument(
        "--dialect", choices=["vllm", "sglang", "llamacpp"], help="which server to imitate"
    )
    parser.add_argument("--reasoning-tokens", type=int, help="thinking tokens before the answer")
    parser.add_argument("--seed", type=int, help="seed for replies and faults")
    parser.add_argument(
        "--gpus", type=int, help="simulated GPUs served at /sim/gpus (default 0: none)"
    )
    parser.add_argument("--model", help="model id to serve (default sim-llm)")
    parser.add_argument(
        "--ground-truth", metavar="FILE", help="append per-request server-side truth (JSONL)"
    )
    parser.add_argument(
        "--quiet", action="store_true", help="keep aiohttp's request-error log off stderr"
    )
    parser.add_argument(  # how `stress run --target sim` ties its child simulator to itself
        "--stop-on-stdin-eof", action="store_true", help="stop when stdin closes"
    )


def build_config(args: argparse.Namespace) -> SimConfig:
    """SimConfig from ``--config`` and flags; raises SimConfigError with one-line problems."""
    overrides: dict[str, Any] = {}
    for dest, field in _FLAGS.items():
        value = getattr(args, dest, None)
        if value is not None:
            overrides[field] = value
    path = getattr(args, "config", None)
    if path:
        return load_config_file(path, overrides)
    try:
        return SimConfig.model_validate(overrides)
    except ValidationError as exc:
        raise SimConfigError(format_validation_error(exc, "command line", {})) from None


def parse_port(text: object) -> int:
    """``--port`` as a TCP port (0-65535); raises SimConfigError with the fix."""
    try:
        port = int(str(text).strip())
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise SimConfigError(
            f"--port {text!r} is not a TCP port -- fix: give a whole number from 1 to 65535 "
            "(0 picks any free port)"
        )
    return port


async def _serve(
    cfg: SimConfig, host: str, port: int, quiet: bool = False, stdin_eof: bool = False
) -> None:
    """Serve until SIGINT or SIGTERM (or, with ``stdin_eof``, until stdin closes: the
    parent that started it is gone), then stop at once, streams in flight included."""
    sim = await start_sim(cfg, host=host, port=port, quiet=quiet)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not on Windows
            loop.add_signal_handler(sig, stop.set)
    if stdin_eof:
        fd = sys.stdin.fileno()

        def on_stdin() -> None:
            try:
                gone = not os.read(fd, 4096)
            except OSError:
                gone = True
            if gone:
                loop.remove_reader(fd)
                stop.set()

        loop.add_reader(fd, on_stdin)
    print(
        f"stress sim: {cfg.dialect} simulator serving model {cfg.model!r} at {sim.url} "
        f"(time scale {cfg.time_scale:g}; Ctrl-C to stop)",
        flush=True,
    )
    try:
        await stop.wait()
    finally:
        for sig in signals:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)
        await sim.close()


def main(args: argparse.Namespace) -> int:
    try:
        port = parse_port(args.port)
        cfg = build_config(args)
    except SimConfigError as exc:
        print(f"stress sim: {exc}", file=sys.stderr)
        return 2
    try:
        runner = _runner()
        runner(_serve(cfg, args.host, port, args.quiet, args.stop_on_stdin_eof))
    except KeyboardInterrupt:
        return 0
    except OSError as exc:
        print(
            f"stress sim: cannot listen on {args.host}:{port} ({exc.strerror or exc}) "
            "-- fix: pick another --port or --host",
            file=sys.stderr,
        )
        return 2
    return 0


def _runner() -> Any:
    with contextlib.suppress(ImportError):
        import uvloop

        return uvloop.run
    return asyncio.run


if __name__ == "__main__":  # pragma: no cover - manual use: python -m stress.sim.cli
    _parser = argparse.ArgumentParser(prog="stress sim")
    add_arguments(_parser)
    sys.exit(main(_parser.parse_args()))
