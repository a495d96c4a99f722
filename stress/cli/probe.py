"""``stress probe``: the one-screen server check, as a CLI subcommand.

Why a separate module: the lead's ``stress.cli.main`` only has to call ``add_arguments`` and
``main``; everything about reading the key, opening the session and printing lives here.
The API key is read from the environment variable the user names, sent only as a request
header, and never printed, logged or put in the JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys

import orjson

from stress.collectors.probe import ProbeResult, check_scenario, probe, render_probe
from stress.collectors.prometheus import normalize_base_url
from stress.core.errors import StressError
from stress.core.secrets import REDACTOR, load_api_key, safe_url
from stress.net.fetch import Fetcher
from stress.runtime.preflight import gpu_info, with_gpu_info

DEFAULT_TARGET = "http://127.0.0.1:8000"
DEFAULT_KEY_ENV = "STRESS_API_KEY"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target",
        metavar="URL",
        default=os.environ.get("STRESS_TARGET", DEFAULT_TARGET),
        help="server root URL (default: $STRESS_TARGET or %(default)s)",
    )
    parser.add_argument(
        "--api-key-env",
        metavar="NAME",
        default=None,
        help=f"name of the environment variable holding the API key (default: {DEFAULT_KEY_ENV}"
        " if set)",
    )
    parser.add_argument("--json", action="store_true", help="print the probe as JSON")
    parser.add_argument(
        "--ceiling-tokens",
        type=int,
        default=None,
        metavar="N",
        help="check a conversation ceiling against the server's per-request context",
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=0,
        metavar="N",
        help="max_tokens per request, added to the ceiling for the context check",
    )
    parser.add_argument(
        "--send-test-request",
        action="store_true",
        help="send one 1-token chat request to see whether cached tokens are reported",
    )
    parser.add_argument(
        "--timeout", type=float, default=5.0, metavar="S", help="per-request timeout (s)"
    )


def read_api_key(env_name: str | None) -> str | None:
    """The key from the named variable (registered with the redactor).

    A variable named explicitly but unset is an error; without a name, ``STRESS_API_KEY``
    is used when it is set, and no key otherwise.
    """
    if env_name is None:
        env_name = DEFAULT_KEY_ENV if os.environ.get(DEFAULT_KEY_ENV) else None
    if env_name is None:
        return None
    key = load_api_key(env_name, None)
    return key.strip() if key else None


class _BadInput(Exception):
    """A command-line value we cannot use (exit 2)."""


def _check_args(args: argparse.Namespace) -> str:
    """The normalised target URL; raises _BadInput for a value the probe cannot use."""
    url = str(args.target).strip()
    if not url.startswith(("http://", "https://")):
        raise _BadInput(
            f"--target {safe_url(url)!r} is not an http(s) URL -- fix: give the server root, "
            f"e.g. {DEFAULT_TARGET}"
        )
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise _BadInput(f"--timeout {args.timeout} -- fix: give a number of seconds above 0")
    for flag, value in (
        ("--ceiling-tokens", args.ceiling_tokens),
        ("--max-tokens", args.max_tokens),
    ):
        if value is not None and value < 0:
            raise _BadInput(f"{flag} {value} is negative -- fix: give 0 or more tokens")
    return normalize_base_url(url)


def unusable_line(result: ProbeResult) -> str:
    """The one line for a target that cannot be used, with the fix (exit 1, as `run`)."""
    if not result.reachable:
        return (
            f"cannot reach {result.target} ({result.error}) -- fix: start the server, or pass "
            "--target URL (the server root)"
        )
    return f"{result.target}: {result.error}"


async def _run(target: str, key: str | None, send_test: bool, timeout_s: float) -> ProbeResult:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    gpu = asyncio.ensure_future(gpu_info())  # NVML in a child process, meanwhile
    # Fresh connections: pooled keep-alive connections were seen dying between requests.
    async with Fetcher(reuse=False) as session:
        result = await probe(
            session, target, headers, send_test_request=send_test, timeout_s=timeout_s
        )
    return await with_gpu_info(result, gpu)


def main(args: argparse.Namespace) -> int:
    """0 ready; 1 unusable target (as ``stress run``) or warnings; 2 bad input.

    An unusable target (unreachable, not OpenAI-compatible, wants a key) is one line on
    stderr with the fix; ``--json`` still prints the probe. A real bug propagates to
    ``stress.cli.main``, which reports it in one line with exit 70.
    """
    try:
        target = _check_args(args)
    except _BadInput as exc:
        print(f"stress probe: {REDACTOR.text(str(exc))}", file=sys.stderr)
        return 2
    try:
        key = read_api_key(args.api_key_env)
        result = asyncio.run(_run(target, key, args.send_test_request, args.timeout))
    except StressError as exc:  # the key's variable is unset: `stress run` says 1 too
        print(f"stress probe: {REDACTOR.text(str(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("stress probe: interrupted", file=sys.stderr)
        return 130
    usable = result.reachable and result.openai_compatible
    warnings: list[str] = []
    if usable:
        if args.ceiling_tokens is not None:
            warnings = check_scenario(result, args.ceiling_tokens, args.max_tokens)
        else:  # no scenario to compare: only what is wrong with the server itself
            warnings = check_scenario(result, 0, 0)
            warnings = [w for w in warnings if "context length is unknown" not in w]
    if args.json:
        doc = {"probe": result.to_dict(), "warnings": warnings}
        sys.stdout.write(
            REDACTOR.text(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
        )
    elif usable:
        sys.stdout.write(REDACTOR.text(render_probe(result, warnings)))
    if not usable:
        print(f"stress probe: {REDACTOR.text(unusable_line(result))}", file=sys.stderr)
        return 1
    return 1 if warnings else 0


if __name__ == "__main__":  # pragma: no cover - convenience for manual runs
    _p = argparse.ArgumentParser(prog="stress probe")
    add_arguments(_p)
    sys.exit(main(_p.parse_args()))
