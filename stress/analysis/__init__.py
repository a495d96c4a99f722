"""The one analysis layer between a run directory and everything that shows a run.

The flow, in one direction::

    run directory --runfiles--> RunFiles (read once, checked, impossible values counted)
                  --rundata-->  RunData (the typed read model every reader uses)
                  --figures / judge / capacity / causes--> the figures, the verdict,
                                the capacity answer and its named causes
                  --itl (+ tokens.bin)--> ITL, TPOT, goodput on TTFT and ITL
    --> renderers: summary.json and the end-of-run terminal summary (stress.report.summary), the
        report (stress.report), ``stress ls``, ``stress compare``, the TUI badge.

Each figure, rule and verdict is decided here once; renderers only format what they get.
Nothing here imports the UI (Textual) or draws (matplotlib).
"""
