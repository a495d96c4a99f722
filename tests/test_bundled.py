"""Bundled scenarios and corpora: names resolve from any directory, `stress scenarios`
lists them, `stress init` copies one that still runs, and the repository's paths still
lead to them. The installed-wheel test is tests/test_wheel.py."""

from __future__ import annotations

import tomllib
from fnmatch import fnmatch
from pathlib import Path

import pytest

from stress.cli.main import main
from stress.config.bundled import (
    CORPORA,
    DATA,
    SCENARIOS,
    SCHEMA_FILE,
    SCHEMA_NAME,
    bundled_corpus,
    corpus_names,
    describe,
    find_scenario,
    scenario_names,
)
from stress.config.scenario import load_scenario
from stress.core.errors import ScenarioError

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = (
    "concurrency_sweep",
    "context_sweep",
    "eight_users_1h",
    "find_capacity",
    "mooncake_replay",
    "open_loop_chat",
    "quickstart",
)
MODELINE = f"# yaml-language-server: $schema={SCHEMA_NAME}\n"

MINE = """\
name: mine
target: {{url: sim}}
duration: 5s
conversation:
  turn:
    paste: {{corpus: {corpus}, tokens: [100, 200]}}
    ask: ["Summarise."]
"""


def test_the_shipped_scenarios_are_bundled_and_the_repository_paths_lead_there() -> None:
    assert tuple(scenario_names()) == SHIPPED
    # scenarios/ and corpora/ at the repository root are links into the package, so the
    # README's `stress run scenarios/quickstart.yaml` and the tests' corpora/en still work
    assert (ROOT / "scenarios").resolve() == SCENARIOS
    assert (ROOT / "corpora").resolve() == CORPORA
    assert (ROOT / "scenarios" / "quickstart.yaml").resolve() == SCENARIOS / "quickstart.yaml"
    assert DATA == ROOT / "stress" / "data"


def test_every_bundled_file_is_package_data() -> None:
    """setuptools puts in the wheel what pyproject's package-data names: every bundled
    scenario, the schema, every corpus file with its NOTICE and licences."""
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["stress"]
    files = [p.relative_to(ROOT / "stress").as_posix() for p in DATA.rglob("*") if p.is_file()]
    missed = [f for f in files if not any(_glob_match(f, g) for g in globs)]
    assert not missed, f"not in the wheel: {missed}"
    assert any(f.startswith("data/corpora/LICENSES/") for f in files)


def _glob_match(path: str, glob: str) -> bool:
    if "**" in glob:  # setuptools: ** spans folders
        head, _, tail = glob.partition("**/")
        return path.startswith(head) and fnmatch(path[len(head) :].rpartition("/")[2], tail)
    return path.count("/") == glob.count("/") and fnmatch(path, glob)


@pytest.mark.parametrize("name", SHIPPED)
def test_bundled_scenarios_point_editors_at_the_schema(name: str) -> None:
    text = (SCENARIOS / f"{name}.yaml").read_text()
    assert text.startswith(MODELINE)
    assert SCHEMA_FILE.parent == SCENARIOS and SCHEMA_FILE.is_file()
    assert describe(SCENARIOS / f"{name}.yaml"), f"{name} has no description"


def test_description_falls_back_to_the_leading_comment(tmp_path: Path) -> None:
    p = tmp_path / "s.yaml"
    p.write_text(f"{MODELINE}# Two users chat. More words here.\n#   stress run s\nname: s\n")
    assert describe(p) == "Two users chat."
    p.write_text("name: s\ndescription: >-\n  Folded\n  text.\n")
    assert describe(p) == "Folded text."


def test_a_bare_name_is_the_local_file_first_then_the_bundled_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert find_scenario("quickstart") == SCENARIOS / "quickstart.yaml"
    assert find_scenario("quickstart.yaml") == SCENARIOS / "quickstart.yaml"
    (tmp_path / "quickstart.yaml").write_text("name: mine\n")
    assert find_scenario("quickstart") == Path("quickstart.yaml")
    assert find_scenario("quickstart.yaml") == Path("quickstart.yaml")
    (tmp_path / "eight_users_1h.yml").write_text("name: mine\n")
    assert find_scenario("eight_users_1h") == Path("eight_users_1h.yml")
    # a folder of that name is not a scenario file: the bundled one is meant
    (tmp_path / "find_capacity").mkdir()
    assert find_scenario("find_capacity") == SCENARIOS / "find_capacity.yaml"
    # a path with a folder in it is only ever that path
    assert find_scenario("sub/quickstart.yaml") == Path("sub/quickstart.yaml")
    assert find_scenario("./context_sweep") == Path("./context_sweep")


def test_a_name_found_nowhere_says_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ScenarioError) as e:
        find_scenario("nosuch")
    [line] = str(e.value).splitlines()
    assert "./nosuch, ./nosuch.yaml, ./nosuch.yml" in line and "bundled" in line
    assert "quickstart" in line and "-- fix:" in line
    assert main(["run", "nosuch", "--no-tui"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "no such scenario" in err and "Traceback" not in err
    assert main(["validate", "quickstart", "nosuch"]) == 2
    out = capsys.readouterr()
    assert "quickstart: ok" in out.out and "no such scenario" in out.err


def test_stress_scenarios_lists_every_bundled_scenario_and_corpus(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["scenarios"]) == 0
    out = capsys.readouterr().out
    for name in SHIPPED:
        line = next(x for x in out.splitlines() if x.strip().startswith(name))
        assert describe(SCENARIOS / f"{name}.yaml") in line
    for name, _ in corpus_names():
        assert f"bundled:{name}" in out
    assert str(DATA) in out


def test_bundled_corpus_names_resolve_from_anywhere(tmp_path: Path) -> None:
    p = tmp_path / "s.yaml"
    for name, path in [("en", CORPORA / "en"), ("all", CORPORA), ("zh", CORPORA / "zh")]:
        p.write_text(MINE.format(corpus=f"bundled:{name}"))
        loaded = load_scenario(p)
        paste = loaded.scenario.conversation.turn.paste
        assert paste is not None and loaded.resolve(paste.corpus) == path
    assert bundled_corpus("bundled:en/python-howto-regex.txt").is_file()


@pytest.mark.parametrize("name", ["xx", "../scenarios", "", "en/../../scenarios"])
def test_an_unknown_bundled_corpus_is_one_line_with_the_names(tmp_path: Path, name: str) -> None:
    p = tmp_path / "s.yaml"
    p.write_text(MINE.format(corpus=f'"bundled:{name}"'))
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    [line] = str(e.value).splitlines()
    assert f"s.yaml:6: conversation.turn.paste.corpus: 'bundled:{name}' is not a bundled" in line
    assert "bundled:all, bundled:en, bundled:es, bundled:pl, bundled:zh" in line


def test_init_copies_a_scenario_that_runs_from_its_new_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["init", "eight_users_1h"]) == 0
    out = capsys.readouterr().out
    copy = tmp_path / "eight_users_1h.yaml"
    assert copy.read_bytes() == (SCENARIOS / "eight_users_1h.yaml").read_bytes()
    assert (tmp_path / SCHEMA_NAME).read_bytes() == SCHEMA_FILE.read_bytes()
    assert "wrote eight_users_1h.yaml" in out and SCHEMA_NAME in out
    loaded = load_scenario(copy)  # its corpus is bundled:all, wherever the copy lives
    paste = loaded.scenario.conversation.turn.paste
    assert paste is not None and loaded.resolve(paste.corpus) == CORPORA
    # the bare name now means the copy, not the bundled file
    assert find_scenario("eight_users_1h") == Path("eight_users_1h.yaml")

    # into a new folder, under another name: the copy is named after its file
    assert main(["init", "quickstart.yaml", "soaks/demo.yaml"]) == 0
    demo = tmp_path / "soaks" / "demo.yaml"
    assert load_scenario(demo).scenario.name == "demo"
    assert (tmp_path / "soaks" / SCHEMA_NAME).is_file()
    assert main(["init", "quickstart", "soaks"]) == 0
    assert (tmp_path / "soaks" / "quickstart.yaml").is_file()
    assert "is up to date" in capsys.readouterr().out


def test_init_refuses_to_overwrite_and_names_the_bundled_scenarios(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "quickstart.yaml").write_text("name: edited\n")
    assert main(["init", "quickstart"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "quickstart.yaml already exists" in err
    assert "--force" in err
    assert (tmp_path / "quickstart.yaml").read_text() == "name: edited\n"
    assert main(["init", "quickstart", "--force"]) == 0
    assert (tmp_path / "quickstart.yaml").read_bytes() == (
        SCENARIOS / "quickstart.yaml"
    ).read_bytes()
    capsys.readouterr()
    assert main(["init", "unknown"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "'unknown' is not a bundled scenario" in err
    assert all(name in err for name in SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_scenario_validates_after_init_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """A copy made by `stress init` in an empty folder names no file it left behind (a
    relative path into the package, like `../traces/...`, broke the replay scenario)."""
    monkeypatch.chdir(tmp_path)
    assert main(["init", name]) == 0
    capsys.readouterr()
    assert main(["validate", f"{name}.yaml"]) == 0, capsys.readouterr()
