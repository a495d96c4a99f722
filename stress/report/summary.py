"""``summary.json`` and the end-of-run terminal summary: outputs of the analysis.

Built from the files, never from live aggregates, so a killed run gets the same summary
(``stress report RUN_DIR``). Headline figures exclude warm-up requests and come as mean,
standard deviation, p50/p95/p99 and n (field note 6: mean with spread, never max). The
checks (``stress.analysis.checks``), the verdict (``stress.analysis.judge``) and the
figures (``stress.analysis.figures``) are decided in the analysis package; this module
only gathers and formats them.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from stress.analysis import figures
from stress.analysis.analyze import Analysis, analyze
from stress.analysis.checks import accounting_text, health_warnings, warnings_for
from stress.analysis.hangs import hang_count, hangs_from_events
from stress.analysis.rows import RequestRow
from stress.analysis.rundata import RunData
from stress.analysis.runfiles import RunFiles
from stress.analysis.server_kind import shared_pool_tokens, slot_layout
from stress.core.errors import RunDirError
from stress.core.record import OUTCOMES
from stress.report.itl import ONE_READ_NOTE
from stress.store.recorder import write_json

__all__ = ["build_summary", "render_summary", "stats"]

METRICS = ("ttft_s", "ttfc_s", "decode_tok_s", "e2e_s", "queue_s")
"""Requests that generated text: the population of latency and speed figures. Only ``ok``
is *answered*: a reply that reasoned and stopped without answer text is not an answer."""


def stats(values: list[float]) -> dict[str, float | int | None]:
    """A figure's samples as summary.json shows them: ``figures.distribution``."""
    return figures.distribution(values)


def _group(records: list[RequestRow]) -> dict[str, Any]:
    outcomes = Counter(r.get("outcome", "error") for r in records)
    classes = Counter(r["error_class"] for r in records if r.get("error_class"))
    out: dict[str, Any] = {
        "requests": len(records),
        "outcomes": {k: outcomes.get(k, 0) for k in OUTCOMES},
        "error_classes": dict(sorted(classes.items())),
    }
    for m in METRICS:
        out[m] = stats(
            [r["queue_s"] for r in records if r.get("queue_s") is not None]
            if m == "queue_s"  # the client's own wait: every request has one
            else figures.generated_values(records, m)
        )
    # every stream's longest silence, failed ones too: a stall is the point of this figure
    out["max_gap_s"] = stats(_gaps(records))
    out["answered"] = outcomes.get("ok", 0)
    out["cached_share"] = figures.cached_share(records)
    out["cache_retention"] = figures.cache_retention(records)
    out["prompt_tokens"] = figures.prompt_tokens(records)
    out["completion_tokens"] = figures.output_tokens(records)
    out["rounds"] = max((r.get("round", 0) for r in records), default=0)
    out["max_conversation_tokens"] = max(
        (r.get("conversation_tokens", 0) for r in records), default=0
    )
    out["reconnects"] = sum(r.get("reconnects", 0) for r in records)
    return out


def _gaps(records: list[RequestRow]) -> list[float]:
    """Every stream's longest silence (``max_gap_s``) that was measured."""
    return [float(g) for r in records if (g := r.get("max_gap_s")) is not None]


def stall_figures(records: list[RequestRow]) -> dict[str, Any]:
    """Stalls (silence after the first token) and first-token timeouts, counted apart,
    and every stream's longest silence (``max_gap_s``) as a distribution."""
    classes = Counter(r.get("error_class") for r in records)
    return {
        "stall": classes.get("stall", 0),
        "first_token_timeout": classes.get("first_token_timeout", 0),
        "max_gap_s": stats(_gaps(records)),
    }


def _phases(records: list[RequestRow]) -> dict[str, Any]:
    """Per phase of a sweep (in run order): figures over its non-warm-up requests, with the
    warm-up requests counted but excluded, and the users that took part."""
    labels = list(dict.fromkeys(str(r.get("phase") or "main") for r in records))
    if labels == ["main"]:
        return {}
    out: dict[str, Any] = {}
    for label in labels:
        rows = [r for r in records if str(r.get("phase") or "main") == label]
        group = _group([r for r in rows if not r.get("warmup")])
        group["warmup_requests"] = sum(1 for r in rows if r.get("warmup"))
        group["users"] = len({r.get("user") for r in rows})
        out[label] = group
    return out


def _steps(records: list[RequestRow]) -> dict[str, Any]:
    """Repeated phases (``name#1``, ``name#2``...) pooled per step: the mean and spread of
    the per-pass figures, so a sweep is judged on its passes, never on its best one
    (field note 6). Only steps with at least two passes appear."""
    passes: dict[str, dict[str, list[RequestRow]]] = {}
    for r in records:
        label = str(r.get("phase") or "main")
        if "#" not in label or r.get("warmup"):
            continue
        step, _, n = label.rpartition("#")
        passes.setdefault(step, {}).setdefault(n, []).append(r)
    out: dict[str, Any] = {}
    for step, by_pass in passes.items():
        if len(by_pass) < 2:
            continue
        per_pass: dict[str, list[float]] = {
            "ttft_p50_s": [],
            "decode_p50_tok_s": [],
            "e2e_p50_s": [],
            "output_tok_s": [],
        }
        for rows in by_pass.values():
            for key, field in (
                ("ttft_p50_s", "ttft_s"),
                ("decode_p50_tok_s", "decode_tok_s"),
                ("e2e_p50_s", "e2e_s"),
            ):
                if (m := figures.median(figures.generated_values(rows, field))) is not None:
                    per_pass[key].append(m)
            start = min(r.get("t_start", 0.0) for r in rows)
            end = max(r.get("t_start", 0.0) + (r.get("e2e_s") or 0.0) for r in rows)
            if (tok_s := figures.output_tok_s(rows, end - start)) is not None:
                per_pass["output_tok_s"].append(tok_s)
        out[step] = {"passes": len(by_pass)} | {
            key: _mean_sd(v) for key, v in per_pass.items() if v
        }
    return out


def _mean_sd(values: list[float]) -> dict[str, Any]:
    """A step's per-pass figure as mean, sd and n (``figures.distribution``)."""
    d = figures.distribution(values)
    return {"mean": d["mean"], "sd": d["sd"], "n": d["n"]}


def _hangs_section(files: RunFiles) -> dict[str, Any]:
    """The run's hangs, one per freeze whichever detectors saw it (``stress.analysis.hangs``):
    the count the verdict gives, and each hang's first detection, silence and clear."""
    server = files.collectors.get("server") or {}
    return {
        "count": hang_count(files.events, server),
        "hangs": [h.as_dict() for h in hangs_from_events(files.events)],
    }


def _server_section(run: RunData, records: list[RequestRow]) -> dict[str, Any]:
    """The server's own figures (from the metrics collector) plus the hit rate by round
    from the per-request cached tokens, and the KV pool as the report reads it (None on
    llama.cpp, whose slots are separate contexts: ``slots`` and ``slot_context_tokens``)."""
    out: dict[str, Any] = dict(run.files.collectors.get("server") or {})
    probe = run.files.manifest.probe
    out["kv_pool_tokens"] = shared_pool_tokens(run)
    layout = slot_layout(run)
    keys = ["kind", "version", "context_length", "kv_pool_tokens", "slots"]
    if layout is not None:
        out["slots"], out["slot_context_tokens"] = layout.count, layout.context_tokens
        keys.remove("kv_pool_tokens")  # the probe's sum of the slots' n_ctx
    for key in keys:
        if probe.get(key) is not None:
            out.setdefault(f"probe_{key}", probe[key])
    by_round: dict[int, list[RequestRow]] = {}
    for r in records:
        by_round.setdefault(int(r.get("round") or 0), []).append(r)
    out["hit_rate_by_round"] = {
        str(k): share
        for k, rows in sorted(by_round.items())
        if (share := figures.cached_share(rows)) is not None
    }
    return out


def build_summary(run_dir: Path, analysis: Analysis | None = None) -> dict[str, Any]:
    """Write ``summary.json`` for a run directory from its analysis (``analyze``d here
    unless given); return it.

    ``RunDirError`` when the run's files are damaged or ``summary.json`` cannot be written.
    """
    analysis = analysis or analyze(run_dir)
    files = analysis.run.files
    manifest = files.manifest
    records = files.requests
    main = [r for r in records if not r.get("warmup")]
    users = sorted({int(r.get("user") or 0) for r in records})
    duration = files.duration_s
    overall = _group(main)
    overall["output_tok_s"] = figures.output_tok_s(main, duration)
    collectors = files.collectors
    summary = {
        "run_id": manifest.run_id,
        "scenario": manifest.scenario.get("name"),
        "complete": files.finished,
        "exit_reason": manifest.exit_reason,
        "duration_s": duration,
        "time_scale": files.time_scale,
        "cache_mode": manifest.cache_mode,
        "requests_total": len(records),
        "warmup_requests": len(records) - len(main),
        "accounting": files.accounting.as_dict(),
        "data_quality": files.quality.as_dict(),
        "stalls": stall_figures(records),
        "overall": overall,
        "per_user": {str(u): _group(g) for u, g in _by_user(main, users).items()},
        "phases": _phases(records),
        "phase_steps": _steps(records),
        "events": dict(Counter(e["kind"] for e in files.events)),
        "hangs": _hangs_section(files),
        "server": _server_section(analysis.run, main),
        "gpu": _gpu_section(files),
        "client": collectors.get("client"),
        "warnings": health_warnings(files) + warnings_for(records, manifest, files.collectors),
    }
    summary["verdict"] = analysis.verdict.as_dict()
    summary["capacity"] = analysis.capacity.as_dict()
    summary["token_timing"] = analysis.tokens.as_dict()
    if analysis.pauses is not None:
        summary["server_pauses"] = analysis.pauses.as_dict()
    if analysis.load is not None:
        summary["arrivals"] = analysis.load.as_dict() | {"sentence": analysis.load.sentence}
    try:
        write_json(run_dir / "summary.json", summary)
    except OSError as e:
        raise RunDirError(
            f"cannot write {run_dir / 'summary.json'}: {e.strerror or e} -- fix: free disk "
            "space or make the run directory writable, then `stress report` it again"
        ) from None
    return summary


def _gpu_section(files: RunFiles) -> dict[str, Any] | None:
    """The GPU collector's summary, with energy and J/token from ``stress.analysis.figures`` (the
    report shows the same); a run killed before that summary gets them from gpu.jsonl."""
    collected = files.collectors.get("gpu")
    samples = [r for r in files.gpu if r.get("type") == "sample"]
    server_cards = next(
        (r.get("server_cards") for r in files.gpu if r.get("type") == "cards"), None
    )
    if isinstance(collected, dict) and collected.get("server_cards"):
        server_cards = collected["server_cards"]
    energy = figures.energy_j(
        collected if isinstance(collected, dict) else None, samples, server_cards
    )
    if energy is None:
        return collected if isinstance(collected, dict) else None
    tokens = figures.energy_tokens(files.requests)
    out: dict[str, Any] = (
        dict(collected) if isinstance(collected, dict) else {"source": "gpu.jsonl"}
    )
    out.update(energy_j=energy, tokens=tokens, j_per_token=figures.j_per_token(energy, tokens))
    return out


def _by_user(records: list[RequestRow], users: list[int]) -> dict[int, list[RequestRow]]:
    """Records per user in one pass (per user, a scan of all records was O(users x n))."""
    out: dict[int, list[RequestRow]] = {u: [] for u in users}
    for r in records:
        out[int(r.get("user") or 0)].append(r)
    return out


def _fmt(v: float | int | None, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, int):
        return f"{v}{unit}"
    return f"{v:.3g}{unit}" if abs(v) < 1000 else f"{v:,.0f}{unit}"


def _outcomes(group: dict[str, Any]) -> dict[str, int]:
    """A group's outcomes as the verdict counts them: an error outcome is an error or a
    cancellation, shown apart (``stress.analysis.judge.RequestTally``)."""
    out = dict(group["outcomes"])
    cancelled = int(group["error_classes"].get("cancelled", 0))
    if cancelled:
        out["error"] = out.get("error", 0) - cancelled
        out["cancelled"] = cancelled
    return out


def render_summary(summary: dict[str, Any]) -> str:
    """A terminal table of the headline figures and the warnings."""
    return "\n".join(
        [
            *_head_lines(summary),
            *_metric_lines(summary),
            *_total_lines(summary),
            *_phase_lines(summary),
            *_step_lines(summary),
            *(f"WARNING: {w['message']}" for w in summary["warnings"]),
        ]
    )


def _head_lines(summary: dict[str, Any]) -> list[str]:
    """The verdict and capacity, what ran, the request count and outcomes, the load, the
    errors and the stalls."""
    o = summary["overall"]
    verdict = summary.get("verdict") or {}
    capacity = (summary.get("capacity") or {}).get("sentence")
    lines = [
        f"verdict: {verdict.get('summary') or verdict.get('status') or '-'}",
        *([f"capacity: {capacity}"] if capacity else []),
        *(  # the verdict's own tier lines: judged once, in analysis.judge
            i for i in verdict.get("items") or () if str(i).startswith("SLO tier ")
        ),
        f"run {summary['run_id']}  scenario {summary['scenario']}  "
        f"exit: {summary.get('exit_reason') or 'killed (incomplete)'}  "
        f"duration {_fmt(summary.get('duration_s'), 's')}",
        f"requests: {accounting_text(summary.get('accounting') or {})}; "
        f"warm-up {summary['warmup_requests']} (excluded below)",
        "  " + "  ".join(f"{k} {v}" for k, v in _outcomes(o).items()),
    ]
    if verdict.get("cancelled"):
        lines.append(f"cancelled: {verdict['cancelled']}")
    arrivals = summary.get("arrivals")
    if arrivals:
        lines.append(f"load: {arrivals['sentence']}")
    errors = {k: v for k, v in o["error_classes"].items() if k != "cancelled"}
    if errors:
        lines.append("errors: " + ", ".join(f"{k} {v}" for k, v in errors.items()))
    st = summary.get("stalls") or {}
    gap = st.get("max_gap_s") or {}
    if gap.get("n"):
        lines.append(
            f"stalls {st.get('stall', 0)}  first-token timeouts {st.get('first_token_timeout', 0)}"
            f"  longest silence in a stream: p50 {_fmt(gap['p50'], 's')}  p95 "
            f"{_fmt(gap['p95'], 's')}  max {_fmt(gap['max'], 's')} (n {gap['n']})"
        )
    return lines


def _stat_line(label: str, s: dict[str, Any]) -> str:
    """One row of the metric table: n, mean, sd, p50, p95, p99."""
    return (
        f"{label:<14}{s['n']:>6}{_fmt(s['mean']):>10}{_fmt(s['sd']):>10}"
        f"{_fmt(s['p50']):>10}{_fmt(s['p95']):>10}{_fmt(s['p99']):>10}"
    )


def _metric_lines(summary: dict[str, Any]) -> list[str]:
    """The metric table (non-warm-up requests; TPOT and ITL from token timing when the run
    has it) and the goodput over TTFT and ITL."""
    o = summary["overall"]
    tt = summary.get("token_timing") or {}
    lines = ["", f"{'metric':<14}{'n':>6}{'mean':>10}{'sd':>10}{'p50':>10}{'p95':>10}{'p99':>10}"]
    for m, label in (
        ("ttft_s", "TTFT s"),
        ("ttfc_s", "TTFC s"),
        ("decode_tok_s", "decode tok/s"),
        ("e2e_s", "e2e s"),
        ("queue_s", "queue s"),
    ):
        lines.append(_stat_line(label, o[m]))
    for key, label in (("tpot_s", "TPOT s"), ("itl_s", "ITL s")):
        s = tt.get(key) or {}
        if s.get("n"):  # ITL: n counts gaps, not requests
            lines.append(_stat_line(label, s))
    lines += _itl_note(summary)
    if tt.get("goodput_ttft_itl") is not None:
        lines.append(
            f"goodput (TTFT + ITL p95 <= {_fmt(tt.get('slo_itl_p95_s'), 's')}): "
            f"{100 * tt['goodput_ttft_itl']:.0f}% of turns"
        )
    return lines


def _itl_note(summary: dict[str, Any]) -> list[str]:
    """Under a time-scaled run's table, the report's ITL footnote: the simulator sends a
    reply's chunks ``time_scale`` times faster, so more of them share one read (a gap of 0)
    and ITL p50 can read 0 s."""
    scale = summary.get("time_scale") or 1.0
    if scale == 1.0 or not ((summary.get("token_timing") or {}).get("itl_s") or {}).get("n"):
        return []
    return [
        f"ITL: {ONE_READ_NOTE} This run's simulator ran x{scale:g} (times above are "
        "simulated seconds): its chunks arrive that much closer together, so many share a "
        "read and ITL p50 can read 0 s; TPOT and decode tok/s are the per-request figures."
    ]


def _total_lines(summary: dict[str, Any]) -> list[str]:
    """Throughput, token totals, the prefix cache and the longest conversation."""
    o = summary["overall"]
    share = o.get("cached_share")
    ret = o.get("cache_retention")
    return [
        "",
        f"output {_fmt(o.get('output_tok_s'))} tok/s aggregate   prompt tokens "
        f"{o['prompt_tokens']:,}   completion tokens {o['completion_tokens']:,}   "
        f"cached share {'-' if share is None else f'{100 * share:.0f}%'}   retention "
        f"{'-' if ret is None else f'{100 * ret:.0f}%'}   max conversation "
        f"{o['max_conversation_tokens']:,} tokens   cache mode {summary.get('cache_mode')}",
    ]


def _phase_lines(summary: dict[str, Any]) -> list[str]:
    """One row per phase of a sweep, in run order; nothing for a run without phases."""
    if not summary.get("phases"):
        return []
    lines = [
        "",
        f"{'phase':<16}{'users':>6}{'n':>6}{'TTFT p50':>10}{'TTFT p95':>10}"
        f"{'decode p50':>12}{'e2e p50':>10}{'errors':>8}",
    ]
    for label, g in summary["phases"].items():
        lines.append(
            f"{label:<16}{g['users']:>6}{g['requests']:>6}{_fmt(g['ttft_s']['p50']):>10}"
            f"{_fmt(g['ttft_s']['p95']):>10}{_fmt(g['decode_tok_s']['p50']):>12}"
            f"{_fmt(g['e2e_s']['p50']):>10}{_outcomes(g)['error']:>8}"
        )
    return lines


def _step_lines(summary: dict[str, Any]) -> list[str]:
    """Repeated steps pooled over their passes (mean ± sd); nothing without repeats."""
    if not summary.get("phase_steps"):
        return []
    lines = ["", "steps pooled over their passes (mean ± sd of per-pass figures):"]
    for step, g in summary["phase_steps"].items():
        parts = [f"{step}: {g['passes']} passes"]
        for key, label in (
            ("ttft_p50_s", "TTFT p50"),
            ("decode_p50_tok_s", "decode p50"),
            ("output_tok_s", "output tok/s"),
        ):
            if key in g:
                parts.append(f"{label} {_fmt(g[key]['mean'])} ± {_fmt(g[key]['sd'])}")
        lines.append("  " + "   ".join(parts))
    return lines
