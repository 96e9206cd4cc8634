"""Times as users send them in queries: UNIX seconds or ISO dates, checked to be showable."""
from __future__ import annotations

import datetime as dt
import re
from typing import Any, Optional


from gpuspawner.vocab.specs import SpecError


# An ISO date, or date and time (UTC unless it says otherwise).
ISO_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}([T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?"
                      r"(Z|[+-][0-9]{2}:[0-9]{2})?)?")


# The times the API shows as ISO dates: from the epoch to the end of year 9999.
LATEST_TIME = 253402300799.0


def check_time(seconds: Any, name: str) -> float:
    """A UNIX time in seconds that an ISO date can show."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) \
            or not 0 <= seconds <= LATEST_TIME:
        raise SpecError(name, f"must be a UNIX time in seconds from 0 to {LATEST_TIME:.0f} "
                              f"(9999-12-31), got {seconds!r}")
    return float(seconds)


def parse_time(value: Optional[str], name: str, default: float) -> float:
    """A UNIX time in seconds, an ISO date (``2026-11-01``, midnight UTC) or
    an ISO date and time."""
    if value is None or value == "":
        return default
    if re.fullmatch(r"[0-9]{1,12}(\.[0-9]{1,9})?", value):
        return check_time(float(value), name)
    try:
        if not ISO_TIME.fullmatch(value):
            raise ValueError(value)
        t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise SpecError(name, f"{value!r} is neither a UNIX time in seconds nor an ISO date "
                              f"such as 2026-11-01 or 2026-11-01T12:00:00Z")
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return check_time(t.timestamp(), name)
