"""The schema: migrations match the models, the audit log is append-only and
a GPU cannot be booked twice, on SQLite and PostgreSQL."""
from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.exc import DBAPIError, IntegrityError

from gpuspawner.store import Allocation, Attempt, AuditEntry, Base, Store, WorkloadRow, migrate


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
