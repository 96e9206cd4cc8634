"""The workload list in pages (GET /workloads's ``cursor`` and
``next_cursor``, ``gpuhub ls``): a client paging through a list longer than
one page sees every workload once, in order, while others keep submitting;
a page is read from the list's index, not sorted out of the whole table; a
cursor that the list did not give is a 400 naming it."""
from __future__ import annotations

import json

import pytest
from sqlalchemy import select, text

from gpuspawner.cli import jobs as cli_jobs
from gpuspawner.cli.main import main
from gpuspawner.service.panel.queue_rows import queued_count, queue_rows
from gpuspawner.service.workloads import queries
from gpuspawner.store import Store, WorkloadRow
from gpuspawner.vocab.specs import SpecError
from gpuspawner.vocab.states import QUEUED
from test_start_estimates_service import ALICE, BOB, Clock, job, make_engine


@pytest.fixture
def engine(db_url, tmp_path):
    clock = Clock()
    engine = make_engine(db_url, tmp_path, clock)
    engine.clock_for_test = clock
    yield engine
    engine.store.close()


def submit(engine, who, n: int, name: str, same_time: bool = False) -> list[str]:
    """``n`` jobs of ``who`` (a second apart, or all at the same time)."""
    out = []
    for _ in range(n):
        if not same_time:
            engine.clock_for_test.t += 1
        out.append(engine.submit(who, job(1, 3600, name)).id)
    return out


def pages(engine, who, filters: dict, limit: int, between=lambda: None) -> list[list[str]]:
    got, cursor = [], None
    while True:
        rows, _, cursor = queries.workloads(engine.store, who, filters, limit, False, cursor=cursor)
        got.append([r.id for r in rows])
        if cursor is None:
            return got
        between()


def test_paging_through_more_than_a_page_while_others_submit_lists_each_workload_once(engine):
    before = submit(engine, ALICE, 95, "first") + submit(engine, BOB, 30, "first")
    # Ties on submitted_at (a sweep's tasks are submitted in one go): the id breaks them.
    before += submit(engine, ALICE, 12, "tied", same_time=True)
    added = []
    got = pages(engine, ALICE, {}, 20,
                between=lambda: added.extend(submit(engine, ALICE, 3, "meanwhile")))
    seen = [wid for page in got for wid in page]
    mine = [w for w in before if w in set(before[:95]) | set(before[125:])]
    assert len(seen) == len(set(seen)), "a workload was listed twice"
    assert sorted(seen) == sorted(mine), "a workload was missed (or another team's shown)"
    assert all(len(p) == 20 for p in got[:-1]) and 0 < len(got[-1]) <= 20
    assert added and not set(added) & set(seen)  # newer than the first page: on a new listing
    with engine.store.session() as s:
        order = [r.id for r in s.scalars(select(WorkloadRow).where(WorkloadRow.team == "a")
                                         .order_by(WorkloadRow.submitted_at.desc(),
                                                   WorkloadRow.id.desc()))]
    assert seen == [w for w in order if w in set(mine)]  # newest first, as one list would be


def test_pages_keep_their_filters_and_the_last_page_says_so(engine):
    submit(engine, ALICE, 7, "a-jobs")
    bobs = submit(engine, BOB, 5, "b-jobs")
    got = pages(engine, BOB, {"user": ["bob"], "state": [QUEUED]}, 2)
    assert [len(p) for p in got] == [2, 2, 1]
    assert [w for p in got for w in p] == bobs[::-1]
    rows, _, cursor = queries.workloads(engine.store, BOB, {"user": ["bob"]}, 5, False)
    assert len(rows) == 5 and cursor is None  # exactly a page: no empty page after it


@pytest.mark.parametrize("cursor", ["garbage!", "", "bnVsbA", "WzEsMl0", "WyJ4IiwidzEiXQ",
                                    "WzEsIncxXHUwMDAwIl0", "W05hTiwidzEiXQ"])
def test_a_cursor_the_list_did_not_give_is_refused_by_name(engine, cursor):
    # not base64, null, [1, 2], ["x", "w1"], a NUL in the id, NaN
    if not cursor:
        rows, _, _ = queries.workloads(engine.store, ALICE, {}, 5, False, cursor=cursor)
        return  # an empty cursor is the first page
    with pytest.raises(SpecError) as e:
        queries.workloads(engine.store, ALICE, {}, 5, False, cursor=cursor)
    assert e.value.field == "cursor" and "next_cursor" in str(e.value)


# SQLite only: PostgreSQL's planner picks by its table statistics, so its
# plan for a small test table says nothing about a long queue.
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_page_is_read_from_the_lists_index(engine):
    """SQLite's plan for a later page: a search of the (submitted_at, id)
    index, no temporary B-tree to sort the table."""
    submit(engine, ALICE, 3, "x")
    _, _, cursor = queries.workloads(engine.store, ALICE, {}, 1, False)
    at, wid = queries.decode_cursor(cursor)
    with engine.store.session() as s:
        plan = " / ".join(str(r[-1]) for r in s.execute(text(
            "EXPLAIN QUERY PLAN SELECT id FROM workloads WHERE team IN ('a') AND "
            "(submitted_at, id) < (:at, :id) ORDER BY submitted_at DESC, id DESC LIMIT 21"),
            {"at": at, "id": wid}))
    assert "ix_workloads_team_submitted" in plan and "TEMP B-TREE" not in plan, plan


def test_the_queue_pages_queued_count_is_the_cores_not_a_count_of_rows(engine):
    submit(engine, ALICE, 4, "x")
    submit(engine, BOB, 3, "y")
    state = engine.scheduler.state
    assert queued_count(state, None) == 7 and queued_count(state, ["b"]) == 3
    with engine.store.session() as s:
        rows, counts, _ = queue_rows(s, ["a"], {QUEUED: queued_count(state, ["a"])})
    assert counts[QUEUED] == 4 and sum(r.state == QUEUED for r in rows) == 4


class PagedClient:
    """What ``gpuhub ls`` asks of the service, answered from a list of 1,234."""

    def __init__(self):
        self.rows = [{"id": f"w{i:04d}", "kind": "job", "name": "n", "team": "a", "user": "alice",
                      "state": "queued", "pool": "default", "gpus_per_node": 1, "num_nodes": 1,
                      "submitted_at": "2026-01-01T00:00:00Z", "reason": ""}
                     for i in range(1234, 0, -1)]
        self.asked: list[tuple[int, object]] = []

    def list_workloads(self, *, limit, cursor=None, **_):
        self.asked.append((limit, cursor))
        start = int(cursor) if cursor else 0
        page = self.rows[start:start + limit]
        more = start + limit < len(self.rows)
        return {"workloads": page, "next_cursor": str(start + limit) if more else None}


@pytest.fixture
def paged(monkeypatch):
    client = PagedClient()
    monkeypatch.setattr(cli_jobs, "connect", lambda args: client)
    return client


def test_gpuhub_ls_pages_to_its_limit_and_says_how_to_go_on(paged, capsys):
    rc = main(["ls", "--url", "http://x", "--token", "t", "--limit", "1200", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and len(out["workloads"]) == 1200
    assert [w["id"] for w in out["workloads"]] == [r["id"] for r in paged.rows[:1200]]
    assert paged.asked == [(500, None), (500, "500"), (200, "1000")]
    assert out["next_cursor"] == "1200"
    rc = main(["ls", "--url", "http://x", "--token", "t", "--cursor", "1200"])
    captured = capsys.readouterr()
    assert rc == 0 and "w0034" in captured.out and "w0035" not in captured.out
    assert "w0001" in captured.out and "--cursor" not in captured.err  # the last page
    main(["ls", "--url", "http://x", "--token", "t", "--limit", "10"])
    assert "more than 10: the next ones with --cursor 10" in capsys.readouterr().err


def test_gpuhub_ls_refuses_a_limit_below_one(paged, capsys):
    rc = main(["ls", "--url", "http://x", "--token", "t", "--limit", "0"])
    assert rc == 2 and "--limit must be at least 1" in capsys.readouterr().err


def test_a_listed_row_shows_what_the_workloads_own_view_shows(engine):
    """The list reads plain rows (Core), not the model: each listed workload,
    queued, running or ended, with its attempts, is viewed as the model's
    row is (``GET /workloads/ID``)."""
    from gpuspawner.service.api.handlers import detail_view
    ids = submit(engine, ALICE, 6, "mixed")
    engine.tick()  # 4 GPUs: four run, two wait
    engine.cancel(ALICE, ids[0])
    all_filters = {name: [] for name in queries.LIST_FILTERS}
    rows, attempts, _ = queries.workloads(engine.store, ALICE, all_filters, 50, True)
    assert {r.id for r in rows} == set(ids)
    with engine.store.session() as s:
        for listed in rows:
            row = s.get(WorkloadRow, listed.id)
            own = list(queries.attempts_of(engine.store, listed.id))
            assert detail_view(listed, attempts.get(listed.id, []), True) == \
                detail_view(row, own, True)
    assert {r.state for r in rows} >= {"queued", "running"}


def test_a_short_page_is_read_on_the_event_loop_on_sqlite_only(engine, db_url):
    from gpuspawner.service.api.handlers import read_on_the_loop
    assert read_on_the_loop(engine.store, 50) == db_url.startswith("sqlite")
    assert not read_on_the_loop(engine.store, 1000)  # a long page: in the reads thread


def _table_rows_read(plan: dict) -> int:
    """The rows a PostgreSQL JSON plan's nodes read from the workloads table
    (those they passed on and those their filter removed)."""
    own = (plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0)
           if plan.get("Relation Name") == "workloads" else 0)
    return own + sum(_table_rows_read(p) for p in plan.get("Plans", []))


def _jobs_panel_page_reads_only_the_page(store: Store, limit: int) -> None:
    """The Jobs panel's page of ``limit`` (alice's jobs outside sweeps) reads
    at most a page and one more of the workload rows: PostgreSQL's plan as
    run; on SQLite, a search of the user's workloads outside sweeps, in the
    page's order (no sort), which starts at the page's first row."""
    q = queries.page_query(ALICE, {"kind": ["job"], "sweep_id": ["none"], "user": ["alice"]},
                           limit)
    sql = str(q.compile(dialect=store.engine.dialect, compile_kwargs={"literal_binds": True}))
    with store.session() as s:
        if store.engine.dialect.name == "postgresql":
            plan = s.execute(text(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")).scalar()[0]["Plan"]
            assert _table_rows_read(plan) <= 2 * (limit + 1), json.dumps(plan, indent=1)
        else:
            plan = " / ".join(str(r[-1]) for r in s.execute(text(f"EXPLAIN QUERY PLAN {sql}")))
            assert "ix_workloads_user_unswept_submitted (user=?)" in plan \
                and "TEMP B-TREE" not in plan, plan


def test_a_users_jobs_page_reads_the_page_not_their_sweeps_or_the_queue(db_url):
    """The Jobs panel's page (one user's jobs outside sweeps, in their team)
    behind 10,000 queued jobs of 50 other teams and the user's own sweep of
    5,000 tasks, newer than their 670 jobs. Migration 0023: an index of a
    user's workloads outside sweeps, newest first, and on PostgreSQL statistics
    that a workload's user decides its team. Before it, a page walked past
    every task of the user's sweep on both databases (5,000 rows read for
    51); and PostgreSQL, taking the user and team conditions as independent,
    read and sorted all of a user's jobs for a page (670 for 50)."""
    store = Store(db_url)
    try:
        row = dict(kind="job", project="", pool="default", gpus_per_node=1, num_nodes=1,
                   priority="normal", spec={}, state=QUEUED, reason="", attempt=0,
                   preempted_by=[], cancel_requested=False, sweep_id=None, sweep_index=None)
        with store.transaction() as s:
            s.execute(WorkloadRow.__table__.insert(), [
                dict(row, id=f"q{i}", name=f"q{i}", team=f"q{i % 50}", user=f"q{i % 50}",
                     submitted_at=1000.0 + i) for i in range(10_000)] + [
                dict(row, id=f"a{i}", name=f"a{i}", team="a", user="alice", state="succeeded",
                     attempt=1, submitted_at=500.0 + 20 * i) for i in range(670)] + [
                dict(row, id=f"s{i}", name=f"s{i}", team="a", user="alice", sweep_id="sw1",
                     sweep_index=i, submitted_at=20_000.0 + i) for i in range(5_000)])
            assert s.execute(text("SELECT count(*) FROM workloads WHERE sweep_id = 'sw1'")
                             ).scalar() == 5_000
            if store.engine.dialect.name == "postgresql":
                s.execute(text("ANALYZE"))  # what store/statistics.py keeps doing there
        _jobs_panel_page_reads_only_the_page(store, limit=50)
    finally:
        store.close()
