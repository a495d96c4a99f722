"""Turn a soak's run directory into a short Markdown report (GPU, cache, TTFT by length).

    python scripts/realserver/soak_report.py RUN_DIR [--out report.md] [--server-log FILE]

Reads only the run directory written by ``stress run`` (manifest.json, requests.jsonl,
gpu.jsonl, server.jsonl, summary.json). Headline figures exclude warm-up requests.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
from pathlib import Path
from typing import Any

BUCKETS = (0, 1000, 2000, 3000, 4000, 5000, 6000, 8192, 1 << 30)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def fmt(v: float | int | None, nd: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, int):
        return f"{v:,}"
    return f"{v:,.{nd}f}"


def gpu_section(run: Path, manifest: dict[str, Any]) -> list[str]:
    recs = read_jsonl(run / "gpu.jsonl")
    cards_rec = next((r for r in recs if r.get("type") == "cards"), None)
    samples = [r for r in recs if r.get("type") == "sample"]
    summ = (manifest.get("collectors") or {}).get("gpu") or {}
    lines = ["## GPU (NVML through the stress GPU collector, 1 s samples)", ""]
    if not samples or not summ.get("available"):
        lines.append(f"No GPU samples: {summ.get('reason', 'collector not available')}.")
        return lines
    if cards_rec:
        for c in cards_rec.get("cards", []):
            ident = ", ".join(
                f"{k} {c[k]}"
                for k in ("name", "uuid", "bus_id", "driver", "power_limit_w", "pcie_gen")
                if c.get(k) is not None
            )
            lines.append(f"- card: {ident}")
    per_card: dict[str, list[dict[str, Any]]] = {}
    for s in samples:
        for c in s.get("cards", []):
            per_card.setdefault(c["key"], []).append(c)
    lines += [
        "",
        "| card | samples | power mean W | power p95 W | power max W | limit W | SM MHz "
        "min/median/max | mem MHz median | temp max C | util mean % | mem used MiB max |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, cs in per_card.items():
        power = [c["power_w"] for c in cs if c.get("power_w") is not None]
        sm = [c["sm_mhz"] for c in cs if c.get("sm_mhz") is not None]
        mem = [c["mem_mhz"] for c in cs if c.get("mem_mhz") is not None]
        temp = [c["temp_c"] for c in cs if c.get("temp_c") is not None]
        util = [c["util_gpu"] for c in cs if c.get("util_gpu") is not None]
        used = [c["mem_used_mib"] for c in cs if c.get("mem_used_mib") is not None]
        limit = next((c["power_limit_w"] for c in cs if c.get("power_limit_w")), None)
        lines.append(
            f"| {key} | {len(cs)} | {fmt(statistics.fmean(power) if power else None, 1)} | "
            f"{fmt(pct(power, 0.95), 1)} | {fmt(max(power) if power else None, 1)} | "
            f"{fmt(limit, 0)} | {min(sm) if sm else '-'}/{pct(sm, 0.5) or '-'}/"
            f"{max(sm) if sm else '-'} | {pct(mem, 0.5) or '-'} | "
            f"{max(temp) if temp else '-'} | {fmt(statistics.fmean(util) if util else None, 1)}"
            f" | {fmt(max(used) if used else None, 0)} |"
        )
    throttles: dict[str, int] = {}
    for cs in per_card.values():
        for c in cs:
            for name in c.get("throttle") or []:
                throttles[name] = throttles.get(name, 0) + 1
    lines += [
        "",
        f"- energy (server cards, summed counter increments): {fmt(summ.get('energy_j'), 0)} J "
        f"over {fmt(summ.get('tokens'))} generated tokens = "
        f"**{fmt(summ.get('j_per_token'), 4)} J/token** "
        f"(sources: {', '.join(summ.get('energy_sources') or []) or '-'})",
        "- clock-event reasons seen (samples): "
        + (", ".join(f"{k} {v}" for k, v in sorted(throttles.items())) or "none"),
        f"- hardware errors: {summ.get('hw_errors_total', 0)}; warnings: "
        f"{summ.get('warnings') or {}}; host-bound hint: {summ.get('host_bound_hint') or '-'}",
        f"- samples {summ.get('samples')}, missed ticks {summ.get('missed_ticks')}, "
        f"read failures {summ.get('read_failures')}",
    ]
    for c in summ.get("cards", []):
        lines.append(
            f"- {c.get('key')}: mean power {c.get('power_mean_w')} W (collector), loaded "
            f"{c.get('loaded_s')} s, loaded max {c.get('loaded_power_max_w')} W, time at power "
            f"limit {c.get('time_at_power_limit_s')} s, throttle s {c.get('throttle_s')}"
        )
    return lines


def timeline(run: Path, reqs: list[dict[str, Any]], step: float = 30.0) -> list[str]:
    samples = [r for r in read_jsonl(run / "gpu.jsonl") if r.get("type") == "sample"]
    if not samples:
        return []
    end = max(s["t"] for s in samples)
    lines = [
        "## Timeline (30 s windows)",
        "",
        "| window s | power mean W | SM MHz mean | util % | generated tok/s | requests done |",
        "|---|---|---|---|---|---|",
    ]
    t = 0.0
    while t < end:
        win = [s for s in samples if t <= s["t"] < t + step]
        cs = [c for s in win for c in s.get("cards", [])]
        power = [c["power_w"] for c in cs if c.get("power_w") is not None]
        sm = [c["sm_mhz"] for c in cs if c.get("sm_mhz") is not None]
        util = [c["util_gpu"] for c in cs if c.get("util_gpu") is not None]
        done = [r for r in reqs if t <= r.get("t_start", 0) + (r.get("e2e_s") or 0) < t + step]
        toks = sum(r.get("completion_tokens") or 0 for r in done)
        lines.append(
            f"| {t:.0f}-{t + step:.0f} | {fmt(statistics.fmean(power) if power else None, 1)} | "
            f"{fmt(statistics.fmean(sm) if sm else None, 0)} | "
            f"{fmt(statistics.fmean(util) if util else None, 1)} | {toks / step:.1f} | "
            f"{len(done)} |"
        )
        t += step
    return lines


def length_section(reqs: list[dict[str, Any]]) -> list[str]:
    ok = [r for r in reqs if r.get("outcome") == "ok" and not r.get("warmup")]
    lines = [
        "## TTFT by conversation length (prompt tokens as the server counted them)",
        "",
        "| prompt tokens | n | TTFT p50 s | TTFT p95 s | cached share | decode tok/s p50 | "
        "e2e p50 s |",
        "|---|---|---|---|---|---|---|",
    ]
    for lo, hi in itertools.pairwise(BUCKETS):
        b = [r for r in ok if lo <= (r.get("prompt_tokens") or 0) < hi]
        if not b:
            continue
        ttft = [r["ttft_s"] for r in b if r.get("ttft_s") is not None]
        dec = [r["decode_tok_s"] for r in b if r.get("decode_tok_s") is not None]
        e2e = [r["e2e_s"] for r in b if r.get("e2e_s") is not None]
        prompt = sum(r.get("prompt_tokens") or 0 for r in b)
        cached = sum(r.get("cached_tokens") or 0 for r in b)
        label = f"{lo:,}-{hi:,}" if hi < 1 << 30 else f">= {lo:,}"
        lines.append(
            f"| {label} | {len(b)} | {fmt(pct(ttft, 0.5), 3)} | {fmt(pct(ttft, 0.95), 3)} | "
            f"{100 * cached / prompt if prompt else 0:.0f}% | {fmt(pct(dec, 0.5), 0)} | "
            f"{fmt(pct(e2e, 0.5), 2)} |"
        )
    first = [r for r in ok if r.get("turn") == 1]
    later = [r for r in ok if (r.get("turn") or 1) > 1]
    for name, group in (("first turns", first), ("turns 2+", later)):
        ttft = [r["ttft_s"] for r in group if r.get("ttft_s") is not None]
        prompt = sum(r.get("prompt_tokens") or 0 for r in group)
        cached = sum(r.get("cached_tokens") or 0 for r in group)
        lines.append(
            f"- {name}: n {len(group)}, TTFT p50 {fmt(pct(ttft, 0.5), 3)} s, p95 "
            f"{fmt(pct(ttft, 0.95), 3)} s, cached share "
            f"{100 * cached / prompt if prompt else 0:.1f}%"
        )
    return lines


def report(run: Path, server_log: Path | None = None) -> str:
    manifest = json.loads((run / "manifest.json").read_text())
    summary = json.loads((run / "summary.json").read_text())
    reqs = read_jsonl(run / "requests.jsonl")
    probe = manifest.get("probe") or {}
    o = summary["overall"]
    srv = (manifest.get("collectors") or {}).get("server") or {}
    main = [r for r in reqs if not r.get("warmup")]
    follow = [r for r in main if (r.get("turn") or 1) > 1 and r.get("outcome") == "ok"]
    hit_follow = sum(r.get("cached_tokens") or 0 for r in follow)
    prompt_follow = sum(r.get("prompt_tokens") or 0 for r in follow)
    timings_equal = sum(
        1
        for r in main
        if r.get("server_timings")
        and r.get("cached_tokens") == (r["server_timings"] or {}).get("cache_n")
    )
    lines = [
        f"# Soak report: {summary['run_id']}",
        "",
        f"- scenario `{summary['scenario']}`, exit `{summary['exit_reason']}`, duration "
        f"{fmt(summary['duration_s'], 1)} s, {summary['requests_total']} requests "
        f"({summary['warmup_requests']} warm-up, excluded below)",
        f"- server: {probe.get('kind')} `{probe.get('version')}`, model `{probe.get('model')}`, "
        f"{probe.get('slots')} slots, per-slot context {(probe.get('slot_n_ctx') or ['-'])[0]}"
        f" ({probe.get('context_source')})",
        f"- stress {manifest.get('versions', {}).get('stress')}, python "
        f"{manifest.get('versions', {}).get('python')}, host {manifest['host']['hostname']} "
        f"({manifest['host']['cpus']} CPUs)",
        "",
        "## Requests",
        "",
        f"- outcomes: {o['outcomes']}; error classes: {o['error_classes'] or 'none'}; "
        f"reconnects: {o['reconnects']}",
        f"- TTFT s: p50 {fmt(o['ttft_s']['p50'], 3)}, p95 {fmt(o['ttft_s']['p95'], 3)}, "
        f"mean {fmt(o['ttft_s']['mean'], 3)} (sd {fmt(o['ttft_s']['sd'], 3)}, n "
        f"{o['ttft_s']['n']})",
        f"- decode tok/s per request: p50 {fmt(o['decode_tok_s']['p50'], 1)}, mean "
        f"{fmt(o['decode_tok_s']['mean'], 1)} (sd {fmt(o['decode_tok_s']['sd'], 1)})",
        f"- e2e s: p50 {fmt(o['e2e_s']['p50'], 2)}, p95 {fmt(o['e2e_s']['p95'], 2)}",
        f"- aggregate output {fmt(o['output_tok_s'], 1)} tok/s; prompt tokens "
        f"{o['prompt_tokens']:,}, completion tokens {o['completion_tokens']:,}; max "
        f"conversation {o['max_conversation_tokens']:,} tokens",
        f"- prefix cache: cached share of all prompt tokens "
        f"{fmt(100 * o['cached_share'] if o['cached_share'] is not None else None, 1)}%; "
        f"of follow-up turns {100 * hit_follow / prompt_follow if prompt_follow else 0:.1f}%; "
        f"retention {fmt(100 * o['cache_retention'] if o['cache_retention'] else None, 1)}%"
        f" (per request: usage.prompt_tokens_details.cached_tokens; equal to "
        f"timings.cache_n on {timings_equal} of {len(main)} requests)",
        f"- server telemetry: dialect {srv.get('dialect')}, scrapes {srv.get('scrapes')}, "
        f"errors {srv.get('scrape_errors')}, restarts {srv.get('restarts')}, hangs "
        f"{srv.get('hangs_suspected')}, KV use (slots estimate) mean "
        f"{fmt(srv.get('kv_usage_mean'), 3)} max {fmt(srv.get('kv_usage_max'), 3)}, running "
        f"max {srv.get('running_max')}, deferred max {srv.get('waiting_max')}",
        f"- warnings: {[w['code'] for w in summary['warnings']] or 'none'}",
        "",
    ]
    lines += gpu_section(run, manifest)
    lines.append("")
    lines += length_section(reqs)
    lines.append("")
    lines += timeline(run, main)
    if server_log is not None and server_log.exists():
        lines += ["", "## Server log (first lines)", "", "```"]
        lines += server_log.read_text(errors="replace").splitlines()[:15]
        lines.append("```")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--server-log", type=Path)
    args = ap.parse_args()
    text = report(args.run_dir, args.server_log)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
