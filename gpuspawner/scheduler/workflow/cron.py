"""Cron expressions: parse them, and find when they fire in a time zone.

Pure (no I/O, no clock of its own): the caller gives the instants. The
syntax is Vixie cron's five fields, ``minute hour day-of-month month
day-of-week``, each a ``*``, a number, a range ``a-b``, a step ``*/n``,
``a-b/n`` or ``a/n`` (``a`` to the end), or a comma list of these; months and
weekdays also by name (``JAN``-``DEC``, ``SUN``-``SAT``, any case); weekday 0
and 7 are both Sunday; ``@hourly @daily @midnight @weekly @monthly @yearly
@annually`` stand for their usual expressions. As in Vixie cron, when both
day fields are restricted (neither starts with ``*``) a day matches when
either matches ("the 1st and every Monday").

The expression is read in wall-clock time of an IANA zone. Daylight saving
changes, as cronie treats fixed times:

- a wall time skipped by a spring-forward (02:30 on the day Berlin goes from
  02:00 to 03:00) fires once, at the first instant after the gap (03:00);
  several skipped wall times fire once between them;
- a wall time repeated by a fall-back (02:30 on the day Berlin goes from
  03:00 back to 02:00) fires once, at its first occurrence.

So every wall time fires at most once, and the firings are in order.
"""
from __future__ import annotations

import datetime as dt
import itertools
from dataclasses import dataclass
from typing import Iterator, Optional
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

UTC = dt.timezone.utc
MINUTE = dt.timedelta(minutes=1)
# No cron expression that can match at all waits longer than this (29 February
# with the years 2100, 2200... that skip it).
LONGEST_WAIT_YEARS = 9

MACROS = {
    "@hourly": "0 * * * *", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0", "@monthly": "0 0 1 * *", "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
WEEKDAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
# The longest each month can be (February in a leap year).
MONTH_DAYS = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


@dataclass(frozen=True)
class Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()  # names for low, low + 1, ...


FIELDS = (Field("minute", 0, 59), Field("hour", 0, 23), Field("day-of-month", 1, 31),
          Field("month", 1, 12, tuple(MONTHS)), Field("day-of-week", 0, 7, tuple(WEEKDAYS)))


class CronError(ValueError):
    """A cron expression or time zone that cannot be used; the message names
    the field and the problem."""


@dataclass(frozen=True)
class Cron:
    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday ... 6 = Saturday
    day_star: bool  # the day-of-month field starts with "*"
    weekday_star: bool

    def day_matches(self, d: dt.date) -> bool:
        in_days = d.day in self.days
        in_weekdays = (d.isoweekday() % 7) in self.weekdays
        if self.day_star or self.weekday_star:
            return in_days and in_weekdays
        return in_days or in_weekdays


def parse(expr: str) -> Cron:
    """A cron expression, or CronError naming the field and the problem."""
    if not isinstance(expr, str) or not expr.strip():
        raise CronError("cron expression is empty")
    text = " ".join(expr.split())
    body = MACROS.get(text.lower(), text)
    if body.startswith("@"):
        raise CronError(f"cron expression: unknown shortcut {text!r}; known: "
                        f"{', '.join(MACROS)}")
    parts = body.split(" ")
    if len(parts) != 5:
        raise CronError(f"cron expression needs 5 fields (minute hour day-of-month month "
                        f"day-of-week), got {len(parts)}")
    values = [_field(f, p) for f, p in zip(FIELDS, parts)]
    weekdays = frozenset(d % 7 for d in values[4])
    cron = Cron(text, *values[:4], weekdays, parts[2].startswith("*"), parts[4].startswith("*"))
    if cron.weekday_star:  # only the day of the month counts: it must exist
        if not any(d <= MONTH_DAYS[m - 1] for m in cron.months for d in cron.days):
            raise CronError(f"cron day-of-month field: {parts[2]} never occurs in month(s) "
                            f"{parts[3]}")
    return cron


def _field(f: Field, text: str) -> frozenset[int]:
    out: set[int] = set()
    for item in text.split(","):
        out |= _item(f, item)
    return frozenset(out)


def _item(f: Field, item: str) -> set[int]:
    where = f"cron {f.name} field"
    if not item:
        raise CronError(f"{where}: empty list item")
    base, slash, step_text = item.partition("/")
    step = 1
    if slash:
        if not step_text.isdigit() or int(step_text) == 0:
            raise CronError(f"{where}: step {step_text!r} is not a whole number of at least 1")
        step = int(step_text)
    if base == "*":
        low, high = f.low, f.high
    elif "-" in base:
        a, _, b = base.partition("-")
        low, high = _number(f, a), _number(f, b)
        if low > high:
            raise CronError(f"{where}: range {base} is backwards ({a} is after {b})")
    else:
        low = _number(f, base)
        high = f.high if slash else low  # "a/n": from a to the end, every n
    return set(range(low, high + 1, step))


def _number(f: Field, text: str) -> int:
    where = f"cron {f.name} field"
    if text.upper() in f.names:
        return f.low + f.names.index(text.upper())
    if not text.isdigit():
        hint = f" (names: {'-'.join((f.names[0], f.names[-1]))})" if f.names else ""
        raise CronError(f"{where}: {text!r} is not a number{hint}")
    n = int(text)
    if not f.low <= n <= f.high:
        raise CronError(f"{where}: {n} is out of {f.low}-{f.high}")
    return n


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``, or CronError."""
    if not isinstance(name, str) or not name:
        raise CronError("timezone: must be an IANA time zone name such as Europe/Berlin")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise CronError(f"timezone: unknown IANA time zone {name!r} "
                        f"(e.g. UTC, Europe/Berlin, America/New_York)") from None


# ---- when it fires -------------------------------------------------------
def next_fire(cron: Cron, tz: dt.tzinfo, after: dt.datetime) -> dt.datetime:
    """The first firing strictly after the aware instant ``after`` (UTC)."""
    if after.tzinfo is None:
        raise ValueError("after must be an aware datetime")
    # Every wall time before after's own fires at or before it (see instant()).
    wall = after.astimezone(tz).replace(tzinfo=None, second=0, microsecond=0)
    while True:
        wall = _next_wall(cron, wall)
        t = instant(wall, tz)
        if t > after:
            return t
        wall += MINUTE  # a wall time repeated by a fall-back: fired at its first


def fires_between(cron: Cron, tz: dt.tzinfo, since: dt.datetime, until: dt.datetime,
                  limit: Optional[int] = None) -> list[dt.datetime]:
    """The firings in (since, until], oldest first, at most ``limit`` of them
    (the oldest ones)."""
    return list(itertools.islice(_fires(cron, tz, since, until), limit))


def last_fire_between(cron: Cron, tz: dt.tzinfo, since: dt.datetime,
                      until: dt.datetime) -> Optional[dt.datetime]:
    """The latest firing in (since, until], None when there is none. Looks
    back from ``until`` in windows that double, so a long outage of a
    frequent schedule costs about as much as its last few firings."""
    window = dt.timedelta(hours=1)
    while until > since:
        start = max(since, until - window)
        found = None
        for found in _fires(cron, tz, start, until):
            pass
        if found is not None:
            return found
        until, window = start, window * 2
    return None


def _fires(cron: Cron, tz, since: dt.datetime, until: dt.datetime) -> Iterator[dt.datetime]:
    t = since
    while True:
        t = next_fire(cron, tz, t)
        if t > until:
            return
        yield t


def instant(wall: dt.datetime, tz: dt.tzinfo) -> dt.datetime:
    """When the naive local ``wall`` time fires (UTC): its first occurrence,
    or for a wall time that does not exist, the end of the gap."""
    first = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
    if first.astimezone(tz).replace(tzinfo=None) == wall:
        return first
    # In a gap: fold=1 reads it with the offset after the change, which lands
    # before the change; fold=0 with the offset before, after it. The change
    # lies between: find it to the second.
    lo, hi = wall.replace(tzinfo=tz, fold=1).astimezone(UTC), first
    offset = lo.astimezone(tz).utcoffset()
    while hi - lo > dt.timedelta(seconds=1):
        mid = (lo + (hi - lo) / 2).replace(microsecond=0)
        if mid.astimezone(tz).utcoffset() == offset:
            lo = mid
        else:
            hi = mid
    return hi


def _next_wall(cron: Cron, t: dt.datetime) -> dt.datetime:
    """The first naive wall time at or after ``t`` (whole minutes) that the
    fields match."""
    give_up = t.year + LONGEST_WAIT_YEARS
    while t.year <= give_up:
        if t.month not in cron.months:
            t = _first_of_next_month(t)
        elif not cron.day_matches(t.date()):
            t = dt.datetime.combine(t.date() + dt.timedelta(days=1), dt.time())
        elif t.hour not in cron.hours:
            t = t.replace(minute=0) + dt.timedelta(hours=1)
        elif t.minute not in cron.minutes:
            later = [m for m in cron.minutes if m > t.minute]
            t = (t.replace(minute=min(later)) if later
                 else t.replace(minute=0) + dt.timedelta(hours=1))
        else:
            return t
    raise CronError(f"cron expression {cron.text!r} never fires")


def _first_of_next_month(t: dt.datetime) -> dt.datetime:
    return (dt.datetime(t.year + 1, 1, 1) if t.month == 12
            else dt.datetime(t.year, t.month + 1, 1))
