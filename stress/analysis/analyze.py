"""One analysis of one run: read the files once, decide every figure, verdict and answer.

``analyze(run_dir)`` is the single pipeline every output starts from: ``summary.json`` and
the end-of-run terminal summary (``stress.report.summary``), the report (``stress.report``),
``stress ls`` and ``stress compare``. None of them re-reads the files or re-decides a
figure, so they cannot disagree. ``tokens.bin``, the largest file, is read in one pass for
the token timing and the server-wide pauses together (``stress.analysis.itl.read_tokens``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stress.analysis.arrivals import OpenLoad, open_load
from stress.analysis.capacity import CapacityAnswer, capacity_answer
from stress.analysis.itl import TokenTiming, read_tokens
from stress.analysis.judge import Verdict, make_verdict
from stress.analysis.pauses import Pauses
from stress.analysis.rundata import RunData, load_run
from stress.analysis.runfiles import RunFiles


@dataclass(slots=True)
class Analysis:
    run: RunData
    verdict: Verdict
    capacity: CapacityAnswer
    tokens: TokenTiming
    """ITL, TPOT and goodput on TTFT + ITL (``tokens.bin``)."""
    load: OpenLoad | None = None
    """Offered vs achieved load of an open-loop run (``arrivals:``); None: closed loop."""
    pauses: Pauses | None = None
    """Server-wide pauses (``tokens.bin``: every running stream silent together)."""


def analyze(run_dir: Path, files: RunFiles | None = None) -> Analysis:
    """Read ``run_dir`` (unless ``files`` holds it read) and analyse it.

    ``RunDirError`` (one line) when the run's files are damaged beyond use."""
    run = load_run(run_dir, files)
    tokens, pauses = read_tokens(run)  # the causes' server_pauses(run) find it held
    verdict = make_verdict(run)
    return Analysis(run, verdict, capacity_answer(run, verdict.slo), tokens, open_load(run), pauses)
