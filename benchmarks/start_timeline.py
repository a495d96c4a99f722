"""Where `stress run`'s start goes: each step on the way to the run clock, timed from the
process start (milliseconds on stderr).

Runs the real CLI on the quick start against ``URL`` (e.g. ``paced_server.py``), with the
steps between the imports and the run clock wrapped to print when each begins and ends:
the model list, the tokenizer, the corpus, the server probe, the run directory, the
recorder, the manifest (its package versions and platform), the run clock, the
collectors (and the GPU backends' opening, in the GPU collector's thread), the engine,
the first excerpt, the first request's body, and the first chat request written to its
connection. A diagnostic, not a measurement of the whole start
(``e2e.py --parts start``): the wrapping itself costs a few microseconds a step.

    .venv/bin/python benchmarks/paced_server.py --port 8399 --log /tmp/paced.jsonl &
    taskset -c 0 .venv/bin/python benchmarks/start_timeline.py http://127.0.0.1:8399 [SCENARIO]

(``SCENARIO``: another scenario than the quick start, e.g. one with ``telemetry.gpus: off``.)
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

T0 = time.perf_counter()
ROOT = Path(__file__).resolve().parents[1]


def lap(what: str) -> None:
    import threading

    thread = threading.current_thread()
    where = "" if thread is threading.main_thread() else f" [thread {thread.name}]"
    print(f"{(time.perf_counter() - T0) * 1000:7.1f} ms {what}{where}", file=sys.stderr, flush=True)


def wrap(module: Any, name: str) -> None:
    f: Callable[..., Any] = getattr(module, name)

    def timed(*a: Any, **k: Any) -> Any:
        lap(f"> {name}")
        out = f(*a, **k)
        lap(f"< {name}")
        return out

    setattr(module, name, timed)


def wrap_async(module: Any, name: str) -> None:
    f: Callable[..., Awaitable[Any]] = getattr(module, name)

    async def timed(*a: Any, **k: Any) -> Any:
        lap(f"> {name}")
        out = await f(*a, **k)
        lap(f"< {name}")
        return out

    setattr(module, name, timed)


def main() -> None:
    url = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8399"
    scenario = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "scenarios" / "quickstart.yaml"
    import stress.cli.main as cli

    lap("stress.cli.main imported")
    import stress.runtime.run as run
    import stress.runtime.target as target

    lap("stress.runtime.run imported")
    import stress.collectors.gpu.collector as gpu_collector
    import stress.load.corpus as corpus
    import stress.load.engine as engine
    import stress.load.users as users
    import stress.net.http1 as http1

    steps = ("get_tokenizer", "Corpus", "new_run_dir", "Recorder", "write_json", "ChatClient")
    for name in (*steps, "versions", "platform_text", "make_collectors"):
        wrap(run, name)
    wrap(users, "build_body")
    wrap(gpu_collector, "open_backends")  # in the GPU collector's thread
    wrap(corpus.Corpus, "excerpt")
    wrap_async(engine.Engine, "run")
    wrap(run.RunClock, "start")
    wrap_async(run, "preflight")
    wrap_async(target, "list_models")
    send = http1.Connection.send

    def first_send(self: Any, head: bytes, *a: Any, **k: Any) -> Any:
        if not sent and b"/chat/completions " in head[:200]:
            sent.append(1)
            lap("first chat request written")
        return send(self, head, *a, **k)

    sent: list[int] = []
    http1.Connection.send = first_send  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory(prefix="stress-start-") as out:
        sys.argv = ["stress", "run", str(scenario)]
        sys.argv += ["--target", url, "--no-tui", "--out", out, "--duration", "2s"]
        sys.argv += ["--fail-on", "never"]
        with contextlib.suppress(SystemExit):  # the verdict's exit code says nothing here
            cli.main()


if __name__ == "__main__":
    main()
