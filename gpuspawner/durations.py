"""Durations as people type them, the one parser for the service's specs
and the culler's flags: 600, 1.5, "600", "90s", "45m", "2h30m", "1h 15s",
"1d" (units in that order, any case, spaces between)."""
from __future__ import annotations

import math
import re
from typing import Any

DURATION_RE = re.compile(r"\s*(?:(\d+(?:\.\d+)?)d)?\s*(?:(\d+(?:\.\d+)?)h)?\s*"
                         r"(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s)?\s*", re.IGNORECASE)


def seconds_of(value: Any) -> float:
    """Seconds (finite, >= 0); ValueError, saying what was expected, else."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration, got the boolean {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            m = DURATION_RE.fullmatch(text)
            if not text or not m or not any(m.groups()):
                raise ValueError(f"expected a duration such as 600, '45m', '2h30m' or '1d', "
                                 f"got {value!r}") from None
            d, h, mi, s = (float(g) if g else 0.0 for g in m.groups())
            seconds = d * 86400 + h * 3600 + mi * 60 + s
    else:
        raise ValueError(f"expected a duration, got {type(value).__name__} {value!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"expected a duration >= 0, got {value!r}")
    return seconds
