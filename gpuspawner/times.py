"""Times as the API writes them (ISO 8601 in UTC, ``…Z``) and reads them
back: the one formatter and the one lenient reader, for the service's views,
the CLI and the culler."""
from __future__ import annotations

import datetime as dt
import functools
from typing import Optional


@functools.lru_cache(maxsize=16384)
def iso(t: Optional[float]) -> Optional[str]:
    """UNIX seconds as the API writes them; None stays None. Remembered: a
    polled list writes the same times again and again."""
    if t is None:
        return None
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat().replace("+00:00", "Z")


def from_iso(text: Optional[str]) -> Optional[dt.datetime]:
    """An API time (or JupyterHub's) as an aware datetime; None for none or
    for text that is not one."""
    if not text:
        return None
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.timezone.utc)
