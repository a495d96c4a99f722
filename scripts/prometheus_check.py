#!/usr/bin/env python3
"""Check `stress run --metrics-port` against a real Prometheus, end to end.

Starts, all on 127.0.0.1 and each stopped by its own PID at the end:

1. the simulator apart (`stress sim`, vLLM dialect), so its own /metrics can be scraped;
2. a Prometheus (the `prometheus` binary on PATH, e.g. Debian's `apt-get install
   prometheus`; the system service is not used) with its own config and a temporary
   storage folder, scraping stress's endpoint and the simulator's /metrics every second;
3. `stress run` (the bundled quickstart, longer and with more users) against the simulator,
   with `--metrics-port`.

While the run goes on, it asks Prometheus's HTTP API (/api/v1/query) for a few example
queries and for every PromQL expression of docs/grafana/stress-dashboard.json, with the
dashboard's variables substituted, and prints what each returns. With `--screenshots DIR`
and a `chromium` on PATH, it also saves screenshots of Prometheus's graph page.

Exit status: 0 when every `stress_*` query of the dashboard returned data, 1 otherwise.

    .venv/bin/python scripts/prometheus_check.py                  # ~3.5 min
    .venv/bin/python scripts/prometheus_check.py --duration 90s --screenshots /tmp/shots
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "docs" / "grafana" / "stress-dashboard.json"

PROMETHEUS_YML = """\
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: stress              # stress run --metrics-port {stress_port}
    static_configs:
      - targets: ["127.0.0.1:{stress_port}"]
  - job_name: vllm                # the simulator's own /metrics (vLLM dialect)
    static_configs:
      - targets: ["127.0.0.1:{sim_port}"]
"""

# the screenshots: (file stem, [expressions shown on one graph page])
SHOTS = [
    (
        "prometheus-ttft-p95",
        ["histogram_quantile(0.95, sum by (le) (rate(stress_ttft_seconds_bucket[30s])))"],
    ),
    ("prometheus-request-rate", ["sum by (outcome) (rate(stress_requests_total[30s]))"]),
    (
        "prometheus-in-flight-vs-vllm",
        [
            'label_replace(sum by (model_name) (stress_in_flight), "series",'
            ' "stress_in_flight", "", "")'
            ' or label_replace(sum by (model_name) (vllm:num_requests_running), "series",'
            ' "vllm:num_requests_running", "", "")'
            ' or label_replace(sum by (model_name) (vllm:num_requests_waiting), "series",'
            ' "vllm:num_requests_waiting", "", "")'
        ],
    ),
]

EXAMPLES = [
    ("TTFT p95", SHOTS[0][1][0]),
    ("request rate by outcome", SHOTS[1][1][0]),
    (
        "stress in flight / vLLM running, joined on model_name",
        "sum by (model_name) (stress_in_flight)"
        " / on(model_name) sum by (model_name) (vllm:num_requests_running)",
    ),
    (
        "stress in flight, with the server's running count (group_left on model_name)",
        "sum by (model_name) (stress_in_flight)"
        " * on(model_name) group_left() (0 * sum by (model_name) (vllm:num_requests_running) + 1)",
    ),
    (
        "cached share of prompt tokens",
        "sum(rate(stress_cached_tokens_total[30s])) / sum(rate(stress_prompt_tokens_total[30s]))",
    ),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise SystemExit(f"prometheus_check: {url} did not answer within {timeout:.0f} s")


def query(prom: str, expr: str) -> list[dict]:
    url = f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body}")
    return body["data"]["result"]


def label_values(prom: str, label: str, match: str) -> list[str]:
    url = f"{prom}/api/v1/label/{label}/values?" + urllib.parse.urlencode({"match[]": match})
    with urllib.request.urlopen(url, timeout=10) as r:
        return list(json.load(r)["data"])


def dashboard_targets() -> list[tuple[str, str, str]]:
    """(panel title, refId, expr) for every query of the dashboard."""
    out: list[tuple[str, str, str]] = []

    def walk(panels: list[dict]) -> None:
        for p in panels:
            for t in p.get("targets", []):
                if t.get("expr"):
                    out.append((p.get("title", "?"), t.get("refId", "?"), t["expr"]))
            walk(p.get("panels", []))

    walk(json.loads(DASHBOARD.read_text())["panels"])
    return out


def grafana_regex(values: list[str]) -> str:
    """A multi-value selection as Grafana's Prometheus data source writes it: an
    alternation, regex metacharacters escaped with a backslash that is itself escaped in
    the PromQL string (so `Qwen/Qwen3-8B` stays, `a.b` becomes `a\\\\.b`)."""
    special = set("\\^$*+?.()|{}[]")
    esc = ["".join("\\\\" + c if c in special else c for c in v) for v in values]
    return "(" + "|".join(esc) + ")"


def substitute(expr: str, values: dict[str, str], rate_interval: str) -> str:
    expr = expr.replace("$__rate_interval", rate_interval)
    for name, value in values.items():
        expr = re.sub(r"\$\{?" + name + r"\}?\b", lambda _m, v=value: v, expr)
    return expr


def show(result: list[dict], limit: int = 6) -> str:
    if not result:
        return "NO DATA"
    parts = []
    for s in result[:limit]:
        labels = {k: v for k, v in s["metric"].items() if k not in ("instance", "job")}
        value = float(s["value"][1])
        parts.append(f"{labels or '{}'}={value:.4g}")
    more = f" (+{len(result) - limit} more)" if len(result) > limit else ""
    return f"{len(result)} series: " + ", ".join(parts) + more


def check_dashboard(prom: str, rate_interval: str) -> bool:
    """Every dashboard query, once with the variables at "All" and once at this run's values."""
    scen = label_values(prom, "scenario", "stress_run_info")
    runs = label_values(prom, "run", "stress_run_info")
    models = label_values(prom, "model_name", "stress_run_info")
    print(f"\nvariables from stress_run_info: scenario={scen} run={runs} model={models}")
    settings = [
        ("All (allValue .*)", {"scenario": ".*", "run": ".*", "model": ".*"}),
        # a multi-value selection is substituted as a regex alternation
        (
            "this run's values",
            {
                "scenario": grafana_regex(scen),
                "run": grafana_regex(runs),
                "model": grafana_regex(models),
            },
        ),
    ]
    ok = bool(scen and runs and models)
    for label, values in settings:
        print(f"\ndashboard queries, variables = {label}, $__rate_interval = {rate_interval}:")
        for title, ref, expr in dashboard_targets():
            q = substitute(expr, values, rate_interval)
            res = query(prom, q)
            is_stress = "stress_" in expr
            if not res and is_stress:
                ok = False
                mark = "FAIL"
            elif not res:
                mark = "n/a "  # the other server's series (SGLang against a vLLM simulator)
            else:
                mark = "ok  "
            print(f"  {mark} {title} [{ref}]: {show(res, 3)}")
            if mark == "FAIL" or (label.startswith("All") and ref == "A" and not res):
                print(f"       {q}")
    return ok


def screenshot(prom: str, stem: str, exprs: list[str], out_dir: Path, range_s: int) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("no chromium on PATH: screenshots skipped")
        return
    params: dict[str, str] = {}
    for i, e in enumerate(exprs):
        params.update(
            {
                f"g{i}.expr": e,
                f"g{i}.tab": "0",
                f"g{i}.stacked": "0",
                f"g{i}.show_exemplars": "0",
                f"g{i}.range_input": f"{range_s}s",
            }
        )
    url = f"{prom}/graph?" + urllib.parse.urlencode(params)
    out_dir.mkdir(parents=True, exist_ok=True)
    png = out_dir / f"{stem}.png"
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                f"--user-data-dir={profile}",
                "--hide-scrollbars",
                "--window-size=1400,900",
                "--virtual-time-budget=10000",
                f"--screenshot={png}",
                url,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=90,
            check=False,
        )
    print(
        f"screenshot: {png} ({png.stat().st_size // 1024} KB)"
        if png.exists()
        else f"screenshot failed: {stem}"
    )


def seconds(text: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smh]?)", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"not a duration: {text}")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=seconds, default=180.0, help="run length (default 180s)")
    ap.add_argument("--users", type=int, default=6, help="users (default 6)")
    ap.add_argument(
        "--max-seqs",
        type=int,
        default=4,
        help="simulator's running-sequence limit, below --users so requests queue",
    )
    ap.add_argument(
        "--check-at",
        type=float,
        default=0.8,
        help="check when this fraction of the run has passed (default 0.8)",
    )
    ap.add_argument("--screenshots", type=Path, help="save graph-page screenshots here")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = ap.parse_args()

    prom_bin = shutil.which("prometheus")
    if not prom_bin:
        print("prometheus_check: no `prometheus` on PATH (apt-get install prometheus)")
        return 2
    version = subprocess.run([prom_bin, "--version"], capture_output=True, text=True)
    print((version.stdout or version.stderr).splitlines()[0])

    tmp = Path(tempfile.mkdtemp(prefix="stress-promcheck-"))
    sim_port, stress_port, prom_port = free_port(), free_port(), free_port()
    prom = f"http://127.0.0.1:{prom_port}"
    (tmp / "prometheus.yml").write_text(
        PROMETHEUS_YML.format(stress_port=stress_port, sim_port=sim_port)
    )
    procs: list[subprocess.Popen] = []

    def start(cmd: list[str], log: str) -> subprocess.Popen:
        print("$ " + " ".join(cmd))
        p = subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdout=open(tmp / log, "w"),  # noqa: SIM115 (the child holds it)
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        procs.append(p)
        return p

    try:
        py = sys.executable
        start(
            [
                py,
                "-m",
                "stress",
                "sim",
                "--port",
                str(sim_port),
                "--quiet",
                "--max-seqs",
                str(args.max_seqs),
                "--seed",
                "1",
            ],
            "sim.log",
        )
        wait_http(f"http://127.0.0.1:{sim_port}/metrics", 30)
        start(
            [
                prom_bin,
                f"--config.file={tmp / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
            ],
            "prometheus.log",
        )
        wait_http(f"{prom}/-/ready", 30)
        run = start(
            [
                py,
                "-m",
                "stress",
                "run",
                "quickstart",
                "--target",
                f"http://127.0.0.1:{sim_port}",
                "--metrics-port",
                str(stress_port),
                "--metrics-linger",
                "5s",
                "--duration",
                f"{args.duration:g}s",
                "--users",
                str(args.users),
                "--no-tui",
                "--fail-on",
                "never",
                "--out",
                str(tmp / "out"),
            ],
            "stress.log",
        )
        t0 = time.monotonic()
        print(f"config: {tmp / 'prometheus.yml'}; logs in {tmp}")
        wait = args.duration * args.check_at
        print(f"waiting {wait:.0f} s into the run before checking ...", flush=True)
        while time.monotonic() - t0 < wait:
            if run.poll() is not None:
                print((tmp / "stress.log").read_text()[-3000:])
                raise SystemExit(f"prometheus_check: stress run ended early ({run.returncode})")
            time.sleep(1)

        targets = json.load(urllib.request.urlopen(f"{prom}/api/v1/targets", timeout=10))
        for t in targets["data"]["activeTargets"]:
            print(
                f"target {t['labels']['job']}: {t['scrapeUrl']} health={t['health']}"
                f" {t.get('lastError') or ''}"
            )

        print("\nexample queries:")
        for label, expr in EXAMPLES:
            print(f"  {label}:\n    {expr}\n    -> {show(query(prom, expr))}")
        # Grafana's $__rate_interval is max(4 x scrape interval, $__interval + scrape
        # interval); with its default 15 s scrape interval that is 1m
        ok = check_dashboard(prom, "1m")

        if args.screenshots:
            rng = int(time.monotonic() - t0) + 20
            for stem, exprs in SHOTS:
                screenshot(prom, stem, exprs, args.screenshots, rng)

        run.wait(timeout=args.duration + 120)
        print(f"\nstress run exit code {run.returncode}")
        print(
            "\nRESULT: every stress_* query of the dashboard returned data"
            if ok
            else "\nRESULT: some stress_* query of the dashboard returned NO DATA"
        )
        return 0 if ok else 1
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
