"""The judge's thresholds and exit codes, in one light module (the scenario schema and the
CLI parser use them without loading the analysis)."""

from __future__ import annotations

SLO_FAIL_FACTOR = 2.0
"""An SLO missed by more than this factor is a FAIL, not a WARN: a run at 19x the TTFT
SLO must not read like one at 1.1x."""
MIN_SAMPLES = 20
"""No SLO judgement (and no capacity bucket judged) on fewer samples: a p95 from 3
requests is noise."""
DEFAULT_ERROR_RATE = 0.01
"""Failed requests (cancelled ones aside) above this share of all requests make a FAIL, and
so do requests cancelled at the drain deadline after the run's end, counted on their own;
fewer are a WARN. The scenario's ``slo.error_rate`` overrides it."""
EXIT_VERDICT_FAIL = 3
"""``stress run``'s exit code when the verdict fails the gate (``--fail-on``: FAIL by
default, WARN too with ``--fail-on warn``, never with ``--fail-on never``). The k6
convention: a threshold breach is a distinct non-zero code, not a crash."""
FAIL_ON = ("fail", "warn", "never")


def exit_code(status: str, fail_on: str = "fail") -> int:
    """``stress run``'s exit code for a run that completed: 0, or ``EXIT_VERDICT_FAIL``
    when its verdict (PASS / WARN / FAIL) fails the ``--fail-on`` gate."""
    failing = {"fail": {"FAIL"}, "warn": {"FAIL", "WARN"}, "never": set()}[fail_on]
    return EXIT_VERDICT_FAIL if status in failing else 0
