"""A grid answers each SLO tier at every row, from the row's own passes (issue 35), checked
in process against passes whose SLO figures are known by construction: the search's own
session, with ``run_pass`` replaced by a pass that reports a factor of users / capacity
for the SLO and for each tier, at each row's history. Fast (no simulator), so it also
covers what the CLI test cannot time: a search stopped in a tier's steps."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from stress.config.scenario import LoadedScenario, load_scenario
from stress.search.session import EXIT_INTERRUPTED, SearchRun, run_search, search_exit_code
from tests.search.test_tiers_cli import TIERED

CAPACITY = {500: (4, 9), 1000: (3, 6)}
"""History -> (users the SLO holds, users the batch tier holds): a longer history holds
fewer of both."""


class Passes:
    """The scripted ``run_pass``: each pass a run directory and a summary whose verdict
    judges the SLO and the tier; ``stop_at``: the pass that ends interrupted (Ctrl-C)."""

    def __init__(self, stop_at: int = 0) -> None:
        self.n, self.stop_at = 0, stop_at

    async def __call__(self, loaded: LoadedScenario, root: Path, line: str) -> Any:
        self.n += 1
        sc = loaded.scenario
        start = sc.conversation.start_tokens
        assert start is not None  # a grid row's history
        slo, tier = CAPACITY[start[0]]
        run = root / f"pass-{self.n}"
        run.mkdir()
        verdict = {
            "slo": _checks(sc.users.count, slo),
            "slo_tiers": {"batch": _checks(sc.users.count, tier)},
        }
        reason = "interrupted" if self.n == self.stop_at else "finished"
        return SimpleNamespace(run_dir=run, summary={"verdict": verdict}, exit_reason=reason)


def _checks(users: int, capacity: int) -> list[dict[str, Any]]:
    factor = users / (capacity + 0.5)
    status = "MET" if factor <= 1 else "MISSED"
    return [{"text": f"x{factor:.2f}", "status": status, "factor": factor}]


def search(tmp_path: Path, passes: Passes) -> tuple[SearchRun, list[str]]:
    path = tmp_path / "tiered.yaml"
    path.write_text(TIERED)
    loaded = load_scenario(path)
    spec = loaded.scenario.search.model_copy(
        update={"axis": "grid", "lengths": [500, 1000], "start": 2, "max_users": 12, "repeat": 1}
    )
    said: list[str] = []
    return asyncio.run(run_search(loaded, tmp_path, spec, passes, said.append)), said


def test_each_row_answers_each_tier(tmp_path: Path) -> None:
    run, said = search(tmp_path, Passes())
    assert run.state == "finished" and search_exit_code(run) == 0
    doc = run.document()
    rows = doc["rows"]
    assert [r["bracket"] for r in rows] == [[4, 5], [3, 4]]
    assert [r["tiers"]["batch"]["bracket"] for r in rows] == [[9, 10], [6, 7]]
    # the second row's tier judged every step of its row: the SLO's 4, 2, 3, then its own
    second = [s["value"] for s in rows[1]["tiers"]["batch"]["steps"]]
    assert second == [s["value"] for s in rows[1]["steps"]] and second[:3] == [4, 2, 3]
    line = "1,000 tokens of history: SLO tier batch (TTFT p95 <= 1 s): 6 users [6-7]"
    assert rows[1]["tiers"]["batch"]["answer_line"] == line and line in said
    tier_map = (
        "capacity map at SLO tier batch (TTFT p95 <= 1 s), by tokens of history: "
        "500 tokens: 9 users [9-10]; 1,000 tokens: 6 users [6-7]"
    )
    assert doc["tiers"]["batch"]["answer_line"] == tier_map and tier_map in said
    assert not any("main SLO only" in s for s in said)
    # the map's text: a column per tier beside the SLO's capacity
    table = next(s for s in said if s.startswith("\ncapacity map (users")).splitlines()
    assert table[2].split()[-3:] == ["capacity", "tier", "batch"]
    assert table[3].endswith("4 users [4-5]  9 users [9-10]")
    assert table[4].endswith("3 users [3-4]  6 users [6-7]")


def test_a_search_stopped_in_a_tiers_steps_has_no_answer(tmp_path: Path) -> None:
    """Ctrl-C in the last row's tier steps: the search did not finish, the row's tier has
    no answer, the first row keeps its own."""
    run, said = search(tmp_path, Passes(stop_at=12))  # row 2: SLO steps 4, 2, 3; tier: 8
    assert run.state == "interrupted" and search_exit_code(run) == EXIT_INTERRUPTED
    assert not any(s.startswith("1,000 tokens of history:") for s in said)  # no row answer
    doc = run.document()
    assert doc["rows"][1]["bracket"] == [3, 4] and doc["rows"][1]["stop"] == "bracket"
    first, second = (r["tiers"]["batch"] for r in doc["rows"])
    assert first["answer"] == "9 users [9-10]"
    assert second["answer"] == "no answer (MET up to 4 users, nothing above it judged)"
    assert "the search was interrupted after 12 steps" in doc["tiers"]["batch"]["answer_line"]
    assert (
        "500 tokens: 9 users [9-10]; 1,000 tokens: no answer"
        in doc["tiers"]["batch"]["answer_line"]
    )


def test_the_bound_counts_each_rows_tier_searches(tmp_path: Path) -> None:
    """Before the first pass: each row's tier search may run steps of its own, like a row
    started anywhere (``later_rows``), so a tier adds that bound once per row."""
    from stress.search.plan import estimate, later_rows
    from stress.search.runner import make_search, step_rounds
    from tests.search.test_capacity_cli import SCENARIO

    def bound(text: str) -> tuple[int, int]:
        """(the estimate's steps, a later row's most steps) for ``text`` as a grid."""
        path = tmp_path / "bound.yaml"
        path.write_text(text)
        loaded = load_scenario(path)
        spec = loaded.scenario.search.model_copy(update={"axis": "grid", "lengths": [500, 1000]})

        def rounds(users: int, start: int | None) -> int | None:
            return step_rounds(loaded.scenario, spec, users, start)

        est = estimate(loaded, spec, make_search(loaded, spec), [500, 1000], rounds)
        return est.steps, later_rows(spec, lambda v: 1.0)[0]

    (tiered, later), (plain, _) = bound(TIERED), bound(SCENARIO)
    assert later > 0 and tiered == plain + 2 * later
