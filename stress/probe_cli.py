"""``stress probe``: the one-screen server check, as a CLI subcommand.

Why a separate module: the lead's ``stress.cli`` only has to call ``add_arguments`` and
``main``; everything about reading the key, opening the session and printing lives here.
The API key is read from the environment variable the user names, sent only as a request
header, and never printed, logged or put in the JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

import aiohttp
import orjson

from stress.errors import StressError, TargetError
from stress.preflight import with_gpu_info
from stress.probe import ProbeResult, check_scenario, normalize_base_url, probe, render_probe
from stress.secrets import REDACTOR, load_api_key

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


def _check_target(url: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise TargetError(f"target {url!r} is not an http(s) URL (e.g. {DEFAULT_TARGET})")
    return normalize_base_url(url)


async def _run(target: str, key: str | None, send_test: bool, timeout_s: float) -> ProbeResult:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    # Fresh connections: pooled keep-alive connections were seen dying between requests.
    connector = aiohttp.TCPConnector(force_close=True, limit=16)
    async with aiohttp.ClientSession(connector=connector) as session:
        result = await probe(
            session, target, headers, send_test_request=send_test, timeout_s=timeout_s
        )
    return await with_gpu_info(result)


def main(args: argparse.Namespace) -> int:
    """0: reachable, no warnings; 1: reachable with warnings; 2: unreachable or an error."""
    try:
        target = _check_target(args.target)
        key = read_api_key(args.api_key_env)
        result = asyncio.run(_run(target, key, args.send_test_request, args.timeout))
        warnings = (
            check_scenario(result, args.ceiling_tokens, args.max_tokens)
            if args.ceiling_tokens is not None
            else (check_scenario(result, 0, 0) if result.reachable else [])
        )
        if args.ceiling_tokens is None:
            warnings = [w for w in warnings if "context length is unknown" not in w]
        if args.json:
            doc = {"probe": result.to_dict(), "warnings": warnings}
            text = orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n"
        else:
            text = render_probe(result, warnings)
        sys.stdout.write(REDACTOR.text(text))
        if not result.reachable:
            return 2
        return 1 if warnings else 0
    except StressError as exc:
        print(f"stress probe: {REDACTOR.text(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("stress probe: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # one line, never a traceback
        msg = REDACTOR.text(f"{type(exc).__name__}: {exc}")
        print(f"stress probe: unexpected error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover - convenience for manual runs
    _p = argparse.ArgumentParser(prog="stress probe")
    add_arguments(_p)
    sys.exit(main(_p.parse_args()))
