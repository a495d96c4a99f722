"""Trace replay (``replay:``): load a Mooncake-format trace and build its prompts.

A Mooncake trace (the published traces of kvcache-ai/Mooncake, also what AIPerf replays) is
JSON Lines, one request a line::

    {"timestamp": 0, "input_length": 655, "output_length": 52, "hash_ids": [46, 47]}

``timestamp``: milliseconds from the trace's start; ``input_length`` / ``output_length``:
prompt and reply tokens; ``hash_ids``: one id per block of ``block_size`` prompt tokens
(512 in the published traces), the i-th id naming the prompt's i-th block. Two requests
whose ids agree on a prefix share that many blocks of prompt.

Prompts are built from the corpus so the server's prefix cache sees exactly that reuse: a
hash id always yields the same block of text of exactly ``block_size`` tokens (a window of
the corpus at an offset drawn from the id), different ids different text, and a prompt is
its ids' blocks in order (the last one cut to ``input_length``), then unique text for any
tokens past its ids. Each block ends with a newline and starts with a word, so the
tokenizer never merges tokens across a join: a shared prefix of ids is a shared prefix of
tokens.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import stat
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from stress.core.errors import Interrupted, Problem, ScenarioError
from stress.load.corpus import Corpus

Stop = Callable[[], bool]
"""Polled while a trace is read or a prompt built: true once the caller has stopped."""
Progress = Callable[[str], None]
"""Takes the status lines of a long trace read."""

MAX_TRACE_LINES = 1_000_000
"""A trace with more requests than this is refused (it would not fit a run's memory)."""
MAX_INPUT_TOKENS = 2_000_000
MAX_PROMPT_BLOCKS = 16_384
"""Blocks of ``block_size`` tokens in one prompt. Each block is a draw of corpus text and a
few tokenizer calls (~0.25 ms at ``block_size: 1``), so this keeps a prompt's build to
seconds; 2,000,000 tokens at ``block_size: 1`` would take minutes, and the run would wait."""
MAX_TRACE_SPAN_S = 7 * 86_400.0
"""How long after the trace's first request its last may come: a week. Past it is a unit
mistake (seconds for milliseconds, a date), and the run would wait for it for years."""
MAX_TRACE_MB_ENV = "STRESS_MAX_TRACE_MB"
"""Overrides ``DEFAULT_MAX_TRACE_MB`` (a trace larger than the limit is refused unread)."""
DEFAULT_MAX_TRACE_MB = 256
"""Room for ``MAX_TRACE_LINES`` requests of the published traces' size; read in ~10 s."""
MAX_LINE_BYTES = 1 << 20
"""A longer line is refused: a published trace's lines are under 1 KiB, a run's 2 KiB."""
PROGRESS_BYTES = 16 << 20
"""A trace at least this large says that it is being read, and how far every few seconds."""
PROGRESS_EVERY_S = 2.0
_STOP_EVERY = 512
"""Lines between two looks at ``stop`` and the clock (a few milliseconds of reading)."""
_UNIT_CHARS = 12
"""Text is cut into units of at most this many characters (scripts without spaces too)."""
_PAD = " the"
"""One token in cl100k, appended to fill a block to its exact size."""
_BLOCK_CACHE = 4096
"""Blocks of text kept per builder (ids that recur are built once)."""
_FIX = "each line is a JSON object with timestamp (ms), input_length, output_length, hash_ids"


@dataclass(frozen=True, slots=True)
class TraceRequest:
    line: int
    """Line number in the trace file (1-based)."""
    t_s: float
    """Seconds from the trace's start (its ``timestamp`` / 1000)."""
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


_RUN_FIX = "point it at a directory made by `stress run`, or its requests.jsonl"


class TraceError(ScenarioError):
    """A trace file that cannot be replayed: one line naming the file, line and field."""

    def __init__(
        self, path: str, line: int | None, field: str, message: str, fix: str = _FIX
    ) -> None:
        super().__init__([Problem(path, line, field, message, fix)])


def _int(obj: dict[str, Any], key: str, path: str, line: int, lo: int, hi: int) -> int:
    v = obj.get(key)
    if not isinstance(v, int) or isinstance(v, bool):
        what = "missing" if v is None else f"{type(v).__name__} {v!r}"[:60]
        raise TraceError(path, line, key, f"{key} must be an integer, got {what}")
    if not lo <= v <= hi:
        raise TraceError(path, line, key, f"{key} {v} is outside [{lo:,}, {hi:,}]")
    return v


# --- reading a trace file: bounded in size, line length, memory and time ---------------


def max_trace_bytes() -> int:
    """The trace size limit: ``$STRESS_MAX_TRACE_MB`` MiB, else ``DEFAULT_MAX_TRACE_MB``."""
    raw = os.environ.get(MAX_TRACE_MB_ENV, "").strip()
    try:
        mib = float(raw) if raw else DEFAULT_MAX_TRACE_MB
    except ValueError:
        mib = -1.0
    if not 0 < mib < 1 << 20:
        raise TraceError(
            MAX_TRACE_MB_ENV,
            None,
            "(environment)",
            f"{MAX_TRACE_MB_ENV}={raw!r} is not a size in MiB",
            f"unset it (the limit is then {DEFAULT_MAX_TRACE_MB} MiB) or give e.g. 512",
        )
    return int(mib * (1 << 20))


def _stderr(text: str) -> None:
    print(f"stress: {text}", file=sys.stderr, flush=True)


class _Meter:
    """Status lines while a large trace is read: one when it starts (with how to stop),
    then its progress every ``PROGRESS_EVERY_S``, and the total at the end."""

    def __init__(self, name: str, size: int, progress: Progress | None) -> None:
        self.name, self.size = name, size
        self.out = progress if size >= PROGRESS_BYTES else None
        self.t0 = self.last = time.monotonic()
        if self.out is not None:
            self.out(f"reading trace {name} ({size / (1 << 20):.0f} MiB); Ctrl-C stops")

    def tick(self, done: int, lines: int) -> None:
        now = time.monotonic()
        if self.out is not None and now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            self.out(
                f"reading trace {self.name}: {done / (1 << 20):.0f} of "
                f"{self.size / (1 << 20):.0f} MiB, {lines:,} lines"
            )

    def end(self, lines: int) -> None:
        if self.out is not None:
            took = time.monotonic() - self.t0
            self.out(f"read trace {self.name}: {lines:,} lines in {took:.1f}s")


def _trace_lines(
    path: Path, stop: Stop | None, progress: Progress | None, fix: str
) -> Iterator[tuple[int, bytes]]:
    """The non-blank lines of a trace file with their numbers, read one at a time (the
    memory is one line's). Raises ``TraceError`` for a file that is not regular, over the
    size limit or with an over-long line, and ``Interrupted`` once ``stop()`` is true."""
    name = str(path)
    limit = max_trace_bytes()
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):  # a FIFO would block, a device never end
            raise TraceError(name, None, "replay.trace", "the trace is not a regular file", fix)
        if st.st_size > limit:
            raise TraceError(
                name,
                None,
                "replay.trace",
                f"the trace is {st.st_size / (1 << 20):,.0f} MiB; the limit is "
                f"{limit / (1 << 20):,.0f} MiB",
                f"replay a part of it, or raise the limit with {MAX_TRACE_MB_ENV}=MiB",
            )
        f = path.open("rb")
    except OSError as e:
        raise TraceError(
            name, None, "replay.trace", f"cannot read the trace ({e.strerror or e})", fix
        ) from None
    meter = _Meter(name, st.st_size, progress)
    no = 0
    with f:
        while line := f.readline(MAX_LINE_BYTES + 1):
            no += 1
            if len(line) > MAX_LINE_BYTES:
                raise TraceError(name, no, "(line)", f"longer than {MAX_LINE_BYTES:,} bytes", fix)
            if no % _STOP_EVERY == 0:
                if stop is not None and stop():
                    raise Interrupted(f"stopped reading the trace {name}")
                meter.tick(f.tell(), no)
            if line.strip():
                yield no, line
    meter.end(no)


# --- Mooncake traces ------------------------------------------------------------------


def _check_blocks(n_in: int, block_size: int, name: str, line: int, field: str) -> None:
    """A prompt of more than ``MAX_PROMPT_BLOCKS`` blocks is refused, with the
    ``block_size`` that would make it buildable."""
    blocks = -(-n_in // block_size)
    if blocks > MAX_PROMPT_BLOCKS:
        least = -(-n_in // MAX_PROMPT_BLOCKS)
        raise TraceError(
            name,
            line,
            field,
            f"a prompt of {n_in:,} tokens at replay.block_size {block_size} is {blocks:,} "
            f"blocks to build; at most {MAX_PROMPT_BLOCKS:,}",
            f"set replay.block_size to at least {least}",
        )


def _span_error(name: str, line: int, field: str, span_s: float) -> TraceError:
    years = span_s / (365.25 * 86_400)
    when = f"{years:,.0f} years" if years >= 1 else f"{span_s / 86_400:,.1f} days"
    return TraceError(
        name,
        line,
        field,
        f"this request comes {when} after the trace's first; a replay spans at most "
        f"{MAX_TRACE_SPAN_S / 86_400:g} days",
        "timestamps are milliseconds from the trace's start (check the unit)",
    )


def _mooncake_request(
    obj: Any, no: int, name: str, first: float | None, last: float
) -> tuple[TraceRequest, float]:
    """One checked line of a Mooncake trace and its timestamp (``first``, ``last``: the
    first and the previous line's timestamps)."""
    if not isinstance(obj, dict):
        raise TraceError(name, no, "(line)", "not a JSON object")
    ts = obj.get("timestamp")
    if not isinstance(ts, (int, float)) or isinstance(ts, bool) or not 0 <= ts < 1e13:
        raise TraceError(
            name, no, "timestamp", f"timestamp must be milliseconds >= 0, got {ts!r}"[:120]
        )
    if ts < last:
        raise TraceError(
            name, no, "timestamp", f"timestamp {ts} is before the previous line's ({last})"
        )
    if first is not None and (ts - first) / 1000.0 > MAX_TRACE_SPAN_S:
        raise _span_error(name, no, "timestamp", (ts - first) / 1000.0)
    n_in = _int(obj, "input_length", name, no, 1, MAX_INPUT_TOKENS)
    n_out = _int(obj, "output_length", name, no, 1, MAX_INPUT_TOKENS)
    ids = obj.get("hash_ids", [])
    if not isinstance(ids, list) or not set(map(type, ids)) <= {int}:  # bool is not int
        raise TraceError(name, no, "hash_ids", "hash_ids must be a list of integers")
    return TraceRequest(no, ts / 1000.0, n_in, n_out, tuple(ids)), float(ts)


def iter_mooncake(
    path: Path, block_size: int = 512, stop: Stop | None = None, progress: Progress | None = None
) -> Iterator[TraceRequest]:
    """The trace's requests in file order, each checked as it is read; raises
    ``TraceError`` on the first bad line (``Interrupted`` once ``stop()`` is true)."""
    name = str(path)
    first: float | None = None
    last = -1.0
    count = 0
    for no, text in _trace_lines(path, stop, progress or _stderr, _FIX):
        if count >= MAX_TRACE_LINES:
            raise TraceError(name, no, "(file)", f"more than {MAX_TRACE_LINES:,} requests")
        try:
            obj = orjson.loads(text)
        except orjson.JSONDecodeError as e:
            raise TraceError(name, no, "(line)", f"not valid JSON ({e})") from None
        req, last = _mooncake_request(obj, no, name, first, last)
        _check_blocks(req.input_length, block_size, name, no, "input_length")
        first = last if first is None else first
        count += 1
        yield req
    if not count:
        raise TraceError(name, None, "(file)", "the trace holds no requests")


def load_mooncake(
    path: Path, block_size: int = 512, stop: Stop | None = None, progress: Progress | None = None
) -> list[TraceRequest]:
    """The trace's requests in file order; raises ``TraceError`` on the first bad line."""
    return list(iter_mooncake(path, block_size, stop, progress))


RUN_FILE = "requests.jsonl"


def trace_format(path: Path) -> Literal["mooncake", "stress"]:
    """``stress`` for a run directory or a run's ``requests.jsonl`` (its first record has
    ``t_sched``), else ``mooncake``."""
    if path.is_dir() or path.name == RUN_FILE:
        return "stress"
    if not path.is_file():  # a FIFO or a device: its loader says so, unopened
        return "mooncake"
    try:
        with path.open("rb") as f:
            first = b""
            for _ in range(1000):
                line = f.readline(MAX_LINE_BYTES + 1)
                if not line or line.strip():
                    first = line
                    break
        obj = orjson.loads(first) if first.strip() else None
    except (OSError, orjson.JSONDecodeError):
        return "mooncake"  # its loader says what is wrong, in one line
    return "stress" if isinstance(obj, dict) and "t_sched" in obj else "mooncake"


def load_trace(
    path: Path,
    fmt: str,
    block_size: int,
    stop: Stop | None = None,
    progress: Progress | None = None,
) -> list[TraceRequest]:
    """The requests of a ``replay.trace`` in send order (``fmt``: ``replay.format``);
    ``stop`` ends the read early (``Interrupted``), ``progress`` takes its status lines
    (stderr by default)."""
    if fmt == "auto":
        fmt = trace_format(path)
    if fmt == "stress":
        return load_run_trace(path, block_size, stop, progress)
    return load_mooncake(path, block_size, stop, progress)


def check_trace(
    path: Path,
    fmt: str,
    block_size: int,
    stop: Stop | None = None,
    progress: Progress | None = None,
) -> int:
    """What ``load_trace`` checks, line by line, keeping nothing (``stress validate``'s
    memory stays one line's whatever the trace's size); returns the request count."""
    if fmt == "auto":
        fmt = trace_format(path)
    if fmt == "stress":
        file, _ = _run_file(path)
        scale = _run_settings(path)[0]
        return sum(1 for _ in _run_rows(file, scale, block_size, stop, progress))
    return sum(1 for _ in iter_mooncake(path, block_size, stop, progress))


# --- a previous run as a trace --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _RunRow:
    """What a replay takes from one request record of a run."""

    t: float
    line: int
    conversation: tuple[str | None, int | None, int | None]
    """(phase, user, conversation): the turns of one conversation share it."""
    n_in: int
    n_out: int
    reuse: int


def _run_file(path: Path) -> tuple[Path, Path]:
    """The run's ``requests.jsonl`` and its directory."""
    run_dir = path if path.is_dir() else path.parent
    file = path / RUN_FILE if path.is_dir() else path
    if not file.is_file():
        raise TraceError(str(file), None, "replay.trace", "no requests.jsonl there", _RUN_FIX)
    return file, run_dir


def _run_settings(path: Path) -> tuple[float, int]:
    """The run's time scale and ``max_tokens`` from its manifest (1 and 256 without)."""
    scale, max_tokens = 1.0, 256
    manifest = _run_file(path)[1] / "manifest.json"
    try:
        if manifest.is_file() and manifest.stat().st_size <= MAX_LINE_BYTES * 16:
            m = orjson.loads(manifest.read_bytes())
            scale = float(m.get("time_scale") or 1.0)
            max_tokens = int(m["scenario"]["request"]["max_tokens"])
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        pass
    return scale, max_tokens


def _count(r: dict[str, Any], *keys: str) -> int:
    for k in keys:
        v = r.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_INPUT_TOKENS:
            return v
    return 0


def _id_field(r: dict[str, Any], key: str, name: str, no: int) -> int | None:
    v = r.get(key)
    if v is None or (isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 63):
        return v
    raise TraceError(
        name,
        no,
        key,
        f"{key} must be a whole number, got {type(v).__name__} {v!r}"[:120],
        f"{_RUN_FIX} (stress writes {key} as a number)",
    )


def _run_row(r: dict[str, Any], t: float, no: int, name: str) -> _RunRow:
    phase = r.get("phase")
    if phase is not None and not isinstance(phase, str):
        raise TraceError(
            name, no, "phase", f"phase must be text, got {type(phase).__name__}", _RUN_FIX
        )
    key = (phase, _id_field(r, "user", name, no), _id_field(r, "conversation", name, no))
    n_in = _count(r, "prompt_tokens", "prompt_tokens_est") or 1
    reuse = min(_count(r, "reusable_tokens"), n_in)
    return _RunRow(t, no, key, n_in, _count(r, "completion_tokens"), reuse)


def _run_rows(
    file: Path, scale: float, block_size: int, stop: Stop | None, progress: Progress | None
) -> Iterator[_RunRow]:
    """The run's request records, checked, in file order (``t`` on the scenario's
    clock). A line that is not JSON (a torn last line) or has no send time is skipped."""
    name = str(file)
    count = 0
    for no, text in _trace_lines(file, stop, progress or _stderr, _RUN_FIX):
        try:
            r = orjson.loads(text)
        except orjson.JSONDecodeError:
            continue
        t = r.get("t_sched") if isinstance(r, dict) else None
        if not isinstance(t, (int, float)) or isinstance(t, bool) or not t >= 0:
            continue  # not a request record (or a damaged one): nothing to replay
        if t * scale > MAX_TRACE_SPAN_S:
            raise _span_error(name, no, "t_sched", t * scale)
        count += 1
        if count > MAX_TRACE_LINES:
            raise TraceError(name, no, "(file)", f"more than {MAX_TRACE_LINES:,} requests")
        row = _run_row(r, float(t) * scale, no, name)
        _check_blocks(row.n_in, block_size, name, no, "prompt_tokens")
        yield row
    if not count:
        raise TraceError(name, None, "(file)", "the run holds no request records", _RUN_FIX)


def load_run_trace(
    path: Path, block_size: int, stop: Stop | None = None, progress: Progress | None = None
) -> list[TraceRequest]:
    """A previous ``stress run``'s requests as a trace: the same send times (on the
    scenario's clock: a time-scaled simulator run's are simulated seconds), sizes and
    conversation shape.

    Sizes: the server's prompt tokens (the estimate where the server gave none) and the
    reply's tokens (for a request that got none, the run's ``max_tokens``). Shape: each
    conversation (phase, user, conversation) is a chain of hash ids; a turn keeps as many
    whole blocks of the previous turn's ids as its ``reusable_tokens`` cover, then new ids
    for the rest, so a replayed turn shares with the one before what the original could
    reuse (to a block; a smaller ``block_size`` follows it closer)."""
    file, _ = _run_file(path)
    scale, max_tokens = _run_settings(path)
    rows = sorted(_run_rows(file, scale, block_size, stop, progress), key=lambda r: (r.t, r.line))
    chains: dict[tuple[Any, ...], list[int]] = {}
    next_id = 0
    out: list[TraceRequest] = []
    for row in rows:
        chain = chains.get(row.conversation, [])
        ids = chain[: min(row.reuse // block_size, len(chain))]
        blocks = -(-row.n_in // block_size)
        while len(ids) < blocks:
            ids.append(next_id)
            next_id += 1
        chains[row.conversation] = ids
        out.append(TraceRequest(row.line, row.t, row.n_in, row.n_out or max_tokens, tuple(ids)))
    return out


def implied_reuse(trace: list[TraceRequest], block_size: int) -> list[int]:
    """Per request, the prompt tokens its hash ids say an earlier request sent: its leading
    blocks whose chain of ids (the block and every id before it) was sent before, up to the
    first block an earlier request sent only part of (a cut last block), capped at its
    prompt. What a prefix cache that never evicts can serve.

    A chain is numbered once (its parent's number and its last id), so a request costs
    its block count, not its block count squared."""
    nodes: dict[tuple[int, int], int] = {}
    """(parent chain's number, id) -> the chain's number (0: the empty chain)."""
    sent: dict[int, int] = {}
    """Chain number -> most tokens of its last block any request sent."""
    out: list[int] = []
    for req in trace:
        reuse = 0
        node = 0
        for i, h in enumerate(req.hash_ids):
            need = min(block_size, req.input_length - i * block_size)
            node = nodes.get((node, h), -1)
            got = min(sent.get(node, 0), need)
            reuse += got
            if need <= 0 or got < block_size or node < 0:
                break
        out.append(reuse)
        node = 0
        for i, h in enumerate(req.hash_ids):
            n = min(block_size, req.input_length - i * block_size)
            if n <= 0:
                break
            node = nodes.setdefault((node, h), len(nodes) + 1)
            sent[node] = max(sent.get(node, 0), n)
    return out


class PromptBuilder:
    """Prompts of a trace from a corpus: block ``h`` is the same text wherever it occurs."""

    def __init__(
        self, corpus: Corpus, block_size: int, salt: str, stop: Stop | None = None
    ) -> None:
        self.corpus = corpus
        self.block_size = block_size
        self.salt = salt
        self.stop = stop
        """Looked at before each block: a stopped run does not wait for a long prompt."""
        self._units: OrderedDict[str, list[str]] = OrderedDict()

    def prompt(self, req: TraceRequest) -> str:
        """The prompt of ``req``: its ids' blocks, then unique text up to input_length;
        ``""`` once ``stop()`` is true (the stopped caller sends nothing)."""
        parts: list[str] = []
        left = req.input_length
        ids = iter(req.hash_ids)
        tail = 0
        while left > 0:
            if self.stop is not None and self.stop():
                return ""
            n = min(self.block_size, left)
            h = next(ids, None)
            if h is not None:
                parts.append(self.block(f"id:{h}", n))
            else:  # tokens past the ids: text no other request has
                parts.append(self.block(f"tail:{req.line}:{tail}", n))
                tail += 1
            left -= n
        return "".join(parts)

    def block(self, key: str, n: int) -> str:
        """``n`` tokens of text for ``key`` ending in a newline; the text for fewer tokens
        is a prefix of the text for more (a cut block shares what it can)."""
        units = self._units_of(key)
        tok = self.corpus.tok
        if n == 1:  # a cut last block: one word, no newline ("\n" would merge with the
            # previous block's "\n" into one token); its first word where that is one token
            return units[0] if units and tok.count(units[0]) == 1 else "the"

        def text(k: int) -> str:
            return " ".join(units[:k]) + "\n"

        lo, hi = 0, len(units)  # the most units whose text fits in n tokens
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if tok.count(text(mid)) <= n:
                lo = mid
            else:
                hi = mid - 1
        for k in range(lo, -1, -1):  # pad with one-token words to exactly n
            body = " ".join(units[:k]) if k else "the"
            m = 0
            for _ in range(4):
                got = tok.count(body + _PAD * m + "\n")
                if got == n:
                    return body + _PAD * m + "\n"
                m += n - got
                if m < 0:
                    break
        return text(lo)  # not reached with cl100k: the count is off by a token or two

    def _units_of(self, key: str) -> list[str]:
        """The words of the corpus window for ``key`` (enough for a whole block)."""
        got = self._units.get(key)
        if got is not None:
            self._units.move_to_end(key)
            return got
        seed = hashlib.sha256(f"{self.salt}:{key}".encode()).digest()
        rng = random.Random(seed)
        docs = self.corpus.docs
        d = self.corpus.draw_doc(rng)
        i = rng.randrange(len(docs[d].paragraphs))
        units: list[str] = []
        chars = 0
        first = True
        while chars < self.block_size * 6 + 64:
            words = re.findall(r"\S+", docs[d].paragraphs[i])
            if first and len(words) > 1:  # start mid-paragraph: more distinct windows
                words = words[rng.randrange(len(words)) :]
                first = False
            for w in words:
                for c in range(0, len(w), _UNIT_CHARS):
                    units.append(w[c : c + _UNIT_CHARS])
                    chars += min(_UNIT_CHARS, len(w) - c) + 1
            i += 1
            if i >= len(docs[d].paragraphs):
                d, i = (d + 1) % len(docs), 0
        self._units[key] = units
        if len(self._units) > _BLOCK_CACHE:
            self._units.popitem(last=False)
        return units
