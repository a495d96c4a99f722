"""Human durations for scenario files and the CLI: ``20s``, ``5m``, ``1h30m``, ``250ms``."""

from __future__ import annotations

import re

_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: object) -> float:
    """Seconds from a number (already seconds) or a string such as ``1h30m``.

    Raises ``ValueError`` with a message that says what is accepted.
    """
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 30s, 5m or 1h, not true/false")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        if re.fullmatch(r"\d+(?:\.\d+)?", text):
            seconds = float(text)
        else:
            pos = 0
            seconds = 0.0
            for m in _PART.finditer(text):
                if m.start() != pos:
                    break
                seconds += float(m.group(1)) * _UNITS[m.group(2)]
                pos = m.end()
            if pos != len(text) or not text:
                raise ValueError(
                    f"{value!r} is not a duration; use a number of seconds or e.g. 250ms, 30s, "
                    "5m, 1h30m"
                )
    else:
        raise ValueError(f"expected a duration such as 30s, 5m or 1h, got {type(value).__name__}")
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    return seconds


def format_duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 120:
        return f"{seconds:.1f}s".replace(".0s", "s")
    minutes, sec = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{sec:02d}s"
