"""The scenario reference: `stress schema`, the shipped schema file and docs/scenarios.md
are generated from stress/config/scenario.py and kept in sync; the schema accepts what
`stress validate` accepts (the bundled scenarios, every documented example) and refuses
what editors should flag."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from stress.cli.main import main
from stress.config import schema_doc
from stress.config.bundled import SCENARIOS, SCHEMA_FILE
from stress.config.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
REGENERATE = "regenerate them with `python -m stress.config.schema_doc --write`"

BASE: dict[str, Any] = {
    "name": "t",
    "target": {"url": "sim"},
    "duration": "1m",
    "conversation": {
        "turn": {"paste": {"corpus": "bundled:en", "tokens": [100, 200]}, "ask": ["Q?"]}
    },
}


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return schema_doc.scenario_schema()


@pytest.fixture(scope="module")
def validator(schema: dict[str, Any]) -> jsonschema.Draft7Validator:
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def test_docs_and_shipped_schema_are_generated_from_the_models() -> None:
    docs = (ROOT / "docs" / "scenarios.md").read_text()
    start = docs.index(schema_doc.BEGIN) + len(schema_doc.BEGIN)
    end = docs.index(schema_doc.END)
    assert docs[start:end] == schema_doc.reference_markdown(), (
        f"docs/scenarios.md's tables are out of date: {REGENERATE}"
    )
    assert SCHEMA_FILE.read_text() == schema_doc.schema_json(), (
        f"{SCHEMA_FILE.name} is out of date: {REGENERATE}"
    )


def test_stress_schema_prints_the_shipped_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    assert capsys.readouterr().out == SCHEMA_FILE.read_text()


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda p: p.name)
def test_bundled_scenarios_pass_the_schema(
    path: Path, validator: jsonschema.Draft7Validator
) -> None:
    errors = [e.message for e in validator.iter_errors(yaml.safe_load(path.read_text()))]
    assert not errors


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"users": {"cuont": 3}}, "'cuont' was unexpected"),
        ({"duration": "5 minutes"}, "is not valid under any of the given schemas"),
        ({"users": {"count": 0}}, "less than the minimum of 1"),
        ({"users": {"count": True}}, "True is not of type 'integer'"),
        ({"conversation": {"cache": "warm", "turn": BASE["conversation"]["turn"]}}, "'warm'"),
        ({"target": {"url": "sim", "sim": {"kv_tokns": 1}}}, "'kv_tokns' was unexpected"),
    ],
)
def test_the_schema_flags_what_validate_refuses(
    validator: jsonschema.Draft7Validator, change: dict[str, Any], says: str
) -> None:
    errors = [e.message for e in validator.iter_errors(BASE | change)]
    assert any(says in m for m in errors), errors


def test_durations_and_token_ranges_accept_every_written_form(
    validator: jsonschema.Draft7Validator,
) -> None:
    for duration in (30, 2.5, "250ms", "30s", "5m", "1h30m", "1d", "90"):
        assert validator.is_valid(BASE | {"duration": duration}), duration
    conv = BASE["conversation"]
    for start in (30000, [20000, 30000], 0):
        assert validator.is_valid(BASE | {"conversation": conv | {"start_tokens": start}})


def _documented() -> list[schema_doc.Row]:
    return [row for _, _, rows in schema_doc.sections() for row in rows]


def test_every_field_has_a_description_an_example_and_a_unit() -> None:
    """A new field in stress/config/scenario.py needs its docstring, an example in
    ``schema_doc.EXAMPLES`` and, when it is a number, its unit in ``schema_doc.UNITS``."""
    rows = _documented()
    paths = {row.path for row in rows}
    assert not [r.path for r in rows if not r.prop.get("description")], "no description"
    needs_example = {r.path for r in rows if r.section is None}  # a mapping's are its fields
    assert not sorted(needs_example - set(schema_doc.EXAMPLES)), "no example in EXAMPLES"
    assert not sorted(set(schema_doc.EXAMPLES) - paths), "EXAMPLES of fields that are gone"
    numeric = {
        r.path
        for r in rows
        if not schema_doc._is_duration(r.prop)
        and any(
            b.get("type") in ("integer", "number")
            or (b.get("type") == "array" and "integer" in json.dumps(b.get("items")))
            for b in schema_doc._branches(r.prop)
        )
    }
    assert not sorted(numeric - set(schema_doc.UNITS)), "no unit in UNITS"
    assert not sorted(set(schema_doc.UNITS) - paths), "UNITS of fields that are gone"


def _with(examples: dict[str, Any]) -> dict[str, Any]:
    """``BASE`` with each value at its documented path (``phases[].x``: in one phase)."""
    data: dict[str, Any] = json.loads(json.dumps(BASE))
    for path, value in examples.items():
        node = data
        parts = path.split(".")
        for part in parts[:-1]:
            if part.endswith("[]"):  # a list of mappings: phases need a name, others not
                first = {"name": "p"} if part == "phases[]" else {}
                node = node.setdefault(part[:-2], [first])[0]
            else:  # arrivals needs its rate even when only its schedule is shown
                seed = {"rate": schema_doc.EXAMPLES["arrivals.rate"]} if part == "arrivals" else {}
                node = node.setdefault(part, seed)
        node[parts[-1]] = value
    return data


@pytest.mark.parametrize("section", [path for path, _, _ in schema_doc.sections()])
def test_the_documented_examples_make_a_valid_scenario(
    section: str, tmp_path: Path, validator: jsonschema.Draft7Validator
) -> None:
    """A mapping's examples, all at once (think_time's min alone would exceed its max)."""
    [rows] = [rows for path, _, rows in schema_doc.sections() if path == section]
    examples = {r.path: schema_doc.EXAMPLES[r.path] for r in rows if r.path in schema_doc.EXAMPLES}
    data = _with(examples)
    assert not [e.message for e in validator.iter_errors(data)]
    file = tmp_path / "s.yaml"
    file.write_text(yaml.safe_dump(data))
    load_scenario(file, check_files=False)  # the models agree
    if section == "target":  # checked against the simulator's settings only with url: sim
        from stress.sim import SimConfig

        SimConfig.model_validate(schema_doc.EXAMPLES["target.sim"])
