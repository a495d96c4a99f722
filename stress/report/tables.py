"""Per-user, per-round and per-phase tables.

Per user: does one user fare worse (its cache evicted by the others)? Per round: how the
figures move as conversations grow. Per phase: sweeps (context, concurrency) recorded as
phases; warm-up passes are shown, marked and kept out of the other tables (field note 7).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

from stress.analysis import figures
from stress.analysis.judge import tally
from stress.analysis.rundata import Record, RunData
from stress.analysis.stats import describe
from stress.core.fmt import mean_sd, num, pct, tokens
from stress.report.headline import values
from stress.report.model import Table

K = TypeVar("K", bound=Hashable)


def _group(records: list[Record], key: Callable[[Record], K]) -> dict[K, list[Record]]:
    out: dict[K, list[Record]] = {}
    for r in records:
        out.setdefault(key(r), []).append(r)
    return out


def _errors(g: list[Record]) -> int:
    """Failed requests, cancelled ones aside: the verdict's count (``judge.tally``)."""
    return tally(g).error_count


def per_user(run: RunData) -> Table:
    rows = []
    for user, g in sorted(_group(run.main, lambda r: int(r.get("user") or 0)).items()):
        rows.append(
            [
                str(user),
                str(len(g)),
                str(_errors(g)),
                mean_sd(describe(values(g, "ttft_s"))),
                num(figures.ttft_p95(g)),
                mean_sd(describe(values(g, "decode_tok_s"))),
                pct(figures.cached_share(g)),
                pct(figures.cache_retention(g)),
                tokens(max((r.get("conversation_tokens") or 0 for r in g), default=0)),
            ]
        )
    return Table(
        "Per user",
        [
            "user",
            "requests",
            "errors",
            "TTFT s",
            "TTFT p95",
            "decode tok/s",
            "cached",
            "retention",
            "max conversation",
        ],
        rows,
        id="per-user",
    )


def per_round(run: RunData) -> Table:
    rows = []
    for rnd, g in sorted(_group(run.main, lambda r: int(r.get("round") or 0)).items()):
        conv = describe([float(r.get("conversation_tokens") or 0) for r in g])
        rows.append(
            [
                str(rnd),
                str(len(g)),
                str(_errors(g)),
                tokens(conv.mean),
                mean_sd(describe(values(g, "ttft_s"))),
                num(figures.ttft_p95(g)),
                mean_sd(describe(values(g, "decode_tok_s"))),
                pct(figures.cached_share(g)),
            ]
        )
    return Table(
        "Per round",
        [
            "round",
            "requests",
            "errors",
            "mean conversation",
            "TTFT s",
            "TTFT p95",
            "decode tok/s",
            "cached",
        ],
        rows,
        id="per-round",
    )


def per_phase(run: RunData) -> Table | None:
    """One row per phase (warm-up passes shown and marked); None for a single-phase run."""
    groups = _group(run.requests, lambda r: (str(r.get("phase") or "main"), bool(r.get("warmup"))))
    if len({k for k, _ in groups}) < 2 and not any(w for _, w in groups):
        return None
    order = sorted(groups, key=lambda k: min(float(r.get("t_start") or 0) for r in groups[k]))
    rows = []
    for phase, warm in order:
        g = groups[phase, warm]
        t0 = min(float(r.get("t_start") or 0) for r in g)
        t1 = max(float(r.get("t_start") or 0) + float(r.get("e2e_s") or 0) for r in g)
        users = len({r.get("user") for r in g})
        rows.append(
            [
                phase + (" (warm-up, excluded)" if warm else ""),
                str(users),
                str(len(g)),
                str(sum(1 for r in g if r.get("outcome") not in figures.ANSWERED)),
                mean_sd(describe(values(g, "ttft_s"))),
                mean_sd(describe(values(g, "decode_tok_s"))),
                num(tok_s) if (tok_s := figures.output_tok_s(g, t1 - t0)) is not None else "-",
                tokens(describe([float(r.get("conversation_tokens") or 0) for r in g]).mean),
            ]
        )
    return Table(
        "Phases",
        [
            "phase",
            "users",
            "requests",
            "not answered",
            "TTFT s",
            "decode tok/s",
            "output tok/s",
            "mean conversation",
        ],
        rows,
        note="Warm-up passes (first pass at a new batch size compiles kernels) are run and "
        "shown, never counted in the headline.",
        id="phases",
    )
