"""``stress export RUN --csv|--parquet``: one row per request, with the derived figures.

For notebooks: pandas, polars or DuckDB read the file straight away, with no JSON Lines to
flatten. The rows come from the one analysis layer (``stress.analysis.rundata.load_run``:
``requests.jsonl`` read and checked by ``stress.analysis.runfiles``; a time-scaled
simulator run on the simulated clock, like the report) and the per-request figures from the
functions that define them (``stress.analysis.figures``, ``stress.analysis.itl``), so an
exported TTFT or retention is the report's.

``COLUMNS`` is the one table of the columns: the writers, the Parquet schema and the table
in docs/export.md (``python -m stress.report.export`` prints it; a test holds the docs equal)
all come from it. CSV uses the standard library; Parquet needs pyarrow, an optional extra
(``pip install '.[parquet]'`` in the checkout).
"""

from __future__ import annotations

import csv
import importlib
import io
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from stress.analysis import figures
from stress.analysis.itl import RequestItl, in_population, token_timing, tpot
from stress.analysis.rows import RequestRow
from stress.analysis.rundata import RunData, load_run
from stress.analysis.runfiles import end_time
from stress.core.errors import StressError

Kind = Literal["int", "float", "str", "bool"]
Value = int | float | str | bool | None
PARQUET_HINT = "pip install '.[parquet]' in the stress checkout"


@dataclass(frozen=True, slots=True)
class Row:
    """What a column reads: the request as recorded, and its derived context."""

    run: RunData
    request: RequestRow
    itl: RequestItl | None


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    kind: Kind
    unit: str
    meaning: str
    get: Callable[[Row], Value]


def _field(key: str) -> Callable[[Row], Value]:
    def get(row: Row) -> Value:
        v = row.request.get(key)
        return v if isinstance(v, int | float | str | bool) else None

    return get


def _raw(name: str, kind: Kind, unit: str, meaning: str) -> Column:
    """A field of ``requests.jsonl`` as read (same name)."""
    return Column(name, kind, unit, meaning, _field(name))


def _cached_share(row: Row) -> float | None:
    c, p = row.request.get("cached_tokens"), row.request.get("prompt_tokens")
    return float(c) / float(p) if c is not None and p else None


def _kept(row: Row) -> int | None:
    r = row.request
    if not figures.counts_for_retention(r):
        return None
    return int(figures.kept_tokens(float(r.get("cached_tokens") or 0), r.get("reusable_tokens", 0)))


def _itl(attr: str) -> Callable[[Row], Value]:
    def get(row: Row) -> Value:
        v = getattr(row.itl, attr) if row.itl is not None else None
        return v if isinstance(v, int | float) else None

    return get


SECONDS = "s (simulated s in a time-scaled simulator run)"
COLUMNS: tuple[Column, ...] = (
    Column(
        "run_id", "str", "", "the run directory's id, to concatenate runs", lambda w: w.run.run_id
    ),
    _raw("phase", "str", "", "phase label (`main` without phases; `name#2` for a second pass)"),
    _raw("user", "int", "", "user number, from 0"),
    _raw("conversation", "int", "", "the user's conversation number, from 1"),
    _raw("round", "int", "", "the user's round (turn across conversations), from 1"),
    _raw("turn", "int", "", "turn within the conversation, from 1"),
    _raw("warmup", "bool", "", "a warm-up round: recorded, kept out of every headline figure"),
    _raw("request_id", "str", "", "the X-Request-ID sent (joins tokens.bin and server logs)"),
    _raw("response_id", "str", "", "the id the server gave its reply"),
    _raw("outcome", "str", "", "ok, empty, reasoning_only, truncated or error"),
    _raw(
        "error_class", "str", "", "why it failed (http_5xx, stall, total_timeout...); empty if ok"
    ),
    _raw("error", "str", "", "the error, one line"),
    _raw("http_status", "int", "", "HTTP status of the reply"),
    _raw("finish_reason", "str", "", "the server's finish_reason"),
    _raw("t_sched", "float", SECONDS, "when the turn was due, since run start"),
    _raw("t_start", "float", SECONDS, "when the request was sent, since run start"),
    Column(
        "t_end",
        "float",
        SECONDS,
        "when it ended: t_start + e2e_s (its last byte without an e2e)",
        lambda w: end_time(w.request),
    ),
    _raw(
        "queue_s",
        "float",
        SECONDS,
        "the client's own queueing: late start or a full pool (t_start - t_sched)",
    ),
    _raw("ttft_s", "float", SECONDS, "TTFT: first chunk carrying generated text - request sent"),
    _raw("ttfc_s", "float", SECONDS, "TTFC: first chunk carrying answer content - request sent"),
    _raw("e2e_s", "float", SECONDS, "last byte - request sent"),
    _raw(
        "decode_tok_s", "float", "tok/s", "(completion_tokens - 1) / (t_last_token - t_first_token)"
    ),
    Column("tpot_s", "float", SECONDS, "TPOT: 1 / decode_tok_s", lambda w: tpot(w.request)),
    _raw("max_gap_s", "float", SECONDS, "longest silence: the longest gap between two chunks"),
    Column(
        "itl_chunks",
        "int",
        "",
        "text chunks in tokens.bin (ITL population only: non-warm-up, streamed, generated text)",
        _itl("chunks"),
    ),
    Column(
        "itl_mean_s",
        "float",
        SECONDS,
        "mean gap between its text chunks (as itl_chunks)",
        _itl("mean"),
    ),
    Column("itl_p50_s", "float", SECONDS, "median gap between its text chunks", _itl("p50")),
    Column("itl_p95_s", "float", SECONDS, "95th percentile (linear) of its gaps", _itl("p95")),
    Column("itl_max_s", "float", SECONDS, "its longest gap between text chunks", _itl("max")),
    Column(
        "in_latency_figures",
        "bool",
        "",
        "counted in TTFT p95, decode p50, TPOT and ITL: not warm-up, outcome ok or reasoning_only",
        lambda w: not w.request.get("warmup") and w.request.get("outcome") in figures.GENERATED,
    ),
    Column(
        "in_itl_figures",
        "bool",
        "",
        "counted in ITL: as in_latency_figures, and streamed",
        lambda w: in_population(w.request),
    ),
    _raw("prompt_tokens", "int", "tokens", "prompt tokens the server reported"),
    _raw("prompt_tokens_est", "int", "tokens", "prompt tokens the client counted"),
    _raw("prompt_source", "str", "", "where prompt_tokens came from"),
    _raw("cached_tokens", "int", "tokens", "prefix-cache hit the server reported"),
    _raw("cache_source", "str", "", "where cached_tokens came from"),
    _raw(
        "reusable_tokens",
        "int",
        "tokens",
        "tokens this turn could reuse from the conversation so far",
    ),
    Column(
        "cached_share",
        "float",
        "0..1",
        "prefix-cache hit of this request: cached_tokens / prompt_tokens",
        _cached_share,
    ),
    Column(
        "kept_tokens",
        "int",
        "tokens",
        "reusable tokens the cache kept: min(cached_tokens, reusable_tokens), when the request "
        "counts for retention (sum kept_tokens / sum reusable_tokens = cache retention)",
        _kept,
    ),
    _raw("completion_tokens", "int", "tokens", "output tokens (usage, or counted)"),
    _raw("tokens_source", "str", "", "where completion_tokens came from"),
    _raw("reasoning_tokens", "int", "tokens", "thinking tokens among completion_tokens"),
    _raw("content_chars", "int", "chars", "characters of answer content"),
    _raw("reasoning_chars", "int", "chars", "characters of reasoning"),
    _raw("chunks_content", "int", "", "chunks carrying content"),
    _raw("chunks_reasoning", "int", "", "chunks carrying reasoning"),
    _raw("chunks_empty", "int", "", "chunks carrying neither"),
    _raw("reasoning_field", "str", "", "the delta field the reasoning came in"),
    _raw("conversation_tokens", "int", "tokens", "the conversation's length before this turn"),
    _raw("paste_tokens", "int", "tokens", "tokens of pasted document in this turn"),
    _raw("prefilled_tokens", "int", "tokens", "history built before the run (start_tokens)"),
    _raw("streamed", "bool", "", "the request asked for a stream"),
    _raw("saw_done", "bool", "", "the stream ended with [DONE]"),
    _raw("retry_after_s", "float", "s", "the Retry-After the server sent"),
    _raw("reconnects", "int", "", "reconnects before this request was sent"),
    _raw("diagnosis", "str", "", "the client's diagnosis of a failure"),
)


def columns_markdown() -> str:
    """docs/export.md's table of columns (``python -m stress.report.export``)."""
    lines = ["| column | type | unit | meaning |", "|---|---|---|---|"]
    lines += [f"| `{c.name}` | {c.kind} | {c.unit} | {c.meaning} |" for c in COLUMNS]
    return "\n".join(lines) + "\n"


def rows(run_dir: Path) -> Iterator[list[Value]]:
    """Every request of the run, as the values of ``COLUMNS``, in recorded order."""
    run = load_run(run_dir)
    per_request = token_timing(run).per_request
    for r in run.requests:
        rid = r.get("request_id")
        row = Row(run, r, per_request.get(str(rid)) if rid else None)
        yield [c.get(row) for c in COLUMNS]


def _csv_cell(v: Value) -> Value:
    if isinstance(v, bool):
        return "true" if v else "false"
    return "" if v is None else v


def write_csv(values: Iterable[list[Value]], out: io.TextIOBase | Any) -> int:
    """Header plus one line per request; empty cells for missing values. Returns rows."""
    w = csv.writer(out, lineterminator="\n")
    w.writerow([c.name for c in COLUMNS])
    n = 0
    for v in values:
        w.writerow([_csv_cell(x) for x in v])
        n += 1
    return n


def pyarrow_module() -> Any:
    """pyarrow (with its parquet module loaded), or StressError with the install line."""
    try:
        pa = importlib.import_module("pyarrow")
        importlib.import_module("pyarrow.parquet")
    except ImportError:
        raise MissingPyarrow(
            f"--parquet needs pyarrow, which is not installed -- fix: {PARQUET_HINT} (or use --csv)"
        ) from None
    return pa


class MissingPyarrow(StressError):
    """The optional extra for --parquet is not installed (exit 2)."""


def write_parquet(values: Iterable[list[Value]], path: Path) -> int:
    """One Parquet file with typed columns (``COLUMNS``' kinds). Returns rows."""
    pa = pyarrow_module()
    pq = importlib.import_module("pyarrow.parquet")
    types = {"int": pa.int64(), "float": pa.float64(), "str": pa.string(), "bool": pa.bool_()}
    data = list(values)
    arrays = []
    for i, c in enumerate(COLUMNS):
        col = [v[i] for v in data]
        if c.kind == "float":
            col = [float(x) if isinstance(x, int | float) else None for x in col]
        arrays.append(pa.array(col, type=types[c.kind]))
    schema = pa.schema(
        [
            pa.field(c.name, types[c.kind], metadata={"unit": c.unit, "meaning": c.meaning})
            for c in COLUMNS
        ]
    )
    pq.write_table(pa.Table.from_arrays(arrays, schema=schema), path)
    return len(data)


if __name__ == "__main__":
    print(columns_markdown(), end="")
