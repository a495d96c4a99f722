"""Scenario loading: every bad input is one line naming file, line, field and fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from stress.config.scenario import load_scenario, with_overrides
from stress.core.errors import ScenarioError

ROOT = Path(__file__).resolve().parents[2]

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
    assert "s.yaml:8: conversation.turn.paste.corpus: corpus " in line and "does not exist" in line
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
    assert "missing.yaml: (file): no such file -- fix: check the path" in str(e.value)


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
    assert any(
        ":10: phases.1.name: phase name 'a' is used twice" in x for x in problems(tmp_path, dup)
    )
    unbounded = base.replace("duration: 5s\n", "") + "phases: [{name: a, users: 1}]\n"
    lines = problems(tmp_path, unbounded)
    assert any(":9: phases.0: phase 'a' needs `duration` or `rounds`" in x for x in lines)
    typo = base + "phases: [{name: a, userz: 1}]\n"
    [line] = problems(tmp_path, typo)
    assert "phases.0.userz: unknown key" in line and "did you mean `users`" in line


def test_phase_plan_inherits_and_repeats(tmp_path: Path) -> None:
    from stress.config.scenario import phase_plan

    text = GOOD.format(corpus="docs") + (
        "phases: [{name: a, users: 3}, {name: b, rounds: 2, paste_tokens: [50, 60], repeat: 2}]\n"
    )
    plan = phase_plan(load_scenario(write(tmp_path, text)).scenario)
    assert [label for label, _ in plan] == ["a", "b#1", "b#2"]
    a, b = plan[0][1], plan[1][1]
    assert a.users.count == 3 and a.duration == 5.0 and not a.phases
    assert b.users.count == 2 and b.rounds == 2 and b.duration is None
    assert b.conversation.turn.paste is not None and b.conversation.turn.paste.tokens == (50, 60)


# --- issue 14: conversations that start at a given length -------------------------------


def test_start_tokens_is_a_number_or_a_range(tmp_path: Path) -> None:
    from stress.config.scenario import phase_plan

    text = GOOD.format(corpus="docs").replace("  turn:", "  start_tokens: 8000\n  turn:")
    conv = load_scenario(write(tmp_path, text)).scenario.conversation
    assert conv.start_tokens == (8000, 8000) and conv.ceiling_tokens > 8000
    ranged = text.replace("start_tokens: 8000", "start_tokens: [4000, 9000]")
    assert load_scenario(write(tmp_path, ranged)).scenario.conversation.start_tokens == (4000, 9000)
    assert (
        load_scenario(
            write(tmp_path, GOOD.format(corpus="docs"))
        ).scenario.conversation.start_tokens
        is None
    )
    sweep = (
        text
        + "phases: [{name: empty, start_tokens: 0}, {name: long, start_tokens: [20000, 30000]},"
        + " {name: same}]\n"
    )
    plan = phase_plan(load_scenario(write(tmp_path, sweep)).scenario)
    starts = [step.conversation.start_tokens for _, step in plan]
    assert starts == [(0, 0), (20000, 30000), (8000, 8000)]  # a phase without it inherits


@pytest.mark.parametrize(
    ("start", "extra", "where", "says"),
    [
        ("40000", "", ":7: conversation.start_tokens:", "below conversation.ceiling_tokens"),
        ("[9000, 4000]", "", ":7: conversation.start_tokens:", "0 <= min <= max"),
        ("-5", "", ":7: conversation.start_tokens:", "0 <= min <= max"),
        ("true", "", ":7: conversation.start_tokens", "list like [1000, 4000]"),
        ("[1.5, 2]", "", ":7: conversation.start_tokens", "whole number"),
        (
            "1000",
            "phases: [{name: a, users: 1}, {name: b, start_tokens: 32000}]\n",
            ":11: phases.1.start_tokens: phase 'b':",
            "below conversation.ceiling_tokens",
        ),
    ],
)
def test_start_tokens_errors_are_one_line(
    tmp_path: Path, start: str, extra: str, where: str, says: str
) -> None:
    text = GOOD.format(corpus="docs").replace("  turn:", f"  start_tokens: {start}\n  turn:")
    [line] = problems(tmp_path, text + extra)
    assert where in line and says in line and "fix:" in line, line


def test_start_tokens_needs_a_paste_corpus(tmp_path: Path) -> None:
    text = GOOD.format(corpus="docs").replace(
        "  turn:\n    paste: {corpus: docs, tokens: [100, 200]}\n", "  start_tokens: 500\n  turn:\n"
    )
    [line] = problems(tmp_path, text)
    assert "conversation.start_tokens:" in line and "add conversation.turn.paste" in line


# --- issue 12: values that validate must also run; hostile files; leaks ---------------


@pytest.mark.parametrize(
    ("old", "new", "where", "says"),
    [
        ("duration: 5s", "duration: .nan", ":5: duration:", "finite"),
        ("duration: 5s", "duration: .inf", ":5: duration:", "finite"),
        ("duration: 5s", "duration: 0s", ":5: duration:", "greater than 0"),
        ("duration: 5s", "duration: 1000d", ":5: duration:", "less than or equal"),
        ("duration: 5s", "duration: 5s\ntimeouts: {stall: .inf}", ":6: timeouts.stall:", "finite"),
        ("duration: 5s", "duration: 5s\ntimeouts: {total: 0}", ":6: timeouts.total:", "than 0"),
        (
            "duration: 5s",
            "duration: 5s\ntelemetry: {interval: 0}",
            ":6: telemetry.interval:",
            "0.1",
        ),
        ("count: 2", "count: true", ":4: users.count:", "valid integer"),
        ("count: 2", "count: 2.0", ":4: users.count:", "valid integer"),
        ("count: 2", 'count: "2"', ":4: users.count:", "valid integer"),
        ("count: 2", "count: 100000", ":4: users.count:", "10,000 users per process"),
        ("count: 2", "count: 36893488147419103232", ":4: users.count:", "less than or equal"),
        ("duration: 5s", "duration: 5s\nrounds: true", ":6: rounds:", "valid integer"),
        ("duration: 5s", "duration: 5s\nseed: 36893488147419103232", ":6: seed:", "less than"),
        (
            "duration: 5s",
            "duration: 5s\nrequest: {temperature: true}",
            ":6: request.temperature",
            "true/false",
        ),
        (
            "duration: 5s",
            "duration: 5s\nrequest: {max_tokens: 18446744073709551617}",
            ":6: request.max_tokens:",
            "less than",
        ),
        (
            "duration: 5s",
            "duration: 5s\nrequest: {extra_body: {n: 36893488147419103232}}",
            ":6: request.extra_body.n:",
            "64 bits",
        ),
        (
            "[100, 200]",
            "[100, 36893488147419103232]",
            ":8: conversation.turn.paste.tokens",
            "max <=",
        ),
        ("[100, 200]", "[true, 200]", ":8: conversation.turn.paste.tokens.0", "valid integer"),
        (
            "duration: 5s",
            "duration: 5s\nphases: [{name: a, users: 100000}]",
            ":6: phases.0.users:",
            "10,000",
        ),
        (
            "{url: sim}",
            '{url: sim, headers: {"X-A": "a\\nb"}}',
            ":2: target.headers.X-A:",
            "line break",
        ),
        ("{url: sim}", '{url: "http://h:8000/?api_key=abcdefgh12"}', ":2: target.url:", "?query"),
    ],
)
def test_values_that_would_break_the_run_are_refused(
    tmp_path: Path, old: str, new: str, where: str, says: str
) -> None:
    text = GOOD.format(corpus="docs")
    assert old in text
    [line] = problems(tmp_path, text.replace(old, new, 1))
    assert where in line and says in line and " -- fix: " in line, line


def test_overrides_go_through_the_same_checks(tmp_path: Path) -> None:
    loaded = load_scenario(write(tmp_path, GOOD.format(corpus="docs")))
    for kwargs, option in [
        ({"users": 100_000}, "--users"),
        ({"duration": float("nan")}, "--duration"),
        ({"duration": float("inf")}, "--duration"),
        ({"duration": 0.0}, "--duration"),
        ({"rounds": 10**30}, "--rounds"),
    ]:
        with pytest.raises(ScenarioError) as e:
            with_overrides(loaded, **kwargs)  # type: ignore[arg-type]
        [line] = [p.render() for p in e.value.problems]
        assert line.startswith(f"stress run: {option} (overrides ") and " -- fix: " in line


BOMB = "\n".join(
    ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    + [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (BOMB + "\nname: t\n", "s.yaml:6: (yaml): the YAML expands to more than 100,000 values"),
        ("name: t\nx: &a [1, *a]\n", "s.yaml:2: (yaml): alias *a refers to itself"),
        ("name: t\nx: *nope\n", "s.yaml:2: (yaml): alias *nope has no &nope anchor"),
        (
            "name: t\nx: " + "[" * 2000 + "]" * 2000 + "\n",
            "s.yaml:2: (yaml): the YAML nests deeper",
        ),
    ],
)
def test_hostile_yaml_is_one_line_with_its_line(tmp_path: Path, text: str, expected: str) -> None:
    [line] = problems(tmp_path, text)
    assert expected in line and " -- fix: " in line


def test_small_anchors_still_work(tmp_path: Path) -> None:
    text = GOOD.format(corpus="docs").replace('ask: ["Summarise."]', 'ask: &q ["Summarise."]')
    loaded = load_scenario(write(tmp_path, text + "phases: [{name: a, users: 1, ask: *q}]\n"))
    assert loaded.scenario.phases[0].ask == ["Summarise."]


def test_scenario_file_size_is_limited(tmp_path: Path) -> None:
    text = GOOD.format(corpus="docs") + "description: " + "x" * (1 << 20) + "\n"
    [line] = problems(tmp_path, text)
    assert "s.yaml: (file): the file is" in line and "1,048,576 bytes (1 MiB)" in line


def test_a_folder_or_device_is_not_called_missing(tmp_path: Path) -> None:
    for path, says in [(tmp_path, "is a folder"), (Path("/dev/null"), "not a regular file")]:
        with pytest.raises(ScenarioError) as e:
            load_scenario(path)
        assert says in str(e.value) and "no such file" not in str(e.value)


def test_corpus_is_confined(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STRESS_CORPUS_ROOTS", raising=False)
    for corpus in ["/proc/self/environ", "/etc", "/dev/zero"]:
        [line] = problems(tmp_path, GOOD.format(corpus=corpus))
        assert ":8: conversation.turn.paste.corpus: corpus" in line and "outside" in line
    (tmp_path / "docs" / "env.txt").symlink_to("/proc/self/environ")
    [line] = problems(tmp_path, GOOD.format(corpus="docs/env.txt"))
    assert "outside" in line
    # a link inside the corpus that leads out of it is not a document
    load_scenario(write(tmp_path, GOOD.format(corpus="docs")))
    from stress.load.corpus import corpus_files

    assert [p.name for p in corpus_files(tmp_path / "docs")] == ["a.txt"]
    # an outside folder is allowed when the user says so, by flag or variable
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "b.md").write_text("Elsewhere.\n")
    text = GOOD.format(corpus=outside)
    assert "outside" in problems(tmp_path / "docs", text)[0]
    load_scenario(write(tmp_path, text), corpus_roots=[outside])
    monkeypatch.setenv("STRESS_CORPUS_ROOTS", f"/nonexistent:{outside}")
    load_scenario(write(tmp_path, text))


def test_shipped_scenarios_reach_the_bundled_corpora_from_anywhere(tmp_path: Path) -> None:
    text = GOOD.format(corpus=ROOT / "corpora" / "en")
    assert load_scenario(write(tmp_path, text)).scenario.conversation.turn.paste is not None


def test_url_credentials_are_stripped_and_redacted(tmp_path: Path) -> None:
    from stress.core.secrets import REDACTOR

    password = 'pa:ss@w"rd-9f3'
    from urllib.parse import quote

    url = f"http://bob:{quote(password, safe='')}@127.0.0.1:8000"
    text = GOOD.format(corpus="docs").replace("{url: sim}", f'{{url: "{url}"}}')
    t = load_scenario(write(tmp_path, text)).scenario.target
    assert t.url == "http://127.0.0.1:8000"
    import base64

    token = base64.b64encode(f"bob:{password}".encode()).decode()
    assert t.headers == {"Authorization": f"Basic {token}"}
    assert REDACTOR.text(f"{url} {token} {password}") == "http://***@127.0.0.1:8000 *** ***"
    short = GOOD.format(corpus="docs").replace("{url: sim}", '{url: "http://a:b@h:1"}')
    [line] = problems(tmp_path, short)
    assert ":2: target.url: the user:password in the URL is shorter than 8" in line
    assert "a:b" not in line


def test_secret_headers_are_still_refused(tmp_path: Path) -> None:
    text = GOOD.format(corpus="docs").replace("{url: sim}", "{url: sim, headers: {X-Api-Key: v}}")
    [line] = problems(tmp_path, text)
    assert ":2: target.headers.X-Api-Key: this header would put a secret" in line


def test_an_extreme_time_scale_is_an_input_error_not_a_crash(tmp_path: Path) -> None:
    from stress.config.scenario import time_scaled

    sc = load_scenario(write(tmp_path, GOOD.format(corpus="docs"))).scenario
    assert time_scaled(sc, 60).timeouts.stall == pytest.approx(2.0)
    with pytest.raises(ScenarioError, match="time scale closer to 1"):
        time_scaled(sc, 1e-300)
