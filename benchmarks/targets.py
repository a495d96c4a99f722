"""Issue 15's targets for the whole tool, in one place, and their verdict from one command.

``e2e.py`` measures each part (burst, paced under both clocks, the live view, RSS, the
start) and hands the per-repeat figures here; at the end it prints one block: for each
target the line, the mean ± sd over repeats, how many repeats fell on the right side of
the line, and whether the mean meets it. A target this command did not measure (a part
left out with ``--parts``) is named as such, never read as met.

The paced target is judged under the ``step`` clock, where the paced server writes every
stream's chunk on one grid fixed at its start, as vLLM, SGLang and llama.cpp write each
engine step's tokens for every running request. Under the ``stream`` clock each stream is
paced from its own request's arrival, so in a closed loop each client's turnaround places
the streams and so sets how often both processes wake: the two clients are no longer
measured under the same load (docs/performance.md, "the paced server's two clocks"). That
figure is printed beside, marked ``reported``, and does not decide the verdict.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from benchmarks._common import mean_spread

MB_IN_MIB = 1e6 / 2**20
"""The RSS target is 100 MB (decimal); RSS is printed in MiB."""


@dataclass(frozen=True)
class Target:
    what: str
    """What is compared; ``{n}`` is the streams of the level measured."""
    line: float
    at_least: bool
    """True: the figure must be at or above the line; False: at or under it."""
    unit: str
    digits: int
    judged: bool = True
    """False: printed beside the judged figure, with why, never a verdict."""
    why_reported: str = ""

    def holds(self, value: float) -> bool:
        """The value is on the right side of the line."""
        return value >= self.line if self.at_least else value <= self.line


TARGETS: dict[str, Target] = {
    "burst": Target("burst, {n} streams: requests/s, stress over the reference", 1.8, True, "x", 3),
    "burst_tui": Target("the same with the live view (the run's process)", 1.8, True, "x", 3),
    "paced_step": Target(
        "paced, step clock, {n} streams: CPU per chunk, stress over the reference",
        0.65,
        False,
        "x",
        3,
    ),
    "paced_step_tui": Target(
        "the same with the live view (the run's process)", 0.65, False, "x", 3
    ),
    "paced_stream": Target(
        "paced, stream clock, {n} streams: the same",
        0.65,
        False,
        "x",
        3,
        judged=False,
        why_reported="each client's turnaround places the streams",
    ),
    "paced_stream_tui": Target(
        "the same with the live view (the run's process)",
        0.65,
        False,
        "x",
        3,
        judged=False,
        why_reported="as above",
    ),
    "rss": Target(
        "RSS of headless stress at {n} streams, steady peak", 100 * MB_IN_MIB, False, " MiB", 1
    ),
    "first_request": Target(
        "the quick start's first request at the server, from launch", 1.0, False, " s", 3
    ),
    "help": Target("`stress --help`, wall", 0.3, False, " s", 3),
}
PARTS = {
    "burst": "burst",
    "burst_tui": "burst tui",
    "paced_step": "paced",
    "paced_step_tui": "paced tui",
    "paced_stream": "paced",
    "paced_stream_tui": "paced tui",
    "rss": "rss",
    "first_request": "start",
    "help": "start",
}
"""The ``--parts`` that measures each target."""


@dataclass
class Figure:
    key: str
    values: list[float]
    streams: int | None = None
    note: str = ""

    @property
    def target(self) -> Target:
        return TARGETS[self.key]

    def within(self) -> int:
        return sum(1 for v in self.values if self.target.holds(v))

    def met(self) -> bool:
        return self.target.holds(statistics.fmean(self.values))

    def line(self) -> str:
        t = self.target
        what = t.what.format(n=self.streams)
        side = ">=" if t.at_least else "<="
        fig = mean_spread(self.values, t.digits)
        if not t.judged:
            verdict = f"reported, not judged ({t.why_reported})"
        else:
            verdict = "met" if self.met() else "NOT MET"
        head = (
            f"  {what}: {side} {t.line:.{t.digits}f}{t.unit}: {fig}; "
            f"{self.within()}/{len(self.values)} repeats within; {verdict}"
        )
        return head + (f"\n      {self.note}" if self.note else "")


@dataclass
class Targets:
    """The figures measured so far, in the order the parts ran."""

    figures: list[Figure] = field(default_factory=list)

    def add(
        self, key: str, values: list[float], streams: int | None = None, note: str = ""
    ) -> None:
        if key not in TARGETS:
            raise KeyError(f"no target {key!r}")
        if values:
            self.figures.append(Figure(key, list(values), streams, note))

    def missing(self, parts: list[str]) -> list[str]:
        """The targets no figure was measured for, and the part that would measure it."""
        seen = {f.key for f in self.figures}
        return [
            f"{k} (--parts {PARTS[k]}"
            + ("" if set(PARTS[k].split()) <= set(parts) else ", not asked for")
            + ")"
            for k in TARGETS
            if k not in seen
        ]

    def report(self, parts: list[str]) -> str:
        """The block ``e2e.py`` prints last."""
        out = [
            "# issue 15's targets, from this command's runs: mean ± sd over repeats, "
            "judged on the mean; 'within': repeats on the right side of the line"
        ]
        out += [f.line() for f in self.figures]
        judged = [f for f in self.figures if f.target.judged]
        missing = self.missing(parts)
        if missing:
            out.append("  not measured by this command: " + "; ".join(missing))
        failed = [f for f in judged if not f.met()]
        out.append(
            f"  => {len(judged) - len(failed)} of {len(judged)} judged figures met"
            + (f"; {len(missing)} targets not measured" if missing else "")
        )
        return "\n".join(out)
