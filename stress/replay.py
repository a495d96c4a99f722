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
import random
import re
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from stress.corpus import Corpus
from stress.errors import Problem, RunDirError, ScenarioError

MAX_TRACE_LINES = 1_000_000
"""A trace with more requests than this is refused (it would not fit a run's memory)."""
MAX_INPUT_TOKENS = 2_000_000
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


def load_mooncake(path: Path) -> list[TraceRequest]:
    """The trace's requests in file order; raises ``TraceError`` on the first bad line."""
    name = str(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise TraceError(
            name, None, "replay.trace", f"cannot read the trace ({e.strerror or e})"
        ) from None
    out: list[TraceRequest] = []
    last = -1.0
    for no, text in enumerate(raw.splitlines(), 1):
        if not text.strip():
            continue
        if len(out) >= MAX_TRACE_LINES:
            raise TraceError(name, no, "(file)", f"more than {MAX_TRACE_LINES:,} requests")
        try:
            obj = orjson.loads(text)
        except orjson.JSONDecodeError as e:
            raise TraceError(name, no, "(line)", f"not valid JSON ({e})") from None
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
        last = float(ts)
        n_in = _int(obj, "input_length", name, no, 1, MAX_INPUT_TOKENS)
        n_out = _int(obj, "output_length", name, no, 1, MAX_INPUT_TOKENS)
        ids = obj.get("hash_ids", [])
        if not isinstance(ids, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) for h in ids
        ):
            raise TraceError(name, no, "hash_ids", "hash_ids must be a list of integers")
        out.append(TraceRequest(no, ts / 1000.0, n_in, n_out, tuple(ids)))
    if not out:
        raise TraceError(name, None, "(file)", "the trace holds no requests")
    return out


RUN_FILE = "requests.jsonl"


def trace_format(path: Path) -> Literal["mooncake", "stress"]:
    """``stress`` for a run directory or a run's ``requests.jsonl`` (its first record has
    ``t_sched``), else ``mooncake``."""
    if path.is_dir() or path.name == RUN_FILE:
        return "stress"
    try:
        with path.open("rb") as f:
            first = next((line for line in f if line.strip()), b"")
        obj = orjson.loads(first) if first else None
    except (OSError, orjson.JSONDecodeError):
        return "mooncake"  # its loader says what is wrong, in one line
    return "stress" if isinstance(obj, dict) and "t_sched" in obj else "mooncake"


def load_trace(path: Path, fmt: str, block_size: int) -> list[TraceRequest]:
    """The requests of a ``replay.trace`` in send order (``fmt``: ``replay.format``)."""
    if fmt == "auto":
        fmt = trace_format(path)
    return load_run_trace(path, block_size) if fmt == "stress" else load_mooncake(path)


def load_run_trace(path: Path, block_size: int) -> list[TraceRequest]:
    """A previous ``stress run``'s requests as a trace: the same send times (on the
    scenario's clock: a time-scaled simulator run's are simulated seconds), sizes and
    conversation shape.

    Sizes: the server's prompt tokens (the estimate where the server gave none) and the
    reply's tokens (for a request that got none, the run's ``max_tokens``). Shape: each
    conversation (phase, user, conversation) is a chain of hash ids; a turn keeps as many
    whole blocks of the previous turn's ids as its ``reusable_tokens`` cover, then new ids
    for the rest, so a replayed turn shares with the one before what the original could
    reuse (to a block; a smaller ``block_size`` follows it closer)."""
    from stress.analysis.runfiles import read_jsonl_counted  # light: orjson, no numpy

    run_dir = path if path.is_dir() else path.parent
    file = path / RUN_FILE if path.is_dir() else path
    name = str(file)
    if not file.is_file():
        raise TraceError(name, None, "replay.trace", "no requests.jsonl there", _RUN_FIX)
    try:
        rows, _ = read_jsonl_counted(file)
    except RunDirError as e:
        raise TraceError(name, None, "replay.trace", str(e), _RUN_FIX) from None
    scale, max_tokens = 1.0, 256
    manifest = run_dir / "manifest.json"
    if manifest.is_file():
        try:
            m = orjson.loads(manifest.read_bytes())
            scale = float(m.get("time_scale") or 1.0)
            max_tokens = int(m["scenario"]["request"]["max_tokens"])
        except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            pass
    if len(rows) > MAX_TRACE_LINES:
        raise TraceError(name, None, "(file)", f"more than {MAX_TRACE_LINES:,} requests")
    picked: list[tuple[float, int, dict[str, Any]]] = []
    for no, r in enumerate(rows, 1):
        t = r.get("t_sched")
        if not isinstance(t, (int, float)) or isinstance(t, bool) or not 0 <= t < 1e10:
            continue  # not a request record (or a damaged one): nothing to replay
        picked.append((float(t) * scale, no, r))
    if not picked:
        raise TraceError(name, None, "(file)", "the run holds no request records", _RUN_FIX)
    picked.sort(key=lambda x: (x[0], x[1]))

    def count(r: dict[str, Any], *keys: str) -> int:
        for k in keys:
            v = r.get(k)
            if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_INPUT_TOKENS:
                return v
        return 0

    chains: dict[tuple[Any, ...], list[int]] = {}
    next_id = 0
    out: list[TraceRequest] = []
    for t, no, r in picked:
        n_in = count(r, "prompt_tokens", "prompt_tokens_est") or 1
        n_out = count(r, "completion_tokens") or max_tokens
        reuse = min(count(r, "reusable_tokens"), n_in)
        key = (r.get("phase"), r.get("user"), r.get("conversation"))
        chain = chains.get(key, [])
        keep = min(reuse // block_size, len(chain))
        ids = chain[:keep]
        blocks = -(-n_in // block_size)
        while len(ids) < blocks:
            ids.append(next_id)
            next_id += 1
        chains[key] = ids
        out.append(TraceRequest(no, t, n_in, n_out, tuple(ids)))
    return out


def implied_reuse(trace: list[TraceRequest], block_size: int) -> list[int]:
    """Per request, the prompt tokens its hash ids say an earlier request sent: its leading
    blocks whose chain of ids (the block and every id before it) was sent before, up to the
    first block an earlier request sent only part of (a cut last block), capped at its
    prompt. What a prefix cache that never evicts can serve."""
    sent: dict[tuple[int, ...], int] = {}
    """Chain of ids -> most tokens of its last block any request sent."""
    out: list[int] = []
    for req in trace:
        reuse = 0
        for i in range(len(req.hash_ids)):
            need = min(block_size, req.input_length - i * block_size)
            got = min(sent.get(req.hash_ids[: i + 1], 0), need)
            reuse += got
            if need <= 0 or got < block_size:
                break
        out.append(reuse)
        for i in range(len(req.hash_ids)):
            n = min(block_size, req.input_length - i * block_size)
            if n <= 0:
                break
            key = req.hash_ids[: i + 1]
            sent[key] = max(sent.get(key, 0), n)
    return out


class PromptBuilder:
    """Prompts of a trace from a corpus: block ``h`` is the same text wherever it occurs."""

    def __init__(self, corpus: Corpus, block_size: int, salt: str) -> None:
        self.corpus = corpus
        self.block_size = block_size
        self.salt = salt
        self._units: OrderedDict[str, list[str]] = OrderedDict()

    def prompt(self, req: TraceRequest) -> str:
        """The prompt of ``req``: its ids' blocks, then unique text up to input_length."""
        parts: list[str] = []
        left = req.input_length
        for h in req.hash_ids:
            if left <= 0:
                break
            n = min(self.block_size, left)
            parts.append(self.block(f"id:{h}", n))
            left -= n
        tail = 0
        while left > 0:  # tokens past the ids: text no other request has
            n = min(self.block_size, left)
            parts.append(self.block(f"tail:{req.line}:{tail}", n))
            left -= n
            tail += 1
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
