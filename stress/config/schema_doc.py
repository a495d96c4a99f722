"""The scenario reference, generated from the pydantic models in stress/config/scenario.py so it
cannot drift from what ``stress validate`` accepts:

- ``scenario_schema()``: a JSON Schema of the scenario file (draft-07, the dialect the YAML
  language server speaks), with every field's description (its ``Field(description=)`` or
  the docstring under it), default and an example; ``stress schema`` prints it and
  ``stress/data/scenarios/stress-scenario.schema.json`` ships it next to the scenarios;
- ``reference_markdown()``: docs/scenarios.md's tables (field, type, default, unit,
  meaning, example), made from that schema.

``python -m stress.config.schema_doc`` prints the tables; ``--write`` rewrites both files (a test
keeps them in sync).
"""

from __future__ import annotations

import ast
import inspect
import itertools
import json
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue

from stress.config.bundled import SCHEMA_FILE
from stress.config.scenario import Scenario, _one_or_range
from stress.core.durations import parse_duration

if TYPE_CHECKING:  # pydantic's own dependency: only its types are named here
    from pydantic_core import core_schema

DRAFT = "http://json-schema.org/draft-07/schema#"
_DEFS = "#/definitions/"
DURATION_TEXT: dict[str, Any] = {
    "type": "string",
    "pattern": r"^\s*(\d+(\.\d+)?|(\d+(\.\d+)?\s*([mM][sS]|[sSmMhHdD])\s*)+)$",
    "description": "a duration: 250ms, 30s, 5m, 1h30m, 1d (or a number of seconds)",
}
"""What ``stress.core.durations.parse_duration`` accepts as text."""
DOC = Path(__file__).resolve().parents[2] / "docs" / "scenarios.md"
BEGIN = (
    "<!-- generated from stress/config/scenario.py: "
    "python -m stress.config.schema_doc --write -->\n"
)
END = "<!-- end generated -->"
SIM_DOC = "simulator.md#config-fields-simconfig"

EXAMPLES: dict[str, Any] = {
    "name": "my_soak",
    "description": "Eight users, long pastes, one hour.",
    "duration": "60m",
    "rounds": 20,
    "seed": 42,
    "workers": 4,
    "target.url": "${STRESS_TARGET:-http://127.0.0.1:8000}",
    "target.model": "Qwen/Qwen3-8B",
    "target.api_key_env": "STRESS_API_KEY",
    "target.api_key_required": True,
    "target.api_key_file": "~/.config/stress/key",
    "target.server": "vllm",
    "target.tokenizer": "server",
    "target.headers": {"X-Team": "inference"},
    "target.sim": {"time_scale": 20, "kv_tokens": 65536},
    "users.count": 8,
    "users.ramp_up": "60s",
    "users.think_time.distribution": "exponential",
    "users.think_time.min": "10s",
    "users.think_time.max": "30s",
    "users.think_time.mean": "20s",
    "conversation.system_prompt": "You are a meticulous analyst.",
    "conversation.cache": "cold",
    "conversation.ceiling_tokens": 50000,
    "conversation.start_tokens": [20000, 30000],
    "conversation.keep_reasoning": True,
    "conversation.turn.paste_on": "first",
    "conversation.turn.ask": ["Summarise the main points of this document."],
    "conversation.turn.paste.corpus": "bundled:en",
    "conversation.turn.paste.tokens": [3000, 8000],
    "request.max_tokens": 2000,
    "request.temperature": 0.2,
    "request.top_p": 0.95,
    "request.reasoning": "off",
    "request.extra_body": {"top_k": 20},
    "timeouts.connect": "5s",
    "timeouts.first_token": "600s",
    "timeouts.stall": "60s",
    "timeouts.total": "30m",
    "timeouts.drain": "120s",
    "warmup.rounds": 1,
    "limits.max_total_tokens": 200000000,
    "limits.max_error_rate": 0.5,
    "limits.min_requests": 50,
    "telemetry.interval": "2s",
    "telemetry.hang_after": "90s",
    "telemetry.server_metrics": False,
    "telemetry.gpus": ["GPU-5b2c1f3e"],
    "slo.ttft_p95": "5s",
    "slo.itl_p95": "150ms",
    "slo.decode_tok_s_p50": 20,
    "slo.error_rate": 0.02,
    "slo.tiers": {"interactive": {"ttft_p95": "2s"}, "batch": {"ttft_p95": "30s"}},
    "search.axis": "length",
    "search.start": 2,
    "search.factor": 1.5,
    "search.max_users": 32,
    "search.width": 2,
    "search.repeat": 3,
    "search.max_repeat": 8,
    "search.confidence": 0.95,
    "search.length_start": 4000,
    "search.length_max": 60000,
    "search.length_width": 4000,
    "search.lengths": [2000, 8000, 32000],
    "search.min_requests": 60,
    "connection.reuse": False,
    "connection.limit": 64,
    "arrivals.rate": 6,
    "arrivals.process": "gamma",
    "arrivals.burstiness": 2,
    "arrivals.rounds": [2, 6],
    "arrivals.max_concurrent": 24,
    "arrivals.warmup": "2m",
    "replay.trace": "traces/mooncake_trace.jsonl",
    "replay.format": "mooncake",
    "replay.corpus": "bundled:en",
    "replay.block_size": 512,
    "replay.speed": 2,
    "replay.per_run": False,
    "replay.warmup": "1m",
    "arrivals.schedule[].at": "30m",
    "arrivals.schedule[].rate": 12,
    "phases[].name": "users-3",
    "phases[].users": 3,
    "phases[].duration": "5m",
    "phases[].rounds": 2,
    "phases[].warmup_rounds": 1,
    "phases[].paste_tokens": [6000, 6000],
    "phases[].start_tokens": 30000,
    "phases[].ask": ["What changed since the last document?"],
    "phases[].think_time": {"min": "2s", "max": "5s"},
    "phases[].repeat": 2,
}
"""One example per field, all of a mapping's together making a valid mapping (a test
checks them against the models and the schema); a field missing here is a test failure."""

_DURATION_UNIT = "seconds, or `250ms`, `30s`, `5m`, `1h30m`"
UNITS: dict[str, str] = {
    "rounds": "rounds per user",
    "seed": "",
    "workers": "processes",
    "users.count": "users",
    "conversation.ceiling_tokens": "tokens",
    "conversation.start_tokens": "tokens (server's count)",
    "conversation.turn.paste.tokens": "tokens (server's count)",
    "request.max_tokens": "tokens",
    "request.temperature": "",
    "request.top_p": "",
    "warmup.rounds": "rounds per user",
    "limits.max_total_tokens": "tokens",
    "limits.max_error_rate": "share of requests (0-1)",
    "limits.min_requests": "requests",
    "slo.decode_tok_s_p50": "tokens/s",
    "slo.error_rate": "share of requests (0-1)",
    "search.start": "users",
    "search.factor": "multiplier",
    "search.max_users": "users",
    "search.width": "users",
    "search.repeat": "passes",
    "search.max_repeat": "passes",
    "search.confidence": "probability (0-1)",
    "search.length_start": "tokens",
    "search.length_max": "tokens",
    "search.length_width": "tokens",
    "search.lengths": "tokens",
    "search.min_requests": "requests",
    "connection.limit": "connections",
    "arrivals.rate": "sessions per minute",
    "arrivals.burstiness": "coefficient of variation of the gaps",
    "arrivals.rounds": "rounds per session",
    "arrivals.max_concurrent": "sessions",
    "replay.block_size": "tokens per hash id",
    "replay.speed": "x the trace's pace",
    "arrivals.schedule[].rate": "sessions per minute",
    "phases[].users": "users",
    "phases[].rounds": "rounds per user",
    "phases[].warmup_rounds": "rounds per user",
    "phases[].paste_tokens": "tokens (server's count)",
    "phases[].start_tokens": "tokens (server's count)",
    "phases[].repeat": "passes",
}
"""The unit of every numeric field that is not a duration ('' for a plain number); a test
says when a numeric field is missing here."""


class _Generator(GenerateJsonSchema):
    """pydantic's schema, plus what the ``BeforeValidator``s accept: a duration may be
    text (``30s``), a token range may be one number (``30000`` = ``[30000, 30000]``)."""

    def function_before_schema(
        self, schema: core_schema.BeforeValidatorFunctionSchema
    ) -> JsonSchemaValue:
        inner = super().function_before_schema(schema)
        function = schema["function"]["function"]
        if function is parse_duration:
            return {"anyOf": [inner, dict(DURATION_TEXT)]}
        if function is _one_or_range:
            return {"anyOf": [{"type": "integer", "minimum": 0}, inner]}
        return inner


def _text(doc: str) -> str:
    """A docstring as one line of Markdown."""
    return re.sub(r"``([^`]+)``", r"`\1`", " ".join(doc.split()))


def _field_docs(cls: type) -> dict[str, str]:
    """The docstring written under each field of ``cls``."""
    try:
        tree = ast.parse(inspect.cleandoc("\n" + inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    out: dict[str, str] = {}
    for node, after in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            out[node.target.id] = _text(after.value.value)
    return out


def _models(root: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """Every model reachable from ``root``, by class name (the schema's definition names)."""
    found: dict[str, type[BaseModel]] = {}

    def visit(model: type[BaseModel]) -> None:
        if model.__name__ in found:
            return
        found[model.__name__] = model
        for field in model.model_fields.values():
            for t in _types(field.annotation):
                visit(t)

    visit(root)
    return found


def _types(annotation: Any) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in getattr(annotation, "__args__", ()):
        yield from _types(arg)


_BOUNDS = {"ge": "minimum", "gt": "exclusiveMinimum", "le": "maximum", "lt": "exclusiveMaximum"}


def _tidy(node: Any) -> Any:
    """Draft-07 spelling: ``definitions``, tuple ``items`` lists, standard bound keywords
    (pydantic writes a constraint on a validated type as ``ge`` / ``le``; the tighter of
    two bounds wins)."""
    if isinstance(node, list):
        return [_tidy(n) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _BOUNDS:
            continue
        if key == "$ref":
            out[key] = value.replace("#/$defs/", _DEFS)
        elif key in ("properties", "$defs"):
            out["definitions" if key == "$defs" else key] = {k: _tidy(v) for k, v in value.items()}
        else:
            out["items" if key == "prefixItems" else key] = _tidy(value)
    for key, name in _BOUNDS.items():
        if key in node:
            _bound(out, name, node[key])
    if "anyOf" in out:  # bounds belong to the numeric alternatives
        out["anyOf"] = _flat_branches(out)
        for name in _BOUNDS.values():
            if name in out:
                bound = out.pop(name)
                for branch in out["anyOf"]:
                    if branch.get("type") in ("number", "integer"):
                        _bound(branch, name, bound)
    return out


def _bound(node: dict[str, Any], name: str, value: float) -> None:
    """Set a bound keyword, keeping the tighter of two."""
    old = node.get(name)
    tighter = max if "inimum" in name else min
    node[name] = value if old is None else tighter(old, value)


def _flat_branches(node: dict[str, Any]) -> list[dict[str, Any]]:
    """``anyOf`` without nesting: a branch that is itself only an ``anyOf`` (with bounds)
    is replaced by its branches, each given those bounds."""
    flat: list[dict[str, Any]] = []
    for branch in node["anyOf"]:
        if set(branch) - {"anyOf", *_BOUNDS.values()}:
            flat.append(branch)
            continue
        extra = {k: v for k, v in branch.items() if k != "anyOf"}
        for sub in branch["anyOf"]:
            numeric = sub.get("type") in ("number", "integer")
            flat.append(sub | extra if numeric else sub)
    return flat


def scenario_schema() -> dict[str, Any]:
    """The JSON Schema of a scenario file (what ``stress schema`` prints)."""
    from stress.config.sim import SimConfig

    schema = Scenario.model_json_schema(schema_generator=_Generator)
    sim = SimConfig.model_json_schema(schema_generator=_Generator)
    defs: dict[str, Any] = schema.pop("$defs")
    for name, definition in [*sim.pop("$defs", {}).items(), ("SimConfig", sim)]:
        if name in defs:
            raise RuntimeError(f"two models named {name}: rename one (schema definitions)")
        defs[name] = definition
    # `target.sim` is a plain mapping in the model (SimConfig checks it when loaded):
    # the schema says what it holds, so editors complete it too
    defs["Target"]["properties"]["sim"] = {"$ref": "#/$defs/SimConfig", "default": {}}
    defs["Scenario"] = schema
    models = _models(Scenario) | _models(SimConfig)
    for name, definition in defs.items():
        docs = _field_docs(models[name]) if name in models else {}
        if "description" in definition:
            definition["description"] = _text(definition["description"])
        for field, prop in definition.get("properties", {}).items():
            prop.pop("title", None)
            if field in docs and "description" not in prop:
                prop["description"] = docs[field]
            if "description" in prop:
                prop["description"] = _text(prop["description"])
            if ("$ref" in prop or "allOf" in prop) and isinstance(prop.get("default"), dict):
                del prop["default"]  # a section's default is its fields' defaults
            info = models[name].model_fields.get(field) if name in models else None
            if info is not None and info.default_factory is not None and "$ref" not in prop:
                prop["default"] = info.get_default(call_default_factory=True)
    root = defs.pop("Scenario")
    for path, prop in _properties(root, defs):
        if path in EXAMPLES:
            prop["examples"] = [EXAMPLES[path]]
    out = {
        "$schema": DRAFT,
        "title": "stress scenario",
        "description": "A scenario file of stress, the load and soak tester for LLM inference "
        "servers (docs/scenarios.md). Generated from stress/config/scenario.py: `stress schema`.",
        **{k: v for k, v in root.items() if k not in ("title", "description")},
        "$defs": defs,
    }
    tidy: dict[str, Any] = _tidy(out)
    return tidy


def schema_json() -> str:
    """The schema as the shipped file holds it."""
    return json.dumps(scenario_schema(), indent=2, ensure_ascii=False) + "\n"


def _ref(prop: dict[str, Any]) -> str | None:
    """The definition a property's value is (directly, in a list, or unless null)."""
    for candidate in (prop, prop.get("items"), *prop.get("anyOf", ())):
        if isinstance(candidate, dict) and "$ref" in candidate:
            return str(candidate["$ref"]).rpartition("/")[2]
    return None


def _properties(
    model: dict[str, Any], defs: dict[str, Any], prefix: str = ""
) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(dotted path, property schema)`` for every field below ``model``, depth first;
    list items are ``name[]``. The simulator's settings are documented in docs/simulator.md
    and are not descended into."""
    for name, prop in model.get("properties", {}).items():
        path = f"{prefix}{name}"
        yield path, prop
        ref = _ref(prop)
        if ref is not None and ref != "SimConfig":
            is_list = prop.get("type") == "array" or "items" in prop
            yield from _properties(defs[ref], defs, f"{path}[]." if is_list else f"{path}.")


# --- the Markdown tables --------------------------------------------------------------


def _is_duration(prop: dict[str, Any]) -> bool:
    return any(
        b.get("pattern") == DURATION_TEXT["pattern"]
        for b in [prop, *prop.get("anyOf", ())]
        if isinstance(b, dict)
    )


def _branches(prop: dict[str, Any]) -> list[dict[str, Any]]:
    """The non-null alternatives of a property."""
    options = prop.get("anyOf") or [prop]
    return [b for b in options if b.get("type") != "null"]


def _duration_text(seconds: float) -> str:
    if seconds == 0:
        return "0s"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size and float(seconds / size).is_integer():
            return f"{int(seconds / size)}{unit}"
    return f"{seconds * 1000:g}ms"


def _number(v: float) -> str:
    return f"{v:,}" if isinstance(v, int) or not float(v).is_integer() else f"{int(v):,}"


def _bounds(b: dict[str, Any], show: Callable[[float], str] = _number) -> str:
    lo = b.get("minimum")
    hi = b.get("maximum")
    xlo = b.get("exclusiveMinimum")
    if lo is not None and hi is not None:
        return f" {show(lo)} to {show(hi)}"
    if xlo is not None and hi is not None:
        return f" > {show(xlo)}, ≤ {show(hi)}"
    if lo is not None:
        return f" ≥ {show(lo)}"
    if xlo is not None:
        return f" > {show(xlo)}"
    return ""


def _type(row: Row) -> str:
    prop = row.prop
    if _ref(prop) == "SimConfig":
        return f"mapping ([simulator settings]({SIM_DOC}))"
    if row.section is not None:
        link = f"[`{row.section}`](#{_anchor(row.section)})"
        return f"list of mappings: {link}" if "items" in prop else f"mapping: {link}"
    words: list[str] = []
    branches = _branches(prop)
    if _is_duration(prop):
        num = next((b for b in branches if b.get("type") == "number"), {})
        words.append("duration" + _bounds(num, _duration_text))
    else:
        for b in branches:
            words.append(_one_type(b))
    text = " or ".join(w for w in words if w)
    if len(branches) < len(prop.get("anyOf") or [prop]):
        text += " or null"
    return text


def _one_type(b: dict[str, Any]) -> str:
    if "enum" in b:
        return " | ".join(f"`{v}`" for v in b["enum"])
    if "const" in b:
        return f"`{b['const']}`"
    kind = b.get("type")
    if kind == "integer":
        return "integer" + _bounds(b)
    if kind == "number":
        return "number" + _bounds(b)
    if kind == "boolean":
        return "`true` | `false`"
    if kind == "string":
        if "pattern" in b:
            return "name (letters, digits, `_` `.` `-`)"
        return "text"
    if kind == "array":
        items = b.get("items")
        if isinstance(items, list):
            return "[min, max]"
        inner = _one_type(items) if isinstance(items, dict) else "values"
        return f"list of {inner}"
    if kind == "object":
        return "mapping"
    return "value"


def _yaml(value: Any, flow: bool = False) -> str:
    """A value as it is written in a scenario, on one line (``flow``: inside [...] or
    {...}); text is quoted only where YAML would read it otherwise."""
    import yaml

    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        wrapped = f"k: [{value}]" if flow else f"k: {value}"
        try:
            plain = yaml.safe_load(wrapped) == {"k": [value] if flow else value}
        except yaml.YAMLError:
            plain = False
        return value if plain and value else json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_yaml(v, True) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml(v, True)}" for k, v in value.items()) + "}"
    return str(value)


def _default(prop: dict[str, Any], required: bool) -> str:
    if required:
        return "required"
    if _ref(prop) == "SimConfig":
        return "simulator defaults"
    if "default" not in prop:
        return "per field" if _ref(prop) and "items" not in prop else ""
    value = prop["default"]
    if value is None:
        return "unset"
    if _is_duration(prop) and isinstance(value, int | float):
        return f"`{_duration_text(float(value))}`"
    if value == "":
        return '`""`'
    return f"`{_yaml(value)}`"


def _unit(path: str, prop: dict[str, Any]) -> str:
    if _is_duration(prop):
        return _DURATION_UNIT
    return UNITS.get(path, "")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _anchor(path: str) -> str:
    """GitHub's anchor for a ``### `path` `` heading."""
    return re.sub(r"[^a-z0-9_ -]", "", path.lower()).replace(" ", "-")


@dataclass(frozen=True, slots=True)
class Row:
    """One field of docs/scenarios.md's tables."""

    path: str
    """Dotted, list items as ``name[]``: ``phases[].think_time``."""
    prop: dict[str, Any]
    required: bool
    section: str | None
    """Where its mapping's fields are listed (the first section of that mapping)."""

    @property
    def name(self) -> str:
        return self.path.rpartition(".")[2]


def sections() -> list[tuple[str, str, list[Row]]]:
    """``(section path, its description, rows)``: the top level first, then each mapping
    where it first appears (a mapping used twice, like a think time, is listed once)."""
    schema = scenario_schema()
    defs = schema["definitions"]
    out: list[tuple[str, str, list[Row]]] = []
    listed: dict[str, str] = {}

    def walk(model: dict[str, Any], path: str, description: str) -> None:
        required = set(model.get("required", ()))
        rows: list[Row] = []
        new: list[tuple[str, str]] = []
        for name, prop in model.get("properties", {}).items():
            ref = _ref(prop)
            section = None
            if ref is not None and ref != "SimConfig":
                if ref not in listed:
                    listed[ref] = f"{path}{name}[]" if "items" in prop else f"{path}{name}"
                    new.append((ref, listed[ref]))
                section = listed[ref]
            rows.append(Row(f"{path}{name}", prop, name in required, section))
        out.append((path.rstrip("."), description, rows))
        for ref, sub in new:
            walk(defs[ref], f"{sub}.", defs[ref].get("description", ""))

    walk(schema, "", "")
    return out


def reference_markdown() -> str:
    """docs/scenarios.md's generated part: one table per mapping of the scenario."""
    lines: list[str] = []
    for path, description, rows in sections():
        lines.append(f"### `{path}`" if path else "### Top level")
        lines.append("")
        if description:
            lines += [description, ""]
        lines.append("| field | type | default | unit | meaning | example |")
        lines.append("|---|---|---|---|---|---|")
        for row in rows:
            example = EXAMPLES.get(row.path)
            cells = [
                f"`{row.name}`",
                _type(row),
                _default(row.prop, row.required),
                _unit(row.path, row.prop),
                row.prop.get("description", ""),
                "" if example is None else f"`{row.name}: {_yaml(example)}`",
            ]
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        lines.append("")
    return "\n".join(lines) + "\n"


def _replace_generated(doc: str, body: str) -> str:
    start = doc.index(BEGIN) + len(BEGIN)
    end = doc.index(END)
    return doc[:start] + body + doc[end:]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args not in ([], ["--write"]):
        print("usage: python -m stress.config.schema_doc [--write]", file=sys.stderr)
        return 2
    body = reference_markdown()
    if not args:
        print(body, end="")
        return 0
    if not DOC.is_file() or BEGIN not in DOC.read_text(encoding="utf-8"):
        print(
            f"{DOC}: missing or without its markers -- fix: run this in a checkout of stress",
            file=sys.stderr,
        )
        return 1
    DOC.write_text(_replace_generated(DOC.read_text(encoding="utf-8"), body), encoding="utf-8")
    SCHEMA_FILE.write_text(schema_json(), encoding="utf-8")
    print(f"wrote {DOC} and {SCHEMA_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
