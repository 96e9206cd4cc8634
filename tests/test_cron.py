"""Cron expressions (gpuspawner/scheduler/workflow/cron.py): what fires when, in a
time zone, across daylight-saving changes, short months and 29 February; and
errors that name the field and the problem."""
from __future__ import annotations

import datetime as dt
import time

import pytest

from gpuspawner.scheduler.workflow import cron

BERLIN, NEW_YORK = "Europe/Berlin", "America/New_York"


def utc(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.timezone.utc)


def firings(expr: str, tz: str, after: str, n: int) -> list[str]:
    c, z, t = cron.parse(expr), cron.zone(tz), utc(after)
    out = []
    for _ in range(n):
        t = cron.next_fire(c, z, t)
        out.append(t.strftime("%Y-%m-%dT%H:%M:%S"))
    return out


@pytest.mark.parametrize("expr,tz,after,expected", [
    # plain fields, lists, ranges and steps
    ("*/5 * * * *", "UTC", "2026-06-01T10:02:30", ["2026-06-01T10:05:00", "2026-06-01T10:10:00"]),
    ("5,10-20/5 * * * *", "UTC", "2026-06-01T10:00:00",
     ["2026-06-01T10:05:00", "2026-06-01T10:10:00", "2026-06-01T10:15:00", "2026-06-01T10:20:00",
      "2026-06-01T11:05:00"]),
    ("50/5 9 * * *", "UTC", "2026-06-01T00:00:00",
     ["2026-06-01T09:50:00", "2026-06-01T09:55:00", "2026-06-02T09:50:00"]),
    ("0 0 * * *", "UTC", "2026-06-01T00:00:00", ["2026-06-02T00:00:00"]),  # strictly after
    # names, any case; 7 is Sunday too
    ("0 9 * jan-Mar MON-FRI", "UTC", "2026-03-27T10:00:00",
     ["2026-03-30T09:00:00", "2026-03-31T09:00:00", "2027-01-01T09:00:00"]),
    ("0 0 * * 7", "UTC", "2026-03-02T00:00:00", ["2026-03-08T00:00:00"]),
    ("0 0 * * SUN", "UTC", "2026-03-02T00:00:00", ["2026-03-08T00:00:00"]),
    # shortcuts
    ("@hourly", "UTC", "2026-06-01T10:30:00", ["2026-06-01T11:00:00"]),
    ("@daily", "UTC", "2026-06-01T10:30:00", ["2026-06-02T00:00:00"]),
    ("@weekly", "UTC", "2026-03-02T00:00:00", ["2026-03-08T00:00:00"]),
    ("@monthly", "UTC", "2026-03-02T00:00:00", ["2026-04-01T00:00:00"]),
    ("@yearly", "UTC", "2026-03-02T00:00:00", ["2027-01-01T00:00:00"]),
    # day-of-month OR day-of-week when both are restricted (Vixie cron) ...
    ("0 0 13 * FRI", "UTC", "2026-03-01T00:00:00",
     ["2026-03-06T00:00:00", "2026-03-13T00:00:00", "2026-03-20T00:00:00"]),
    # ... AND when one starts with "*" (here: odd days that are Mondays)
    ("0 0 */2 * MON", "UTC", "2026-03-01T00:00:00", ["2026-03-09T00:00:00", "2026-03-23T00:00:00"]),
    # 30-day months and February
    ("0 0 31 * *", "UTC", "2026-04-01T00:00:00", ["2026-05-31T00:00:00", "2026-07-31T00:00:00"]),
    ("0 0 30 * *", "UTC", "2026-01-31T00:00:00", ["2026-03-30T00:00:00"]),
    ("0 0 29 2 *", "UTC", "2026-01-01T00:00:00", ["2028-02-29T00:00:00", "2032-02-29T00:00:00"]),
    ("0 0 29 2 *", "UTC", "2096-03-01T00:00:00", ["2104-02-29T00:00:00"]),  # 2100 is no leap year
    # a zone's offset
    ("0 9 * * *", "Europe/Paris", "2026-06-01T00:00:00", ["2026-06-01T07:00:00"]),
    ("0 9 * * *", "Europe/Paris", "2026-01-10T00:00:00", ["2026-01-10T08:00:00"]),
])
def test_next_firings(expr, tz, after, expected):
    assert firings(expr, tz, after, len(expected)) == expected


# Berlin: 2026-03-29 02:00 CET -> 03:00 CEST (01:00Z); 2026-10-25 03:00 CEST -> 02:00 CET (01:00Z).
# New York: 2026-03-08 02:00 EST -> 03:00 EDT (07:00Z); 2026-11-01 02:00 EDT -> 01:00 EST (06:00Z).
@pytest.mark.parametrize("expr,tz,after,expected", [
    # spring forward: the skipped 02:30 fires once, at the end of the gap (03:00 CEST)
    ("30 2 * * *", BERLIN, "2026-03-28T12:00:00", ["2026-03-29T01:00:00", "2026-03-30T00:30:00"]),
    # several skipped wall times fire once between them; then on as usual
    ("*/15 * * * *", BERLIN, "2026-03-29T00:50:00",
     ["2026-03-29T01:00:00", "2026-03-29T01:15:00", "2026-03-29T01:30:00"]),
    # 03:00 itself and the skipped 02:xx are one firing
    ("0,30 2,3 * * *", BERLIN, "2026-03-29T00:00:00", ["2026-03-29T01:00:00", "2026-03-29T01:30:00"]),
    # fall back: the repeated 02:30 fires at its first occurrence (CEST) only
    ("30 2 * * *", BERLIN, "2026-10-24T12:00:00", ["2026-10-25T00:30:00", "2026-10-26T01:30:00"]),
    # every 30 minutes: the repeated hour fires once, so 02:30 CEST is followed by 03:00 CET
    ("*/30 * * * *", BERLIN, "2026-10-25T00:00:00",
     ["2026-10-25T00:30:00", "2026-10-25T02:00:00", "2026-10-25T02:30:00"]),
    # asked from inside the second pass of the repeated hour: nothing fires twice
    ("*/30 * * * *", BERLIN, "2026-10-25T01:10:00", ["2026-10-25T02:00:00"]),
    ("0 2 * * *", NEW_YORK, "2026-03-07T12:00:00", ["2026-03-08T07:00:00", "2026-03-09T06:00:00"]),
    ("30 1 * * *", NEW_YORK, "2026-10-31T12:00:00", ["2026-11-01T05:30:00", "2026-11-02T06:30:00"]),
    ("0 * * * *", NEW_YORK, "2026-11-01T04:30:00",  # 01:00 EDT, then 02:00 EST an hour later
     ["2026-11-01T05:00:00", "2026-11-01T07:00:00", "2026-11-01T08:00:00"]),
])
def test_daylight_saving_changes(expr, tz, after, expected):
    assert firings(expr, tz, after, len(expected)) == expected


@pytest.mark.parametrize("expr,since,until,expected", [
    ("0 * * * *", "2026-06-01T10:00:00", "2026-06-01T15:00:00", 5),   # (since, until]
    ("*/5 * * * *", "2026-06-01T10:00:00", "2026-06-01T10:04:59", 0),
    ("0 0 29 2 *", "2026-01-01T00:00:00", "2036-01-01T00:00:00", 2),  # 2028 and 2032
])
def test_firings_between(expr, since, until, expected):
    c = cron.parse(expr)
    got = cron.fires_between(c, cron.zone("UTC"), utc(since), utc(until))
    assert len(got) == expected
    assert got == sorted(got) and all(utc(since) < t <= utc(until) for t in got)


def test_firings_between_keeps_the_oldest_up_to_a_limit():
    got = cron.fires_between(cron.parse("* * * * *"), cron.zone("UTC"),
                             utc("2026-06-01T10:00:00"), utc("2026-06-02T10:00:00"), limit=3)
    assert [t.strftime("%H:%M") for t in got] == ["10:01", "10:02", "10:03"]


@pytest.mark.parametrize("expr,tz,since,until,expected", [
    ("* * * * *", "UTC", "2026-05-01T00:00:00", "2026-06-01T10:02:30", "2026-06-01T10:02:00"),
    ("0 3 * * *", "UTC", "2026-05-01T00:00:00", "2026-06-01T02:59:00", "2026-05-31T03:00:00"),
    ("0 3 1 1 *", "UTC", "2020-05-01T00:00:00", "2026-06-01T00:00:00", "2026-01-01T03:00:00"),
    ("0 3 * * *", "UTC", "2026-05-31T03:00:00", "2026-06-01T02:59:00", None),  # since is excluded
    ("30 2 * * *", BERLIN, "2026-03-28T12:00:00", "2026-03-29T05:00:00", "2026-03-29T01:00:00"),
])
def test_last_firing_between(expr, tz, since, until, expected):
    got = cron.last_fire_between(cron.parse(expr), cron.zone(tz), utc(since), utc(until))
    assert (got and got.strftime("%Y-%m-%dT%H:%M:%S")) == expected


def test_the_last_firing_of_a_long_outage_is_found_quickly():
    t0 = time.perf_counter()
    got = cron.last_fire_between(cron.parse("* * * * *"), cron.zone(BERLIN),
                                 utc("2025-06-01T00:00:00"), utc("2026-06-01T00:00:30"))
    assert got == utc("2026-06-01T00:00:00")
    assert time.perf_counter() - t0 < 1.0


@pytest.mark.parametrize("expr,message", [
    ("61 * * * *", "cron minute field: 61 is out of 0-59"),
    ("* 24 * * *", "cron hour field: 24 is out of 0-23"),
    ("* * 0 * *", "cron day-of-month field: 0 is out of 1-31"),
    ("* * * 13 *", "cron month field: 13 is out of 1-12"),
    ("* * * * 8", "cron day-of-week field: 8 is out of 0-7"),
    ("* * * FOO *", "cron month field: 'FOO' is not a number (names: JAN-DEC)"),
    ("* * * * MON-XYZ", "cron day-of-week field: 'XYZ' is not a number (names: SUN-SAT)"),
    ("*/0 * * * *", "cron minute field: step '0' is not a whole number of at least 1"),
    ("*/x * * * *", "cron minute field: step 'x' is not a whole number of at least 1"),
    ("5-1 * * * *", "cron minute field: range 5-1 is backwards (5 is after 1)"),
    ("1,,2 * * * *", "cron minute field: empty list item"),
    ("-1 * * * *", "cron minute field: '' is not a number"),
    ("* * * *", "cron expression needs 5 fields (minute hour day-of-month month day-of-week), got 4"),
    ("0 0 * * * *", "cron expression needs 5 fields (minute hour day-of-month month day-of-week), "
                    "got 6"),
    ("@reboot", "cron expression: unknown shortcut '@reboot'"),
    ("", "cron expression is empty"),
    ("0 0 30 2 *", "cron day-of-month field: 30 never occurs in month(s) 2"),
    ("0 0 31 4,6,9,11 *", "cron day-of-month field: 31 never occurs in month(s) 4,6,9,11"),
])
def test_bad_expressions_name_the_field_and_the_problem(expr, message):
    with pytest.raises(cron.CronError) as err:
        cron.parse(expr)
    assert str(err.value).startswith(message)


def test_feb_30_is_fine_when_weekdays_also_count():
    # OR-semantics: "the 30th, or any Monday" of February still fires (on Mondays).
    got = firings("0 0 30 2 MON", "UTC", "2026-01-01T00:00:00", 1)
    assert got == ["2026-02-02T00:00:00"]


@pytest.mark.parametrize("name", ["Mars/Olympus", "../etc/passwd", "", "Europe/"])
def test_unknown_time_zones_are_refused(name):
    with pytest.raises(cron.CronError, match="timezone"):
        cron.zone(name)


def test_spaces_are_normalised_and_the_text_kept():
    c = cron.parse("  */5   *  * * *  ")
    assert c.text == "*/5 * * * *" and c.minutes == frozenset(range(0, 60, 5))
