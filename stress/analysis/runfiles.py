"""A run directory's files, read once and checked, for ``summary.json`` and the report.

The files may come from a run that was killed mid-write, from an older version, or from a
server that sent impossible numbers. Nothing here is skipped silently: a line that cannot
be read is counted per file, an impossible value (a negative token count, more cached
than prompt tokens, a field of the wrong type) is removed from its record and counted, so
the figures never include it and the report says how much was left out. What makes the
run unusable (a damaged manifest, a file that cannot be opened) is a :class:`RunDirError`:
one line, exit 1. ``state.json`` (rewritten every second by the run) says how many
requests were sent, so a killed run's requests in flight are counted, not forgotten.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard, cast, overload

import orjson

from stress.analysis.manifest import Manifest
from stress.analysis.rows import EventRow, RequestRow
from stress.core.errors import RunDirError
from stress.core.record import OUTCOMES, SCHEMA_VERSION

Record = dict[str, Any]

MAX_COUNT = 2**31
"""Above this a token or chunk count is impossible (no context is two billion tokens)."""

SECONDS = (
    "t_sched",
    "t_start",
    "t_last_byte",
    "queue_s",
    "ttft_s",
    "ttfc_s",
    "e2e_s",
    "max_gap_s",
    "retry_after_s",
)
RATES = ("decode_tok_s",)
COUNTS = (
    "prompt_tokens",
    "prompt_tokens_est",
    "cached_tokens",
    "reusable_tokens",
    "completion_tokens",
    "reasoning_tokens",
    "content_chars",
    "reasoning_chars",
    "chunks_content",
    "chunks_reasoning",
    "chunks_empty",
    "conversation_tokens",
    "paste_tokens",
    "reconnects",
)
IDS = ("user", "conversation", "round", "turn")
TEXTS = (
    "phase",
    "request_id",
    "response_id",
    "error_class",
    "error",
    "cancelled_by",
    "finish_reason",
    "diagnosis",
    "reasoning_field",
    "tokens_source",
    "cache_source",
    "prompt_source",
)
FLAGS = ("warmup", "streamed", "saw_done")

# manifest paths the report reads, and the JSON type each must have when present
_OBJ, _NUM, _STR, _LIST, _BOOL = "an object", "a number", "a string", "a list", "true/false"
MANIFEST_SHAPE: tuple[tuple[str, str], ...] = (
    ("scenario", _OBJ),
    ("scenario.name", _STR),
    ("scenario.users", _OBJ),
    ("scenario.users.count", _NUM),
    ("scenario.conversation", _OBJ),
    ("scenario.conversation.ceiling_tokens", _NUM),
    ("scenario.request", _OBJ),
    ("scenario.target", _OBJ),
    ("scenario.target.sim", _OBJ),
    ("scenario.slo", _OBJ),
    ("scenario.slo.ttft_p95", _NUM),
    ("scenario.slo.decode_tok_s_p50", _NUM),
    ("collectors", _OBJ),
    ("collectors.server", _OBJ),
    ("collectors.server.kv_pool_tokens", _NUM),
    ("collectors.server.hit_rate_run", _NUM),
    ("collectors.server.preemptions", _NUM),
    ("collectors.server.restarts", _NUM),
    ("collectors.server.hangs_suspected", _NUM),
    ("collectors.server.down_events", _NUM),
    ("collectors.gpu", _OBJ),
    ("collectors.gpu.hw_errors", _OBJ),
    ("collectors.client", _OBJ),
    ("probe", _OBJ),
    ("probe.effective_config", _OBJ),
    ("models", _LIST),
    ("versions", _OBJ),
    ("host", _OBJ),
    ("start_time", _NUM),
    ("end_time", _NUM),
    ("duration_s", _NUM),
    ("time_scale", _NUM),
)


def _is_num(v: object) -> TypeGuard[int | float]:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _type_ok(v: object, kind: str) -> bool:
    if v is None:
        return True
    return {
        _OBJ: isinstance(v, dict),
        _NUM: _is_num(v),
        _STR: isinstance(v, str),
        _LIST: isinstance(v, list),
        _BOOL: isinstance(v, bool),
    }[kind]


@dataclass(slots=True)
class Quality:
    """What could not be used: unreadable lines per file, impossible values per reason."""

    unreadable: dict[str, int] = field(default_factory=dict)
    excluded: Counter[str] = field(default_factory=Counter)
    records: int = 0
    """Requests with at least one excluded value."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "unreadable_lines": dict(self.unreadable),
            "excluded_values": dict(sorted(self.excluded.items())),
            "requests_with_excluded_values": self.records,
        }


@dataclass(slots=True)
class Accounting:
    """Requests sent against requests recorded (``state.json`` knows what was sent)."""

    sent: int
    recorded: int
    unreadable: int
    no_record: int
    """Sent, with no line in requests.jsonl (in flight at a kill, or lost)."""
    sent_known: bool
    killed: bool
    lost_to_disk: int = 0
    """Of ``no_record``: finished requests whose record the run could not write (state.json's
    ``unwritten`` at the end, after ``write_error``)."""
    write_error: str | None = None
    """Why the run could not write its files (e.g. "No space left on device")."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "sent": self.sent if self.sent_known else None,
            "recorded": self.recorded,
            "unreadable_lines": self.unreadable,
            "no_record": self.no_record,
            "killed": self.killed,
            "lost_to_disk": self.lost_to_disk,
            "write_error": self.write_error,
        }


@dataclass(slots=True)
class RunFiles:
    """A run directory's files, read and checked (telemetry on the wall clock)."""

    path: Path
    manifest: Manifest
    collectors: dict[str, Any]
    """The collectors' end-of-run results (collectors.json; in the manifest before it)."""
    requests: list[RequestRow]
    events: list[EventRow]
    server: list[Record]
    gpu: list[Record]
    state: dict[str, Any] | None
    time_scale: float
    duration_s: float
    quality: Quality

    @property
    def accounting(self) -> Accounting:
        return accounting(self.manifest, self.requests, self.state, self.quality)

    @property
    def finished(self) -> bool:
        """The run ended by itself (not killed): its manifest has an end time, or its last
        state.json says finished (a full disk can keep the manifest from being rewritten)."""
        return finished(self.manifest, self.state)


def read_jsonl_counted(path: Path) -> tuple[list[Record], int]:
    """Every JSON-object line of a file, and how many non-blank lines were not one
    (a torn last line after ``kill -9``, a damaged line). A missing file is empty."""
    out: list[Record] = []
    bad = 0
    for obj in iter_jsonl(path):
        if obj is None:
            bad += 1
        else:
            out.append(obj)
    return out, bad


def iter_jsonl(path: Path) -> Iterator[Record | None]:
    """Each non-blank line of a file parsed: the object, or None for a line that is not
    one. Read a line at a time, so a large file's bytes and its list of lines are never
    held beside the objects (a 26k-request requests.jsonl is 27 MB of them)."""
    try:
        f = path.open("rb")
    except FileNotFoundError:
        return
    except OSError as e:
        raise RunDirError(f"cannot read {path}: {e.strerror or e}") from None
    with f:
        try:
            for line in f:
                if not line.strip():
                    continue
                try:
                    obj = orjson.loads(line)
                except orjson.JSONDecodeError:
                    yield None
                    continue
                yield obj if isinstance(obj, dict) else None
        except OSError as e:
            raise RunDirError(f"cannot read {path}: {e.strerror or e}") from None


def _json_object(path: Path) -> dict[str, Any]:
    """A JSON object file, or ``RunDirError`` in one line saying what is wrong with it."""
    try:
        obj = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError:
        raise RunDirError(f"{path} is damaged (not JSON)") from None
    except OSError as e:
        raise RunDirError(f"cannot read {path}: {e.strerror or e}") from None
    if not isinstance(obj, dict):
        raise RunDirError(f"{path} is damaged (not a JSON object)")
    return obj


def _check_shape(obj: dict[str, Any], path: Path, prefix: str = "") -> None:
    """Every ``MANIFEST_SHAPE`` field under ``prefix`` of the type the readers need."""
    for key, kind in MANIFEST_SHAPE:
        if not key.startswith(prefix):
            continue
        node: Any = obj
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if not _type_ok(node, kind):
            raise RunDirError(
                f"{path} is damaged: {key} is {type(node).__name__} {_short(node)}, expected {kind}"
            )


def read_manifest_checked(run_dir: Path) -> Manifest:
    """The manifest, every field the report reads checked to be of the type it must have."""
    path = run_dir / "manifest.json"
    if not run_dir.is_dir() or not path.is_file():
        raise RunDirError(
            f"{run_dir} is not a run directory (no manifest.json) -- fix: pass a folder "
            "under out/ made by `stress run`"
        )
    obj = _json_object(path)
    _check_shape(obj, path)
    scale = obj.get("time_scale")
    if scale is not None and scale <= 0:
        raise RunDirError(f"{path} is damaged: time_scale is {scale}, expected a number > 0")
    return Manifest.of(obj, run_dir)


def read_collectors(run_dir: Path, manifest: Manifest) -> dict[str, Any]:
    """The collectors' end-of-run results: ``collectors.json`` (written as the run ends;
    absent after a kill), else the manifest's ``collectors`` (runs before the split), each
    field the report reads checked like the manifest's."""
    path = run_dir / "collectors.json"
    if not path.is_file():
        return dict(manifest.collectors)  # checked with the manifest
    obj = _json_object(path)
    _check_shape({"collectors": obj}, path, "collectors.")
    return obj


def _short(v: object) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def clean_request(r: Record, owned: bool = False) -> tuple[Record, list[str]]:
    """The record without its impossible values, and why each one went; ``owned``: the
    caller just parsed ``r`` and nobody else holds it, so it is cleaned in place."""
    out = r if owned else dict(r)
    why: list[str] = []

    def drop(key: str, reason: str) -> None:
        out.pop(key, None)
        why.append(f"{key} {reason}")

    for key in (*SECONDS, *RATES):
        v = out.get(key)
        if v is None:
            continue
        if not _is_num(v):
            drop(key, "not a number")
        elif v < 0:
            drop(key, "negative")
    for key in (*COUNTS, *IDS):
        v = out.get(key)
        if v is None:
            continue
        if not _is_num(v) or (key in IDS and v != int(v)):
            drop(key, "not a number")
        elif v < 0:
            drop(key, "negative")
        elif v >= MAX_COUNT:
            drop(key, "impossibly large")
    c, p = out.get("cached_tokens"), out.get("prompt_tokens")
    if c is not None and p is not None and c > p:
        drop("cached_tokens", "> prompt_tokens")
    for key in TEXTS:
        if out.get(key) is not None and not isinstance(out[key], str):
            drop(key, "not text")
    for key in FLAGS:
        if out.get(key) is not None and not isinstance(out[key], bool):
            drop(key, "not true/false")
    status = out.get("http_status")
    if status is not None and not (isinstance(status, int) and 100 <= status <= 599):
        drop("http_status", "not an HTTP status")
    if out.get("server_timings") is not None and not isinstance(out["server_timings"], dict):
        drop("server_timings", "not an object")
    outcome = out.get("outcome", "error")
    if outcome not in OUTCOMES:
        why.append("outcome unknown")
        out["outcome"] = "error"
        out.setdefault("error_class", None)
    return out, why


def clean_event(e: Record) -> Record | None:
    """An event with a text ``kind``; None when it has none (counted as unreadable)."""
    if not isinstance(e.get("kind"), str):
        return None
    out = dict(e)
    if not _is_num(out.get("t")):
        out.pop("t", None)
    if not isinstance(out.get("data"), dict):
        out["data"] = {}
    if not isinstance(out.get("message"), str):
        out.pop("message", None)
    if out.get("user") is not None and not _is_num(out["user"]):
        out.pop("user", None)
    return out


def read_state(run_dir: Path, quality: Quality) -> dict[str, Any] | None:
    """``state.json`` if the run wrote one and it reads; a damaged one is counted."""
    path = run_dir / "state.json"
    try:
        obj = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError):
        quality.unreadable["state.json"] = 1
        return None
    if not isinstance(obj, dict):
        quality.unreadable["state.json"] = 1
        return None
    state: dict[str, Any] = {}
    for key in ("t", "sent", "recorded", "in_flight_count", "unwritten"):
        v = obj.get(key)
        if _is_num(v) and v >= 0:
            state[key] = v
    if isinstance(obj.get("finished"), bool):
        state["finished"] = obj["finished"]
    if isinstance(obj.get("write_error"), str):
        state["write_error"] = obj["write_error"][:200]
    return state


@overload
def sim_seconds(wall_s: float, scale: float) -> float: ...
@overload
def sim_seconds(wall_s: None, scale: float) -> None: ...
def sim_seconds(wall_s: float | None, scale: float) -> float | None:
    """Seconds measured on the wall clock of a time-scaled simulator run, in simulated
    seconds (``scale`` is the manifest's ``time_scale``: simulated seconds per wall second)."""
    return None if wall_s is None else wall_s * scale


@overload
def sim_rate(per_wall_s: float, scale: float) -> float: ...
@overload
def sim_rate(per_wall_s: None, scale: float) -> None: ...
def sim_rate(per_wall_s: float | None, scale: float) -> float | None:
    """A per-second rate (tok/s) of a time-scaled simulator run, per simulated second."""
    return None if per_wall_s is None else per_wall_s / scale


def rescale_record(r: Record, scale: float) -> Record:
    """A request on the simulated clock: times multiplied, the decode rate divided."""
    r = dict(r)
    for key in SECONDS:
        if r.get(key) is not None:
            r[key] = sim_seconds(r[key], scale)
    for key in RATES:
        if r.get(key) is not None:
            r[key] = sim_rate(r[key], scale)
    return r


RATE_SUFFIXES = ("_tok_s", "_per_min")
"""Telemetry fields that are per-time rates (``gen_tok_s``, ``preemptions_per_min``)."""


def rescale_sample(s: Record, scale: float) -> Record:
    """A telemetry line (a server scrape, the server collector's live view, a GPU line and
    its cards) on the simulated clock: its times multiplied, per-time rates divided.
    Gauges (KV usage, counts, watts, degrees, clocks) are readings: they stay as read."""
    out = dict(s)
    for key, value in s.items():
        if not _is_num(value):
            continue
        if key == "t":
            out[key] = sim_seconds(value, scale)
        elif key.endswith(RATE_SUFFIXES):
            out[key] = sim_rate(value, scale)
    rates = s.get("rates")
    if isinstance(rates, dict):
        out["rates"] = {k: sim_rate(v, scale) if _is_num(v) else v for k, v in rates.items()}
    cards = s.get("cards")
    if isinstance(cards, list):
        out["cards"] = [rescale_sample(c, scale) if isinstance(c, dict) else c for c in cards]
    return out


def end_time(r: Mapping[str, Any]) -> float:
    """When a request ended, seconds since run start (its last byte without an e2e)."""
    if r.get("e2e_s") is None and r.get("t_last_byte") is not None:
        return float(r["t_last_byte"])
    return float(r.get("t_start") or 0.0) + float(r.get("e2e_s") or 0.0)


def run_duration(
    manifest: Manifest,
    state: dict[str, Any] | None,
    requests: Sequence[Mapping[str, Any]],
    scale: float,
) -> float:
    """How long the run lived: the manifest's duration; after a kill, how long state.json
    saw it alive (never less than the last request's end)."""
    d = manifest.duration_s
    if d is not None and d > 0:
        return d * scale
    last = max((end_time(r) for r in requests), default=0.0)
    lived = float(state["t"]) * scale if state and "t" in state else 0.0
    return max(lived, last)


def accounting(
    manifest: Manifest,
    requests: Sequence[Mapping[str, Any]],
    state: dict[str, Any] | None,
    quality: Quality,
) -> Accounting:
    unreadable = quality.unreadable.get("requests.jsonl", 0)
    lines = len(requests) + unreadable
    sent_known = state is not None and "sent" in state
    sent = max(int(state["sent"]), lines) if state is not None and sent_known else lines
    ended = finished(manifest, state)
    error = (state or {}).get("write_error")
    # state.json's last count of records it could not write; lines written after it
    # (a retry, once there was room) are not lost
    unwritten = int((state or {}).get("unwritten") or 0) if ended and error else 0
    return Accounting(
        sent=sent,
        recorded=len(requests),
        unreadable=unreadable,
        no_record=sent - lines,
        sent_known=sent_known,
        killed=not ended,
        lost_to_disk=min(unwritten, sent - lines),
        write_error=error,
    )


def finished(manifest: Manifest, state: Mapping[str, Any] | None) -> bool:
    """Whether the run ended by itself: see ``RunFiles.finished``."""
    return manifest.finished or bool((state or {}).get("finished"))


def _telemetry(
    run_dir: Path, name: str, quality: Quality, clean: Callable[[Record], Record | None]
) -> list[Record]:
    """A telemetry file's usable lines; the rest counted as unreadable in ``quality``."""
    raw, bad = read_jsonl_counted(run_dir / name)
    out = [c for c in (clean(r) for r in raw) if c is not None]
    bad += len(raw) - len(out)
    if bad:
        quality.unreadable[name] = bad
    return out


def _numbers(d: object) -> dict[str, Any]:
    if not isinstance(d, dict):
        return {}
    if all(_is_num(v) for v in d.values()):
        return d
    return {k: v for k, v in d.items() if _is_num(v)}


def _clean_server(s: Record) -> Record | None:
    """A server sample with a time; its counters and gauges numbers only (in place)."""
    if not _is_num(s.get("t")):
        return None
    for key in ("deltas", "rates", "values"):
        s[key] = _numbers(s.get(key))
    if "kv_usage" in s and not _is_num(s["kv_usage"]):
        del s["kv_usage"]
    return s


def _clean_gpu(rec: Record) -> Record | None:
    """A GPU line: its cards are objects, times numbers, throttle reasons a list (in
    place; the lines were just parsed)."""
    cards = rec.get("cards")
    if not isinstance(cards, list) or not _is_num(rec.get("t", 0.0)):
        return None
    if not all(isinstance(c, dict) for c in cards):
        rec["cards"] = cards = [c for c in cards if isinstance(c, dict)]
    for c in cards:
        for key in ("t", "power_limit_w"):
            if c.get(key) is not None and not _is_num(c[key]):
                del c[key]
        if "throttle" in c and not isinstance(c["throttle"], list):
            del c["throttle"]
        if "pcie" in c and not isinstance(c["pcie"], dict):
            del c["pcie"]
    return rec


SHARED_TEXT_MAX = 32
"""Text values up to this long are held once per run (``_compact``)."""


def _compact(r: Record, texts: dict[str, str]) -> Record:
    """The record as the analysis holds it, a third of its parsed size: each short text
    value (outcome, phase, sources, finish reason...) replaced by the run's one copy of it
    (the parser makes a new string per line), and the fields whose value is null left out
    (about 10 of 48 on an ordinary request; past 42 fields a dict doubles its table). A
    left-out field reads as it did (``r.get(key)`` is None); ids stay as they are."""
    return {
        k: texts.setdefault(v, v) if type(v) is str and len(v) <= SHARED_TEXT_MAX else v
        for k, v in r.items()
        if v is not None
    }


def read_run_files(run_dir: Path) -> RunFiles:
    """Read and check a run directory; times on the simulated clock for scaled runs."""
    manifest = read_manifest_checked(run_dir)
    quality = Quality()
    requests: list[Record] = []
    bad = 0
    texts: dict[str, str] = {}
    for n, r in enumerate(iter_jsonl(run_dir / "requests.jsonl"), 1):
        if r is None:
            bad += 1
            continue
        version = r.get("schema_version", 0)
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise RunDirError(
                f"{run_dir / 'requests.jsonl'}: record {n} has schema_version {version!r}; "
                f"this stress reads up to {SCHEMA_VERSION} -- fix: upgrade stress "
                "(`git pull && pip install .` in the checkout) to read this run"
            )
        clean, why = clean_request(r, owned=True)
        if why:
            quality.records += 1
            quality.excluded.update(why)
        requests.append(_compact(clean, texts))
    if bad:
        quality.unreadable["requests.jsonl"] = bad
    raw_events, bad = read_jsonl_counted(run_dir / "events.jsonl")
    events = [e for e in (clean_event(e) for e in raw_events) if e is not None]
    bad += len(raw_events) - len(events)
    if bad:
        quality.unreadable["events.jsonl"] = bad
    server = _telemetry(run_dir, "server.jsonl", quality, _clean_server)
    gpu = _telemetry(run_dir, "gpu.jsonl", quality, _clean_gpu)
    state = read_state(run_dir, quality)
    scale = manifest.time_scale
    if scale != 1.0:  # a time-scaled simulator run: report simulated seconds
        requests = [rescale_record(r, scale) for r in requests]
        events = [{**e, "t": e["t"] * scale} if "t" in e else e for e in events]
    return RunFiles(
        path=run_dir,
        manifest=manifest,
        collectors=read_collectors(run_dir, manifest),
        # the checked boundary: clean_request / clean_event removed every impossible value
        requests=cast("list[RequestRow]", requests),
        events=cast("list[EventRow]", events),
        server=server,
        gpu=gpu,
        state=state,
        time_scale=scale,
        duration_s=run_duration(manifest, state, requests, scale),
        quality=quality,
    )
