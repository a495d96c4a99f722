"""What a run ran against: the facts two runs must share to be comparable (field note 8).

A flat ``name -> value`` map: scenario hash, tool and library versions, server kind,
version and effective configuration (whatever the manifest records), model, KV pool, GPUs
and driver. ``stress compare`` diffs these, so a flag that did not take effect shows up as
"no change in the server's effective configuration".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stress.analysis.rundata import RunData
from stress.analysis.server_kind import server_kind
from stress.collectors.gpu.model import card_label

#: What the pre-flight probe learnt from the server itself (never its URL or port).
PROBE_KEYS = (
    "kind",
    "version",
    "model",
    "context_length",
    "kv_pool_tokens",
    "prefix_caching",
    "spec_decode",
    "slot_n_ctx",
)

#: Keys whose values come from the server itself (not from what we asked for).
SERVER_REPORTED_PREFIXES = ("server.", "model", "gpu")


def _flatten(prefix: str, obj: Any, out: dict[str, str]) -> None:
    if isinstance(obj, Mapping):
        for k, v in sorted(obj.items()):
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(obj, list) and not all(isinstance(x, str | int | float) for x in obj):
        for i, v in enumerate(obj):
            _flatten(f"{prefix}[{i}]", v, out)
    elif obj is not None and obj != "" and obj != {} and obj != []:
        out[prefix] = ", ".join(map(str, obj)) if isinstance(obj, list) else str(obj)


def fingerprint(run: RunData) -> dict[str, str]:
    m = run.manifest
    sc = run.scenario
    out: dict[str, str] = {}
    out["scenario"] = run.scenario_name
    out["scenario.sha256"] = (m.scenario_sha256 or "-")[:16]
    for k in ("count",):
        if (sc.get("users") or {}).get(k) is not None:
            out["scenario.users"] = str(sc["users"][k])
    conv = sc.get("conversation") or {}
    for k in ("cache", "ceiling_tokens"):
        if conv.get(k) is not None:
            out[f"scenario.{k}"] = str(conv[k])
    if (sc.get("request") or {}).get("max_tokens") is not None:
        out["scenario.max_tokens"] = str(sc["request"]["max_tokens"])
    _flatten("sim", (sc.get("target") or {}).get("sim") or {}, out)
    _flatten("tool", m.versions, out)
    out["target"] = m.target_url or "-"
    out["model"] = m.model or "-"
    if m.models and m.models[0].get("max_model_len"):
        out["model.max_model_len"] = str(m.models[0]["max_model_len"])
    out["server.kind"] = str((sc.get("target") or {}).get("server") or "auto")
    server = run.collector("server")
    if server.get("dialect"):
        out["server.dialect"] = str(server["dialect"])
    if server.get("kv_pool_tokens"):
        out["server.kv_pool_tokens"] = f"{float(server['kv_pool_tokens']):.0f}"
    if m.server_kind:
        out["server.kind"] = m.server_kind
    probe = m.probe
    # llama.cpp's kv_pool_tokens is its slots' n_ctx summed, no pool: slot_n_ctx says it
    pooled = server_kind(run) != "llamacpp"
    if not pooled:
        out.pop("server.kv_pool_tokens", None)
    for key in PROBE_KEYS if pooled else tuple(k for k in PROBE_KEYS if k != "kv_pool_tokens"):
        if probe.get(key) not in (None, "", []):
            out[f"server.{key}"] = str(probe[key])
    _flatten("server.config", probe.get("effective_config") or {}, out)
    if m.time_scale != 1.0:
        out["sim.time_scale"] = str(m.time_scale)
    for i, c in enumerate(run.gpu_cards):
        if c.get("simulated") is True:
            out[f"gpu[{i}]"] = (
                f"{card_label(c.get('name'), c.get('bus_id'))} simulated by the built-in "
                f"simulator, power limit {c.get('power_limit_w')} W"
            )
            continue
        pcie = c.get("pcie") or {}
        out[f"gpu[{i}]"] = (
            f"{card_label(c.get('name'), c.get('bus_id'))} bus {c.get('bus_id')} "
            f"driver {c.get('driver')} "
            f"power limit {c.get('power_limit_w')} W PCIe gen{pcie.get('gen_max')} "
            f"x{pcie.get('width')}/x{pcie.get('width_max')}"
        )
    host = m.host
    if host.get("hostname"):
        out["host"] = f"{host.get('hostname')} ({host.get('cpus')} CPUs)"
    return out


def group_key(fp: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """Runs with equal keys are repeats of one configuration and are pooled."""
    return tuple(sorted(fp.items()))


def diff(fps: list[dict[str, str]]) -> list[tuple[str, list[str]]]:
    """Keys whose values differ between fingerprints, with each one's value."""
    keys = sorted({k for fp in fps for k in fp})
    return [
        (k, [fp.get(k, "-") for fp in fps]) for k in keys if len({fp.get(k, "-") for fp in fps}) > 1
    ]


def server_unchanged(changed: list[tuple[str, list[str]]]) -> bool:
    """True when what we asked for changed but nothing the server reports did."""
    asked = [k for k, _ in changed if k.startswith(("scenario", "sim"))]
    reported = [k for k, _ in changed if k.startswith(SERVER_REPORTED_PREFIXES)]
    return bool(asked) and not reported
