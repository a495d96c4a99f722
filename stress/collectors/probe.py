"""Pre-flight look at the server: what it is, what it will report, what it will refuse.

Why this exists: an hour-long soak against a server that cannot hold the scenario's
conversations (llama.cpp slots of 8,192 tokens for a 50k ceiling), exposes no /metrics,
or does not report cached tokens wastes the hour. ``probe`` reads what the server says
about itself (/v1/models, /version, /props, /slots, /server_info, /metrics, /health),
detects the server kind and version, and records its effective configuration for the run
manifest so two runs are only compared when they really differ (field note 8).
``check_scenario`` turns a probe into warnings; ``render_probe`` into one screen of text.

Nothing here ever stores or prints request headers: the API key stays in the session.
Nothing here prints a response body either (a static server's 404 page is HTML): bodies
are summarised as ``HTTP 404 (text/html, 469 bytes)``. Redirects are never followed (a
redirect to another host would carry the key there); a 3xx is reported as such, with any
credentials stripped from the URL shown. A server is only called OpenAI-compatible when
/v1/models answers JSON with a ``data`` list.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

from stress.collectors.prometheus import (
    METRICS_FLAGS,
    MetricSet,
    MetricsParseError,
    detect_dialect,
    info_labels,
    normalize_base_url,
    parse_metrics,
    vllm_kv_pool_tokens,
)
from stress.core.secrets import safe_url
from stress.net.fetch import Fetcher, FetchError

ServerKind = Literal["vllm", "sglang", "llamacpp", "openai", "unknown"]

CACHED_TOKENS_FLAGS: dict[str, str] = {
    "vllm": "start vLLM with --enable-prompt-tokens-details",
    "sglang": "start SGLang with --enable-cache-report",
    "llamacpp": "llama.cpp reports timings.cache_n on every response (no flag)",
}
_NAMES: dict[str, str] = {
    "vllm": "vLLM",
    "sglang": "SGLang",
    "llamacpp": "llama.cpp",
    "openai": "OpenAI-compatible",
    "unknown": "unknown",
}
_SECRET_KEY = re.compile(r"(api_?key|secret|passw|credential|auth|(^|_)token$)", re.IGNORECASE)
_PROPS_DROP = {"chat_template", "media_marker", "bos_token", "eos_token", "ui_settings"}


class ProbeResult(BaseModel):
    """What the server says about itself; stored in the run manifest."""

    model_config = ConfigDict(frozen=True)

    target: str
    reachable: bool
    openai_compatible: bool = False
    """/v1/models answered JSON with a ``data`` list; only then is the target usable."""
    error: str | None = None
    """Why the target cannot be used (unreachable, not OpenAI-compatible, wants a key)."""
    health: str | None = None
    kind: ServerKind = "unknown"
    kind_evidence: list[str] = Field(default_factory=list)
    version: str | None = None
    model: str | None = None
    models: list[str] = Field(default_factory=list)
    context_length: int | None = None
    """The longest request (prompt + output) the server accepts, in tokens."""
    context_source: str | None = None
    n_ctx_train: int | None = None
    metrics_available: bool = False
    metrics_dialect: str | None = None
    metrics_flag: str | None = None
    cached_tokens_reported: bool | None = None
    cached_tokens_source: str | None = None
    cached_tokens_flag: str | None = None
    kv_pool_tokens: int | None = None
    kv_pool_source: str | None = None
    slots: int | None = None
    slot_n_ctx: list[int] = Field(default_factory=list)
    prefix_caching: bool | None = None
    spec_decode: bool | None = None
    gpu: dict[str, Any] | None = None
    """Filled by the GPU pre-flight (memory still held by another process), when present."""
    endpoints: dict[str, str] = Field(default_factory=dict)
    effective_config: dict[str, Any] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


# --- fetching ---------------------------------------------------------------------


class _Resp:
    __slots__ = ("body", "ctype", "error", "location", "status")

    def __init__(
        self,
        status: int | None,
        body: bytes = b"",
        error: str | None = None,
        ctype: str = "",
        location: str | None = None,
    ) -> None:
        self.status = status
        self.body = body
        self.error = error
        self.ctype = ctype
        self.location = location

    def json(self) -> Any:
        if self.status != 200:
            return None
        try:
            return orjson.loads(self.body)
        except orjson.JSONDecodeError:
            return None

    def label(self) -> str:
        return str(self.status) if self.status is not None else (self.error or "error")

    def summary(self) -> str:
        """One line about the answer that never quotes the body: it may be an HTML page."""
        if self.status is None:
            return self.error or "no answer"
        if 300 <= self.status < 400:
            where = safe_url(self.location) if self.location else "nowhere"
            return f"HTTP {self.status} redirect to {where} (not followed)"
        return f"HTTP {self.status} ({self.ctype or 'no content type'}, {len(self.body):,} bytes)"


async def _request(
    session: Fetcher,
    method: Literal["GET", "POST"],
    url: str,
    headers: dict[str, str],
    timeout_s: float,
    json_body: dict[str, Any] | None = None,
) -> _Resp:
    """Never follows a redirect (the ``Location`` is reported, the key stays here)."""
    try:
        resp = await session.request(method, url, headers, timeout_s, json_body)
    except FetchError as exc:
        return _Resp(None, b"", exc.short)
    return _Resp(resp.status, resp.body, None, resp.content_type or "", resp.location)


_ENDPOINTS = ("/health", "/v1/models", "/version", "/props", "/slots", "/server_info", "/metrics")


# --- interpretation ---------------------------------------------------------------


def _dict(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _int(x: Any) -> int | None:
    if isinstance(x, bool):
        return None
    if isinstance(x, int | float):
        return int(x)
    if isinstance(x, str):
        try:
            return int(float(x))
        except ValueError:
            return None
    return None


def redact(d: dict[str, Any]) -> dict[str, Any]:
    """Copy of ``d`` with secret-looking keys blanked (SGLang's server info has api_key)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if _SECRET_KEY.search(k) and v not in (None, "", False):
            out[k] = "<redacted>"
        elif isinstance(v, dict):
            out[k] = redact(v)
        else:
            out[k] = v
    return out


def _scalars(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is None or isinstance(v, str | int | float | bool)}


def _detect_kind(
    owned_by: str | None,
    dialect: str | None,
    props: dict[str, Any],
    server_info: dict[str, Any],
    version: dict[str, Any],
) -> tuple[ServerKind, list[str]]:
    evidence: list[str] = []
    votes: list[ServerKind] = []
    if owned_by in ("vllm", "sglang", "llamacpp"):
        evidence.append(f"/v1/models owned_by={owned_by}")
        votes.append(owned_by)  # type: ignore[arg-type]
    if dialect is not None:
        evidence.append(f"/metrics names {dialect}:*")
        votes.append(dialect)  # type: ignore[arg-type]
    if "default_generation_settings" in props or "total_slots" in props:
        evidence.append("/props (llama-server)")
        votes.append("llamacpp")
    if server_info and ("internal_states" in server_info or "tp_size" in server_info):
        evidence.append("/server_info (SGLang)")
        votes.append("sglang")
    if votes:
        return votes[0], evidence
    if "version" in version:
        evidence.append("/version only")
        return "openai", evidence
    return "openai", evidence


def _chat_template_digest(template: Any) -> str | None:
    if not isinstance(template, str):
        return None
    return hashlib.sha256(template.encode()).hexdigest()[:16]


def _str(x: Any) -> str | None:
    return x if isinstance(x, str) else None


async def _fetch_endpoints(
    session: Fetcher, base: str, headers: dict[str, str], timeout_s: float
) -> dict[str, _Resp]:
    """Every endpoint's answer, keyed by its path, asked all at once."""
    responses = await asyncio.gather(
        *(_request(session, "GET", base + ep, headers, timeout_s) for ep in _ENDPOINTS)
    )
    r = dict(zip(_ENDPOINTS, responses, strict=True))
    if r["/server_info"].status == 404:  # older SGLang spelling
        r["/get_server_info"] = await _request(
            session, "GET", base + "/get_server_info", headers, timeout_s
        )
    return r


def _model_cards(models: _Resp) -> list[dict[str, Any]] | None:
    """The cards of /v1/models; ``None`` when it is not a JSON object with a ``data`` list."""
    data = _dict(models.json()).get("data")
    if not isinstance(data, list):
        return None
    return [c for c in data if isinstance(c, dict)]


@dataclass(slots=True)
class _Answers:
    """The endpoints' documents, read once, that every step of the probe shares.

    ``config`` and ``notes`` fill as the steps run, so their order is the steps' order.
    """

    cards: list[dict[str, Any]]
    first: dict[str, Any]
    model: str | None
    props: dict[str, Any]
    server_info: dict[str, Any]
    version_doc: dict[str, Any]
    slot_docs: list[dict[str, Any]]
    slot_ctx: list[int]
    metrics: MetricSet | None
    dialect: str | None
    config: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _read_answers(r: dict[str, _Resp], cards: list[dict[str, Any]]) -> _Answers:
    """The documents behind ``cards`` (a compatible server's model list), parsed once."""
    notes: list[str] = []
    metrics: MetricSet | None = None
    if r["/metrics"].status == 200:
        try:
            metrics = parse_metrics(r["/metrics"].body.decode("utf-8", errors="replace"))
        except MetricsParseError as exc:
            notes.append(f"/metrics is not Prometheus text ({exc})")
    slots_doc = r["/slots"].json()
    slot_docs = [s for s in slots_doc if isinstance(s, dict)] if isinstance(slots_doc, list) else []
    first = cards[0] if cards else {}
    return _Answers(
        cards=cards,
        first=first,
        model=_str(first.get("id")),
        props=_dict(r["/props"].json()),
        server_info=_dict(r["/server_info"].json())
        or _dict(r["/get_server_info"].json() if "/get_server_info" in r else None),
        version_doc=_dict(r["/version"].json()),
        slot_docs=slot_docs,
        slot_ctx=[c for c in (_int(s.get("n_ctx")) for s in slot_docs) if c is not None],
        metrics=metrics,
        dialect=detect_dialect(metrics) if metrics is not None else None,
        notes=notes,
    )


def _identify(a: _Answers) -> tuple[ServerKind, list[str], str | None]:
    """The server's kind, the evidence for it, and its version where that kind publishes
    it (recorded in the configuration)."""
    owned_by = _str(a.first.get("owned_by"))
    kind, evidence = _detect_kind(owned_by, a.dialect, a.props, a.server_info, a.version_doc)
    version: Any
    if kind == "llamacpp":
        version = _str(a.props.get("build_info"))
    elif kind == "sglang":
        version = a.server_info.get("version") or a.version_doc.get("version")
    else:
        version = a.version_doc.get("version")
    if version is None:
        return kind, evidence, None
    a.config["version"] = str(version)
    return kind, evidence, str(version)


def _context(a: _Answers) -> tuple[int | None, str | None]:
    """The per-request context and where it was read, the most specific source first."""
    if a.slot_ctx:
        return min(a.slot_ctx), f"/slots n_ctx (min of {len(a.slot_ctx)} slots)"
    candidates = (
        (_dict(a.props.get("default_generation_settings")).get("n_ctx"), "/props n_ctx"),
        (a.first.get("max_model_len"), "/v1/models max_model_len"),
        (_dict(a.first.get("meta")).get("n_ctx"), "/v1/models meta.n_ctx"),
        (a.server_info.get("context_length"), "/server_info"),
    )
    for value, source in candidates:
        if _int(value) is not None:
            return _int(value), source
    return None, None


def _models_config(cards: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each card's settings; ``created`` is a timestamp, so two runs would always differ."""
    return [
        _scalars({k: v for k, v in c.items() if k != "created"})
        | ({"meta": _scalars(_dict(c.get("meta")))} if "meta" in c else {})
        for c in cards
    ]


def _metrics_available(a: _Answers) -> bool:
    """/metrics has samples and llama-server's /props does not say the endpoint is off."""
    available = a.metrics is not None and len(a.metrics) > 0
    return available and a.props.get("endpoint_metrics") is not False


@dataclass(slots=True)
class _Capacity:
    """The KV pool, the slots, prefix caching and speculative decoding, where known."""

    kv_pool: int | None = None
    kv_source: str | None = None
    slots: int | None = None
    prefix_caching: bool | None = None
    spec_decode: bool | None = None


def _capacity(kind: ServerKind, a: _Answers) -> _Capacity:
    """Each engine's reading in turn; a later one overrides only what it knows.

    The vLLM reading goes by the /metrics names, the others by the server's kind (which
    /v1/models' owned_by decides first), so two readings can both apply.
    """
    cap = _Capacity()
    if a.metrics is not None and a.dialect == "vllm":
        _vllm_capacity(a.metrics, a, cap)
    if kind == "sglang":
        _sglang_capacity(a, cap)
    if kind == "llamacpp":
        _llamacpp_capacity(a, cap)
    return cap


def _vllm_capacity(metrics: MetricSet, a: _Answers, cap: _Capacity) -> None:
    cache_cfg = info_labels(metrics, "vllm:cache_config_info")
    if cache_cfg:
        a.config["cache_config"] = cache_cfg[0] if len(cache_cfg) == 1 else cache_cfg
        epc = cache_cfg[0].get("enable_prefix_caching")
        cap.prefix_caching = epc == "True" if epc in ("True", "False") else None
    cap.kv_pool = vllm_kv_pool_tokens(metrics)
    cap.kv_source = "cache_config_info" if cap.kv_pool is not None else None
    cap.spec_decode = metrics.has("vllm:spec_decode_num_drafts_total") or None


def _sglang_capacity(a: _Answers, cap: _Capacity) -> None:
    pool = None
    if a.metrics is not None:
        vals = [s.value for s in a.metrics.get("sglang:max_total_num_tokens")]
        pool = int(max(vals)) if vals else None  # ⚠ one pool per dp rank not summed
    pool = pool or _int(a.server_info.get("max_total_num_tokens"))
    if pool:
        cap.kv_pool, cap.kv_source = pool, "sglang max_total_num_tokens"
    cap.slots = _int(a.server_info.get("max_running_requests"))
    if "disable_radix_cache" in a.server_info:
        cap.prefix_caching = not bool(a.server_info["disable_radix_cache"])
    if "speculative_algorithm" in a.server_info:
        cap.spec_decode = bool(a.server_info["speculative_algorithm"])
    if a.server_info:
        a.config["server_info"] = redact(_scalars(a.server_info))


def _llamacpp_capacity(a: _Answers, cap: _Capacity) -> None:
    cap.slots = _int(a.props.get("total_slots")) or (len(a.slot_docs) or None)
    if a.slot_ctx:
        cap.kv_pool = sum(a.slot_ctx)
        cap.kv_source = f"sum of /slots n_ctx ({len(a.slot_ctx)} slots)"
    if a.slot_docs:
        cap.spec_decode = any(bool(s.get("speculative")) for s in a.slot_docs)
    if a.props:
        pc = {k: v for k, v in a.props.items() if k not in _PROPS_DROP}
        pc["chat_template_sha256_16"] = _chat_template_digest(a.props.get("chat_template"))
        a.config["props"] = redact(pc)
    if a.props.get("is_sleeping"):
        a.notes.append("llama-server reports is_sleeping: the first request will reload")


def _cached_tokens_declared(
    kind: ServerKind, server_info: dict[str, Any]
) -> tuple[bool | None, str | None]:
    """Whether the server reports cached tokens per request, as far as its kind or its
    settings tell without sending a request, and in which field."""
    if kind == "llamacpp":
        return True, "timings.cache_n"
    if kind == "sglang" and "enable_cache_report" in server_info:
        cached = bool(server_info["enable_cache_report"])
        return cached, "usage.prompt_tokens_details.cached_tokens" if cached else None
    return None, None


async def _cached_tokens_tested(
    session: Fetcher,
    base: str,
    headers: dict[str, str],
    model: str,
    timeout_s: float,
    notes: list[str],
) -> tuple[bool, str | None] | None:
    """What a test request's reply shows about cached tokens, and in which field; ``None``
    (and a note) when the request fails."""
    test = await _test_request(session, base, headers, model, timeout_s * 6)
    if test is None:
        notes.append("test request failed; cached-token reporting not checked")
        return None
    in_usage, in_timings = test
    if in_usage:
        return True, "usage.prompt_tokens_details.cached_tokens"
    if in_timings:
        return True, "timings.cache_n"
    return False, None


async def probe(
    session: Fetcher,
    base_url: str,
    headers: dict[str, str],
    *,
    send_test_request: bool = False,
    timeout_s: float = 5.0,
) -> ProbeResult:
    """Ask the server about itself. Never raises for server-side problems."""
    base = normalize_base_url(base_url)
    shown = safe_url(base)  # what the result (and the run manifest) keeps: no credentials
    r = await _fetch_endpoints(session, base, headers, timeout_s)
    endpoints = {ep: resp.label() for ep, resp in r.items()}
    if all(resp.status is None for resp in r.values()):
        err = r["/health"].error or r["/v1/models"].error or "no answer"
        return ProbeResult(target=shown, reachable=False, error=err, endpoints=endpoints)
    health = "ok" if r["/health"].status == 200 else r["/health"].summary()
    cards = _model_cards(r["/v1/models"])
    if cards is None:
        why = _not_compatible(r["/v1/models"], "Authorization" in headers)
        return ProbeResult(
            target=shown, reachable=True, error=why, health=health, endpoints=endpoints
        )
    a = _read_answers(r, cards)
    kind, evidence, version = _identify(a)
    context, context_source = _context(a)
    a.config["models"] = _models_config(cards)
    metrics_available = _metrics_available(a)
    cap = _capacity(kind, a)
    cached, cached_source = _cached_tokens_declared(kind, a.server_info)
    if send_test_request and a.model is not None:
        tested = await _cached_tokens_tested(session, base, headers, a.model, timeout_s, a.notes)
        if tested is not None:
            cached, cached_source = tested
    return ProbeResult(
        target=shown,
        reachable=True,
        openai_compatible=True,
        health=health,
        kind=kind,
        kind_evidence=evidence,
        version=version,
        model=a.model,
        models=[c["id"] for c in cards if isinstance(c.get("id"), str)],
        context_length=context,
        context_source=context_source,
        n_ctx_train=_int(_dict(a.first.get("meta")).get("n_ctx_train")),
        metrics_available=metrics_available,
        metrics_dialect=a.dialect,
        metrics_flag=None if metrics_available else METRICS_FLAGS.get(kind),
        cached_tokens_reported=cached,
        cached_tokens_source=cached_source,
        cached_tokens_flag=CACHED_TOKENS_FLAGS.get(kind) if cached is not True else None,
        kv_pool_tokens=cap.kv_pool,
        kv_pool_source=cap.kv_source,
        slots=cap.slots,
        slot_n_ctx=a.slot_ctx,
        prefix_caching=cap.prefix_caching,
        spec_decode=cap.spec_decode,
        endpoints=endpoints,
        effective_config=a.config,
        notes=a.notes,
    )


def _not_compatible(models: _Resp, key_sent: bool) -> str:
    """Why /v1/models shows the target is not an OpenAI-compatible server we can use."""
    what = models.summary()
    if models.status in (401, 403):
        if not key_sent:
            return (
                f"/v1/models wants an API key ({what}) and none was sent -- fix: pass "
                "--api-key-env NAME (a variable holding the key)"
            )
        return f"/v1/models refused the API key ({what}) -- fix: check the key in --api-key-env"
    if models.status is None:
        return f"/v1/models did not answer ({what}) -- fix: check that the server is up"
    if 300 <= models.status < 400:
        return f"/v1/models answered {what} -- fix: use the URL it points to as --target"
    if models.status == 200:
        what = f"{what}, not a JSON model list"
    return (
        f"not an OpenAI-compatible server: /v1/models answered {what} -- fix: point "
        "--target at the server root of vLLM, SGLang, llama-server or another "
        "OpenAI-compatible server (no /v1 suffix)"
    )


async def _test_request(
    session: Fetcher,
    base: str,
    headers: dict[str, str],
    model: str,
    timeout_s: float,
) -> tuple[bool, bool] | None:
    """One 1-token chat; returns (usage carries cached_tokens, timings carry cache_n)."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Reply with OK."}],
        "max_tokens": 1,
        "stream": False,
    }
    resp = await _request(session, "POST", base + "/v1/chat/completions", headers, timeout_s, body)
    doc = _dict(resp.json())
    if not doc:
        return None
    details = _dict(_dict(doc.get("usage")).get("prompt_tokens_details"))
    timings = _dict(doc.get("timings"))
    return details.get("cached_tokens") is not None, timings.get("cache_n") is not None


# --- checks and rendering ---------------------------------------------------------


def check_scenario(result: ProbeResult, ceiling_tokens: int, max_tokens: int) -> list[str]:
    """Warnings for a scenario whose conversations grow to ``ceiling_tokens``."""
    if not result.reachable:
        return [f"server not reachable at {result.target}: {result.error}"]
    if not result.openai_compatible:
        return [f"{result.target}: {result.error}"]
    warnings: list[str] = []
    need = ceiling_tokens + max_tokens
    ctx = result.context_length
    llamacpp = result.kind == "llamacpp"
    if ctx is not None and need > ctx:
        fix = f"lower conversation.ceiling_tokens to at most {max(ctx - max_tokens, 0):,}"
        if llamacpp:
            # A llama.cpp slot never preempts: a request that does not fit is refused.
            what = (
                "requests past the slot's context fail with HTTP 400 (recorded as context_exceeded)"
            )
            fix += (
                " or give each slot more context (-c is split across --parallel slots and a"
                " slot is capped at the model's training context"
                + (f", {result.n_ctx_train:,}" if result.n_ctx_train else "")
                + ")"
            )
        else:
            what = "requests past it will fail with HTTP 400 (recorded as context_exceeded)"
            fix += " or raise the server's context (e.g. vLLM --max-model-len)"
        warnings.append(
            f"conversation ceiling {ceiling_tokens:,} + max_tokens {max_tokens:,} = "
            f"{need:,} tokens exceeds the server's per-request context of {ctx:,} "
            f"({result.context_source}): {what}; {fix}"
        )
    elif ctx is None:
        warnings.append(
            "the server's per-request context length is unknown: cannot check the ceiling"
        )
    # vLLM and SGLang share one pool and preempt; llama.cpp's "pool" is its slots, covered
    # by the per-request context above.
    if not llamacpp and result.kv_pool_tokens is not None and need > result.kv_pool_tokens:
        warnings.append(
            f"one conversation at the ceiling ({need:,} tokens) is larger than the KV pool "
            f"({result.kv_pool_tokens:,} tokens): expect preemptions and re-prefill"
        )
    if result.health not in (None, "ok"):
        warnings.append(f"/health is not ok: {result.health}")
    if not result.metrics_available:
        flag = f" ({result.metrics_flag})" if result.metrics_flag else ""
        warnings.append(
            f"no /metrics: no server hit rate, preemptions or KV usage in this run{flag}"
        )
    if result.cached_tokens_reported is False:
        flag = f" ({result.cached_tokens_flag})" if result.cached_tokens_flag else ""
        warnings.append(f"the server does not report cached tokens per request{flag}")
    if result.prefix_caching is False:
        warnings.append(
            "prefix caching is off on the server: a multi-turn run will re-read every "
            "conversation (expect a 0 % hit rate and rising TTFT)"
        )
    return warnings


def check_users(result: ProbeResult, users: int) -> list[str]:
    """A warning when more users than llama.cpp slots will share the server.

    llama.cpp keeps one prompt per slot; with more users than slots each slot is taken
    over by another user's conversation between turns, so the prefix cache collapses and
    TTFT becomes waiting for a slot (field notes: 24 users on 16 slots, per-round hit rate
    38 % -> 13 % -> 0 %). vLLM and SGLang share one pool and are not limited this way.
    """
    slots = result.slots
    if result.kind != "llamacpp" or not slots or users <= slots:
        return []
    ctx = min(result.slot_n_ctx) if result.slot_n_ctx else None
    more_c = f" and -c {users * ctx:,} to keep {ctx:,} tokens per slot" if ctx else ""
    return [
        f"{users} users on {slots} llama.cpp slots: each slot keeps one conversation's "
        "prompt, so users take over each other's slots between turns; expect the prefix "
        "cache hit rate to fall toward 0 % and TTFT to be mostly waiting for a slot; fix: "
        f"--parallel {users}{more_c}, or at most {slots} users"
    ]


def _fmt(n: int | None) -> str:
    return f"{n:,}" if n is not None else "?"


def render_probe(result: ProbeResult, warnings: list[str] | None = None) -> str:
    """One screen of text for ``stress probe``."""
    if not result.reachable:
        return f"target   {result.target}\n         NOT REACHABLE: {result.error}\n"
    if not result.openai_compatible:
        return f"target   {result.target}\n         NOT USABLE: {result.error}\n"
    lines = [f"target   {result.target}  (health: {result.health})"]
    why = ", ".join(result.kind_evidence) or "no server-specific endpoint answered"
    lines.append(f"server   {_NAMES[result.kind]} {result.version or '(version unknown)'}  [{why}]")
    extra = f" (+{len(result.models) - 1} more)" if len(result.models) > 1 else ""
    lines.append(f"model    {result.model or '?'}{extra}")
    ctx = f"context  {_fmt(result.context_length)} tokens per request"
    if result.context_source:
        ctx += f"  [{result.context_source}]"
    if result.n_ctx_train:
        ctx += f"  (trained {result.n_ctx_train:,})"
    lines.append(ctx)
    if result.metrics_available:
        lines.append(f"metrics  /metrics available ({result.metrics_dialect or 'unknown'} names)")
    else:
        lines.append(
            f"metrics  NOT available{': ' + result.metrics_flag if result.metrics_flag else ''}"
        )
    if result.cached_tokens_reported is True:
        lines.append(f"cached   reported per request ({result.cached_tokens_source})")
    elif result.cached_tokens_reported is False:
        lines.append(f"cached   NOT reported per request: {result.cached_tokens_flag or '?'}")
    else:
        hint = f"; needs: {result.cached_tokens_flag}" if result.cached_tokens_flag else ""
        lines.append(f"cached   unknown (probe --send-test-request checks){hint}")
    kv = f"kv pool  {_fmt(result.kv_pool_tokens)} tokens"
    if result.kv_pool_source:
        kv += f"  [{result.kv_pool_source}]"
    lines.append(kv)
    if result.slots is not None or result.slot_n_ctx:
        per = sorted(set(result.slot_n_ctx))
        per_txt = f", n_ctx {'/'.join(f'{c:,}' for c in per)} each" if per else ""
        lines.append(f"slots    {_fmt(result.slots)}{per_txt}")
    flags = []
    if result.prefix_caching is not None:
        flags.append(f"prefix caching {'on' if result.prefix_caching else 'OFF'}")
    if result.spec_decode is not None:
        flags.append(f"spec decode {'on' if result.spec_decode else 'off'}")
    if flags:
        lines.append("config   " + ", ".join(flags))
    gpu = result.gpu
    lines.append(f"gpu      {'not checked' if gpu is None else gpu.get('summary', gpu)}")
    for note in result.notes:
        lines.append(f"note     {note}")
    for w in warnings or []:
        lines.append(f"WARNING  {w}")
    return "\n".join(lines) + "\n"
