"""Scenario loading: every bad input is one line naming file, line, field and fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from stress.errors import ScenarioError
from stress.scenario import load_scenario, with_overrides

ROOT = Path(__file__).resolve().parents[1]

GOOD = """\
name: t
target: {{url: sim}}
users:
  count: 2
duration: 5s
conversation:
  turn:
    paste: {{corpus: {corpus}, tokens: [100, 200]}}
    ask: ["Summarise."]
"""


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "docs").mkdir(exist_ok=True)
    (tmp_path / "docs" / "a.txt").write_text("Some text.\n\nMore text.\n")
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return p


def problems(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(ScenarioError) as e:
        load_scenario(write(tmp_path, text))
    return [p.render() for p in e.value.problems]


def test_good_scenario_loads_and_resolves_corpus_relative_to_file(tmp_path: Path) -> None:
    loaded = load_scenario(write(tmp_path, GOOD.format(corpus="docs")))
    assert loaded.scenario.users.count == 2 and loaded.scenario.duration == 5.0
    paste = loaded.scenario.conversation.turn.paste
    assert paste is not None and loaded.resolve(paste.corpus) == (tmp_path / "docs").resolve()


@pytest.mark.parametrize("path", sorted((ROOT / "scenarios").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_scenarios_validate(path: Path) -> None:
    load_scenario(path)


def test_unknown_key_names_line_and_suggests(tmp_path: Path) -> None:
    text = GOOD.format(corpus="docs").replace("  count: 2", "  count: 2\n  cuont: 3")
    [line] = problems(tmp_path, text)
    assert "s.yaml:5: users.cuont: unknown key" in line and "did you mean `count`" in line


def test_wrong_type_and_negative_count(tmp_path: Path) -> None:
    text = (
        GOOD.format(corpus="docs")
        .replace("count: 2", "count: -1")
        .replace("duration: 5s", "duration: soon")
    )
    lines = problems(tmp_path, text)
    assert any("s.yaml:4: users.count:" in x and "greater than or equal to 1" in x for x in lines)
    assert any("s.yaml:5: duration:" in x and "not a duration" in x for x in lines)


def test_unreadable_corpus(tmp_path: Path) -> None:
    [line] = problems(tmp_path, GOOD.format(corpus="nowhere"))
    assert "s.yaml:8: conversation.turn.paste.corpus: cannot read corpus" in line
    assert "fix:" in line


def test_literal_api_key_is_refused_and_not_echoed(tmp_path: Path) -> None:
    key = "sk-" + "abcdefghijklmnop1234"  # a fake key, built so scanners do not flag it
    text = GOOD.format(corpus="docs").replace(
        "target: {url: sim}", f"target:\n  url: sim\n  api_key: {key}"
    )
    [line] = problems(tmp_path, text)
    assert "target.api_key" in line and "literal API key" in line and "api_key_env" in line
    assert key not in line


def test_secret_looking_value_anywhere_is_refused(tmp_path: Path) -> None:
    text = GOOD.format(corpus="docs") + "request: {extra_body: {user: 'Bearer abcdefghijklmnop'}}\n"
    [line] = problems(tmp_path, text)
    assert "request.extra_body.user" in line


def test_yaml_syntax_error_has_line(tmp_path: Path) -> None:
    [line] = problems(tmp_path, "name: t\nusers: {count: 2\nduration: 5s\n")
    assert line.startswith(str(tmp_path / "s.yaml") + ":") and "YAML syntax" in line


def test_duplicate_key(tmp_path: Path) -> None:
    text = GOOD.format(corpus="docs").replace("duration: 5s", "duration: 5s\nduration: 6s")
    [line] = problems(tmp_path, text)
    assert ":6: duration: key appears twice" in line


def test_missing_bound_and_missing_file(tmp_path: Path) -> None:
    lines = problems(tmp_path, GOOD.format(corpus="docs").replace("duration: 5s\n", ""))
    assert any("`duration`" in x and "`rounds`" in x for x in lines)
    with pytest.raises(ScenarioError) as e:
        load_scenario(tmp_path / "missing.yaml")
    assert "cannot read the file" in str(e.value)


def test_env_interpolation_in_target_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = GOOD.format(corpus="docs").replace("{url: sim}", '{url: "${MY_T:-http://127.0.0.1:9}"}')
    assert load_scenario(write(tmp_path, text)).scenario.target.url == "http://127.0.0.1:9"
    monkeypatch.setenv("MY_T", "http://127.0.0.1:7777")
    assert load_scenario(write(tmp_path, text)).scenario.target.url == "http://127.0.0.1:7777"


def test_overrides_are_validated(tmp_path: Path) -> None:
    loaded = load_scenario(write(tmp_path, GOOD.format(corpus="docs")))
    assert with_overrides(loaded, users=5).scenario.users.count == 5
    with pytest.raises(ScenarioError):
        with_overrides(loaded, target="ftp://x")


def test_paste_must_fit_under_ceiling(tmp_path: Path) -> None:
    text = (
        GOOD.format(corpus="docs")
        .replace("  turn:", "  ceiling_tokens: 300\n  turn:")
        .replace("[100, 200]", "[100, 400]")
    )
    [line] = problems(tmp_path, text)
    assert "ceiling_tokens" in line


def test_simulator_settings_are_checked_with_lines(tmp_path: Path) -> None:
    text = GOOD.format(corpus="docs").replace(
        "target: {url: sim}", "target:\n  url: sim\n  sim: {kv_tokns: 5}"
    )
    [line] = problems(tmp_path, text)
    assert ":4: target.sim.kv_tokns: unknown key" in line and "kv_tokens" in line


def test_phases_are_validated(tmp_path: Path) -> None:
    base = GOOD.format(corpus="docs")
    dup = base + "phases: [{name: a, users: 1}, {name: a, users: 2}]\n"
    assert any("phase names must be unique" in x for x in problems(tmp_path, dup))
    unbounded = base.replace("duration: 5s\n", "") + "phases: [{name: a, users: 1}]\n"
    assert any("phase 'a' needs `duration` or `rounds`" in x for x in problems(tmp_path, unbounded))
    typo = base + "phases: [{name: a, userz: 1}]\n"
    [line] = problems(tmp_path, typo)
    assert "phases.0.userz: unknown key" in line and "did you mean `users`" in line


def test_phase_plan_inherits_and_repeats(tmp_path: Path) -> None:
    from stress.scenario import phase_plan

    text = GOOD.format(corpus="docs") + (
        "phases: [{name: a, users: 3}, {name: b, rounds: 2, paste_tokens: [50, 60], repeat: 2}]\n"
    )
    plan = phase_plan(load_scenario(write(tmp_path, text)).scenario)
    assert [label for label, _ in plan] == ["a", "b#1", "b#2"]
    a, b = plan[0][1], plan[1][1]
    assert a.users.count == 3 and a.duration == 5.0 and not a.phases
    assert b.users.count == 2 and b.rounds == 2 and b.duration is None
    assert b.conversation.turn.paste is not None and b.conversation.turn.paste.tokens == (50, 60)
