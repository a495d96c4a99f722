"""Open-loop load (``arrivals:``): the load offered against the load achieved.

Read from the run directory alone: every arrival ends in one ``session_ended`` event
(admitted or not, with its arrival, admission and end times) and the arrival process's
``arrivals_ended`` event gives the window it ran (stress.core.events). The event times inside
``data`` are on the run's wall clock; they are converted to the run's one clock here (a
time-scaled simulator run: simulated seconds), like everything else the analysis reads.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from stress.analysis.rundata import RunData
from stress.core import rates


@dataclass(frozen=True, slots=True)
class OpenLoad:
    """Offered vs achieved load of an open-loop run (rates per minute on the run's clock)."""

    process: str
    rate_per_min: float
    """The scenario's arrival rate (sessions per minute)."""
    burstiness: float
    max_concurrent: int | None
    arrivals: int
    window_s: float
    """How long sessions arrived (the run's duration, or less when it stopped early)."""
    offered_per_min: float | None
    """Arrivals / window: the load the process offered."""
    gap_cv: float | None
    """Coefficient of variation (sd / mean) of the gaps between arrivals (Poisson: 1)."""
    admitted: int
    admitted_per_min: float | None
    """Sessions started / window."""
    completed: int
    """Sessions that did all their rounds."""
    completed_per_min: float | None
    """Completed sessions / the run's duration."""
    stopped: int
    """Admitted sessions the run's end cut short."""
    never_admitted: int
    """Still in the backlog when the run stopped."""
    offered_req_s: float | None
    """Offered requests per second: offered sessions per second x the mean rounds drawn."""
    achieved_req_s: float | None
    """Requests sent (warm-up included) / the run's duration."""
    wait_s_mean: float | None
    wait_s_p95: float | None
    wait_s_max: float | None
    max_backlog: int
    max_active: int
    """Most sessions active at once (from admission and end times)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def sentence(self) -> str:
        """One line: offered vs achieved."""
        off = "-" if self.offered_per_min is None else f"{self.offered_per_min:.1f}"
        adm = "-" if self.admitted_per_min is None else f"{self.admitted_per_min:.1f}"
        done = "-" if self.completed_per_min is None else f"{self.completed_per_min:.1f}"
        oreq = "-" if self.offered_req_s is None else f"{self.offered_req_s:.2f}"
        areq = "-" if self.achieved_req_s is None else f"{self.achieved_req_s:.2f}"
        text = (
            f"offered {off} sessions/min ({self.arrivals} arrivals, {self.process} at "
            f"{self.rate_per_min:g}/min) vs achieved {adm}/min started, {done}/min completed; "
            f"requests {oreq}/s offered vs {areq}/s achieved"
        )
        if self.max_concurrent is not None:
            wait = "-" if self.wait_s_p95 is None else f"{self.wait_s_p95:.1f}s"
            text += (
                f"; cap {self.max_concurrent}: backlog max {self.max_backlog}, wait p95 {wait}, "
                f"{self.never_admitted} never admitted"
            )
        return text


def _scheduled_rate(spec: dict[str, Any], window_s: float) -> float:
    """The scenario's rate per minute, averaged over the arrival window when it follows a
    schedule (``arrivals.schedule``; both on the scenario's own clock)."""
    base = _num(spec.get("rate")) or 0.0
    steps = []
    for step in spec.get("schedule") or ():
        at, rate = (_num(step.get(k)) if isinstance(step, dict) else None for k in ("at", "rate"))
        if at is None or rate is None:  # a schedule this version cannot read: the plain rate
            return base
        steps.append((at, rate))
    return rates.mean_rate(base, sorted(steps), window_s)


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def open_load(run: RunData) -> OpenLoad | None:
    """The open-loop figures of ``run``; None for a closed-loop run."""
    spec = run.scenario.get("arrivals")
    if not isinstance(spec, dict):
        return None
    scale = run.files.time_scale
    sessions = [e.get("data") or {} for e in run.events if e.get("kind") == "session_ended"]
    ended = [e for e in run.events if e.get("kind") == "arrivals_ended"]
    arrived = sorted(t * scale for d in sessions if (t := _num(d.get("arrived"))) is not None)
    window = sum((_num((e.get("data") or {}).get("window_s")) or 0.0) for e in ended) * scale
    n = sum(int((e.get("data") or {}).get("arrivals") or 0) for e in ended) if ended else 0
    if not ended:  # a killed run: the sessions recorded, over the run so far
        n, window = len(arrived), run.files.duration_s
    duration = run.files.duration_s
    stop = max((_num(e.get("t")) or 0.0 for e in ended), default=duration)
    # when arrivals stopped (run clock): a session never admitted waited until then
    per_min = (lambda k: 60.0 * k / window) if window > 0 else (lambda k: None)
    gaps = np.diff(np.asarray(arrived)) if len(arrived) > 2 else np.asarray([])
    cv = float(gaps.std(ddof=1) / gaps.mean()) if gaps.size > 1 and gaps.mean() > 0 else None
    admitted = [d for d in sessions if d.get("admitted") is not None]
    waits = [w * scale for d in admitted if (w := _num(d.get("wait_s"))) is not None]
    rounds = [int(d.get("rounds") or 0) for d in sessions]
    offered = per_min(n)
    offered_req = (
        offered / 60.0 * float(np.mean(rounds)) if offered is not None and rounds else None
    )
    return OpenLoad(
        process=str(spec.get("process") or "poisson"),
        rate_per_min=_scheduled_rate(spec, window),
        burstiness=float(spec.get("burstiness") or 1.0),
        max_concurrent=spec.get("max_concurrent"),
        arrivals=n,
        window_s=window,
        offered_per_min=offered,
        gap_cv=cv,
        admitted=len(admitted),
        admitted_per_min=per_min(len(admitted)),
        completed=sum(1 for d in sessions if d.get("reason") == "done"),
        completed_per_min=(
            60.0 * sum(1 for d in sessions if d.get("reason") == "done") / duration
            if duration > 0
            else None
        ),
        stopped=sum(1 for d in admitted if d.get("reason") != "done"),
        never_admitted=len(sessions) - len(admitted),
        offered_req_s=offered_req,
        achieved_req_s=len(run.requests) / duration if duration > 0 else None,
        wait_s_mean=float(np.mean(waits)) if waits else None,
        wait_s_p95=float(np.percentile(waits, 95)) if waits else None,
        wait_s_max=max(waits) if waits else None,
        max_backlog=_max_overlap(
            [
                (t * scale, (_num(d.get("admitted")) or stop / scale) * scale)
                for d in sessions
                if (t := _num(d.get("arrived"))) is not None
            ]
        ),
        max_active=_max_overlap([(a * scale, b * scale) for a, b in _admitted_spans(run)]),
    )


def _admitted_spans(run: RunData) -> list[tuple[float, float]]:
    """(admission, end) of every admitted session, wall seconds (the event's own ``t`` is
    already on the run's clock, so it is converted back)."""
    scale = run.files.time_scale
    out: list[tuple[float, float]] = []
    for e in run.events:
        if e.get("kind") != "session_ended":
            continue
        d = e.get("data") or {}
        t = _num(e.get("t"))
        a = _num(d.get("admitted"))
        if a is not None and t is not None:
            out.append((a, t / scale))
    return out


def _max_overlap(spans: list[tuple[float, float]]) -> int:
    """Most spans [start, end) open at once."""
    points: list[tuple[float, int]] = []
    for a, b in spans:
        if b > a:
            points += [(a, 1), (b, -1)]
    points.sort()  # at one instant an end (-1) comes before a start (+1)
    most = cur = 0
    for _, step in points:
        cur += step
        most = max(most, cur)
    return most
