"""The live terminal UI (Textual). The only package in ``stress`` that imports Textual.

The engine, collectors and report never import this; ``stress.runtime.run`` does, lazily, when the
run is attached to a terminal. See docs/tui.md.
"""

from __future__ import annotations

from stress.tui.sink import TuiSink

__all__ = ["TuiSink"]
