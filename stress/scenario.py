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
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from stress.durations import parse_duration
from stress.errors import Problem, ScenarioError
from stress.yamlpos import Located, load_located

Duration = Annotated[float, BeforeValidator(parse_duration)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ThinkTime(_Model):
    """Pause between a reply and the user's next turn."""

    distribution: Literal["uniform", "exponential", "constant"] = "uniform"
    min: Duration = 0.0
    max: Duration = 0.0
    mean: Duration | None = None

    @model_validator(mode="after")
    def _check(self) -> ThinkTime:
        if self.max < self.min:
            raise ValueError("think_time.max must be at least think_time.min")
        if self.distribution == "exponential" and self.mean is None:
            raise ValueError("an exponential think time needs `mean`")
        return self


class Users(_Model):
    count: int = Field(default=1, ge=1, le=100_000)
    ramp_up: Duration = 0.0
    think_time: ThinkTime = ThinkTime()


class Target(_Model):
    url: str = "sim"
    """Server root (``http://host:port``), or ``sim`` for the built-in simulator."""
    model: str = "auto"
    api_key_env: str | None = None
    api_key_required: bool = False
    """Fail before the run when the variable named by api_key_env is unset."""
    api_key_file: str | None = None
    server: Literal["auto", "vllm", "sglang", "llamacpp", "openai"] = "auto"
    tokenizer: Literal["auto", "tiktoken", "server"] = "auto"
    headers: dict[str, str] = Field(default_factory=dict)
    sim: dict[str, Any] = Field(default_factory=dict)

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
    def _no_auth_header(cls, v: dict[str, str]) -> dict[str, str]:
        for name in v:
            if name.lower() in {"authorization", "x-api-key", "api-key", "proxy-authorization"}:
                raise ValueError(
                    f"header {name!r} would put a secret in the scenario; use api_key_env"
                )
        return v

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        if v != "sim" and not re.match(r"^https?://[^/\s]+", v):
            raise ValueError("target.url must be http(s)://host:port or `sim`")
        return v.rstrip("/")


class Paste(_Model):
    corpus: str
    tokens: tuple[int, int]

    @field_validator("tokens")
    @classmethod
    def _range(cls, v: tuple[int, int]) -> tuple[int, int]:
        lo, hi = v
        if lo < 1 or hi < lo:
            raise ValueError("tokens is [min, max] with 1 <= min <= max")
        return v


class Turn(_Model):
    paste: Paste | None = None
    paste_on: Literal["every", "first"] = "every"
    """Paste on every turn, or only on a conversation's first turn (then just ask)."""
    ask: list[str] = Field(min_length=1)


class ConversationSpec(_Model):
    system_prompt: str = "You are a helpful assistant."
    cache: Literal["per_user", "cold", "shared"] = "per_user"
    ceiling_tokens: int = Field(default=32_000, ge=256)
    keep_reasoning: bool = False
    turn: Turn

    @model_validator(mode="after")
    def _paste_fits(self) -> ConversationSpec:
        if self.turn.paste and self.turn.paste.tokens[1] >= self.ceiling_tokens:
            raise ValueError(
                "turn.paste.tokens max must be below ceiling_tokens, or no turn ever fits"
            )
        return self


class RequestSpec(_Model):
    max_tokens: int = Field(default=1024, ge=1)
    temperature: float = Field(default=0.7, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    reasoning: Literal["auto", "on", "off"] = "auto"
    extra_body: dict[str, Any] = Field(default_factory=dict)


class Timeouts(_Model):
    connect: Duration = 10.0
    first_token: Duration = 300.0
    stall: Duration = 120.0
    total: Duration = 1800.0
    drain: Duration = 60.0
    """Grace period for in-flight requests once the run stops starting new turns."""


class Warmup(_Model):
    rounds: int = Field(default=0, ge=0)


class Limits(_Model):
    max_total_tokens: int | None = Field(default=None, ge=1)
    max_error_rate: float | None = Field(default=None, gt=0.0, le=1.0)
    min_requests: int = Field(default=20, ge=1)
    """Requests needed before max_error_rate is judged."""


class Telemetry(_Model):
    interval: Duration = 1.0
    hang_after: Duration = 60.0
    """Requests in flight and not a byte on any stream for this long: a suspected hang."""
    server_metrics: bool = True
    gpus: Literal["auto", "off"] | list[str] = "auto"


class Slo(_Model):
    ttft_p95: Duration | None = None
    decode_tok_s_p50: float | None = Field(default=None, gt=0)


class Connection(_Model):
    reuse: bool = True
    """Keep-alive pooling. Either way a request that exchanged nothing is retried once."""
    limit: int | None = Field(default=None, ge=1)


class Phase(_Model):
    """One step of a sweep: the scenario with a few things changed, run after the previous
    step with fresh users and conversations. ``repeat`` runs it several times so the report
    can show mean and spread across passes (field note 6); each pass's warm-up rounds are
    recorded but kept out of the figures (field note 7: the first pass at a new batch size
    compiles kernels)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=48)
    users: int | None = Field(default=None, ge=1, le=100_000)
    duration: Duration | None = None
    rounds: int | None = Field(default=None, ge=1)
    warmup_rounds: int | None = Field(default=None, ge=0)
    paste_tokens: tuple[int, int] | None = None
    ask: list[str] | None = Field(default=None, min_length=1)
    think_time: ThinkTime | None = None
    repeat: int = Field(default=1, ge=1, le=100)

    @field_validator("paste_tokens")
    @classmethod
    def _range(cls, v: tuple[int, int] | None) -> tuple[int, int] | None:
        if v is not None and (v[0] < 1 or v[1] < v[0]):
            raise ValueError("paste_tokens is [min, max] with 1 <= min <= max")
        return v


class Scenario(_Model):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)
    description: str = ""
    target: Target = Target()
    users: Users = Users()
    duration: Duration | None = None
    rounds: int | None = Field(default=None, ge=1)
    conversation: ConversationSpec
    request: RequestSpec = RequestSpec()
    timeouts: Timeouts = Timeouts()
    warmup: Warmup = Warmup()
    limits: Limits = Limits()
    telemetry: Telemetry = Telemetry()
    slo: Slo = Slo()
    connection: Connection = Connection()
    phases: list[Phase] = Field(default_factory=list)
    """Optional sweep: run these steps one after another instead of one steady run."""
    seed: int = 0

    @model_validator(mode="after")
    def _bounded(self) -> Scenario:
        if self.phases:
            for ph in self.phases:
                if (
                    ph.duration is None
                    and ph.rounds is None
                    and (self.duration is None and self.rounds is None)
                ):
                    raise ValueError(
                        f"phase {ph.name!r} needs `duration` or `rounds` (or set them at the "
                        "top level for every phase)"
                    )
            names = [ph.name for ph in self.phases]
            if len(set(names)) != len(names):
                raise ValueError("phase names must be unique")
            paste = self.conversation.turn.paste
            for ph in self.phases:
                if ph.paste_tokens and not paste:
                    raise ValueError(
                        f"phase {ph.name!r} sets paste_tokens but the turn has no paste"
                    )
                if ph.paste_tokens and ph.paste_tokens[1] >= self.conversation.ceiling_tokens:
                    raise ValueError(
                        f"phase {ph.name!r}: paste_tokens max must be below ceiling_tokens"
                    )
        elif self.duration is None and self.rounds is None:
            raise ValueError("a run needs `duration` (e.g. 60m) or `rounds` (per user), or both")
        if self.duration is not None and self.duration <= 0:
            raise ValueError("duration must be positive")
        return self


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
        p = Path(os.path.expanduser(relative))
        return p if p.is_absolute() else (self.base_dir / p).resolve()


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
        from stress.sim import SimConfig

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


def _problem_from_error(file: str, located: Located, err: Any) -> Problem:
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    field_name = ".".join(str(p) for p in loc)
    kind = err["type"]
    msg = str(err["msg"]).removeprefix("Value error, ")
    line = located.line_of(loc)
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
        "int_type": "write a whole number",
        "float_parsing": "write a number",
        "bool_parsing": "write true or false",
        "literal_error": "use one of the values listed",
        "string_pattern_mismatch": "use letters, digits, '.', '_' and '-' only",
        "too_short": "add at least one item",
        "tuple_type": "write a list like [1000, 4000]",
        "list_type": "write a YAML list",
        "dict_type": "write a YAML mapping (key: value)",
        "model_type": "write a YAML mapping (key: value)",
    }
    return Problem(file, line, field_name, msg, fixes.get(kind, ""))


def load_scenario(path: str | Path, *, check_files: bool = True) -> LoadedScenario:
    """Load and validate a scenario; raises ``ScenarioError`` listing every problem."""
    p = Path(path)
    file = str(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise ScenarioError(
            [Problem(file, None, "", f"cannot read the file ({e.strerror})", "check the path")]
        ) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ScenarioError(
            [Problem(file, None, "", "the file is not UTF-8 text", "save it as UTF-8")]
        ) from None
    try:
        located = load_located(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        what = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ScenarioError(
            [Problem(file, line, "(yaml)", f"YAML syntax: {what}", "fix the YAML syntax")]
        ) from None
    problems: list[Problem] = []
    data = located.data
    if not isinstance(data, dict):
        raise ScenarioError(
            [Problem(file, 1, "", "a scenario is a YAML mapping", "start with `name: my_run`")]
        )
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
    if problems:
        raise ScenarioError(problems)
    target = data.get("target")
    if isinstance(target, dict):
        for key in ("url", "model"):
            if ("target", key) in _INTERPOLATED and isinstance(target.get(key), str):
                target[key] = _interpolate(target[key])
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
        problems.extend(_check_files(file, located, loaded))
    if scenario.target.url == "sim" and scenario.target.sim:
        problems.extend(_check_sim(file, located, scenario.target.sim))
    if problems:
        raise ScenarioError(problems)
    return loaded


def _check_files(file: str, located: Located, loaded: LoadedScenario) -> list[Problem]:
    out: list[Problem] = []
    paste = loaded.scenario.conversation.turn.paste
    if paste is not None:
        where = ("conversation", "turn", "paste", "corpus")
        corpus = loaded.resolve(paste.corpus)
        from stress.corpus import corpus_files

        try:
            files = corpus_files(corpus)
        except OSError as e:
            out.append(
                Problem(
                    file,
                    located.line_of(where),
                    ".".join(where),
                    f"cannot read corpus {str(corpus)!r}: {e.strerror or e}",
                    "point it at a folder of .txt/.md files (relative to the scenario file)",
                )
            )
        else:
            if not files:
                out.append(
                    Problem(
                        file,
                        located.line_of(where),
                        ".".join(where),
                        f"corpus {str(corpus)!r} holds no .txt or .md files",
                        "add documents or point at another folder",
                    )
                )
    key_file = loaded.scenario.target.api_key_file
    if key_file is not None and not loaded.resolve(key_file).is_file():
        key_where = ("target", "api_key_file")
        out.append(
            Problem(
                file,
                located.line_of(key_where),
                ".".join(key_where),
                "the key file does not exist",
                "create it or fix the path",
            )
        )
    return out


def _check_sim(file: str, located: Located, sim: dict[str, Any]) -> list[Problem]:
    try:
        from stress.sim import SimConfig
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
) -> LoadedScenario:
    """Apply CLI overrides and re-validate (so an override cannot bypass the checks)."""
    data = loaded.scenario.model_dump()
    if users is not None:
        data["users"]["count"] = users
    if duration is not None:
        data["duration"] = duration
    if rounds is not None:
        data["rounds"] = rounds
    if target is not None:
        data["target"]["url"] = target
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise ScenarioError(
            [
                Problem(
                    str(loaded.path),
                    None,
                    field or "(override)",
                    f"command-line override rejected: {err['msg']}",
                    "change the option",
                )
            ]
        ) from None
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
    return Scenario.model_validate(data)


def phase_plan(scenario: Scenario) -> list[tuple[str, Scenario]]:
    """The runs to make, in order, each as a plain scenario (no phases) with its label.

    Without phases: one step, ``main``. A phase inherits everything it does not set; a
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
        step = Scenario.model_validate(data)
        for i in range(1, ph.repeat + 1):
            plan.append((ph.name if ph.repeat == 1 else f"{ph.name}#{i}", step))
    return plan
