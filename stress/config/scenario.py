"""Scenario files: the typed, validated description of a run.

A scenario is YAML checked against pydantic models that forbid unknown keys. Every problem
becomes one line naming the file, the line, the field and the fix (``stress validate``);
nothing here raises a traceback at a user. Paths inside a scenario are relative to the
scenario file. API keys never live in a scenario: only the *name* of an environment variable
(``api_key_env``) or a key file (``api_key_file``) may appear.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import math
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

import orjson
import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    field_validator,
    model_validator,
)

from stress.config.yamlpos import Located, load_located
from stress.core import rates
from stress.core.durations import parse_duration
from stress.core.errors import CorpusError, Problem, ScenarioError
from stress.core.limits import DEFAULT_ERROR_RATE

# --- limits: every number a run uses is bounded, so a value that validates also runs ----

MAX_SCENARIO_BYTES = 1 << 20
"""Scenario files above 1 MiB are refused before parsing (a 50 MB file took 98 s)."""
MAX_YAML_NODES = 100_000
"""YAML nodes after alias expansion: a 1.5 KB alias bomb expands to billions."""
MAX_YAML_DEPTH = 64
MAX_USERS = 10_000
"""Simulated users per process: one event loop cannot drive more (100,000 froze the
process and ignored Ctrl-C); run several processes for more."""
MAX_WORKERS = 256
"""Worker processes of one run (``workers``): far above the cores of one machine."""
USERS_PER_WORKER = 250
"""``workers: auto``: one worker process per this many users (docs/scaling.md)."""
MAX_TOKENS = 100_000_000
"""Tokens in one request (paste, ceiling, max_tokens): far above any model's context."""
MAX_TOTAL_TOKENS = 2**53
"""Token sums stay exact in a float (and in JSON readers that use doubles)."""
MAX_ROUNDS = 1_000_000
MAX_COUNT = 2**31 - 1
MAX_DURATION_S = 30 * 86_400.0
"""Thirty days: longer than any soak; beyond it timers overflow in some event loops."""
MIN_TELEMETRY_INTERVAL_S = 0.1


def _no_bool(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError("expected a number, not true/false -- fix: write a number")
    return value


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise ValueError("must be a finite number -- fix: write a number such as 30s or 5m")
    return value


Int = Annotated[int, Strict()]
"""A whole number, strictly: ``true``, ``3.0`` and ``"3"`` are refused."""
Float = Annotated[float, BeforeValidator(_no_bool)]
Duration = Annotated[float, BeforeValidator(parse_duration), Field(ge=0, le=MAX_DURATION_S)]
"""Seconds, from ``30s`` / ``5m`` / a number; finite, at most thirty days."""
PositiveDuration = Annotated[float, BeforeValidator(parse_duration), Field(gt=0, le=MAX_DURATION_S)]
TokenRange = tuple[Int, Int]


def _one_or_range(value: object) -> object:
    """``30000`` means ``[30000, 30000]``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (value, value)
    return value


StartTokens = Annotated[TokenRange, BeforeValidator(_one_or_range)]
"""A number of tokens or a ``[min, max]`` range, drawn once per user; 0 means none."""


def _start_range(v: tuple[int, int] | None, field: str) -> tuple[int, int] | None:
    if v is not None and (v[0] < 0 or v[1] < v[0] or v[1] > MAX_TOKENS):
        raise ValueError(
            f"{field} is a number or [min, max] with 0 <= min <= max <= {MAX_TOKENS:,} -- "
            "fix: e.g. 30000 or [20000, 40000]"
        )
    return v


_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")
_AUTH_HEADERS = {"authorization", "x-api-key", "api-key", "proxy-authorization"}


class _FieldError(ValueError):
    """A model-level check's error, with the path (below the model) it is about, so the
    one-line message names the right field and line instead of the file's first line."""

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ThinkTime(_Model):
    """Pause between a reply and the user's next turn."""

    distribution: Literal["uniform", "exponential", "constant"] = "uniform"
    """How the pause is drawn: ``uniform`` between min and max, ``exponential``
    around ``mean`` (clamped to [min, max] when max is set), ``constant`` (``mean``, else min)."""
    min: Duration = 0.0
    """Shortest pause."""
    max: Duration = 0.0
    """Longest pause (``uniform``: the upper end; ``exponential``: a cap when above 0)."""
    mean: Duration | None = None
    """Mean pause: required by ``exponential``, the pause itself for ``constant``."""

    @model_validator(mode="after")
    def _check(self) -> ThinkTime:
        if self.max < self.min:
            raise _FieldError(
                ("max",), "think_time.max must be at least think_time.min -- fix: raise max"
            )
        if self.distribution == "exponential" and self.mean is None:
            raise _FieldError(
                ("distribution",),
                "an exponential think time needs `mean` -- fix: add mean: 20s (or another "
                "distribution)",
            )
        return self


class Users(_Model):
    """Who sends requests: simulated users, each with its own conversation."""

    count: Int = Field(default=1, ge=1, le=MAX_USERS)
    """Simulated users, each with its own conversation, running at once."""
    ramp_up: Duration = 0.0
    """The users' start times are spread evenly over this window."""
    think_time: ThinkTime = ThinkTime()
    """Pause between a reply and the user's next turn."""


MAX_ARRIVAL_RATE = 1_000_000.0
"""Sessions per minute (wall or simulated): far above what one process can serve."""


class RateStep(_Model):
    """One step of ``arrivals.schedule``."""

    at: Duration
    """When this rate starts, from the start of the run (e.g. ``10m``)."""
    rate: Float = Field(gt=0, le=MAX_ARRIVAL_RATE)
    """Sessions per minute from then on."""


class Arrivals(_Model):
    """Open-loop sessions: they arrive at a rate, each talks for a few rounds, then leaves."""

    rate: Float = Field(gt=0, le=MAX_ARRIVAL_RATE)
    """Mean arrivals, in sessions per minute (the offered load)."""
    process: Literal["poisson", "gamma"] = "poisson"
    """``poisson``: exponential gaps between arrivals (independent arrivals);
    ``gamma``: gamma-distributed gaps with the same mean and a coefficient of variation of
    ``burstiness`` (above 1: bursts and lulls, below 1: more regular than Poisson)."""
    burstiness: Float = Field(default=1.0, gt=0, le=10)
    """``gamma`` only: the coefficient of variation of the gaps (shape 1/burstiness^2);
    1 is Poisson."""
    rounds: StartTokens = (3, 3)
    """Rounds of each session: a number or ``[min, max]``, drawn uniformly per session."""
    think_time: ThinkTime = ThinkTime()
    """Pause between a reply and the session's next turn."""
    max_concurrent: Int | None = Field(default=None, ge=1, le=MAX_USERS)
    """Most sessions active at once; later arrivals wait in a first-in, first-out backlog
    (the wait is recorded). Unset: no cap (up to the process limit of users)."""
    warmup: Duration = 0.0
    """Requests sent in the first seconds of the run are warm-up (recorded, kept out of
    the headline figures), while the server fills from empty to its steady load."""
    schedule: list[RateStep] = Field(default_factory=list, max_length=1000)
    """Rates that change over the run: from each step's ``at`` on, sessions arrive at its
    ``rate`` (``rate`` above holds until the first step), e.g. a morning ramp."""

    @field_validator("schedule")
    @classmethod
    def _ordered(cls, v: list[RateStep]) -> list[RateStep]:
        if any(b.at <= a.at for a, b in itertools.pairwise(v)):
            raise ValueError(
                "schedule steps must be in order of `at`, each later than the one before -- "
                "fix: sort them by time"
            )
        return v

    def rate_at(self, t: float) -> tuple[float, float | None]:
        """The rate (per minute) at ``t`` seconds into the run, and when it next changes
        (None: never)."""
        return rates.rate_at(self.rate, self._steps(), t)

    def mean_rate(self, window_s: float) -> float:
        """The scheduled rate averaged over the first ``window_s`` seconds (per minute)."""
        return rates.mean_rate(self.rate, self._steps(), window_s)

    def _steps(self) -> list[tuple[float, float]]:
        return [(step.at, step.rate) for step in self.schedule]

    @field_validator("rounds")
    @classmethod
    def _rounds(cls, v: tuple[int, int]) -> tuple[int, int]:
        if v[0] < 1 or v[1] < v[0] or v[1] > MAX_ROUNDS:
            raise ValueError(
                f"rounds is a number or [min, max] with 1 <= min <= max <= {MAX_ROUNDS:,} -- "
                "fix: e.g. 4 or [2, 8]"
            )
        return v

    @model_validator(mode="after")
    def _gamma_only(self) -> Arrivals:
        if self.burstiness != 1.0 and self.process != "gamma":
            raise _FieldError(
                ("burstiness",),
                "burstiness applies to gamma arrivals only -- fix: add process: gamma, or "
                "remove burstiness",
            )
        return self

    def peak_sessions(self) -> int:
        """The cap, else a bound on the sessions active at once for the connection pool and
        the pre-flight check: arrivals in a mean session's length (Little's law) with
        room for bursts, assuming 30 s per reply."""
        if self.max_concurrent is not None:
            return self.max_concurrent
        t = self.think_time
        think = t.mean if t.mean is not None else (t.min + t.max) / 2
        rounds = (self.rounds[0] + self.rounds[1]) / 2
        length_s = rounds * 30.0 + max(0.0, rounds - 1) * think
        top = max([self.rate, *(step.rate for step in self.schedule)])
        return max(1, min(MAX_USERS, math.ceil(2 * top / 60 * length_s) + 8))


REPLAY_PEAK = 256
"""Requests of a replay that may be in flight at once (the connection pool's size)."""


class Replay(_Model):
    """Replay a trace: its requests at its times, with its sizes and prefix reuse."""

    trace: str = Field(min_length=1)
    """The trace, relative to the scenario file: a Mooncake JSON Lines file (one request a
    line with ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``), or a
    previous run's directory or ``requests.jsonl``; ``bundled:NAME`` is a trace shipped
    with stress (``bundled:mooncake_sample.jsonl``)."""
    format: Literal["auto", "mooncake", "stress"] = "auto"
    """The trace's format: ``mooncake`` (kvcache-ai/Mooncake's published traces, as AIPerf
    replays them), ``stress`` (a previous run: its directory or its ``requests.jsonl``, with
    the same send times, sizes and conversation shape), or ``auto``: ``stress`` for a run
    directory or a file of request records, else ``mooncake``."""
    corpus: str = Field(default="bundled:en", min_length=1)
    """Documents the prompts are built from (like ``conversation.turn.paste.corpus``)."""
    block_size: Int = Field(default=512, ge=1, le=65_536)
    """Prompt tokens per hash id (512 in the published traces); requests that share their
    first k hash ids share their first k x block_size prompt tokens."""
    speed: Float = Field(default=1.0, gt=0, le=10_000)
    """Time scaling of the trace: 2 sends it twice as fast (the gaps between requests
    halved), 0.5 at half speed."""
    per_run: bool = True
    """Build the blocks' text anew for every run (a server's cache from an earlier run
    cannot serve this one); false: the same text on every run with the same seed."""
    warmup: Duration = 0.0
    """Requests sent in the first seconds of the replay are warm-up (recorded, kept out of
    the headline figures)."""


class Target(_Model):
    """The server under test (or the built-in simulator)."""

    url: str = "sim"
    """Server root (``http://host:port``), or ``sim`` for the built-in simulator."""
    model: str = "auto"
    """Model id to request; ``auto``: the first id that ``/v1/models`` lists."""
    api_key_env: str | None = None
    """The NAME of an environment variable that holds the API key (never the key)."""
    api_key_required: bool = False
    """Fail before the run when the variable named by api_key_env is unset."""
    api_key_file: str | None = None
    """A file that holds the API key (relative to the scenario file)."""
    server: Literal["auto", "vllm", "sglang", "llamacpp", "openai"] = "auto"
    """The server kind, for its metrics and reasoning fields; ``auto``: probed."""
    tokenizer: Literal["auto", "tiktoken", "server"] = "auto"
    """How paste budgets are counted: ``auto`` and ``server`` scale them to the
    server's own token count (its tokenize endpoint, when it has one), ``tiktoken`` counts
    with the local cl100k tokenizer only."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Extra request headers. A secret header is refused in the file (use api_key_env);
    ``Authorization: Basic`` is only ever derived from credentials in ``url``."""
    sim: dict[str, Any] = Field(default_factory=dict)
    """The built-in simulator's settings when ``url`` is ``sim`` (docs/simulator.md)."""

    @model_validator(mode="before")
    @classmethod
    def _credentials(cls, data: Any) -> Any:
        """``http://user:pw@host`` becomes ``http://host`` plus a Basic Authorization header,
        and the credentials are registered with the redactor, so the URL can be written to
        the manifest and printed without them."""
        if not isinstance(data, dict) or not isinstance(data.get("url"), str):
            return data
        from stress.core.secrets import split_url_credentials

        try:
            url, auth = split_url_credentials(data["url"].strip())
        except ValueError as e:
            raise _FieldError(("url",), str(e)) from None
        if auth is None:
            return data
        given = data.get("headers")
        headers: dict[Any, Any] = given if isinstance(given, dict) else {}
        if not any(str(k).lower() == "authorization" for k in headers):
            headers = {**headers, "Authorization": auth}
        return {**data, "url": url, "headers": headers}

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v):
            raise ValueError(
                "api_key_env is the NAME of an environment variable (e.g. STRESS_API_KEY), "
                "not the key itself"
            )
        return v

    @field_validator("headers")
    @classmethod
    def _header_syntax(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            if not _HEADER_NAME.match(name):
                raise _FieldError(
                    (name,),
                    f"{name!r} is not a valid HTTP header name -- fix: use letters, digits "
                    "and '-' only",
                )
            if any(c in value for c in "\r\n\0"):
                raise _FieldError(
                    (name,),
                    "a header value cannot contain a line break or NUL -- fix: remove it",
                )
        return v

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        v = v.strip()
        if v == "sim":
            return v
        m = re.match(r"^https?://([^/\s?#]+)", v)
        if not m:
            raise ValueError(
                "target.url must be http(s)://host:port or `sim` -- fix: e.g. http://127.0.0.1:8000"
            )
        if "?" in v or "#" in v:
            raise ValueError(
                "target.url is the server root, without ?query or #fragment -- fix: remove "
                "them (put a key in the variable that target.api_key_env names)"
            )
        port = m.group(1).rpartition(":")[2] if not m.group(1).endswith("]") else ""
        if port and port.isdigit() and not 1 <= int(port) <= 65535:
            raise ValueError(f"port {port} is out of range -- fix: use a port from 1 to 65535")
        return v.rstrip("/")


class Paste(_Model):
    """An excerpt of real documents pasted into a turn."""

    corpus: str = Field(min_length=1)
    """Documents to paste from: a folder of ``.txt`` / ``.md`` files or one file,
    relative to the scenario file, or ``bundled:NAME``, a corpus shipped with stress
    (``bundled:en``, ``es``, ``pl``, ``zh``, ``bundled:all``; ``stress scenarios`` lists them)."""
    tokens: TokenRange
    """Size of each paste, drawn per turn between min and max (in the server's tokens
    when it can count them, see ``target.tokenizer``)."""

    @field_validator("tokens")
    @classmethod
    def _range(cls, v: tuple[int, int]) -> tuple[int, int]:
        lo, hi = v
        if lo < 1 or hi < lo or hi > MAX_TOKENS:
            raise ValueError(
                f"tokens is [min, max] with 1 <= min <= max <= {MAX_TOKENS:,} -- fix: e.g. "
                "[1000, 4000]"
            )
        return v


class Turn(_Model):
    """What one turn sends: an optional paste, then a question."""

    paste: Paste | None = None
    """An excerpt of a corpus pasted into the turn before the question (none: just ask)."""
    paste_on: Literal["every", "first"] = "every"
    """Paste on every turn, or only on a conversation's first turn (then just ask)."""
    ask: list[str] = Field(min_length=1)
    """Questions; each turn asks one, drawn at random."""


class ConversationSpec(_Model):
    """Each user's conversation: how it opens, grows and restarts."""

    system_prompt: str = "You are a helpful assistant."
    """The system message that opens every conversation."""
    cache: Literal["per_user", "cold", "shared"] = "per_user"
    """``per_user``: a marker unique to each user's conversation opens the prompt, so
    users never share cache while a user's own history can hit; ``cold``: a marker unique to
    every request, nothing can hit; ``shared``: one system prompt for all users, cached once."""
    ceiling_tokens: Int = Field(default=32_000, ge=256, le=MAX_TOKENS)
    """When the next turn would take a conversation past this many tokens, the user
    starts a new conversation."""
    start_tokens: StartTokens | None = None
    """Each user's *first* conversation opens with about this many tokens of pre-built
    history (server tokens, like paste budgets): earlier turns of corpus pastes, asks and
    corpus replies, unique to the user like the rest of its prompts. It is sent with the
    first real turn as one request, recorded as warm-up with ``prefilled_tokens``, so "16
    users at 30k tokens" is measured from the second turn on instead of after an hour of
    growth. Conversations started after the ceiling open empty, as without it."""
    keep_reasoning: bool = False
    """Feed the model's reasoning back into the history with its answer."""
    turn: Turn
    """What each turn of a conversation sends."""

    @field_validator("start_tokens")
    @classmethod
    def _start(cls, v: tuple[int, int] | None) -> tuple[int, int] | None:
        return _start_range(v, "start_tokens")

    @model_validator(mode="after")
    def _paste_fits(self) -> ConversationSpec:
        if self.turn.paste and self.turn.paste.tokens[1] >= self.ceiling_tokens:
            raise _FieldError(
                ("turn", "paste", "tokens"),
                "the paste's max must be below conversation.ceiling_tokens, or no turn ever "
                "fits -- fix: lower the max or raise ceiling_tokens",
            )
        if self.start_tokens is not None:
            problem = _start_problem(self.start_tokens, self)
            if problem:
                raise _FieldError(("start_tokens",), problem)
        return self


def _start_problem(start: tuple[int, int], conv: ConversationSpec) -> str | None:
    """Why ``start`` cannot open ``conv``'s first conversation (None when it can)."""
    if start[1] == 0:
        return None
    if conv.turn.paste is None:
        return (
            "start_tokens builds its history from the paste corpus, and the turn has no "
            "paste -- fix: add conversation.turn.paste or remove start_tokens"
        )
    if start[1] >= conv.ceiling_tokens:
        return (
            "start_tokens must be below conversation.ceiling_tokens, or the first "
            "conversation is over its ceiling before it begins -- fix: lower start_tokens "
            "or raise ceiling_tokens"
        )
    return None


class RequestSpec(_Model):
    """Sampling settings sent with every chat request."""

    max_tokens: Int = Field(default=1024, ge=1, le=MAX_TOKENS)
    """Most tokens a reply may generate (reasoning included: thinking models need
    1,500-2,000 or replies come back empty)."""
    temperature: Float = Field(default=0.7, ge=0.0, le=2.0)
    """Sampling temperature sent with every request."""
    top_p: Float | None = Field(default=None, gt=0.0, le=1.0)
    """Nucleus sampling; unset: not sent (the server's default)."""
    reasoning: Literal["auto", "on", "off"] = "auto"
    """``on`` / ``off`` send ``chat_template_kwargs.enable_thinking``; ``auto`` sends
    nothing (the model's default)."""
    extra_body: dict[str, Any] = Field(default_factory=dict)
    """Extra fields merged into every request body (e.g. ``top_k``)."""

    @field_validator("extra_body")
    @classmethod
    def _json_safe(cls, v: dict[str, Any]) -> dict[str, Any]:
        """Every request body is written with orjson: check once here that it can be."""
        _check_json_value(v, ())
        return v


def _check_json_value(v: Any, loc: tuple[str | int, ...]) -> None:
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return
    if isinstance(v, int):
        if not -(2**63) <= v < 2**64:
            raise _FieldError(
                loc, "this integer does not fit in 64 bits -- fix: use a smaller number"
            )
    elif isinstance(v, float):
        if not math.isfinite(v):
            raise _FieldError(loc, "JSON has no NaN or infinity -- fix: write a finite number")
    elif isinstance(v, dict):
        for key, item in v.items():
            _check_json_value(item, (*loc, str(key)))
    elif isinstance(v, list):
        for i, item in enumerate(v):
            _check_json_value(item, (*loc, i))
    else:
        try:
            orjson.dumps(v)
        except TypeError:
            raise _FieldError(
                loc, f"a {type(v).__name__} cannot be sent as JSON -- fix: write a string"
            ) from None


class Timeouts(_Model):
    """One watchdog per request (docs/metrics.md, Timeouts), and the end-of-run drain."""

    connect: PositiveDuration = 10.0
    """Opening the TCP connection."""
    first_token: PositiveDuration = 300.0
    """From sending to the first generated token (a long prefill is legitimate)."""
    stall: PositiveDuration = 120.0
    """No byte at all for this long after the first token: the request is a ``stall``."""
    total: PositiveDuration = 1800.0
    """The whole request."""
    drain: Duration = 60.0
    """Grace period for in-flight requests once the run stops starting new turns (0: none)."""


class Warmup(_Model):
    """Rounds recorded but kept out of the headline figures."""

    rounds: Int = Field(default=0, ge=0, le=MAX_ROUNDS)
    """Each user's first rounds, recorded but kept out of the headline figures."""


class Limits(_Model):
    """Safety stops: the run ends early when one is reached."""

    max_total_tokens: Int | None = Field(default=None, ge=1, le=MAX_TOTAL_TOKENS)
    """Stop the run once its requests have used this many tokens in all."""
    max_error_rate: Float | None = Field(default=None, gt=0.0, le=1.0)
    """Stop the run when more than this share of requests failed (judged after
    ``min_requests``)."""
    min_requests: Int = Field(default=20, ge=1, le=MAX_COUNT)
    """Requests needed before max_error_rate is judged."""


class Telemetry(_Model):
    """Samples taken besides the requests: the server's metrics, GPUs, hangs."""

    interval: Duration = Field(default=1.0, ge=MIN_TELEMETRY_INTERVAL_S)
    """Seconds between collector samples; at least 0.1 s (0 killed both collectors)."""
    hang_after: PositiveDuration = 60.0
    """Not a byte on any stream for this long, counted while requests are in flight (the
    thinking between requests does not count; a request that times out does not restart
    the count): a suspected hang."""
    server_metrics: bool = True
    """Scrape the server's Prometheus ``/metrics`` during the run."""
    gpus: Literal["auto", "off"] | list[str] = "auto"
    """GPUs to sample: ``auto`` (what the machine shows), ``off``, or a list of UUIDs,
    PCI bus ids or ``CUDA_VISIBLE_DEVICES=...``."""


TierName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=32)]
MAX_SLO_TIERS = 8


class SloTier(_Model):
    """A further service level judged from the same requests as ``slo`` (interactive
    users and a batch job served by one box): shown beside the SLO, never grading the
    verdict; a capacity search answers each tier from the same passes."""

    ttft_p95: PositiveDuration | None = None
    """TTFT p95 limit (s) of this tier."""
    decode_tok_s_p50: Float | None = Field(default=None, gt=0, le=1e9)
    """Decode speed p50 floor (tok/s) of this tier."""

    @model_validator(mode="after")
    def _some_limit(self) -> SloTier:
        if self.ttft_p95 is None and self.decode_tok_s_p50 is None:
            raise ValueError(
                "an SLO tier without a limit -- fix: give it ttft_p95, decode_tok_s_p50 or both"
            )
        return self


class Slo(_Model):
    """The service level the verdict grades (PASS, WARN, FAIL)."""

    ttft_p95: PositiveDuration | None = None
    """TTFT p95 limit (s). Missed: WARN up to 2x, FAIL beyond (stress.analysis.judge)."""
    decode_tok_s_p50: Float | None = Field(default=None, gt=0, le=1e9)
    """Decode speed p50 floor (tok/s), graded like ttft_p95."""
    itl_p95: PositiveDuration | None = None
    """Inter-token latency limit (s) for goodput on TTFT and ITL together: a turn is good
    when it is answered, its TTFT is within ttft_p95 (when set) and the 95th percentile
    of its own gaps between chunks is within this. The run's ITL p95 is shown against it;
    it is not graded in the verdict."""
    error_rate: Float = Field(default=DEFAULT_ERROR_RATE, ge=0, le=1)
    """Share of requests that may fail before the run is a FAIL, and on its own the share
    that may be cancelled at the drain deadline after the run's end; fewer are a WARN (a
    request the user cancels never counts, a run with none answered is a FAIL)."""
    tiers: dict[TierName, SloTier] = Field(default_factory=dict, max_length=MAX_SLO_TIERS)
    """Named further service levels, e.g. ``{interactive: {ttft_p95: 2s}, batch:
    {ttft_p95: 30s, decode_tok_s_p50: 5}}``: each judged on the run's own figures and
    listed beside the SLO (they do not grade the verdict); ``stress capacity`` gives one
    bracket per tier from the same passes."""


class Connection(_Model):
    """The HTTP keep-alive pool."""

    reuse: bool = True
    """Keep-alive pooling. Either way a request that exchanged nothing is retried once."""
    limit: Int | None = Field(default=None, ge=1, le=65_535)
    """Most connections in the keep-alive pool (default: the most users of any step,
    phases included, + 4; never fewer than those users). A request that finds the pool full
    waits its turn in order, and the wait is its ``queue_s``, not time to first token."""


class Phase(_Model):
    """One step of a sweep: the scenario with a few things changed, run after the previous
    step with fresh users and conversations. ``repeat`` runs it several times so the report
    can show mean and spread across passes (field note 6); each pass's warm-up rounds are
    recorded but kept out of the figures (field note 7: the first pass at a new batch size
    compiles kernels)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=48)
    """The step's label in the report and ``summary.json`` (``name#2`` for the second pass)."""
    users: Int | None = Field(default=None, ge=1, le=MAX_USERS)
    """Users in this step."""
    duration: PositiveDuration | None = None
    """Length of this step."""
    rounds: Int | None = Field(default=None, ge=1, le=MAX_ROUNDS)
    """Rounds per user in this step."""
    warmup_rounds: Int | None = Field(default=None, ge=0, le=MAX_ROUNDS)
    """Each user's first rounds in this step, recorded but kept out of the figures."""
    paste_tokens: TokenRange | None = None
    """Paste size [min, max] in this step (the turn must have a paste)."""
    start_tokens: StartTokens | None = None
    """Pre-built history of each user's first conversation in this step (0: none), for a
    sweep over users x length."""
    ask: list[str] | None = Field(default=None, min_length=1)
    """Questions in this step."""
    think_time: ThinkTime | None = None
    """Pause between turns in this step."""
    repeat: Int = Field(default=1, ge=1, le=100)
    """Passes of this step, each with fresh users (mean and spread in the report)."""

    @field_validator("start_tokens")
    @classmethod
    def _start(cls, v: tuple[int, int] | None) -> tuple[int, int] | None:
        return _start_range(v, "start_tokens")

    @field_validator("paste_tokens")
    @classmethod
    def _range(cls, v: tuple[int, int] | None) -> tuple[int, int] | None:
        if v is not None and (v[0] < 1 or v[1] < v[0] or v[1] > MAX_TOKENS):
            raise ValueError(
                f"paste_tokens is [min, max] with 1 <= min <= max <= {MAX_TOKENS:,} -- fix: "
                "e.g. [1000, 4000]"
            )
        return v


CONFIDENCES = (0.8, 0.9, 0.95, 0.99)
"""The confidences a search step may be decided at (``stress.analysis.stats.T_TABLE``)."""


class SearchSpec(_Model):
    """``stress capacity``: how the search for the users where the SLO breaks proceeds
    (docs/capacity.md). Command-line flags of the same names override these."""

    axis: Literal["users", "length", "grid"] = "users"
    """What the search varies: the number of users (the scenario's conversation length),
    the conversation length (``conversation.start_tokens``) at the scenario's users, or
    both (``grid``: a users search at each of ``lengths``, a capacity map)."""
    start: Int = Field(default=1, ge=1, le=MAX_USERS)
    """Users of the first step."""
    factor: Float = Field(default=2.0, gt=1, le=16)
    """Growth of the user count per step until the SLO breaks."""
    max_users: Int = Field(default=64, ge=1, le=MAX_USERS)
    """The most users the search tries."""
    width: Int = Field(default=1, ge=1, le=MAX_USERS)
    """Stop bisecting when the bracket [met, missed] is this narrow (in users)."""
    repeat: Int = Field(default=2, ge=1, le=20)
    """Passes per step at least; with 2 or more, a step whose passes leave the SLO inside
    their spread runs more, up to ``max_repeat``."""
    max_repeat: Int | None = Field(default=None, ge=1, le=50)
    """The most passes a step may run to be decided (default 3 x repeat, or 1 for
    repeat: 1); past it the step is UNDECIDED."""
    confidence: Float = 0.9
    """A step is MET (MISSED) when its passes' SLO factors put the limit above (below) their
    interval at this confidence (Student t over log factors)."""
    length_start: Int = Field(default=2000, ge=1, le=MAX_TOKENS)
    """axis: length: tokens of history of the first step."""
    length_max: Int | None = Field(default=None, ge=1, le=MAX_TOKENS)
    """axis: length: the longest history tried (default: 90 % of ceiling_tokens)."""
    length_width: Int = Field(default=2000, ge=1, le=MAX_TOKENS)
    """axis: length: stop bisecting when the bracket is this narrow (tokens)."""
    lengths: list[Annotated[Int, Field(ge=1, le=MAX_TOKENS)]] | None = Field(
        default=None, min_length=1, max_length=12
    )
    """axis: grid: the conversation lengths (tokens of history) of the map's rows (default:
    length_start doubling up to length_max)."""
    min_requests: Int = Field(default=40, ge=20, le=100_000)
    """A scenario bounded by rounds gets enough rounds per user for this many judged
    requests in each pass (the SLO needs 20)."""

    @field_validator("confidence")
    @classmethod
    def _known_confidence(cls, v: float) -> float:
        if v not in CONFIDENCES:
            raise ValueError(
                f"confidence is {v:g} -- fix: one of {', '.join(f'{c:g}' for c in CONFIDENCES)}"
            )
        return v

    @model_validator(mode="after")
    def _start_within_max(self) -> SearchSpec:
        if self.start > self.max_users:
            raise ValueError(
                f"start ({self.start}) is above max_users ({self.max_users}) -- fix: start "
                "lower or allow more users"
            )
        if self.max_repeat is not None and self.max_repeat < self.repeat:
            raise ValueError(
                f"max_repeat ({self.max_repeat}) is below repeat ({self.repeat}) -- fix: "
                "max_repeat at least repeat"
            )
        return self

    @property
    def passes_max(self) -> int:
        """The most passes a step runs: ``max_repeat``, else 3 x ``repeat`` (1 for 1)."""
        if self.max_repeat is not None:
            return self.max_repeat
        return 1 if self.repeat == 1 else min(3 * self.repeat, 50)


class Scenario(_Model):
    """A scenario file: who sends what to which server, for how long, judged how."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)
    """Names the run: its directory is ``out/<time>-<name>``."""
    description: str = ""
    """One line about the scenario (``stress scenarios`` shows it)."""
    target: Target = Target()
    """The server under test."""
    users: Users = Users()
    """How many users, how they start and how long they pause."""
    arrivals: Arrivals | None = None
    """Open-loop sessions arriving at a rate instead of ``users`` (a closed loop of N
    users); the two are exclusive."""
    replay: Replay | None = None
    """Replay a trace's requests at its times instead of ``users`` or ``arrivals``."""
    duration: PositiveDuration | None = None
    """How long the run starts new turns; with ``rounds`` too, whichever ends first."""
    rounds: Int | None = Field(default=None, ge=1, le=MAX_ROUNDS)
    """Turns per user; with ``duration`` too, whichever ends first."""
    conversation: ConversationSpec = Field(
        default_factory=lambda: ConversationSpec(turn=Turn(ask=["Continue."]))
    )
    """What the users say: system prompt, cache mode, ceiling, the turn (required, except
    with ``replay``, whose prompts come from its trace)."""
    request: RequestSpec = RequestSpec()
    """Sampling settings of every request."""
    timeouts: Timeouts = Timeouts()
    """Per-request timeouts and the drain period at the end."""
    warmup: Warmup = Warmup()
    """Rounds kept out of the headline figures."""
    limits: Limits = Limits()
    """Safety stops for the run."""
    telemetry: Telemetry = Telemetry()
    """What is sampled besides the requests: server metrics, GPUs."""
    slo: Slo = Slo()
    """The service level the verdict judges (and ``stress capacity`` searches for)."""
    search: SearchSpec = SearchSpec()
    """``stress capacity``'s search settings (docs/capacity.md)."""
    connection: Connection = Connection()
    """The HTTP connection pool."""
    phases: list[Phase] = Field(default_factory=list)
    """Optional sweep: run these steps one after another instead of one steady run."""
    seed: Int = Field(default=0, ge=0, le=2**63 - 1)
    """Seed of every random draw (pastes, questions, think times), for repeatable runs."""
    workers: Annotated[Int, Field(ge=1, le=MAX_WORKERS)] | Literal["auto"] = 1
    """Client processes on this machine that share the users (user u runs in worker
    u % N); ``auto``: one per 250 users, at most the cores less one (docs/scaling.md).
    Closed-loop ``users`` scenarios only."""

    @property
    def peak_users(self) -> int:
        """Users (closed loop) or the most sessions expected at once (open loop)."""
        if self.replay is not None:
            return REPLAY_PEAK
        return self.arrivals.peak_sessions() if self.arrivals else self.users.count

    @model_validator(mode="after")
    def _bounded(self) -> Scenario:
        """The checks across fields. The first problem found is the one reported, so the
        order here is the order a user meets them: what is required, what excludes what,
        then the phases."""
        if self.replay is None and "conversation" not in self.model_fields_set:
            raise _FieldError(
                ("conversation",),
                "conversation is required (what the users say) -- fix: add a conversation: "
                "section with turn: {ask: [...]}",
            )
        if self.replay is not None:
            self._replay_alone()
        if self.workers != 1 and (self.arrivals is not None or self.replay is not None):
            field = "arrivals" if self.arrivals is not None else "replay"
            raise _FieldError(
                ("workers",),
                f"workers applies to users: scenarios; {field} runs in one process -- fix: "
                "drop workers (or --workers)",
            )
        if self.arrivals is not None:
            self._arrivals_alone()
        if self.phases:
            self._phase_ends_and_names()
            self._phase_sizes_fit()
        elif self.duration is None and self.rounds is None and self.replay is None:
            raise ValueError(
                "a run needs `duration` or `rounds` -- fix: add `duration: 60m` or `rounds: N` "
                "(per user), or both"
            )
        return self

    def _replay_alone(self) -> None:
        """A replay's trace decides who sends what and when: nothing else may."""
        for name, clash in (
            ("users", self.users != Users()),
            ("arrivals", self.arrivals is not None),
            ("phases", bool(self.phases)),
            ("rounds", self.rounds is not None),
        ):
            if clash:
                raise _FieldError(
                    (name,),
                    f"`replay` sends the trace's requests; `{name}` does not apply -- fix: "
                    f"remove {name}",
                )

    def _arrivals_alone(self) -> None:
        """Open-loop sessions come and go: what sizes or paces a closed loop of users does
        not apply to them."""
        if self.users != Users():
            raise _FieldError(
                ("users",),
                "`users` (a closed loop of N users) and `arrivals` (open-loop sessions) "
                "exclude each other -- fix: remove one of them",
            )
        if self.phases:
            raise _FieldError(
                ("phases",),
                "phases are not supported with `arrivals` -- fix: remove phases, or run "
                "one scenario per rate",
            )
        if self.duration is None:
            raise _FieldError(
                ("arrivals",),
                "open-loop sessions need `duration` (how long sessions arrive) -- fix: add "
                "`duration: 30m`",
            )
        start = self.conversation.start_tokens
        if start is not None and start[1] > 0:
            raise _FieldError(
                ("conversation", "start_tokens"),
                "start_tokens is not supported with `arrivals` (sessions open empty) -- "
                "fix: remove it",
            )
        if self.rounds is not None:
            raise _FieldError(
                ("rounds",),
                "with `arrivals`, the rounds of a session are `arrivals.rounds` -- fix: "
                "move `rounds` under arrivals",
            )

    def _phase_ends_and_names(self) -> None:
        """Every phase has an end (its own or the top level's) and a name of its own (the
        report's rows and ``summary.json`` are keyed by it)."""
        for i, ph in enumerate(self.phases):
            if (
                ph.duration is None
                and ph.rounds is None
                and (self.duration is None and self.rounds is None)
            ):
                raise _FieldError(
                    ("phases", i),
                    f"phase {ph.name!r} needs `duration` or `rounds` -- fix: add one to "
                    "the phase, or set them at the top level for every phase",
                )
        seen: set[str] = set()
        for i, ph in enumerate(self.phases):
            if ph.name in seen:
                raise _FieldError(
                    ("phases", i, "name"),
                    f"phase name {ph.name!r} is used twice -- fix: give each phase its own name",
                )
            seen.add(ph.name)

    def _phase_sizes_fit(self) -> None:
        """Each phase's paste and pre-built history fit the conversation, as the top level's
        must."""
        paste = self.conversation.turn.paste
        for i, ph in enumerate(self.phases):
            if ph.paste_tokens and not paste:
                raise _FieldError(
                    ("phases", i, "paste_tokens"),
                    f"phase {ph.name!r} sets paste_tokens but the turn has no paste -- "
                    "fix: add conversation.turn.paste or remove paste_tokens",
                )
            if ph.paste_tokens and ph.paste_tokens[1] >= self.conversation.ceiling_tokens:
                raise _FieldError(
                    ("phases", i, "paste_tokens"),
                    f"phase {ph.name!r}: paste_tokens max must be below "
                    "conversation.ceiling_tokens -- fix: lower it or raise ceiling_tokens",
                )
            start = ph.start_tokens
            problem = _start_problem(start, self.conversation) if start else None
            if problem:
                raise _FieldError(("phases", i, "start_tokens"), f"phase {ph.name!r}: {problem}")


class LoadedScenario(BaseModel):
    """A scenario plus where it came from (for relative paths and the manifest)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    scenario: Scenario
    path: Path
    sha256: str

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    def resolve(self, relative: str) -> Path:
        """A path the scenario names, relative to the scenario's folder; ``bundled:NAME``
        is one of the corpora shipped with stress (``stress.config.bundled``), from anywhere."""
        from stress.config.bundled import CORPUS_PREFIX, bundled_corpus

        if relative.startswith(CORPUS_PREFIX):
            return bundled_corpus(relative)
        p = Path(os.path.expanduser(relative))
        return p if p.is_absolute() else (self.base_dir / p).resolve()

    def resolve_trace(self, relative: str) -> Path:
        """``replay.trace``: like ``resolve``, with ``bundled:NAME`` one of the traces
        shipped with stress."""
        from stress.config.bundled import CORPUS_PREFIX, bundled_trace

        if relative.startswith(CORPUS_PREFIX):
            return bundled_trace(relative)
        return self.resolve(relative)


# --- loading and friendly errors ------------------------------------------------------

_SECRET_KEYS = {
    "api_key",
    "apikey",
    "key",
    "token",
    "access_token",
    "authorization",
    "password",
    "secret",
    "bearer",
    "auth",
}
_SECRET_VALUE = re.compile(r"^(sk-[A-Za-z0-9_-]{8,}|Bearer\s+\S{8,}|hf_[A-Za-z0-9]{16,})")
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_INTERPOLATED = {("target", "url"), ("target", "model")}


def _interpolate(text: str) -> str:
    def sub(m: re.Match[str]) -> str:
        return os.environ.get(m.group(1)) or (m.group(2) or "")

    return _ENV_REF.sub(sub, text)


def _find_literal_secrets(
    data: Any, path: tuple[str | int, ...] = ()
) -> list[tuple[str | int, ...]]:
    found: list[tuple[str | int, ...]] = []
    if isinstance(data, dict):
        for k, v in data.items():
            child = (*path, str(k))
            if isinstance(v, str) and v and str(k).lower() in _SECRET_KEYS:
                found.append(child)
            else:
                found.extend(_find_literal_secrets(v, child))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            found.extend(_find_literal_secrets(v, (*path, i)))
    elif isinstance(data, str) and _SECRET_VALUE.match(data.strip()):
        found.append(path)
    return found


def _fields_at(loc: tuple[str | int, ...]) -> list[str]:
    """Known keys of the model that holds the key at ``loc`` (for spelling suggestions)."""
    model: Any = Scenario
    if loc[:2] == ("target", "sim"):  # simulator settings are validated by SimConfig
        from stress.config.sim import SimConfig

        model, loc = SimConfig, loc[2:]
    for part in loc[:-1]:
        if isinstance(part, int) or model is None:
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return []
        ann = field.annotation
        model = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
        if model is None:
            for arg in getattr(ann, "__args__", ()):
                if isinstance(arg, type) and issubclass(arg, BaseModel):
                    model = arg
    return list(getattr(model, "model_fields", {})) if model else []


_BOUND_FIXES = {
    "count": f"use at most {MAX_USERS:,} users per process; run several stress processes for more",
    "users": f"use at most {MAX_USERS:,} users per process; run several stress processes for more",
    "interval": f"use at least {MIN_TELEMETRY_INTERVAL_S:g}s",
}


def _problem_from_error(file: str, located: Located, err: Any) -> Problem:
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    # a check on a whole model says which field it is about
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, _FieldError):
        loc = (*loc, *cause.loc)
    loc = tuple(p for p in loc if p not in ("tuple[...]", "list[...]"))
    field_name = ".".join(str(p) for p in loc)
    kind = err["type"]
    msg = str(err["msg"]).removeprefix("Value error, ")
    line = located.line_of(loc)
    if " -- fix: " in msg:
        msg, _, fix = msg.partition(" -- fix: ")
        return Problem(file, line, field_name, msg, fix)
    if kind in ("less_than_equal", "greater_than_equal", "greater_than") and loc:
        bound_fix = _BOUND_FIXES.get(str(loc[-1]))
        if bound_fix and (kind == "less_than_equal" or loc[-1] == "interval"):
            return Problem(file, line, field_name, msg, bound_fix)
    if kind == "extra_forbidden":
        known = _fields_at(loc)
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        fix = f"did you mean `{close[0]}`?" if close else "remove it"
        if known:
            fix += f" (allowed here: {', '.join(known)})"
        return Problem(file, line, field_name, "unknown key", fix)
    if kind == "missing":
        return Problem(file, line, field_name, "required key is missing", f"add `{loc[-1]}:`")
    fixes = {
        "greater_than_equal": "use a larger number",
        "less_than_equal": "use a smaller number",
        "greater_than": "use a larger number",
        "int_parsing": "write a whole number",
        "int_type": "write a whole number (not true/false, not a quoted or decimal number)",
        "int_from_float": "write a whole number",
        "float_parsing": "write a number",
        "float_type": "write a number",
        "finite_number": "write a finite number",
        "bool_parsing": "write true or false",
        "bool_type": "write true or false",
        "string_type": 'write text (quote it: "...")',
        "string_too_short": "write a non-empty value",
        "too_long": "use a shorter value",
        "string_too_long": "use a shorter name",
        "literal_error": "use one of the values listed",
        "string_pattern_mismatch": "use letters, digits, '.', '_' and '-' only",
        "too_short": "add at least one item",
        "tuple_type": "write a list like [1000, 4000]",
        "list_type": "write a YAML list",
        "dict_type": "write a YAML mapping (key: value)",
        "model_type": "write a YAML mapping (key: value)",
    }
    return Problem(file, line, field_name, msg, fixes.get(kind, "see README.md, A scenario"))


def _read_scenario_file(p: Path, file: str) -> bytes:
    """The file's bytes, refusing folders, devices and FIFOs (``/dev/zero`` would never
    end) and anything above ``MAX_SCENARIO_BYTES``, with the reason in one line."""

    def fail(message: str, fix: str) -> ScenarioError:
        return ScenarioError([Problem(file, None, "", message, fix)])

    try:
        st = p.stat()
        if stat.S_ISDIR(st.st_mode):
            raise fail("is a folder, not a scenario file", "give the path of a .yaml file")
        if not stat.S_ISREG(st.st_mode):
            raise fail("is not a regular file", "give the path of a .yaml file")
        if st.st_size > MAX_SCENARIO_BYTES:
            raise fail(
                f"the file is {st.st_size:,} bytes; scenario files are limited to "
                f"{MAX_SCENARIO_BYTES:,} bytes (1 MiB)",
                "keep documents in the corpus folder, not in the scenario",
            )
        with p.open("rb") as f:
            raw = f.read(MAX_SCENARIO_BYTES + 1)
    except FileNotFoundError:
        raise fail("no such file", "check the path") from None
    except PermissionError:
        raise fail("permission denied", "make the file readable (chmod u+r)") from None
    except OSError as e:
        raise fail(f"cannot read the file ({e.strerror or e})", "check the path") from None
    if len(raw) > MAX_SCENARIO_BYTES:
        raise fail(
            f"the file is larger than the {MAX_SCENARIO_BYTES:,}-byte (1 MiB) limit",
            "keep documents in the corpus folder, not in the scenario",
        )
    return raw


def _yaml_shape(text: str, file: str) -> None:
    """Walk the YAML event stream (linear, nothing built) and refuse what would blow up
    when loaded: aliases that expand past ``MAX_YAML_NODES`` nodes (an alias bomb),
    recursive or undefined aliases, nesting deeper than ``MAX_YAML_DEPTH``. Raises
    ``ScenarioError`` naming the line; ``yaml.YAMLError`` on plain syntax errors."""
    loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    sizes: dict[str, int] = {}  # anchor -> nodes it expands to
    stack: list[list[Any]] = []  # open collections: [anchor, nodes so far]
    total = 0

    def fail(event: Any, message: str, fix: str) -> ScenarioError:
        return ScenarioError([Problem(file, event.start_mark.line + 1, "(yaml)", message, fix)])

    def close(size: int, anchor: str | None, event: Any) -> None:
        nonlocal total
        if anchor is not None:
            sizes[anchor] = size
        if stack:
            stack[-1][1] += size
        else:
            total += size
        if total + sum(s[1] for s in stack) > MAX_YAML_NODES:
            raise fail(
                event,
                f"the YAML expands to more than {MAX_YAML_NODES:,} values (aliases repeating "
                "aliases)",
                "write the values out instead of nesting *aliases",
            )

    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, yaml.AliasEvent):
            name = event.anchor
            if any(open_[0] == name for open_ in stack):
                raise fail(event, f"alias *{name} refers to itself", "remove the alias")
            if name not in sizes:
                raise fail(event, f"alias *{name} has no &{name} anchor before it", "define it")
            close(sizes[name], None, event)
        elif isinstance(event, yaml.ScalarEvent):
            close(1, event.anchor, event)
        elif isinstance(event, yaml.CollectionStartEvent):
            if len(stack) >= MAX_YAML_DEPTH:
                raise fail(
                    event,
                    f"the YAML nests deeper than {MAX_YAML_DEPTH} levels",
                    "flatten the structure",
                )
            stack.append([event.anchor, 1])
        elif isinstance(event, yaml.CollectionEndEvent):
            anchor, size = stack.pop()
            close(size, anchor, event)


def load_scenario(
    path: str | Path, *, check_files: bool = True, corpus_roots: Iterable[str | Path] = ()
) -> LoadedScenario:
    """Load and validate a scenario; raises ``ScenarioError`` listing every problem.

    ``corpus_roots``: folders a corpus may live in besides the scenario's own folder, the
    bundled ``corpora/`` and ``$STRESS_CORPUS_ROOTS`` (``--corpus-root``).
    """
    p = Path(path)
    file = str(path)
    raw = _read_scenario_file(p, file)
    located = _parse_yaml(_utf8(raw, file), file)
    data = located.data
    if not isinstance(data, dict):
        raise ScenarioError(
            [Problem(file, 1, "", "a scenario is a YAML mapping", "start with `name: my_run`")]
        )
    problems = _duplicates_and_secrets(file, located, data)
    if problems:
        raise ScenarioError(problems)
    _interpolate_target(data)
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as e:
        raise ScenarioError(
            [_problem_from_error(file, located, err) for err in e.errors()]
        ) from None
    loaded = LoadedScenario(
        scenario=scenario, path=p.resolve(), sha256=hashlib.sha256(raw).hexdigest()
    )
    if check_files:
        problems.extend(_check_files(file, located, loaded, corpus_roots))
    if scenario.target.url == "sim" and scenario.target.sim:
        problems.extend(_check_sim(file, located, scenario.target.sim))
    if problems:
        raise ScenarioError(problems)
    return loaded


def _utf8(raw: bytes, file: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ScenarioError(
            [Problem(file, line, "", "the file is not UTF-8 text", "save it as UTF-8")]
        ) from None


def _parse_yaml(text: str, file: str) -> Located:
    """The YAML with each value's line, after the shape checks (``_yaml_shape``); a syntax
    error is one problem at its line."""
    try:
        _yaml_shape(text, file)
        return load_located(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        yaml_line = mark.line + 1 if mark is not None else None
        what = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ScenarioError(
            [
                Problem(
                    file,
                    yaml_line,
                    "(yaml)",
                    f"YAML syntax: {what}",
                    "fix the YAML syntax at that line (indentation, quotes, a missing ':')",
                )
            ]
        ) from None


def _duplicates_and_secrets(file: str, located: Located, data: dict[str, Any]) -> list[Problem]:
    """Keys given twice (YAML keeps only the last), literal keys or secrets, and headers
    that would carry one."""
    problems: list[Problem] = []
    for dup_path, line in located.duplicates:
        problems.append(
            Problem(
                file, line, ".".join(map(str, dup_path)), "key appears twice", "keep one of them"
            )
        )
    for secret_path in _find_literal_secrets(data):
        problems.append(
            Problem(
                file,
                located.line_of(secret_path),
                ".".join(map(str, secret_path)),
                "a literal API key or secret is not allowed in a scenario file",
                "remove it; set target.api_key_env: NAME (an environment variable) "
                "or target.api_key_file: PATH",
            )
        )
    target = data.get("target")
    headers = target.get("headers") if isinstance(target, dict) else None
    for name in headers if isinstance(headers, dict) else {}:
        if str(name).lower() in _AUTH_HEADERS:
            where = ("target", "headers", str(name))
            problems.append(
                Problem(
                    file,
                    located.line_of(where),
                    ".".join(where),
                    "this header would put a secret in the scenario file",
                    "remove it; set target.api_key_env: NAME (an environment variable) or "
                    "target.api_key_file: PATH",
                )
            )
    return problems


def _interpolate_target(data: dict[str, Any]) -> None:
    """``${VAR}`` and ``${VAR:-default}`` in ``target.url`` and ``target.model`` replaced
    from the environment, in place."""
    target = data.get("target")
    if isinstance(target, dict):
        for key in ("url", "model"):
            if ("target", key) in _INTERPOLATED and isinstance(target.get(key), str):
                target[key] = _interpolate(target[key])


def _check_files(
    file: str, located: Located, loaded: LoadedScenario, corpus_roots: Iterable[str | Path]
) -> list[Problem]:
    out: list[Problem] = []
    sc = loaded.scenario
    corpora: list[tuple[tuple[str, ...], str]] = []
    if sc.conversation.turn.paste is not None:
        corpora.append(
            (("conversation", "turn", "paste", "corpus"), sc.conversation.turn.paste.corpus)
        )
    if sc.replay is not None:
        corpora.append((("replay", "corpus"), sc.replay.corpus))
    for where, name in corpora:
        from stress.config.bundled import corpus_fix, corpus_problem
        from stress.load.corpus import allowed_roots, check_corpus, confine

        try:
            if problem := corpus_problem(name):  # bundled:NAME naming nothing
                raise CorpusError(name, problem, corpus_fix())
            corpus = loaded.resolve(name)
            check_corpus(confine(corpus, allowed_roots(loaded.base_dir, corpus_roots)))
        except CorpusError as e:
            out.append(Problem(file, located.line_of(where), ".".join(where), e.message, e.fix))
        except (OSError, RuntimeError) as e:  # e.g. a symlink loop while resolving
            out.append(
                Problem(
                    file,
                    located.line_of(where),
                    ".".join(where),
                    f"cannot resolve corpus path {name!r} ({e})",
                    "point it at a folder of .txt/.md files (relative to the scenario file)",
                )
            )
    if sc.replay is not None:
        from stress.load.replay import check_trace

        trace = loaded.resolve_trace(sc.replay.trace)
        if not trace.is_file() and not (trace.is_dir() and sc.replay.format != "mooncake"):
            where = ("replay", "trace")
            out.append(
                Problem(
                    file,
                    located.line_of(where),
                    "replay.trace",
                    f"trace {sc.replay.trace!r} is not a file ({trace})",
                    "point it at a JSON Lines trace or a run directory (relative to the "
                    "scenario file)",
                )
            )
        else:
            try:  # line by line, keeping nothing: a large trace costs time, not memory
                check_trace(trace, sc.replay.format, sc.replay.block_size)
            except ScenarioError as e:
                out.extend(e.problems)
    key_file = loaded.scenario.target.api_key_file
    if key_file is not None:
        from stress.core.secrets import key_file_problem

        key_where = ("target", "api_key_file")
        key_path = loaded.resolve(key_file)
        if what := key_file_problem(key_path):
            out.append(
                Problem(
                    file,
                    located.line_of(key_where),
                    ".".join(key_where),
                    f"the key file {str(key_path)!r} {what}",
                    "point it at a regular, readable file that holds only the key "
                    "(relative to the scenario file)",
                )
            )
    return out


def _check_sim(file: str, located: Located, sim: dict[str, Any]) -> list[Problem]:
    try:
        from stress.config.sim import SimConfig
    except ImportError:  # the simulator package is optional during development
        return []
    try:
        SimConfig.model_validate(sim)
    except ValidationError as e:
        return [
            _problem_from_error(file, located, {**err, "loc": ("target", "sim", *err["loc"])})
            for err in e.errors()
        ]
    return []


def with_overrides(
    loaded: LoadedScenario,
    *,
    users: int | None = None,
    duration: float | None = None,
    target: str | None = None,
    rounds: int | None = None,
    start_tokens: int | None = None,
    workers: int | Literal["auto"] | None = None,
) -> LoadedScenario:
    """Apply CLI overrides and re-validate (so an override cannot bypass the checks);
    a refused override is one line naming the option."""
    data = loaded.scenario.model_dump()
    if start_tokens is not None:
        data["conversation"]["start_tokens"] = start_tokens
    if users is not None:
        data["users"]["count"] = users
    elif data.get("arrivals") is not None or data.get("replay") is not None:
        data.pop("users")  # the default: arrivals and replay exclude users
    if duration is not None:
        data["duration"] = duration
    if rounds is not None:
        data["rounds"] = rounds
    if target is not None:
        data["target"]["url"] = target
    if workers is not None:
        data["workers"] = workers
    options = {
        ("workers",): "--workers",
        ("users", "count"): "--users",
        ("users",): "--users",
        ("duration",): "--duration",
        ("rounds",): "--rounds",
        ("target", "url"): "--target",
        ("target",): "--target",
    }
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            pr = _problem_from_error(str(loaded.path), Located(data), err)
            loc = tuple(pr.field.split(".")) if pr.field else ()
            option = options.get(loc) or options.get(loc[:1])
            field = f"{option} (overrides {pr.field})" if option else pr.field or "(override)"
            fix = pr.fix if option is None else f"{pr.fix or 'change the option'}"
            problems.append(Problem("stress run", None, field, pr.message, fix))
        raise ScenarioError(problems) from None
    return LoadedScenario(scenario=scenario, path=loaded.path, sha256=loaded.sha256)


def time_scaled(scenario: Scenario, scale: float) -> Scenario:
    """The scenario as the engine must run it when the simulator's clock runs ``scale`` times
    faster than the wall: every wall-clock duration (run length, ramp-up, think time,
    timeouts) is divided by ``scale``. Recorded times stay wall times; the summary
    converts them back to simulated seconds using ``manifest.time_scale``."""
    if scale == 1:
        return scenario
    data = scenario.model_dump()
    if data["duration"] is not None:
        data["duration"] /= scale
    data["users"]["ramp_up"] /= scale
    think = data["users"]["think_time"]
    for key in ("min", "max", "mean"):
        if think[key] is not None:
            think[key] /= scale
    for key in data["timeouts"]:
        data["timeouts"][key] /= scale
    data["telemetry"]["hang_after"] /= scale
    replay = data.get("replay")
    if replay is not None:
        replay["speed"] *= scale
        replay["warmup"] /= scale
    arrivals = data.get("arrivals")
    if arrivals is not None:
        arrivals["rate"] *= scale  # per wall minute
        arrivals["warmup"] /= scale
        for step in arrivals["schedule"]:
            step["at"] /= scale
            step["rate"] *= scale
        for key in ("min", "max", "mean"):
            if arrivals["think_time"][key] is not None:
                arrivals["think_time"][key] /= scale
    try:
        return Scenario.model_validate(data)
    except ValidationError as e:  # e.g. a time scale that turns a timeout into 0
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise ScenarioError(
            [
                Problem(
                    "target.sim.time_scale",
                    None,
                    field,
                    f"at time scale {scale:g} this becomes invalid ({err['msg']})",
                    "use a time scale closer to 1",
                )
            ]
        ) from None


def worker_count(scenario: Scenario, cpus: int | None) -> int:
    """How many worker processes a run uses: ``workers``, or for ``auto`` one per
    ``USERS_PER_WORKER`` users of the largest step, at most the cores less one (the parent
    needs a core for the recorder and the live view) and at least 1; never more than the
    users (a worker without a user would do nothing)."""
    users = max([scenario.users.count, *(ph.users or 0 for ph in scenario.phases)])
    if scenario.workers == "auto":
        n = min(math.ceil(users / USERS_PER_WORKER), (cpus or 1) - 1)
    else:
        n = scenario.workers
    return max(1, min(n, users))


def phase_plan(scenario: Scenario) -> list[tuple[str, Scenario]]:
    """The runs to make, in order, each as a plain scenario (no phases) with its label.

    Without phases: one step, ``main``. A phase inherits everything it does not set (its
    users' first conversations open with the phase's ``start_tokens`` of history); a
    phase with ``duration`` and no ``rounds`` (or the other way round) does not inherit
    the other bound. ``repeat: N`` gives steps ``name#1`` .. ``name#N``.
    """
    if not scenario.phases:
        return [("main", scenario)]
    plan: list[tuple[str, Scenario]] = []
    base = scenario.model_dump()
    base["phases"] = []
    for ph in scenario.phases:
        data = {**base, "users": dict(base["users"]), "warmup": dict(base["warmup"])}
        data["conversation"] = {**base["conversation"], "turn": dict(base["conversation"]["turn"])}
        if ph.users is not None:
            data["users"]["count"] = ph.users
        if ph.duration is not None or ph.rounds is not None:
            data["duration"], data["rounds"] = ph.duration, ph.rounds
        if ph.warmup_rounds is not None:
            data["warmup"]["rounds"] = ph.warmup_rounds
        if ph.think_time is not None:
            data["users"]["think_time"] = ph.think_time.model_dump()
        turn = data["conversation"]["turn"]
        if ph.paste_tokens is not None:
            turn["paste"] = {**turn["paste"], "tokens": ph.paste_tokens}
        if ph.ask is not None:
            turn["ask"] = ph.ask
        if ph.start_tokens is not None:
            data["conversation"]["start_tokens"] = ph.start_tokens
        step = Scenario.model_validate(data)
        for i in range(1, ph.repeat + 1):
            plan.append((ph.name if ph.repeat == 1 else f"{ph.name}#{i}", step))
    return plan
