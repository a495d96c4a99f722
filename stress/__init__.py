"""stress: a load and soak tester for self-hosted LLM inference servers."""

from __future__ import annotations

__version__ = "0.1.0"
