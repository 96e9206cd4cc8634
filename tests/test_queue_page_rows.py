"""The admin queue page in pages (``queued_after`` / ``waiting_after``): an
admin or a lead paging through a queue longer than a page sees each of the
workloads they may see once, oldest first, while others keep submitting; a
page is read from an index, however deep; a cursor no link gave is refused
by the argument's name."""
from __future__ import annotations

import pytest
from sqlalchemy import event, select

from gpuspawner.service.loop import journal
from gpuspawner.service.panel.queue_rows import (PAGED, page_cursor, queue_rows, queued_count,
                                                 recent_preemptions, state_page)
from gpuspawner.service.workloads import queries
from gpuspawner.store import WorkloadRow
from gpuspawner.vocab.specs import SpecError
from gpuspawner.vocab.states import QUEUED, WAITING
from test_list_pages import engine, submit  # noqa: F401 (the fixture)
from test_start_estimates_service import ALICE, BOB


@pytest.fixture
def queue(engine):  # noqa: F811
    """12 of team a and 9 of team b queued, interleaved, with ties on
    submitted_at (a sweep's tasks are submitted in one go: the id breaks them)."""
    for _ in range(3):
        submit(engine, ALICE, 2, "a")
        submit(engine, BOB, 3, "b")
    submit(engine, ALICE, 6, "a-tied", same_time=True)
    return engine


def oldest_first(engine, teams) -> list[str]:
    """Every queued workload of ``teams`` (None: all), as one list would be."""
    q = select(WorkloadRow.id).where(WorkloadRow.state == QUEUED)
    if teams is not None:
        q = q.where(WorkloadRow.team.in_(teams))
    with engine.store.session() as s:
        return list(s.scalars(q.order_by(WorkloadRow.submitted_at, WorkloadRow.id)))


def walk(engine, teams, limit: int, between=lambda: None) -> list[tuple[list[str], bool]]:
    """Each page (its ids, whether it has a next), following the cursors as
    the page's links do (through ``page_cursor``, the handler's reading)."""
    got, cursor = [], ""
    while True:
        with engine.store.session() as s:
            rows, cursor = state_page(s, QUEUED, teams, page_cursor("queued_after", cursor),
                                      limit)
        got.append(([r.id for r in rows], cursor is not None))
        if cursor is None:
            return got
        between()


@pytest.mark.parametrize("who, teams, limit, sizes", [
    ("admin, first page then next ones", None, 8, [8, 8, 5]),
    ("admin, the last page exactly full: no empty page after it", None, 7, [7, 7, 7]),
    ("admin, one page holds them all", None, 500, [21]),
    ("lead of a", ["a"], 5, [5, 5, 2]),
    ("lead of b, exactly one page", ["b"], 9, [9]),
    ("lead of a and b (merged from each team's index)", ["a", "b"], 8, [8, 8, 5]),
])
def test_pages_list_each_workload_the_viewer_may_see_once_oldest_first(queue, who, teams, limit,
                                                                       sizes):
    got = walk(queue, teams, limit)
    assert [len(ids) for ids, _ in got] == sizes, who
    assert [more for _, more in got] == [True] * (len(sizes) - 1) + [False], who
    assert [w for ids, _ in got for w in ids] == oldest_first(queue, teams), who


@pytest.mark.parametrize("teams", [None, ["a"], ["a", "b"]])
def test_work_submitted_while_paging_only_adds_to_the_last_page(queue, teams):
    before = oldest_first(queue, teams)
    added: list[str] = []
    got = walk(queue, teams, 4, between=lambda: added.extend(
        submit(queue, ALICE, 1, "meanwhile") + submit(queue, BOB, 1, "meanwhile")))
    seen = [w for ids, _ in got for w in ids]
    assert len(seen) == len(set(seen)), "a workload was listed twice"
    assert seen[:len(before)] == before  # the pages already seen never shift
    assert seen == oldest_first(queue, teams)  # the newer ones follow, each once
    with queue.store.session() as s:
        teams_of = {w: s.get(WorkloadRow, w).team for w in seen}
    assert teams is None or set(teams_of.values()) <= set(teams), "another team's work shown"


@pytest.mark.parametrize("argument", sorted(PAGED.values()))
@pytest.mark.parametrize("raw", ["garbage!", "bnVsbA", "WzEsMl0", "WyJ4IiwidzEiXQ",
                                 "W05hTiwidzEiXQ"])
def test_a_cursor_no_link_gave_is_refused_by_the_arguments_name(argument, raw):
    # not base64, null, [1, 2], ["x", "w1"], NaN
    with pytest.raises(SpecError) as e:
        page_cursor(argument, raw)
    assert e.value.field == argument and repr(raw) in str(e.value)


def test_an_empty_cursor_is_the_first_page():
    assert page_cursor("queued_after", "") is None


def test_the_page_takes_the_cores_queued_count_and_pages_one_section(queue):
    state = queue.scheduler.state
    first = oldest_first(queue, ["a"])
    with queue.store.session() as s:
        row = s.get(WorkloadRow, first[4])
        after = {QUEUED: queries.decode_cursor(queries.encode_cursor(row))}
        rows, counts, nexts = queue_rows(s, ["a"], {QUEUED: queued_count(state, ["a"])}, after)
    assert [r.id for r in rows if r.state == QUEUED] == first[5:]
    assert counts[QUEUED] == 12 and counts[WAITING] == 0  # all of a's, not the page's
    assert nexts == {s: None for s in nexts}


# SQLite only: PostgreSQL's planner picks by its table statistics, so its
# plan for a small test table says nothing about a long queue.
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("teams, index", [(None, "ix_workloads_state_submitted"),
                                          (["a", "b"], "ix_workloads_team_state_submitted")])
def test_a_deep_page_is_read_from_an_index(queue, teams, index):
    """SQLite's plan for each query a later page makes: a search of the
    (state, submitted_at, id) index (a lead's, per team: (team, state,
    submitted_at, id)), no temporary B-tree to sort the queue."""
    with queue.store.session() as s:
        _, cursor = state_page(s, QUEUED, teams, None, 3)
        for plan in plans(s, lambda: state_page(s, QUEUED, teams,
                                                page_cursor("queued_after", cursor), 3),
                          1 if teams is None else len(teams)):
            assert index in plan and "(submitted_at,id)>" in plan, plan
            assert "TEMP B-TREE" not in plan, plan


def plans(s, read, statements: int) -> list[str]:
    """SQLite's plan of each statement ``read()`` runs (``statements`` of them)."""
    ran = []
    listen = lambda *a: ran.append((a[2], a[3]))  # noqa: E731 (statement, parameters)
    event.listen(s.get_bind(), "before_cursor_execute", listen)
    try:
        read()
    finally:
        event.remove(s.get_bind(), "before_cursor_execute", listen)
    assert len(ran) == statements, ran
    return [" / ".join(str(r[-1]) for r in s.connection().exec_driver_sql(
        "EXPLAIN QUERY PLAN " + statement, parameters)) for statement, parameters in ran]


def preempt(engine, wid: str, at: float) -> None:
    with engine.store.transaction() as s:
        journal.event(s, wid, "preempted", at, f"{wid} preempted")


@pytest.mark.parametrize("teams, shown", [(None, ["b-new", "a-new"]), (["a"], ["a-new"]),
                                          (["b"], ["b-new"])])
def test_the_preemptions_are_the_recent_ones_of_the_viewers_teams(queue, teams, shown):
    a, b = oldest_first(queue, ["a"]), oldest_first(queue, ["b"])
    now = queue.clock_for_test.t
    preempt(queue, a[0], now - 8 * 86400)   # older than the page's 7 days
    named = {a[1]: "a-new", b[0]: "b-new"}
    preempt(queue, a[1], now - 3600)
    preempt(queue, b[0], now - 60)
    with queue.store.session() as s:
        got = recent_preemptions(s, teams, now - 7 * 86400)
    assert [named[w.id] for _, w in got] == shown  # newest first


# SQLite only (see above).
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("teams", [None, ["a"]])
def test_the_preemptions_are_read_from_the_events_type_and_time(queue, teams):
    """Not every event (an admin's) or every workload of a lead's teams."""
    with queue.store.session() as s:
        [plan] = plans(s, lambda: recent_preemptions(s, teams, 0.0), 1)
    assert plan.startswith("SEARCH events USING INDEX ix_events_type_time (type=? AND time>?)"), \
        plan
