"""The report's inter-token latency section, rendered from the run's token timing.

The figures (ITL over every gap between text chunks, each request's own ITL, TPOT, and
goodput on TTFT and ITL together) are decided once by :mod:`stress.analysis.itl`; this
module lays them out: the distribution, by conversation length, and (folded, with the other
per-user tables) per user.
"""

from __future__ import annotations

from stress.analysis.itl import Group, TokenTiming
from stress.analysis.loghist import LogHistogram
from stress.analysis.pauses import MIN_STREAMS, Pauses, describe_pauses
from stress.analysis.stats import describe
from stress.core.fmt import num, pct
from stress.report.model import Section, Table

MS = 1000.0
ONE_READ_NOTE = (
    "Percentiles come from log bins within 1% (mean and longest exact); chunks that "
    "arrived in one read count a gap of 0."
)
"""The ITL footnote, in the report's ITL section and under the terminal summary's table."""


def ms(v: float | None) -> str:
    """Seconds shown in milliseconds (ITL is tens of ms)."""
    return "-" if v is None else num(v * MS)


def _hist_row(label: str, h: LogHistogram, unit: str) -> list[str]:
    return [
        label,
        f"{ms(h.mean)} ± {ms(h.sd)}" if h.n else "-",
        ms(h.percentile(50)),
        ms(h.percentile(90)),
        ms(h.percentile(95)),
        ms(h.percentile(99)),
        ms(h.high if h.n else None),
        f"{h.n:,} {unit}",
    ]


def _values_row(label: str, values: list[float]) -> list[str]:
    d = describe(values)
    return [
        label,
        f"{ms(d.mean)} ± {ms(d.sd)}" if d.n else "-",
        ms(d.p50),
        "-",
        ms(d.p95),
        ms(d.p99),
        ms(max(values) if values else None),
        f"{d.n:,} requests",
    ]


def _group_cells(g: Group) -> list[str]:
    tpot = describe(g.tpot)
    return [
        f"{g.requests:,}",
        ms(g.itl.percentile(50)),
        ms(g.itl.percentile(95)),
        ms(g.itl.percentile(99)),
        ms(g.itl.high if g.itl.n else None),
        ms(tpot.p50),
        ms(tpot.p95),
    ]


GROUP_COLUMNS = [
    "requests",
    "ITL p50 ms",
    "ITL p95 ms",
    "ITL p99 ms",
    "ITL max ms",
    "TPOT p50 ms",
    "TPOT p95 ms",
]


def paragraphs(t: TokenTiming) -> list[str]:
    out: list[str] = []
    h = t.overall.itl
    if t.available:
        out.append(
            f"Inter-token latency over {h.n:,} gaps between text chunks of "
            f"{t.overall.requests:,} requests: p50 {ms(h.percentile(50))} ms, p95 "
            f"{ms(h.percentile(95))} ms, p99 {ms(h.percentile(99))} ms, longest "
            f"{ms(h.high if h.n else None)} ms. {ONE_READ_NOTE}"
        )
    else:
        out.append(
            "This run has no token timing (no tokens.bin: recorded by an older stress, or "
            "no request streamed text): TPOT only, from each request's decode speed."
        )
    if t.read.damaged:
        out.append(
            f"tokens.bin ends early ({t.read.damaged}; {t.read.skipped_bytes:,} bytes not "
            f"read, as after a kill): {t.read.frames:,} requests' timings were read."
        )
    if t.itl_limit is not None and t.goodput is not None:
        within = f"TTFT within {num(t.ttft_limit)} s and " if t.ttft_limit is not None else ""
        spread = ""
        if len(t.goodput_by_user) > 1:
            lo, hi = min(t.goodput_by_user.values()), max(t.goodput_by_user.values())
            spread = f" (per user {pct(lo)} to {pct(hi)})"
        out.append(
            f"Goodput on TTFT and ITL: {pct(t.goodput)} of turns were answered with {within}"
            f"their own ITL p95 within {ms(t.itl_limit)} ms (slo.itl_p95){spread}."
        )
    elif t.itl_limit is not None:
        out.append("slo.itl_p95 is set but the run has no token timing: no goodput on ITL.")
    return out


PAUSES_SHOWN = 10
"""The longest pauses listed in the report (summary.json lists more)."""


def pause_paragraph(p: Pauses) -> str:
    """The server-wide pauses in one paragraph (none found is said too)."""
    if not p.pauses:
        return (
            f"No server-wide pause: at no moment did every running stream (at least "
            f"{MIN_STREAMS}) go silent together for over {num(p.threshold_s)} s."
        )
    frozen = f"; {pct(p.decode_share)} of the streams' time between first and last chunk"
    return (
        f"{describe_pauses(p)}{frozen if p.decode_share is not None else ''}. A silence "
        "every stream shares is the server stopping, not slow decoding: the causes name "
        "what is likely."
    )


def pause_tables(p: Pauses) -> list[Table]:
    """The pauses' figures, and the longest of them in time order."""
    if not p.pauses:
        return []
    streams = [x.streams for x in p.pauses]
    figures_row = [
        f"{p.count:,}",
        num(p.total_s),
        num(p.longest_s),
        pct(p.share) if p.share is not None else "-",
        f"{min(streams)}-{max(streams)}" if min(streams) != max(streams) else str(streams[0]),
        num(p.threshold_s),
    ]
    longest = sorted(
        sorted(p.pauses, key=lambda x: -x.seconds)[:PAUSES_SHOWN], key=lambda x: x.start
    )
    return [
        Table(
            "Server-wide pauses",
            ["pauses", "total s", "longest s", "share of run", "streams frozen", "threshold s"],
            [figures_row],
            note=f"Threshold: the longer of 1 s and 10 x ITL p50 ({ms(p.itl_p50_s)} ms).",
            id="pauses",
        ),
        Table(
            f"The longest pauses (at most {PAUSES_SHOWN})",
            ["from s", "to s", "seconds", "streams frozen"],
            [[num(x.start), num(x.end), num(x.seconds), str(x.streams)] for x in longest],
            id="pauses-longest",
        ),
    ]


def itl_section(t: TokenTiming, pauses: Pauses | None = None) -> Section:
    """The ITL and TPOT distributions, ITL by conversation length when measured, and the
    server-wide pauses (every running stream silent together) beside them."""
    columns = ["figure", "mean ± sd ms", "p50", "p90", "p95", "p99", "max", "n"]
    rows: list[list[str]] = []
    if t.available:
        rows.append(_hist_row("ITL, every gap", t.overall.itl, "gaps"))
        rows.append(_values_row("ITL p95 of each request", t.itl_p95_per_request))
    rows.append(_values_row("TPOT", t.overall.tpot))
    tables = [
        Table(
            "Inter-token latency and time per output token (ms)",
            columns,
            rows,
            note="TPOT = (last token - first token) / (completion tokens - 1) = 1 / decode "
            "speed, per request.",
            id="itl",
        )
    ]
    if t.available and t.by_length:
        tables.append(
            Table(
                "By conversation length",
                ["conversation tokens", *GROUP_COLUMNS],
                [[b.label, *_group_cells(b.group)] for b in t.by_length],
                id="itl-by-length",
            )
        )
    paras = paragraphs(t)
    if pauses is not None and pauses.available:
        paras.append(pause_paragraph(pauses))
        tables += pause_tables(pauses)
    return Section("itl", "Inter-token latency", paras, tables)


def per_user_table(t: TokenTiming) -> Table | None:
    """ITL and TPOT per user (with the report's other per-user tables, folded)."""
    if not t.available or not t.per_user:
        return None
    return Table(
        "Inter-token latency per user",
        ["user", *GROUP_COLUMNS],
        [[str(u), *_group_cells(g)] for u, g in sorted(t.per_user.items())],
        id="itl-per-user",
    )
