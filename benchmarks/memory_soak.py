"""Client memory over a one-hour soak: RSS growth of the process that runs the users.

Why: a soak tester that keeps something per chunk or per request in RAM runs out of memory
in the hour it is meant to last (issue target: under 20 MB growth over a one-hour soak).
The simulator runs in its own process on another core with a time scale (one simulated
hour in ``3600 / scale`` wall seconds); this process runs the real engine through
``stress.runtime.run.execute`` (recorder, live state, server collector, headless printer) on a
64-user scenario whose durations are scaled to match, and samples its own RSS once a
second. Growth is measured from the end of the warm-up (first 10 % of the run, when the
pools, buffers and caches fill) to the moment the engine finished (the manifest gets its
end time); the report built after that is a one-off and its peak is printed apart.

    taskset -c 0 .venv/bin/python benchmarks/memory_soak.py                # 1 h in 4 min
    taskset -c 0 .venv/bin/python benchmarks/memory_soak.py --scale 60 --users 64
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import free_port, machine, wait_port  # noqa: E402
from stress.config.scenario import Scenario, load_scenario, time_scaled  # noqa: E402
from stress.runtime.run import execute  # noqa: E402


def scenario(url: str, users: int, scale: float) -> dict[str, object]:
    data: dict[str, object] = {
        "name": "memory_soak",
        "target": {"url": url, "model": "auto"},
        "users": {"count": users, "ramp_up": "60s", "think_time": {"min": "10s", "max": "30s"}},
        "duration": "60m",
        "conversation": {
            "system_prompt": "You are a careful assistant.",
            "cache": "per_user",
            "ceiling_tokens": 12000,
            "turn": {
                "paste": {"corpus": str(ROOT / "corpora" / "en"), "tokens": [500, 1500]},
                "ask": ["Summarise the main points of this document."],
            },
        },
        "request": {"max_tokens": 256, "temperature": 0.7},
        "warmup": {"rounds": 1},
        "telemetry": {"gpus": "off"},
        "seed": 3,
    }
    # the simulator is external, so scale the wall-clock durations here as the run does
    scaled = time_scaled(Scenario.model_validate(data), scale)
    return scaled.model_dump(mode="json", exclude_none=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--users", type=int, default=64)
    ap.add_argument("--scale", type=float, default=15.0, help="simulated s per wall s")
    ap.add_argument("--server-cpu", type=int, default=1)
    args = ap.parse_args()
    port = free_port()
    sim_cmd = [
        "taskset", "-c", str(args.server_cpu), sys.executable, "-m", "stress", "sim",
        "--port", str(port), "--time-scale", str(args.scale), "--max-seqs", str(args.users),
        "--kv-tokens", str(1 << 20),
    ]  # fmt: skip
    sim = subprocess.Popen(sim_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tmp = Path(tempfile.mkdtemp(prefix="stress-bench-soak-"))
    samples: list[tuple[float, float]] = []
    stop = threading.Event()

    ended: list[int] = []  # index of the first sample after the engine finished

    def sampler() -> None:
        proc, t0 = psutil.Process(), time.perf_counter()
        while not stop.wait(1.0):
            samples.append((time.perf_counter() - t0, proc.memory_info().rss / (1 << 20)))
            if not ended:
                for m in (tmp / "out").glob("*/manifest.json"):
                    with contextlib.suppress(ValueError, OSError):
                        if json.loads(m.read_bytes()).get("end_time") is not None:
                            ended.append(len(samples) - 1)

    try:
        wait_port(port, 30)
        path = tmp / "soak.yaml"
        path.write_text(
            yaml.safe_dump(scenario(f"http://127.0.0.1:{port}", args.users, args.scale))
        )
        loaded = load_scenario(path)
        print(f"# memory soak: {args.users} users, 1 h simulated at x{args.scale:g}; {machine()}")
        threading.Thread(target=sampler, daemon=True).start()
        import uvloop

        outcome = uvloop.run(execute(loaded, tmp / "out", progress_interval=30.0))
        stop.set()
    finally:
        sim.terminate()
        sim.wait(10)
    report_phase = samples[ended[0] :] if ended else []
    samples = samples[: ended[0]] if ended else samples  # the soak itself, not the report
    total = samples[-1][0] if samples else 0.0
    after_warm = [r for t, r in samples if t >= 0.1 * total]
    start, end = after_warm[0], after_warm[-1]
    reqs = outcome.summary["requests_total"]
    print(
        f"requests={reqs} outcomes={outcome.summary['overall']['outcomes']} wall={total:.0f}s\n"
        f"rss after warm-up {start:.1f} MiB, end {end:.1f} MiB, growth {end - start:+.1f} MiB, "
        f"peak {max(r for _, r in samples):.1f} MiB; "
        f"growth per 1,000 requests {1000 * (end - start) / max(reqs, 1):+.2f} MiB"
    )
    if report_phase:
        print(f"building the report at the end: peak {max(r for _, r in report_phase):.1f} MiB")
    tail = samples[len(samples) // 2 :]
    print(
        "rss (MiB) every 10 % of the run: "
        + " ".join(
            f"{samples[min(len(samples) - 1, int(i * len(samples) / 10))][1]:.0f}"
            for i in range(11)
        )
        + f"  (second half min {min(r for _, r in tail):.0f}, max {max(r for _, r in tail):.0f})"
    )


if __name__ == "__main__":
    main()
