"""A real wall-clock hour: `stress run eight_users_1h` against an external simulator, with
the client's RSS and CPU sampled every minute.

Why: time-scaled runs compress wall time, which hides anything that grows per wall second
(timers, samples, buffers, the live view's history). This runs the shipped scenario for
its full hour, exactly as a user would (the real CLI, in its own process), against
`stress sim` started apart (so the simulator's work is not the client's), headless or with
the live view in a pseudo-terminal (the TUI really renders), and samples the client
process every ``--every`` seconds: RSS (MiB) and CPU (% of one core over the interval);
with the view, its own process (``stress.tui.child``) apart, likewise.

    .venv/bin/python benchmarks/hour_soak.py --ui headless --out /tmp/soak-headless
    .venv/bin/python benchmarks/hour_soak.py --ui tui --out /tmp/soak-tui
    .venv/bin/python benchmarks/hour_soak.py --duration 5m --every 10   # a short try

Writes ``samples.csv`` (t_s, rss_mib, cpu_pct, view_rss_mib, view_cpu_pct) and
``result.json`` (first/last/max RSS, growth after the first 10 minutes, mean CPU, the
run's verdict line) into ``--out``, and prints them.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import pty
import select
import struct
import subprocess
import sys
import time
from fcntl import ioctl
from pathlib import Path
from termios import TIOCSWINSZ

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import free_port, machine, wait_port  # noqa: E402


def start_client(
    args: argparse.Namespace, url: str, runs: Path
) -> tuple[subprocess.Popen[bytes], int | None]:
    cmd = [
        sys.executable,
        "-m",
        "stress",
        "run",
        "eight_users_1h",
        "--target",
        url,
        "--out",
        str(runs),
        "--duration",
        args.duration,
        "--fail-on",
        "never",
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if args.ui == "headless":
        log = open(Path(args.out) / "client.log", "wb")  # noqa: SIM115 - lives as long as the run
        return subprocess.Popen(
            [*cmd, "--no-tui"], stdout=log, stderr=subprocess.STDOUT, env=env
        ), None
    master, slave = pty.openpty()
    ioctl(slave, TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env |= {"TERM": "xterm-256color"}
    proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    return proc, master


def drain(master: int | None, sink: list[int]) -> None:
    """Read what the live view wrote (a terminal that is never read blocks the app)."""
    if master is None:
        return
    while select.select([master], [], [], 0)[0]:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:
            return
        if not chunk:
            return
        sink[0] += len(chunk)


def view_result(rows: list[tuple[float, ...]]) -> dict[str, float | None]:
    """The live view's own process over the run: RSS first, last, max, growth after the
    first 10 minutes; mean CPU."""
    seen = [r for r in rows if r[3] == r[3]]  # NaN: not found yet
    after10 = [r for r in seen if r[0] >= 600] or seen
    return {
        "view_rss_first_mib": seen[0][3] if seen else None,
        "view_rss_last_mib": seen[-1][3] if seen else None,
        "view_rss_max_mib": max((r[3] for r in seen), default=None),
        "view_rss_growth_after_10min_mib": round(after10[-1][3] - after10[0][3], 1)
        if after10
        else None,
        "view_cpu_mean_pct": round(sum(r[4] for r in seen) / len(seen), 1) if seen else None,
    }


def find_view(p: psutil.Process) -> psutil.Process | None:
    """The live view's process (``stress.tui.child``), a child of the run's."""
    for c in p.children():
        try:
            if "stress.tui.child" in c.cmdline():
                return c
        except psutil.Error:
            pass
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ui", choices=("headless", "tui"), default="headless")
    ap.add_argument("--duration", default="60m", help="the run's --duration (default 60m)")
    ap.add_argument("--every", type=float, default=60.0, help="seconds between samples")
    ap.add_argument("--out", default="/tmp/hour-soak", help="folder for samples and runs")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    sim = subprocess.Popen(
        [sys.executable, "-m", "stress", "sim", "--port", str(port), "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=open(out / "sim.log", "wb"),  # noqa: SIM115
    )
    wait_port(port, timeout=120)
    url = f"http://127.0.0.1:{port}"
    proc, master = start_client(args, url, out / "runs")
    p = psutil.Process(proc.pid)
    p.cpu_percent(None)
    t0 = time.monotonic()
    rows: list[tuple[float, ...]] = []
    view: psutil.Process | None = None  # the live view's own process (--ui tui)
    written = [0]
    try:
        while proc.poll() is None:
            deadline = time.monotonic() + args.every
            while time.monotonic() < deadline and proc.poll() is None:
                drain(master, written)
                time.sleep(0.2)
            if proc.poll() is not None:
                break
            try:
                rss = p.memory_info().rss / 2**20
                cpu = p.cpu_percent(None)
            except psutil.NoSuchProcess:
                break
            view_rss = view_cpu = float("nan")
            if args.ui == "tui":
                if view is None:
                    view = find_view(p)
                    if view is not None:
                        view.cpu_percent(None)  # the first interval starts now
                if view is not None:
                    try:
                        view_rss, view_cpu = view.memory_info().rss / 2**20, view.cpu_percent(None)
                    except psutil.NoSuchProcess:
                        view = None
            t = round(time.monotonic() - t0, 1)
            rows.append((t, round(rss, 1), round(cpu, 1), round(view_rss, 1), round(view_cpu, 1)))
            print(
                f"t={t:7.0f}s rss={rss:6.1f} MiB cpu={cpu:5.1f}%"
                + (
                    f"  view rss={view_rss:6.1f} MiB cpu={view_cpu:5.1f}%"
                    if args.ui == "tui"
                    else ""
                ),
                flush=True,
            )
    finally:
        drain(master, written)
        proc.wait()
        sim.terminate()
        sim.wait()
    with open(out / "samples.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t_s", "rss_mib", "cpu_pct", "view_rss_mib", "view_cpu_pct"])
        w.writerows(rows)
    after10 = [r for r in rows if r[0] >= 600] or rows
    summaries = sorted((out / "runs").glob("*/summary.json"))
    verdict = ""
    if summaries:
        s = json.loads(summaries[-1].read_text())
        verdict = str((s.get("verdict") or {}).get("summary") or "")
    result = {
        "machine": machine(),
        "ui": args.ui,
        "duration": args.duration,
        "exit_code": proc.returncode,
        "samples": len(rows),
        "rss_first_mib": rows[0][1] if rows else None,
        "rss_last_mib": rows[-1][1] if rows else None,
        "rss_max_mib": max((r[1] for r in rows), default=None),
        "rss_growth_after_10min_mib": round(after10[-1][1] - after10[0][1], 1) if after10 else None,
        "cpu_mean_pct": round(sum(r[2] for r in rows) / len(rows), 1) if rows else None,
        "cpu_max_pct": max((r[2] for r in rows), default=None),
        "tui_bytes_written": written[0] if args.ui == "tui" else None,
        **(view_result(rows) if args.ui == "tui" else {}),
        "verdict": verdict,
    }
    (out / "result.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
