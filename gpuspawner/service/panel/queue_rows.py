"""The queue page's reads: each state's workloads oldest first, a page at a
time, how many there are, and the recent preemptions.

Pages are keyset pages on (submitted_at, id), with the list API's cursor
encoding (``queries.encode_cursor``): a page is read from an index
(migration 0021) and costs what it shows, however deep it is and however
long the queue; work submitted while an admin pages is newer than every
cursor, so it only adds to the last page, never shifts one already seen.
"""
from __future__ import annotations

from typing import Optional

from sqlalchemy import func, select, tuple_

from gpuspawner.service.workloads import queries
from gpuspawner.store import EventRow, WorkloadRow
from gpuspawner.vocab.specs import SpecError
from gpuspawner.vocab.states import HELD, QUEUED, RUNNING, STOPPING, WAITING

# The most workloads a section lists at once (the oldest, or the oldest
# after its cursor).
QUEUE_PAGE_ROWS = 500
# The sections that page (the long ones: a queue of 10,000, a sweep's tasks
# beyond its cap), and the query argument that carries each one's cursor.
PAGED = {QUEUED: "queued_after", WAITING: "waiting_after"}
SECTIONS = (WAITING, QUEUED, HELD, RUNNING, STOPPING)

Keyset = tuple[float, str]


def queued_count(state, teams: Optional[list[str]]) -> int:
    """How many workloads of ``teams`` (None: all) are queued, from the
    counts the scheduler core maintains (not a count of the queue's rows)."""
    wanted = None if teams is None else set(teams)
    return sum(n for (team, _pool, _kind), (n, _gpus) in list(state.pending_counts.items())
               if wanted is None or team in wanted)


def page_cursor(argument: str, raw: str) -> Optional[Keyset]:
    """The keyset of a section's cursor (None: its first page); a SpecError
    naming ``argument`` for a cursor that no link of the page gave."""
    if not raw:
        return None
    try:
        return queries.decode_cursor(raw)
    except SpecError:
        raise SpecError(argument, f"{raw!r} is not a cursor this page gave (follow the page's "
                                  "“Next” or “First” link as it is)") from None


def state_page(s, state: str, teams: Optional[list[str]], after: Optional[Keyset] = None,
               limit: int = QUEUE_PAGE_ROWS) -> tuple[list[WorkloadRow], Optional[str]]:
    """The oldest ``limit`` workloads in ``state`` of ``teams`` (None: all)
    after the keyset ``after``, and the next page's cursor (None: this is the
    last page). A lead's teams are read one by one from the (team, state,
    submitted_at, id) index and merged: each read stops after a page, where
    one query over all of them would sort their whole queues."""
    def read(team: Optional[str]) -> list[WorkloadRow]:
        q = select(WorkloadRow).where(WorkloadRow.state == state)
        if team is not None:
            q = q.where(WorkloadRow.team == team)
        if after is not None:
            q = q.where(tuple_(WorkloadRow.submitted_at, WorkloadRow.id) > tuple_(*after))
        return list(s.scalars(q.order_by(WorkloadRow.submitted_at, WorkloadRow.id)
                              .limit(limit + 1)))

    if teams is None:
        rows = read(None)
    else:
        rows = sorted((r for team in teams for r in read(team)),
                      key=lambda r: (r.submitted_at, r.id))
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, queries.encode_cursor(rows[-1]) if more else None


def queue_rows(s, teams: Optional[list[str]], maintained: Optional[dict[str, int]] = None,
               after: Optional[dict[str, Keyset]] = None
               ) -> tuple[list[WorkloadRow], dict[str, int], dict[str, Optional[str]]]:
    """A page of each state the queue page shows (of ``teams``; None: all),
    oldest first: a state in ``after`` from after its keyset, the others
    their first page; how many there are in each (a state's count in
    ``maintained`` is taken as it is, the others are an indexed COUNT, only
    when one page does not hold them all); and each state's next cursor."""
    rows: list[WorkloadRow] = []
    counts: dict[str, int] = dict(maintained or {})
    next_cursors: dict[str, Optional[str]] = {}
    for state in SECTIONS:
        start = (after or {}).get(state)
        shown, next_cursors[state] = state_page(s, state, teams, start)
        if start is None and next_cursors[state] is None:
            counts[state] = len(shown)
        elif state not in counts:
            n = select(func.count()).select_from(WorkloadRow).where(WorkloadRow.state == state)
            if teams is not None:
                n = n.where(WorkloadRow.team.in_(teams))
            counts[state] = s.scalar(n)
        rows += shown
    rows.sort(key=lambda r: (r.submitted_at, r.id))
    return rows, counts, next_cursors


def recent_preemptions(s, teams: Optional[list[str]], since: float, limit: int = 50
                       ) -> list[tuple[EventRow, WorkloadRow]]:
    """The newest ``limit`` preemptions since ``since`` of ``teams``' work
    (None: all), with their workloads: read from the events' (type, time)
    index, so they cost the recent preemptions, not every event or every
    workload of the teams."""
    q = (select(EventRow, WorkloadRow).join(WorkloadRow, WorkloadRow.id == EventRow.workload_id)
         .where(EventRow.type == "preempted", EventRow.time >= since))
    if teams is not None:
        q = q.where(WorkloadRow.team.in_(teams))
    return [(e, w) for e, w in s.execute(q.order_by(EventRow.id.desc()).limit(limit))]
