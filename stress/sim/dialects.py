"""What each imitated server looks like on the wire.

Everything that differs between vLLM, SGLang and llama.cpp lives here: /v1/models cards,
/health bodies, stream chunk shapes, error bodies for over-long prompts, /metrics names and
semantics (TELEMETRY.md), and llama.cpp's /props, /slots and per-response ``timings``.
The engine's counters are the single source; each dialect only renames and re-slices them
the way that server does (e.g. llama.cpp's prompt counter excludes cached tokens).
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from stress.config.sim import SimConfig
from stress.sim.scheduler import Engine, Seq

VERSION = {"vllm": "0.33.0", "sglang": "0.5.23", "llamacpp": "b1-sim"}
_MARK = "\x01"
_MARK_JSON = b"\\u0001"


# --- models, health, version -----------------------------------------------------------
def models_body(cfg: SimConfig, created: int) -> dict[str, Any]:
    limit = cfg.context_limit
    if cfg.dialect == "llamacpp":
        card: dict[str, Any] = {
            "id": cfg.model,
            "aliases": [cfg.model],
            "tags": [],
            "object": "model",
            "created": created,
            "owned_by": "llamacpp",
            "meta": {
                "vocab_type": 2,
                "n_vocab": 100277,
                "n_ctx": limit,
                "n_ctx_train": limit,
                "n_embd": 4096,
                "n_params": 8_000_000_000,
                "size": 4_920_000_000,
                "ftype": "Q4_K_M",
            },
        }
        return {
            "models": [{"name": cfg.model, "model": cfg.model, "type": "model"}],
            "object": "list",
            "data": [card],
        }
    return {
        "object": "list",
        "data": [
            {
                "id": cfg.model,
                "object": "model",
                "created": created,
                "owned_by": cfg.dialect,
                "root": cfg.model,
                "parent": None,
                "max_model_len": limit,
            }
        ],
    }


def health_body(cfg: SimConfig) -> bytes:
    return b'{"status":"ok"}' if cfg.dialect == "llamacpp" else b""


# --- stream chunks ---------------------------------------------------------------------
def chunk_dict(
    cfg: SimConfig,
    rid: str,
    created: int,
    delta: dict[str, Any] | None,
    finish: str | None = None,
) -> dict[str, Any]:
    """One ``chat.completion.chunk``; ``delta=None`` gives the ``choices: []`` usage chunk."""
    choices: list[dict[str, Any]] = []
    if delta is not None:
        if cfg.dialect == "llamacpp":
            choices = [{"finish_reason": finish, "index": 0, "delta": delta}]
        elif cfg.dialect == "sglang":
            choices = [
                {
                    "index": 0,
                    "delta": delta,
                    "logprobs": None,
                    "finish_reason": finish,
                    "matched_stop": None,
                }
            ]
        else:
            choice: dict[str, Any] = {
                "index": 0,
                "delta": delta,
                "logprobs": None,
                "finish_reason": finish,
            }
            if finish is not None:
                choice["stop_reason"] = None
            choice["token_ids"] = None
            choices = [choice]
    if cfg.dialect == "llamacpp":
        return {
            "choices": choices,
            "created": created,
            "id": rid,
            "model": cfg.model,
            "system_fingerprint": VERSION["llamacpp"],
            "object": "chat.completion.chunk",
        }
    return {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": cfg.model,
        "choices": choices,
    }


def sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


class ChunkTemplates:
    """Pre-serialised chunk halves so a token costs two byte concatenations, not a dump.

    Pieces are plain ASCII words, spaces and periods, so they need no JSON escaping.
    """

    def __init__(self, cfg: SimConfig, rid: str, created: int) -> None:
        rkey = cfg.reasoning_key
        self.content = self._split(chunk_dict(cfg, rid, created, {"content": _MARK}))
        self.reasoning = self._split(chunk_dict(cfg, rid, created, {rkey: _MARK}))
        inline_finish = cfg.dialect != "llamacpp"
        self.content_last: dict[str, tuple[bytes, bytes]] = {}
        self.reasoning_last: dict[str, tuple[bytes, bytes]] = {}
        if inline_finish:
            for fin in ("stop", "length"):
                self.content_last[fin] = self._split(
                    chunk_dict(cfg, rid, created, {"content": _MARK}, fin)
                )
                self.reasoning_last[fin] = self._split(
                    chunk_dict(cfg, rid, created, {rkey: _MARK}, fin)
                )

    @staticmethod
    def _split(obj: dict[str, Any]) -> tuple[bytes, bytes]:
        raw = b"data: " + orjson.dumps(obj) + b"\n\n"
        left, right = raw.split(_MARK_JSON, 1)
        return left, right


def first_chunk(cfg: SimConfig, rid: str, created: int) -> bytes:
    content: str | None = None if cfg.dialect == "llamacpp" else ""
    return sse(chunk_dict(cfg, rid, created, {"role": "assistant", "content": content}))


# --- usage and timings -----------------------------------------------------------------
def usage_body(cfg: SimConfig, seq: Seq, completion_tokens: int, reasoning: int) -> dict[str, Any]:
    cached = seq.cached_tokens or 0
    usage: dict[str, Any] = {
        "prompt_tokens": seq.prompt_len,
        "completion_tokens": completion_tokens,
        "total_tokens": seq.prompt_len + completion_tokens,
    }
    if cfg.report_cached_tokens:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    if reasoning and cfg.dialect == "vllm":
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return usage


def timings_body(seq: Seq, completion_tokens: int) -> dict[str, Any]:
    """llama.cpp's per-response ``timings`` (simulated milliseconds)."""
    cached = seq.cached_tokens or 0
    prompt_n = seq.prompt_len - cached
    prompt_ms = seq.prefill_s * 1000.0
    predicted_ms = seq.decode_s * 1000.0
    return {
        "cache_n": cached,
        "prompt_n": prompt_n,
        "prompt_ms": round(prompt_ms, 3),
        "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
        "prompt_per_second": prompt_n / (prompt_ms / 1000.0) if prompt_ms else 0.0,
        "predicted_n": completion_tokens,
        "predicted_ms": round(predicted_ms, 3),
        "predicted_per_token_ms": predicted_ms / completion_tokens if completion_tokens else 0.0,
        "predicted_per_second": (
            completion_tokens / (predicted_ms / 1000.0) if predicted_ms else 0.0
        ),
    }


def usage_chunk(
    cfg: SimConfig, rid: str, created: int, seq: Seq, completion: int, reasoning: int
) -> bytes:
    obj = chunk_dict(cfg, rid, created, None)
    obj["usage"] = usage_body(cfg, seq, completion, reasoning)
    if cfg.dialect == "llamacpp":
        obj["timings"] = timings_body(seq, completion)
    elif cfg.dialect == "vllm":
        obj["system_fingerprint"] = f"vllm-{VERSION['vllm']}-sim"
    return sse(obj)


def completion_body(
    cfg: SimConfig,
    rid: str,
    created: int,
    seq: Seq,
    content: str | None,
    reasoning_text: str | None,
    finish: str,
    completion: int,
    reasoning: int,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning_text is not None:
        message[cfg.reasoning_key] = reasoning_text
    body: dict[str, Any] = {
        "id": rid,
        "object": "chat.completion",
        "created": created,
        "model": cfg.model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": usage_body(cfg, seq, completion, reasoning),
    }
    if cfg.dialect == "llamacpp":
        body["timings"] = timings_body(seq, completion)
        body["system_fingerprint"] = VERSION["llamacpp"]
    return body


# --- errors ----------------------------------------------------------------------------
def context_error(cfg: SimConfig, prompt_tokens: int, limit: int) -> dict[str, Any]:
    """The 400 body each server sends for a prompt longer than its context."""
    if cfg.dialect == "llamacpp":
        return {
            "error": {
                "code": 400,
                "message": f"request ({prompt_tokens} tokens) exceeds the available context "
                f"size ({limit} tokens), try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": prompt_tokens,
                "n_ctx": limit,
            }
        }
    if cfg.dialect == "sglang":
        return {
            "object": "error",
            "message": f"The input ({prompt_tokens} tokens) is longer than the model's context "
            f"length ({limit} tokens).",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    return {
        "error": {
            "message": f"This model's maximum context length is {limit} tokens. However, your "
            f"request has {prompt_tokens} input tokens. Please reduce the length of the "
            "input messages.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    }


def error_body(cfg: SimConfig, status: int, message: str, kind: str) -> dict[str, Any]:
    if cfg.dialect == "llamacpp":
        return {"error": {"code": status, "message": message, "type": kind}}
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


# --- llama.cpp /props and /slots -------------------------------------------------------
def props_body(cfg: SimConfig) -> dict[str, Any]:
    return {
        "default_generation_settings": {
            "params": {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "n_predict": -1},
            "n_ctx": cfg.context_limit,
        },
        "total_slots": cfg.max_seqs,
        "model_alias": cfg.model,
        "model_path": cfg.model,
        "modalities": {"vision": False, "video": False, "audio": False},
        "endpoint_slots": True,
        "endpoint_props": False,
        "endpoint_metrics": True,
        "chat_template": "{% for message in messages %}{{'<|im_start|>' + message['role'] + "
        "'\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}",
        "bos_token": "<|im_start|>",
        "eos_token": "<|im_end|>",
        "build_info": VERSION["llamacpp"],
        "is_sleeping": False,
    }


def slots_body(cfg: SimConfig, engine: Engine) -> list[dict[str, Any]]:
    busy = list(engine.running)
    out: list[dict[str, Any]] = []
    for i in range(cfg.max_seqs):
        seq = busy[i] if i < len(busy) else None
        out.append(
            {
                "id": i,
                "n_ctx": cfg.context_limit,
                "speculative": False,
                "is_processing": seq is not None,
                "id_task": -1 if seq is None else seq.rid,
                "n_prompt_tokens": 0 if seq is None else seq.prompt_len,
                "n_prompt_tokens_processed": 0 if seq is None else seq.prompt_computed,
                "n_prompt_tokens_cache": 0 if seq is None else (seq.cached_tokens or 0),
                "params": {"max_tokens": -1, "n_predict": -1, "stream": True},
                "next_token": [
                    {
                        "has_next_token": seq is not None,
                        "has_new_line": False,
                        "n_remain": -1 if seq is None else seq.n_out - seq.emitted,
                        "n_decoded": 0 if seq is None else seq.emitted,
                    }
                ],
            }
        )
    return out


# --- /metrics --------------------------------------------------------------------------
def _fmt(v: float) -> str:
    return repr(float(v))


def metrics_text(cfg: SimConfig, engine: Engine, start_unix: float) -> str:
    if cfg.dialect == "llamacpp":
        return _llamacpp_metrics(engine)
    if cfg.dialect == "sglang":
        return _sglang_metrics(cfg, engine)
    return _vllm_metrics(cfg, engine, start_unix)


def _vllm_metrics(cfg: SimConfig, engine: Engine, start_unix: float) -> str:
    lbl = f'engine="0",model_name="{cfg.model}"'
    lines: list[str] = []
    for name, kind, help_, series in _vllm_rows(engine):
        lines.append(f"# HELP {name} {help_}")
        lines.append(f"# TYPE {name} {kind}")
        for extra, val in series:
            lines.append(f"{name}{{{lbl}{extra}}} {_fmt(val)}")
        # each unlabelled counter has its ``_created`` gauge beside it, as prometheus_client
        # writes it; the families split by a label have none here
        if kind == "counter" and series[0][0] == "":
            base = name.removesuffix("_total")
            lines.append(f"# HELP {base}_created {help_}")
            lines.append(f"# TYPE {base}_created gauge")
            lines.append(f"{base}_created{{{lbl}}} {_fmt(start_unix)}")
    lines.extend(_vllm_cache_config(cfg, engine, lbl))
    return "\n".join(lines) + "\n"


def _vllm_rows(engine: Engine) -> list[tuple[str, str, str, list[tuple[str, float]]]]:
    """vLLM's families in its /metrics order: name, type, help, and each series' extra
    labels with its value."""
    st = engine.stats
    pool = engine.pool
    return [
        ("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
         [("", len(engine.running))]),
        ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
         [("", len(engine.waiting))]),
        ("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
         [("", pool.used / pool.num_blocks)]),
        ("vllm:prefix_cache_queries_total", "counter",
         "Prefix cache queries, in terms of number of queried tokens.", [("", st.cache_queries)]),
        ("vllm:prefix_cache_hits_total", "counter",
         "Prefix cache hits, in terms of number of cached tokens.", [("", st.cache_hits)]),
        ("vllm:num_preemptions_total", "counter",
         "Cumulative number of preemption from the engine.", [("", st.preemptions)]),
        ("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
         [("", st.prompt_tokens)]),
        ("vllm:prompt_tokens_cached_total", "counter",
         "Number of cached prompt tokens (local + external).", [("", st.cache_hits)]),
        ("vllm:prompt_tokens_by_source_total", "counter", "Number of prompt tokens by source.",
         [(',source="local_compute"', st.prompt_tokens - st.cache_hits),
          (',source="local_cache_hit"', st.cache_hits),
          (',source="external_kv_transfer"', 0)]),
        ("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
         [("", st.generation_tokens)]),
        ("vllm:request_success_total", "counter", "Count of successfully processed requests.",
         [(f',finished_reason="{reason}"', st.finished.get(reason, 0))
          for reason in ("stop", "length", "abort")]),
    ]  # fmt: skip


def _vllm_cache_config(cfg: SimConfig, engine: Engine, lbl: str) -> list[str]:
    """vLLM's info gauge: the KV cache's geometry in its labels, its value always 1."""
    pool = engine.pool
    info = (
        f'block_size="{cfg.block_size}",cache_dtype="auto",enable_prefix_caching='
        f'"{cfg.prefix_caching}",{lbl},kv_cache_size_tokens="{pool.num_blocks * cfg.block_size}",'
        f'num_gpu_blocks="{pool.num_blocks}"'
    )
    return [
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
        "# TYPE vllm:cache_config_info gauge",
        f"vllm:cache_config_info{{{info}}} 1.0",
    ]


def _sglang_metrics(cfg: SimConfig, engine: Engine) -> str:
    st = engine.stats
    pool = engine.pool
    lbl = f'engine_type="unified",model_name="{cfg.model}",pp_rank="0",tp_rank="0",moe_ep_rank="0"'
    used_tokens = pool.used * cfg.block_size
    total_tokens = pool.num_blocks * cfg.block_size
    computed = st.cache_queries - st.cache_hits
    rows: list[tuple[str, str, str, list[tuple[str, float]]]] = [
        ("sglang:num_running_reqs", "gauge", "The number of running requests.",
         [("", len(engine.running))]),
        ("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.",
         [("", len(engine.waiting))]),
        ("sglang:token_usage", "gauge", "The token usage.", [("", used_tokens / total_tokens)]),
        ("sglang:num_used_tokens", "gauge", "The number of used tokens.", [("", used_tokens)]),
        ("sglang:max_total_num_tokens", "gauge", "Maximum total number of tokens in the KV pool.",
         [("", total_tokens)]),
        ("sglang:cache_hit_rate", "gauge", "The prefix cache hit rate of the last prefill batch.",
         [("", engine.last_batch_hit_rate)]),
        ("sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
         [(',is_streaming="true"', st.prompt_tokens)]),
        ("sglang:generation_tokens_total", "counter", "Number of generation tokens processed.",
         [("", st.generation_tokens)]),
        ("sglang:cached_tokens_total", "counter", "Number of cached prompt tokens.",
         [(',cache_source="device"', st.cache_hits), (',cache_source="total"', st.cache_hits)]),
        ("sglang:prefill_effective_tokens_total", "counter",
         "Prefill tokens by source; hit rate = sum(*_hit) / sum(all).",
         [(',mode="input"', computed), (',mode="device_hit"', st.cache_hits)]),
        ("sglang:realtime_tokens_total", "counter", "Tokens processed, by mode.",
         [(',mode="prefill_compute"', st.prompt_tokens_computed),
          (',mode="prefill_cache"', st.cache_hits),
          (',mode="decode"', st.generation_tokens)]),
        ("sglang:num_retracted_requests_total", "counter", "Number of retracted requests.",
         [("", st.preemptions)]),
        ("sglang:num_retracted_input_tokens_total", "counter",
         "Number of input tokens of retracted requests.", [("", st.preempted_input_tokens)]),
        ("sglang:num_retracted_output_tokens_total", "counter",
         "Number of output tokens of retracted requests.", [("", st.preempted_output_tokens)]),
        ("sglang:num_requests_total", "counter", "Number of requests.", [("", st.requests)]),
        ("sglang:num_aborted_requests_total", "counter", "Number of aborted requests.",
         [("", st.finished.get("abort", 0))]),
    ]  # fmt: skip
    lines: list[str] = []
    for name, kind, help_, series in rows:
        lines.append(f"# HELP {name} {help_}")
        lines.append(f"# TYPE {name} {kind}")
        for extra, val in series:
            lines.append(f"{name}{{{lbl}{extra}}} {_fmt(val)}")
    return "\n".join(lines) + "\n"


def _llamacpp_metrics(engine: Engine) -> str:
    st = engine.stats
    prompt_s = st.prefill_seconds
    pred_s = st.decode_seconds
    rows: list[tuple[str, str, str, float]] = [
        ("prompt_tokens_total", "counter",
         "Number of prompt tokens processed, excluding cached tokens", st.prompt_tokens_computed),
        ("prompt_seconds_total", "counter", "Total time spent processing prompts", prompt_s),
        ("tokens_predicted_total", "counter", "Number of generation tokens processed",
         st.generation_tokens),
        ("tokens_predicted_seconds_total", "counter", "Total time spent generating tokens",
         pred_s),
        ("n_decode_total", "counter", "Total number of llama_decode() calls", st.steps),
        ("n_tokens_max", "counter", "Largest observed sequence length (prompt + generation)",
         st.max_seq_tokens),
        ("prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s",
         st.prompt_tokens_computed / prompt_s if prompt_s else 0.0),
        ("predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s",
         st.generation_tokens / pred_s if pred_s else 0.0),
        ("requests_processing", "gauge", "Number of requests processing", len(engine.running)),
        ("requests_deferred", "gauge", "Number of requests deferred", len(engine.waiting)),
        ("n_busy_slots_per_decode", "gauge", "Average number of busy slots per llama_decode() call",
         st.busy_slots_sum / st.steps if st.steps else 0.0),
    ]  # fmt: skip
    lines: list[str] = []
    for name, kind, help_, val in rows:
        lines.append(f"# HELP llamacpp:{name} {help_}")
        lines.append(f"# TYPE llamacpp:{name} {kind}")
        lines.append(f"llamacpp:{name} {_fmt(val)}")
    return "\n".join(lines) + "\n"


def now_created() -> int:
    return int(time.time())
