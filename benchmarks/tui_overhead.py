"""Does the live TUI slow the run it watches? Same load with and without it.

Runs the built-in simulator (in-process, on the same event loop as the engine and the UI)
at 64 users, once with the headless printer and once with the Textual TUI rendering into a
virtual 160x50 screen, alternating, and compares aggregate output tok/s and TTFT. TTFT
error is the client's TTFT minus the simulator's ground truth for the same request
(matched on prompt and output token counts), so it isolates what the UI adds to the
measurement. Not run in CI:

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

import stress.tui
from stress.run import execute
from stress.scenario import load_scenario

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


async def one(ui: Literal["headless", "tui"], users: int, duration: int) -> dict[str, Any]:
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
        out = {
            "ui": ui,
            "requests": len(recs),
            "out_tok_s": tokens / manifest["duration_s"],
            "errors": s.get("outcomes", {}).get("error", 0) if isinstance(s, dict) else None,
        }
        out.update(ttft_error(outcome.run_dir, gt))
        return out


class BenchSink(stress.tui.TuiSink):
    """The real TUI, rendering into a virtual 160x50 terminal (no tty needed)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, headless=True, size=(160, 50), **kwargs)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=64)
    ap.add_argument("--duration", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    stress.tui.TuiSink = BenchSink  # type: ignore[misc]
    rows: list[dict[str, Any]] = []
    for _ in range(args.repeat):
        for ui in ("headless", "tui"):
            r = await one(ui, args.users, args.duration)  # type: ignore[arg-type]
            rows.append(r)
            print(
                f"{r['ui']:>8}: {r['requests']:5d} requests  {r['out_tok_s']:8.1f} out tok/s  "
                f"TTFT p50 {r['ttft_p50_s']:.3f}s  TTFT error mean {r['ttft_err_ms_mean']:.2f} ms "
                f"p95 {r['ttft_err_ms_p95']:.2f} ms ({r['matched']:.0f} matched)",
                flush=True,
            )
    for key in ("out_tok_s", "ttft_p50_s", "ttft_err_ms_mean"):
        base = statistics.fmean(r[key] for r in rows if r["ui"] == "headless")
        tui = statistics.fmean(r[key] for r in rows if r["ui"] == "tui")
        print(f"{key:>17}: headless {base:9.3f}  tui {tui:9.3f}  ({100 * (tui / base - 1):+.1f} %)")


if __name__ == "__main__":
    asyncio.run(main())
