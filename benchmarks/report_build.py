"""How long `stress report` takes on a one-hour, eight-user, four-GPU run (synthetic).

Prints the build time of report.md + report.html (matplotlib already imported, as in a
long-lived process) and the memory it grew, over a few repeats: mean and spread.

    .venv/bin/python benchmarks/report_build.py --repeat 3
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.report.synth import long_run  # noqa: E402
from tests.report.test_scale import BUILD  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = long_run(Path(tmp))
        n = len((d / "requests.jsonl").read_bytes().splitlines())
        times, grew = [], []
        for _ in range(args.repeat):
            r = subprocess.run(
                [sys.executable, "-c", BUILD, str(d)],
                capture_output=True,
                text=True,
                check=True,
                cwd=ROOT,
            )
            elapsed, mib, _charts, _size = r.stdout.split()
            times.append(float(elapsed))
            grew.append(float(mib))
    sd = statistics.stdev(times) if len(times) > 1 else 0.0
    print(f"requests {n:,}; build {statistics.mean(times):.2f} s +- {sd:.2f} (n {len(times)})")
    print(f"memory grown: max {max(grew):.0f} MiB")


if __name__ == "__main__":
    main()
