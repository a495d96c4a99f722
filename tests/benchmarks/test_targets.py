"""``benchmarks/targets.py``: the verdict block ``e2e.py`` prints last.

A figure is judged on its mean against its line, with the repeats on either side counted;
the paced ``stream`` clock is printed but never decides; a target whose part did not run
is named, never counted as met.
"""

from __future__ import annotations

from benchmarks.targets import TARGETS, Targets


def test_a_figure_is_judged_on_its_mean_and_its_repeats_are_counted() -> None:
    t = Targets()
    t.add("paced_step", [0.60, 0.62, 0.66], 64)
    t.add("burst", [1.70, 1.90, 1.75], 2000)
    out = t.report(["burst", "paced"])
    step, burst = out.splitlines()[1:3]
    assert "paced, step clock, 64 streams" in step and "<= 0.650x" in step
    assert "2/3 repeats within" in step and step.endswith("; met")
    assert "burst, 2000 streams" in burst and ">= 1.800x" in burst
    assert "1/3 repeats within" in burst and burst.endswith("NOT MET")
    assert "=> 1 of 2 judged figures met" in out


def test_the_stream_clock_is_reported_beside_and_never_decides() -> None:
    t = Targets()
    t.add("paced_step", [0.61], 64)
    t.add("paced_stream", [0.70], 64)
    out = t.report(["paced"])
    stream = next(x for x in out.splitlines() if "stream clock" in x)
    assert "0/1 repeats within" in stream and "reported, not judged" in stream
    assert "NOT MET" not in out and "=> 1 of 1 judged figures met" in out


def test_a_target_no_part_measured_is_named_not_met() -> None:
    t = Targets()
    t.add("help", [0.06, 0.07])
    t.add("first_request", [0.29, 0.31])
    t.add("rss", [], 256)  # no runs: nothing added
    out = t.report(["start"])
    missing = next(x for x in out.splitlines() if "not measured by this command" in x)
    assert "rss (--parts rss, not asked for)" in missing
    assert "paced_step_tui (--parts paced tui, not asked for)" in missing
    assert "--parts start" not in missing  # both start targets were measured
    assert out.splitlines()[-1] == (
        f"  => 2 of 2 judged figures met; {len(TARGETS) - 2} targets not measured"
    )


def test_the_rss_line_is_100_megabytes() -> None:
    assert round(TARGETS["rss"].line, 2) == 95.37  # MiB
    t = Targets()
    t.add("rss", [96.0], 256)
    assert "NOT MET" in t.report(["rss"])
