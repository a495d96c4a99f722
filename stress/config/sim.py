"""Every knob of the simulator, validated in one place.

The same model backs three doors: ``stress sim`` flags, ``stress sim --config FILE`` and
``target: {url: sim, sim: {...}}`` in a scenario. Field names are therefore user-facing:
snake_case, units in the name, and a description that ``docs/simulator.md`` repeats.
All durations are *simulated* seconds; ``time_scale`` divides them into wall time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from stress.core.errors import StressError

Dialect = Literal["vllm", "sglang", "llamacpp"]
ReasoningField = Literal["reasoning", "reasoning_content"]
FaultKind = Literal[
    "http_500",
    "http_503",
    "http_429",
    "reset",
    "stall",
    "malformed_chunk",
    "no_done",
    "slow_headers",
    "huge_chunk",
    "wrong_content_type",
    "restart",
    "hang",
    "pause",
]
FAULT_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)


class FaultRule(BaseModel):
    """One fault: what happens, and when (by rate, by request number, or by time)."""

    model_config = ConfigDict(extra="forbid")

    kind: FaultKind = Field(description="Which fault to inject.")
    rate: float = Field(
        0.0, ge=0.0, le=1.0, description="Probability that a chat request gets this fault."
    )
    on_requests: list[int] = Field(
        default_factory=list,
        description="1-based chat request numbers (in arrival order) that get this fault.",
    )
    at_seconds: list[float] = Field(
        default_factory=list,
        description="Simulated seconds since start: the first chat request at or after each "
        "time gets this fault (a restart fires at that time even with no request).",
    )
    after_tokens: int = Field(
        3, ge=0, description="Mid-stream faults strike after this many generated tokens."
    )
    duration_s: float = Field(
        10.0,
        ge=0.0,
        description="Simulated seconds: stall length, slow-header delay, restart downtime, "
        "hang length (then the connection is dropped), server-wide pause length.",
    )
    retry_after_s: int = Field(1, ge=0, description="Retry-After header value for http_429.")
    size_bytes: int = Field(
        1_048_576, ge=1, description="Size of the content of the huge_chunk data line."
    )


class SimConfig(BaseModel):
    """The simulated engine: model identity, KV pool, scheduler, speed, replies, faults."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field("sim-llm", min_length=1, description="Model id served by /v1/models.")
    dialect: Dialect = Field(
        "vllm", description="Which server to imitate: metric names, endpoints, error bodies."
    )
    # KV pool and scheduler
    kv_tokens: int = Field(
        262_144, ge=16, description="KV pool size in tokens (all sequences share it)."
    )
    block_size: int = Field(16, ge=1, le=4096, description="Tokens per KV block.")
    max_seqs: int = Field(
        16, ge=1, description="Most sequences running at once; the rest wait in FIFO order."
    )
    max_model_len: int | None = Field(
        None,
        ge=16,
        description="Per-request context limit (prompt + output) in tokens; longer prompts "
        "get HTTP 400. Default: kv_tokens (llama.cpp dialect: kv_tokens / max_seqs per slot).",
    )
    prefix_caching: bool = Field(True, description="Reuse cached KV blocks across requests.")
    # Speed model (simulated time)
    prefill_tokens_per_s: float = Field(
        4000.0, gt=0, description="Prefill throughput, shared by all sequences in prefill."
    )
    decode_tokens_per_s: float = Field(
        40.0, gt=0, description="Decode speed of a single sequence with an empty context."
    )
    decode_batch_slowdown: float = Field(
        0.05, ge=0, description="Extra decode step time per additional running sequence (x1)."
    )
    decode_context_slowdown_per_1k: float = Field(
        0.01,
        ge=0,
        description="Extra decode step time per 1,000 tokens of context across the batch (x1).",
    )
    max_batched_tokens: int = Field(
        2048,
        ge=1,
        description="Chunked prefill: most prompt tokens computed in one step, so a long "
        "paste shares steps with (and slows) everyone's decode.",
    )
    time_scale: float = Field(
        1.0,
        gt=0,
        description="Simulated seconds per wall second: 60 runs a simulated hour in a minute.",
    )
    # Replies
    reply_tokens_min: int = Field(64, ge=1, description="Shortest natural reply (tokens).")
    reply_tokens_max: int = Field(256, ge=1, description="Longest natural reply (tokens).")
    reasoning_tokens: int = Field(
        0, ge=0, description="Thinking tokens streamed before the answer (0 = no reasoning)."
    )
    reasoning_field: ReasoningField | None = Field(
        None,
        description="Delta/message field for thinking. Default per dialect: vllm "
        "'reasoning', sglang and llamacpp 'reasoning_content'.",
    )
    honor_enable_thinking: bool = Field(
        True,
        description="Skip reasoning when a request sends chat_template_kwargs.enable_thinking "
        "false (or reasoning_effort 'none').",
    )
    report_cached_tokens: bool = Field(
        True,
        description="Put usage.prompt_tokens_details.cached_tokens in replies (real servers "
        "need --enable-prompt-tokens-details / --enable-cache-report).",
    )
    # Ground truth and reproducibility
    ground_truth_path: str | None = Field(
        None, description="Append one JSON line per finished request to this file."
    )
    seed: int = Field(0, description="Seed for reply lengths, reply words and fault draws.")
    faults: list[FaultRule] = Field(
        default_factory=list, description="Faults to inject (none by default)."
    )
    # Simulated GPUs
    gpus: int = Field(
        0,
        ge=0,
        le=16,
        description="Simulated GPUs (named 'Simulated H100 (sim)'), served at /sim/gpus: "
        "their power, temperature, clocks and energy follow the simulated load. A run "
        "against the simulator reads only these, never a real card. 0 = no GPU telemetry.",
    )

    @model_validator(mode="after")
    def _check(self) -> SimConfig:
        if self.reply_tokens_max < self.reply_tokens_min:
            raise ValueError("reply_tokens_max must be >= reply_tokens_min")
        if self.kv_tokens < self.block_size:
            raise ValueError("kv_tokens must hold at least one block (>= block_size)")
        if self.max_model_len is not None and self.max_model_len > self.kv_tokens:
            raise ValueError(
                "max_model_len must be <= kv_tokens (one request must fit in the pool)"
            )
        return self

    @property
    def num_blocks(self) -> int:
        return self.kv_tokens // self.block_size

    @property
    def context_limit(self) -> int:
        """The per-request context (prompt + output) in tokens."""
        pool = self.num_blocks * self.block_size
        if self.max_model_len is not None:
            return min(self.max_model_len, pool)
        if self.dialect == "llamacpp":
            return max(self.block_size, pool // self.max_seqs)
        return pool

    @property
    def reasoning_key(self) -> ReasoningField:
        if self.reasoning_field is not None:
            return self.reasoning_field
        return "reasoning" if self.dialect == "vllm" else "reasoning_content"


class SimConfigError(StressError):
    """A simulator config (file or flags) is wrong; ``str()`` is one line per problem."""


def format_validation_error(err: ValidationError, source: str, lines: dict[str, int]) -> str:
    """One line per problem: ``source:line: field: message -- fix: ...``."""
    out = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        line = lines.get(loc) or lines.get(".".join(str(p) for p in e["loc"][:-1]))
        where = f"{source}:{line}" if line else source
        if e["type"] == "extra_forbidden":
            parent: type[BaseModel] = FaultRule if "faults" in loc else SimConfig
            known = ", ".join(sorted(parent.model_fields))
            fix = f"remove it or use one of: {known}"
            msg = "unknown field"
        else:
            msg = e["msg"]
            name = str(e["loc"][-1]) if e["loc"] else ""
            field = SimConfig.model_fields.get(name) or FaultRule.model_fields.get(name)
            fix = field.description or "" if field is not None else "check the value"
        out.append(f"{where}: {loc or '(config)'}: {msg} -- fix: {fix}")
    return "\n".join(out)


def _key_lines(node: yaml.Node, prefix: str, out: dict[str, int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            key = f"{prefix}.{k.value}" if prefix else str(k.value)
            out[key] = k.start_mark.line + 1
            _key_lines(v, key, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            key = f"{prefix}.{i}" if prefix else str(i)
            out[key] = v.start_mark.line + 1
            _key_lines(v, key, out)


def load_config_file(path: str, overrides: dict[str, Any] | None = None) -> SimConfig:
    """Read a YAML file of SimConfig fields (flags in ``overrides`` win)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SimConfigError(
            f"{path}: cannot read the simulator config ({exc.strerror or exc}) -- fix: "
            "check the path given to --config"
        ) from None
    try:
        data = yaml.safe_load(text)
        node = yaml.compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else path
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise SimConfigError(
            f"{where}: (file): {problem} -- fix: write a YAML mapping of simulator fields"
        ) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SimConfigError(
            f"{path}: (file): expected a mapping of simulator fields, got "
            f"{type(data).__name__} -- fix: write e.g. 'kv_tokens: 65536' on its own line"
        )
    if "sim" in data and isinstance(data["sim"], dict) and len(data) == 1:
        data = data["sim"]
    lines: dict[str, int] = {}
    if node is not None:
        _key_lines(node, "", lines)
    merged = {**data, **(overrides or {})}
    try:
        return SimConfig.model_validate(merged)
    except ValidationError as exc:
        raise SimConfigError(format_validation_error(exc, path, lines)) from None
