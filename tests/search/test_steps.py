"""The search's logic on its own: growth, bisection and every way it stops."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from stress.search.steps import Search, Step, most_cost


def drive(search: Search, capacity: int, hang_at: int | None = None) -> list[int]:
    """Run the search against a server whose SLO holds up to ``capacity`` users."""
    tried: list[int] = []
    while (users := search.next_value()) is not None:
        tried.append(users)
        step = Step(users, "MET" if users <= capacity else "MISSED")
        step.hang = hang_at is not None and users >= hang_at
        search.steps.append(step)
    return tried


def test_grows_then_bisects_to_a_bracket_of_one() -> None:
    s = Search(start=1, factor=2.0, maximum=64)
    assert drive(s, capacity=6) == [1, 2, 4, 8, 6, 7]
    assert s.answer() == "6 users [6-7]" and s.stop == "bracket"


@pytest.mark.parametrize("capacity", [1, 2, 3, 5, 11, 17, 40, 63])
def test_brackets_any_capacity(capacity: int) -> None:
    s = Search(start=1, maximum=64)
    drive(s, capacity)
    assert s.met is not None and s.missed is not None
    assert s.met.value == capacity and s.missed.value == capacity + 1


def test_a_wider_bracket_costs_fewer_steps() -> None:
    narrow, wide = Search(maximum=64), Search(maximum=64, width=4)
    assert len(drive(wide, 21)) < len(drive(narrow, 21))
    assert wide.met is not None and wide.missed is not None
    assert wide.missed.value - wide.met.value <= 4 and wide.met.value <= 21 < wide.missed.value


def test_stops_at_maximum() -> None:
    s = Search(start=4, maximum=20)
    assert drive(s, capacity=1000) == [4, 8, 16, 20]
    assert s.stop == "maximum" and s.answer().startswith(">= 20 users")


def test_missed_at_the_start_looks_below() -> None:
    s = Search(start=8, maximum=64)
    assert drive(s, capacity=2) == [8, 4, 2, 3]
    assert s.answer() == "2 users [2-3]"
    s = Search(start=1)
    assert drive(s, capacity=0) == [1]
    assert s.stop == "missed_at_start" and s.answer().startswith("no capacity found")


def test_a_hang_ends_the_search() -> None:
    s = Search(start=1, maximum=64)
    assert drive(s, capacity=100, hang_at=8) == [1, 2, 4, 8]
    assert s.stop == "hang"


def test_a_step_that_cannot_be_judged_ends_the_search() -> None:
    s = Search()
    s.steps.append(Step(1, "NOT JUDGED"))
    assert s.next_value() is None and s.stop == "not_judged"
    assert "too few requests" in s.answer()


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        Search(start=0)
    with pytest.raises(ValueError):
        Search(factor=1.0)


def tree_cost(search: Search, cost: Callable[[int], float], steps: list[Step]) -> float:
    """The most ``search`` can spend, by trying every sequence of outcomes."""
    s = Search(search.start, search.factor, search.maximum, search.width, steps=list(steps))
    value = s.next_value()
    if value is None:
        return sum(cost(st.value) for st in steps)
    return max(
        tree_cost(search, cost, [*steps, Step(value, status)]) for status in ("MET", "MISSED")
    )


@pytest.mark.parametrize(
    ("start", "factor", "maximum", "width"),
    [(1, 2.0, 64, 1), (8, 2.0, 64, 1), (3, 1.5, 40, 2), (1, 1.01, 20, 1), (5, 3.0, 70, 4)],
)
def test_most_cost_is_the_worst_sequence_of_outcomes(
    start: int, factor: float, maximum: int, width: int
) -> None:
    search = Search(start, factor, maximum, width)
    for cost in (lambda v: 1.0, lambda v: 1 + 40 / v, lambda v: float(v % 7)):
        assert most_cost(search, cost) == pytest.approx(tree_cost(search, cost, []))
    one = tree_cost(search, lambda v: 1.0, [])
    assert most_cost(search, lambda v: 1.0, uniform=True) == one


def test_an_interrupted_step_moves_no_bracket() -> None:
    s = Search(start=1, maximum=64)
    s.steps += [Step(1, "MET"), Step(2, "MET"), Step(4, "INTERRUPTED"), Step(8, "SERVER LOST")]
    assert s.met is not None and s.met.value == 2 and s.missed is None


# ---- sequential decisions, UNDECIDED, the monotone boundary (issue 35) -----------------


def test_a_step_is_decided_only_when_its_interval_clears_the_limit() -> None:
    from stress.search.steps import decide

    assert decide([0.48, 0.43], 0.9, 6) == "MET"  # the H200's 16 users
    assert decide([1.68, 1.64], 0.9, 6) == "MISSED"  # its 17 users
    assert decide([0.996, 1.004], 0.9, 6) == "UNDECIDED"  # one met, one missed by 0.4 %
    assert decide([0.95, 0.97], 0.9, 6) == "UNDECIDED"  # both met, the spread holds 1
    assert decide([0.95, 0.97, 0.96, 0.955], 0.9, 6) == "MET"  # more passes narrow it
    assert decide([0.9], 0.9, 6) == "UNDECIDED"  # one pass: no spread to judge
    assert decide([0.9], 0.9, 1) == "MET" and decide([1.1], 0.9, 1) == "MISSED"


def test_the_sequential_step_stops_adding_passes_once_decided() -> None:
    """What the session does: ``repeat`` passes, then one more while UNDECIDED."""
    from stress.search.runner import settle_step

    def run(factors: list[float], repeat: int = 2, most: int = 6) -> Step:
        step = Step(18)
        for k, f in enumerate(factors):
            if k >= repeat:
                settle_step(step, ["MET"] * k, 0.9, most)
                if step.status != "UNDECIDED":
                    break
            step.factors.append(f)
        settle_step(step, ["MET"] * len(step.factors), 0.9, most)
        return step

    decided = run([0.95, 0.97, 0.96, 0.955, 2.0, 2.0])
    assert decided.status == "MET" and len(decided.factors) == 3  # 2 passes: UNDECIDED
    coin = run([0.99, 1.01, 0.98, 1.02, 0.995, 1.005])
    assert coin.status == "UNDECIDED" and len(coin.factors) == 6


def test_an_undecided_step_bounds_the_bracket_and_is_named() -> None:
    """The H200 search's passes at 18, 20 and 24 users split met/missed; only 18 stays
    undecided once more passes run: the answer is 16 [16-18] and says why."""
    s = Search(start=8, maximum=32)
    outcomes = {
        8: [0.22, 0.21],
        16: [0.48, 0.43],
        32: [4.5, 4.3],
        24: [2.9, 3.2],
        20: [2.8, 2.6],
        18: [0.99, 1.01, 0.98, 1.02, 0.995, 1.005],
        17: [0.95, 0.97, 0.96, 0.955],
    }
    from stress.search.steps import decide

    while (users := s.next_value()) is not None:
        f = outcomes[users]
        s.steps.append(Step(users, decide(f, 0.9, 6), factors=f))
    assert [st.value for st in s.steps] == [8, 16, 32, 24, 20, 18, 17]
    assert s.answer() == (
        "17 users [17-18]; UNDECIDED at 18 users (x0.98-x1.02 over 6 passes): the SLO sits "
        "inside the pass-to-pass spread there"
    )
    # the whole line: the bracket's conversations and first limit, then the undecided step
    # (an H200 search printed "...spread there with conversations up to 2,695 tokens")
    from stress.search.runner import row_answer

    s.steps[-1] = Step(17, "MET", factors=[0.95], conversation_tokens=2695)
    s.steps[-2] = Step(18, "UNDECIDED", factors=[0.98, 1.02], limit="more users than slots")
    assert row_answer(s, "capacity: ") == (
        "capacity: 17 users [17-18] with conversations up to 2,695 tokens; first limit: more "
        "users than slots (at 18 users); UNDECIDED at 18 users (x0.98-x1.02 over 2 passes): "
        "the SLO sits inside the pass-to-pass spread there"
    )


def test_the_monotone_boundary_and_a_cliff() -> None:
    from stress.search.steps import boundary

    s = Search(start=8, maximum=32)
    for v, f in ((8, [0.22, 0.21]), (16, [0.48, 0.43]), (17, [1.68, 1.64]), (32, [4.5, 4.3])):
        s.steps.append(Step(v, "MET" if f[0] < 1 else "MISSED", factors=f))
    b = boundary(s)
    assert b is not None and b.cliff and b.below[0] == 16 and b.above[0] == 17
    assert 16 < b.value < 17
    assert "a cliff" in b.text(s.fmt)
    gradual = Search(start=2, maximum=32, width=4)
    for v, f in ((2, [0.5, 0.5]), (4, [0.8, 0.8]), (8, [1.25, 1.25]), (6, [1.1, 1.0])):
        gradual.steps.append(Step(v, "MET", factors=f))
    g = boundary(gradual)
    # a fit that must stay non-decreasing pools 6 and 8; it crosses 1 between 4 and 6
    assert g is not None and not g.cliff and 4 < g.value <= 6
    assert boundary(Search()) is None
