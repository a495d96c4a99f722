"""The search's bound, worked out before it starts, for the bundled example."""

from __future__ import annotations

from stress.config.scenario import load_scenario, with_overrides
from stress.search.plan import estimate
from stress.search.runner import make_search, step_rounds
from tests.search.test_capacity_cli import ROOT

EXAMPLE = ROOT / "stress" / "data" / "scenarios" / "find_capacity.yaml"


def bound(target: str) -> tuple[float, str]:
    loaded = with_overrides(load_scenario(EXAMPLE), target=target)
    spec = loaded.scenario.search
    est = estimate(
        loaded,
        spec,
        make_search(loaded, spec),
        [None],
        lambda users, start: step_rounds(loaded.scenario, spec, users, start),
    )
    assert est.total_s is not None
    return est.total_s, est.line()


def test_the_example_is_minutes_on_the_simulator_and_says_hours_elsewhere() -> None:
    """The scenario comment's own `stress capacity find_capacity --target sim`: its worst
    case, every reply at the SLO's limits, fits in minutes; against a real server the
    same search is bounded by hours, and the line says so before it starts."""
    sim_s, sim_line = bound("sim")
    real_s, real_line = bound("http://127.0.0.1:8000")
    # every step decided in its 2 passes: minutes; every step needing all 6: under an hour
    assert sim_s * 2 / 6 < 15 * 60 and sim_s < 60 * 60, sim_line
    assert "if every step is decided in its first 2 passes" in sim_line
    assert real_s > 2 * 3600, real_line
    assert "8-41 rounds a user, 41 at 1 user" in sim_line and "clock x20" in sim_line
    assert "at most 12 steps x 2-6 passes" in real_line and "clock" not in real_line
