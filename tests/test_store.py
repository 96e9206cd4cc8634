"""The schema: migrations match the models, the audit log is append-only and
a GPU cannot be booked twice, on SQLite and PostgreSQL."""
from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError, IntegrityError

from gpuspawner.store import Allocation, Attempt, AuditEntry, Base, Store, WorkloadRow, audit, migrate


def test_migrations_match_the_models(db_url):
    store = Store(db_url)
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []
    migrate(store.engine)  # running again at the next start is a no-op
    store.close()


def test_audit_log_is_append_only(db_url):
    store = Store(db_url)
    with store.transaction() as s:
        s.add(AuditEntry(time=1.0, actor="admin", action="set-team", target="a"))
    for change in ("UPDATE audit_log SET actor = 'mallory'", "DELETE FROM audit_log"):
        with pytest.raises(DBAPIError) as e:
            with store.transaction() as s:
                s.execute(__import__("sqlalchemy").text(change))
        assert "append-only" in str(e.value)
    with store.session() as s:
        assert [a.actor for a in s.query(AuditEntry)] == ["admin"]
    store.close()


def test_a_gpu_cannot_be_allocated_twice(db_url):
    store = Store(db_url)
    with store.transaction() as s:
        for wid in ("w1", "w2"):
            s.add(WorkloadRow(id=wid, kind="job", team="a", user="u", pool="p", gpus_per_node=1,
                              priority="batch", state="running", submitted_at=0.0))
        s.flush()
        for wid in ("w1", "w2"):
            s.add(Attempt(workload_id=wid, number=0, state="running", gpus=1, started_at=0.0))
        s.flush()
        s.add(Allocation(node="n", gpu=0, workload_id="w1", attempt=0))
    with pytest.raises(IntegrityError):
        with store.transaction() as s:
            s.add(Allocation(node="n", gpu=0, workload_id="w2", attempt=0))
    store.close()


def _entries(store):
    from sqlalchemy import select
    with store.session() as s:
        return list(s.scalars(select(AuditEntry).order_by(AuditEntry.id)))


def _tamper(store, sql):
    """What someone with the database's credentials could do: lift the
    append-only triggers, then rewrite history."""
    from sqlalchemy import text
    with store.engine.begin() as conn:
        if store.engine.dialect.name == "sqlite":
            conn.execute(text("DROP TRIGGER audit_log_no_update"))
            conn.execute(text("DROP TRIGGER audit_log_no_delete"))
        else:
            conn.execute(text("DROP TRIGGER audit_log_append_only ON audit_log"))
        conn.execute(text(sql))


@pytest.mark.parametrize("change, broken", [
    ("UPDATE audit_log SET detail = '{\"nominal\": 99}' WHERE id = 2", 2),
    ("UPDATE audit_log SET actor = 'mallory' WHERE id = 3", 3),
    ("DELETE FROM audit_log WHERE id = 2", 3),
    ("UPDATE audit_log SET time = time + 1 WHERE id = 1", 1),
])
def test_audit_hash_chain_detects_tampering(db_url, change, broken):
    from gpuspawner.cli import main
    from gpuspawner.store.audit import verify
    store = Store(db_url)
    for i in range(4):
        with store.transaction() as s:
            s.add(AuditEntry(time=100.0 + i, actor="admin", action="set-team", target="a",
                             detail={"nominal": i}))
    assert verify(_entries(store)) is None
    assert main(["audit", "verify", "--db-url", db_url]) == 0
    _tamper(store, change)
    problem = verify(_entries(store))
    assert problem is not None and f"audit entry {broken} " in problem
    assert main(["audit", "verify", "--db-url", db_url]) == 1
    store.close()


def test_entries_added_together_chain_in_order(db_url):
    from gpuspawner.store.audit import verify
    store = Store(db_url)
    with store.transaction() as s:
        s.add_all([AuditEntry(time=1.0, actor="a", action=f"x{i}") for i in range(5)])
    entries = _entries(store)
    assert [e.action for e in entries] == [f"x{i}" for i in range(5)]
    assert verify(entries) is None and len({e.hash for e in entries}) == 5
    store.close()


def test_migration_chains_existing_entries(db_url):
    from sqlalchemy import text

    from gpuspawner.store.audit import verify
    from gpuspawner.store.db import make_engine
    engine = make_engine(db_url)
    migrate(engine, "0002")
    with engine.begin() as conn:
        for i in range(3):
            conn.execute(text("INSERT INTO audit_log (time, actor, action, target, detail) "
                              "VALUES (:t, 'admin', 'submit', 'w1', :d)"),
                         {"t": 10.0 + i, "d": '{"gpus": %d}' % i})
    migrate(engine)
    engine.dispose()
    store = Store(db_url)
    entries = _entries(store)
    assert len(entries) == 3 and verify(entries) is None
    with pytest.raises(DBAPIError):  # still append-only after the rewrite
        with store.transaction() as s:
            s.execute(text("DELETE FROM audit_log"))
    store.close()


def test_prices_set_before_the_price_history_keep_applying_to_all_of_history(db_url):
    from sqlalchemy import text

    from gpuspawner.service.teams.usage import price_history
    from gpuspawner.store.db import make_engine
    engine = make_engine(db_url)
    migrate(engine, "0005")
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO pools (name, description, price_per_gpu_hour) "
                          "VALUES ('a100', '', 2.5), ('t4', '', 0)"))
    migrate(engine)
    engine.dispose()
    store = Store(db_url)
    with store.session() as s:
        assert price_history(s) == {"a100": [(0.0, 2.5)]}
    store.close()


@pytest.mark.parametrize("stores, writers, entries_each", [
    (200, 1, 1),  # a fresh session factory each time, one writer
    (30, 4, 3),   # writers at once, each with its own Store
])
def test_audit_chain_holds_across_fresh_stores_and_concurrent_writers(db_url, stores, writers,
                                                                      entries_each):
    """Every Store is a new session factory (as in each test, each CLI call
    and each restart), and several writers, each with its own Store as two
    processes would be, append at once: the chain must verify every time. A
    listener skipped for a reused session class, or two writers hashing
    against the same previous entry, is a false tamper alarm."""
    import gc
    import threading

    from gpuspawner.store.audit import verify
    Store(db_url).close()  # migrate once; the loop's stores skip the migrations
    written = 0
    for round_ in range(stores):
        group = [Store(db_url, run_migrations=False) for _ in range(writers)]
        start = threading.Barrier(writers)
        failures = []

        def write(store, w):
            try:
                start.wait(timeout=10)
                for k in range(entries_each):
                    with store.transaction() as s:
                        s.add(AuditEntry(time=float(round_), actor=f"w{w}", action="submit",
                                         target=f"r{round_}-{k}", detail={"k": k}))
            except Exception as e:  # reported below, with the round it happened in
                failures.append(repr(e))

        threads = [threading.Thread(target=write, args=(st, w)) for w, st in enumerate(group)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert failures == [], f"round {round_}: {failures}"
        written += writers * entries_each
        entries = _entries(group[0])
        assert len(entries) == written
        problem = verify(entries)
        assert problem is None, f"round {round_}: {problem}"
        for st in group:
            st.close()
        del group, threads
        gc.collect(1)  # the old session classes go, so new ones may take their ids


def test_a_new_sqlite_database_is_in_wal_mode_before_the_service_opens_it(tmp_path):
    """The service's threads (and a CLI call beside it) open their first
    connections together on a file its start just created: had the file
    still to be switched to WAL then, one of them would fail at once with
    "database is locked" (the round-0 failure CI saw in the test above)."""
    import sqlite3

    path = tmp_path / "gpuhub.sqlite"
    Store(f"sqlite:///{path}").close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@pytest.mark.parametrize("holder_leaves_after, switched", [
    (0, True),     # nobody else holds the file
    (2, True),     # another connection holds it for the first two tries
    (None, False), # it never lets go: the error says the database is locked
])
def test_switching_a_file_to_wal_waits_for_another_connection_to_let_go(tmp_path,
                                                                       holder_leaves_after,
                                                                       switched):
    import sqlite3

    from gpuspawner.store.sqlite_mode import use_wal

    path = tmp_path / "new.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (x)")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN")
    holder.execute("SELECT * FROM t").fetchall()  # a reader in the middle of its transaction
    pauses, now = [], [0.0]

    def sleep(seconds):  # the seam: no real waiting, and the holder lets go on cue
        pauses.append(seconds)
        now[0] += seconds
        if len(pauses) == holder_leaves_after:
            holder.execute("COMMIT")

    if holder_leaves_after == 0:
        holder.execute("COMMIT")
    conn = sqlite3.connect(path, timeout=0)
    try:
        if switched:
            use_wal(conn, wait_s=1.0, sleep=sleep, clock=lambda: now[0])
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert len(pauses) == (holder_leaves_after or 0)
        else:
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                use_wal(conn, wait_s=1.0, sleep=sleep, clock=lambda: now[0])
            assert sum(pauses) >= 1.0  # it waited the whole while before giving up
    finally:
        conn.close()
        holder.close()


def test_a_list_read_whose_connection_the_server_dropped_is_read_again_on_a_new_one(pg_url):
    """The reads' pool does not ping a connection before a read (a round
    trip per page): a restarted server's dropped connection is found by the
    read itself, which is then made again on a new connection."""
    from sqlalchemy import text

    store = Store(pg_url)
    try:
        def backend(db):
            return db.execute(text("SELECT pg_backend_pid()")).scalar()

        dropped = store.read(backend)
        with store.transaction() as s:  # what a server restart does to the pooled connection
            assert s.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": dropped}).scalar()
        again = store.read(backend)
        assert again != dropped
        # A read never holds a transaction open between its queries' trips.
        with store.transaction() as s:
            state = s.execute(text("SELECT state FROM pg_stat_activity WHERE pid = :pid"),
                              {"pid": again}).scalar()
        assert state == "idle"
    finally:
        store.close()


def test_the_services_writers_in_several_threads_lose_no_update(db_url):
    """The cycle's worker, the intake's writer and the event loop each read a
    workload and then change it: the store's transactions take turns, so
    one thread's change never lands between another's read and write."""
    import threading

    store = Store(db_url)
    with store.transaction() as s:
        s.add(WorkloadRow(id="w1", kind="job", team="a", user="alice", pool="default",
                          gpus_per_node=1, priority="normal", state="queued", submitted_at=1.0))
    start = threading.Barrier(3)

    def bump(times: int) -> None:
        start.wait()
        for _ in range(times):
            with store.transaction() as s:
                row = s.get(WorkloadRow, "w1")
                row.attempt = row.attempt + 1

    threads = [threading.Thread(target=bump, args=(40,)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with store.session() as s:
        assert s.get(WorkloadRow, "w1").attempt == 120
    store.close()


def test_submits_are_stored_while_another_thread_holds_its_turn_on_postgresql(db_url):
    """The intake's batches only add rows (``Store.adding``): on PostgreSQL
    they commit while the cycle's worker holds its turn for a long write;
    on SQLite, one writer at a time, they wait for it. Either way both land
    and the audit chain holds."""
    import threading

    store = Store(db_url)
    with store.transaction() as s:
        s.add(WorkloadRow(id="w0", kind="job", team="a", user="alice", pool="default",
                          gpus_per_node=1, priority="normal", state="queued", submitted_at=1.0))
    held, release = threading.Event(), threading.Event()

    def long_write() -> None:
        with store.transaction() as s:
            s.get(WorkloadRow, "w0").state = "running"
            s.flush()
            held.set()
            release.wait(10)

    def add_submit() -> None:
        with store.adding() as s:
            s.add(WorkloadRow(id="w1", kind="job", team="a", user="alice", pool="default",
                              gpus_per_node=1, priority="normal", state="queued",
                              submitted_at=2.0))
            s.add(AuditEntry(time=2.0, actor="alice", action="submit", target="w1", detail={}))

    cycle = threading.Thread(target=long_write)
    cycle.start()
    assert held.wait(10)
    intake = threading.Thread(target=add_submit)
    intake.start()
    intake.join(1.0)
    on_postgresql = store.engine.dialect.name == "postgresql"
    assert intake.is_alive() is not on_postgresql
    with store.session() as s:
        assert (s.get(WorkloadRow, "w1") is not None) is on_postgresql
    release.set()
    cycle.join()
    intake.join(10)
    with store.session() as s:
        assert [(r.id, r.state) for r in s.scalars(select(WorkloadRow).order_by(WorkloadRow.id))] \
            == [("w0", "running"), ("w1", "queued")]
        assert audit.verify(s.scalars(select(AuditEntry).order_by(AuditEntry.id))) is None
    store.close()


@pytest.mark.parametrize("added, counted, due_now", [
    (499, 0, False),          # a new table: 500 rows at least
    (500, 0, True),
    (9_999, 100_000, False),  # a tenth of what was counted
    (10_000, 100_000, True),
])
def test_a_table_is_analyzed_again_once_it_grew_by_a_tenth(added, counted, due_now):
    from gpuspawner.store.statistics import due
    assert due(added, counted) is due_now


def test_submits_keep_the_postgresql_planners_counts_of_the_queue(pg_url):
    """With autovacuum off (as here) or behind a burst, the planner would
    plan one user's page from counts made before the queue was there; the
    store analyzes ``workloads`` itself once enough rows were added."""
    import time

    store = Store(pg_url)
    store.statistics.min_added = 20

    def counted() -> float:
        with store.engine.connect() as c:
            return c.execute(text("SELECT reltuples FROM pg_class WHERE relname = 'workloads'")
                             ).scalar()
    before = counted()
    for i in range(30):
        with store.adding() as s:
            s.add(WorkloadRow(id=f"w{i}", kind="job", team="a", user="alice", pool="default",
                              gpus_per_node=1, priority="normal", state="queued",
                              submitted_at=float(i)))
        store.rows_added("workloads", 1)
    deadline = time.monotonic() + 10
    while store.statistics.analyzed < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert before <= 0 and counted() >= 20
    store.close()


def test_a_service_started_behind_a_burst_analyzes_its_queue_at_once(pg_url):
    """Rows added by a service that then stopped (or by anything else) are
    counted by the server; the next service's start analyzes them."""
    import logging
    import time
    from gpuspawner.store.db import open_store

    store = Store(pg_url)
    with store.transaction() as s:
        s.add_all([WorkloadRow(id=f"w{i}", kind="job", team="a", user="alice", pool="default",
                               gpus_per_node=1, priority="normal", state="queued",
                               submitted_at=float(i)) for i in range(600)])
    store.close()
    store = open_store(pg_url, logging.getLogger("test"))
    deadline = time.monotonic() + 10
    while store.statistics.analyzed < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    with store.engine.connect() as c:
        assert c.execute(text("SELECT reltuples FROM pg_class WHERE relname = 'workloads'")
                         ).scalar() == 600
    store.close()


def _admins_jobs_page_plan(store) -> str:
    """SQLite's plan of an admin's Jobs panel page (every team's jobs outside
    sweeps, newest first), on a connection the store hands out."""
    with store.engine.connect() as c:
        return " / ".join(str(r[-1]) for r in c.execute(text(
            "EXPLAIN QUERY PLAN SELECT id FROM workloads WHERE kind IN (:kind) AND "
            "sweep_id IS NULL ORDER BY submitted_at DESC, id DESC LIMIT :n"),
            {"kind": "job", "n": 51}))


def _queued(n: int, start: int = 0) -> list:
    return [WorkloadRow(id=f"w{i}", kind="job", team="a", user="alice", pool="default",
                        gpus_per_node=1, priority="normal", state="queued", submitted_at=float(i))
            for i in range(start, start + n)]


def _wait_analyzed(store) -> None:
    import time
    deadline = time.monotonic() + 10
    while store.statistics.analyzed < 1 and time.monotonic() < deadline:
        time.sleep(0.05)


def test_submits_keep_the_sqlite_planners_counts_and_its_connections_plan_by_them(tmp_path):
    """Without counts SQLite read an admin's Jobs panel page through the
    (kind, state) index and sorted every job (55 ms with 100,000 queued);
    counted, it reads the newest from the list's index."""
    store = Store(f"sqlite:///{tmp_path}/q.db")
    store.statistics.min_added = 20
    with store.transaction() as s:
        s.add_all(_queued(600))
    plan = _admins_jobs_page_plan(store)
    assert "ix_workloads_kind_state" in plan and "TEMP B-TREE" in plan, plan
    with store.adding() as s:
        s.add_all(_queued(30, start=600))
    store.rows_added("workloads", 30)
    _wait_analyzed(store)
    assert store.statistics.analyzed == 1
    plan = _admins_jobs_page_plan(store)  # a pooled connection: it plans by the new counts
    assert "ix_workloads_submitted" in plan and "TEMP B-TREE" not in plan, plan
    store.close()


def test_a_sqlite_service_started_on_an_uncounted_queue_analyzes_it_at_once(tmp_path):
    import logging
    from gpuspawner.store.db import open_store

    url = f"sqlite:///{tmp_path}/q.db"
    store = Store(url)
    with store.transaction() as s:
        s.add_all(_queued(600))
    store.close()
    store = open_store(url, logging.getLogger("test"))
    _wait_analyzed(store)
    assert "TEMP B-TREE" not in _admins_jobs_page_plan(store)
    with store.engine.connect() as c:
        assert c.execute(text("SELECT max(CAST(stat AS INTEGER)) FROM sqlite_stat1 "
                              "WHERE tbl = 'workloads'")).scalar() == 600
    store.close()
    store = open_store(url, logging.getLogger("test"))  # counted already: nothing to do
    store.statistics.close()
    assert store.statistics.analyzed == 0
    store.close()
