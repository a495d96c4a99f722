"""Does the live view slow the run it watches? Same load headless, with the view in its
own process (as `stress run` draws it), and with the view on the run's own event loop.

Runs the built-in simulator (its own process) at 64 users: once with the headless printer,
once with the view's process (``stress.live.view_process``) rendering into a virtual 160x50
screen, and once with the same Textual app on the engine's loop (``stress.tui.TuiSink``,
how the view ran before it had its own process), in turn, and compares aggregate output
tok/s and TTFT. TTFT error is the client's TTFT minus the simulator's ground truth for the
same request (matched on prompt and output token counts), so it isolates what the UI adds
to the measurement; ``client lag max`` is the run's own loop-lag probe. Not run in CI:

    .venv/bin/python benchmarks/tui_overhead.py --users 64 --duration 30 --repeat 2
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import statistics
import tempfile
from pathlib import Path
from typing import Any, Literal

import orjson

import stress.live.view_process
from stress.config.scenario import load_scenario
from stress.live.view_process import TuiProcess
from stress.runtime.run import execute
from stress.tui import TuiSink

SIZE = (160, 50)
MODES = ("headless", "tui", "tui-on-loop")

ROOT = Path(__file__).resolve().parents[1]


def scenario(d: Path, users: int, duration: int, gt: Path) -> Path:
    p = d / "bench.yaml"
    p.write_text(f"""\
name: tui_overhead
target: {{url: sim, sim: {{ground_truth_path: "{gt}", max_seqs: 64, kv_tokens: 1048576}}}}
users: {{count: {users}, ramp_up: 2s, think_time: {{min: 0.5s, max: 1.5s}}}}
duration: {duration}s
conversation:
  cache: per_user
  ceiling_tokens: 8000
  turn:
    paste: {{corpus: {ROOT / "corpora" / "en"}, tokens: [300, 800]}}
    ask: ["Summarise this.", "What matters most here?"]
request: {{max_tokens: 256}}
warmup: {{rounds: 0}}
telemetry: {{server_metrics: true}}
""")
    return p


def ttft_error(run_dir: Path, gt: Path) -> dict[str, float]:
    recs = [orjson.loads(x) for x in (run_dir / "requests.jsonl").read_bytes().splitlines()]
    truth = [orjson.loads(x) for x in gt.read_bytes().splitlines()]
    by_key: dict[tuple[int, int], list[float]] = {}
    for t in truth:
        if t.get("ttft_s") is not None:
            by_key.setdefault((t["prompt_tokens"], t["tokens_sent"]), []).append(t["ttft_s"])
    diffs = []
    for r in recs:
        if r.get("ttft_s") is None or r.get("prompt_tokens") is None:
            continue
        hit = by_key.get((r["prompt_tokens"], r["completion_tokens"]))
        if hit and len(hit) == 1:
            diffs.append(r["ttft_s"] - hit[0])
    client = [r["ttft_s"] for r in recs if r.get("ttft_s") is not None]
    return {
        "matched": float(len(diffs)),
        "ttft_err_ms_mean": 1000 * statistics.fmean(diffs) if diffs else float("nan"),
        "ttft_err_ms_p95": 1000 * sorted(diffs)[int(0.95 * (len(diffs) - 1))]
        if diffs
        else float("nan"),
        "ttft_p50_s": statistics.median(client) if client else float("nan"),
    }


def view_process(*args: Any, **kwargs: Any) -> TuiProcess:
    """The view as `stress run` draws it, its process rendering into a virtual screen."""
    return TuiProcess(*args, args=("--headless", "x".join(map(str, SIZE))), **kwargs)


def view_on_loop(*args: Any, child: object = None, **kwargs: Any) -> TuiSink:
    """The same Textual app on the run's own event loop (virtual screen); no child process
    (``stress run`` starts one early: here the run is started without it)."""
    return TuiSink(*args, headless=True, size=SIZE, **kwargs)


async def one(mode: str, users: int, duration: int) -> dict[str, Any]:
    ui: Literal["headless", "tui"] = "headless" if mode == "headless" else "tui"
    stress.live.view_process.TuiProcess = view_on_loop if mode == "tui-on-loop" else view_process  # type: ignore[assignment,misc]
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        gt = d / "truth.jsonl"
        loaded = load_scenario(scenario(d, users, duration, gt))
        with contextlib.redirect_stdout(io.StringIO()):
            outcome = await execute(loaded, d / "out", progress_interval=3600, ui=ui)
        s = outcome.summary
        recs = (outcome.run_dir / "requests.jsonl").read_bytes().splitlines()
        tokens = sum(orjson.loads(x)["completion_tokens"] for x in recs)
        manifest = orjson.loads((outcome.run_dir / "manifest.json").read_bytes())
        client = orjson.loads((outcome.run_dir / "collectors.json").read_bytes()).get("client")
        out = {
            "ui": mode,
            "lag_p99_ms": (client or {}).get("loop_lag_ms_p99") or float("nan"),
            "lag_max_ms": (client or {}).get("loop_lag_ms_max") or float("nan"),
            "requests": len(recs),
            "out_tok_s": tokens / manifest["duration_s"],
            "errors": s.get("outcomes", {}).get("error", 0) if isinstance(s, dict) else None,
        }
        out.update(ttft_error(outcome.run_dir, gt))
        return out


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=64)
    ap.add_argument("--duration", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    for _ in range(args.repeat):
        for mode in MODES:
            r = await one(mode, args.users, args.duration)
            rows.append(r)
            print(
                f"{r['ui']:>11}: {r['requests']:5d} requests  {r['out_tok_s']:8.1f} out tok/s  "
                f"TTFT p50 {r['ttft_p50_s']:.3f}s  TTFT error mean {r['ttft_err_ms_mean']:.2f} ms "
                f"p95 {r['ttft_err_ms_p95']:.2f} ms ({r['matched']:.0f} matched)  "
                f"client lag p99 {r['lag_p99_ms']:.1f} max {r['lag_max_ms']:.1f} ms",
                flush=True,
            )
    for key in (
        "out_tok_s",
        "ttft_p50_s",
        "ttft_err_ms_mean",
        "ttft_err_ms_p95",
        "lag_p99_ms",
        "lag_max_ms",
    ):
        base = statistics.fmean(r[key] for r in rows if r["ui"] == "headless")
        parts = []
        for mode in MODES[1:]:
            v = statistics.fmean(r[key] for r in rows if r["ui"] == mode)
            parts.append(f"{mode} {v:9.3f} ({100 * (v / base - 1):+.1f} %)")
        print(f"{key:>17}: headless {base:9.3f}  " + "  ".join(parts))


if __name__ == "__main__":
    asyncio.run(main())
