"""Upgrades lose nothing (docs/service.md, "Upgrading"), on SQLite and
PostgreSQL: a database at each earlier schema of the repository's history,
holding the live state a running service leaves (running jobs with their
allocations, a queued, a held and a 0-GPU job, a notebook's GPU, a sweep, a
schedule, a deployment's replica, the audit trail), is brought to this
release's schema with every row it held unchanged, and the service starts
on it and finds its work where it left it. A migration that fails half-way
leaves the database exactly as it was, and says which migration, why and
the way back."""
from __future__ import annotations

import os
import shutil
import sqlite3
import textwrap

import pytest
from sqlalchemy import inspect, select, text

from gpuspawner.store import AuditEntry, Store, WorkloadRow
from gpuspawner.store.audit import verify
from gpuspawner.store.db import make_engine
from gpuspawner.store.upgrade import (MIGRATIONS, MigrationFailed, NewerDatabase, dry_run, plan,
                                      steps, upgrade)

from test_start_estimates_service import Clock
from upgrade_state import ALICE, START, job, make_engine as make_service_engine
from upgrade_state import make_live_state, read_rows, write_rows

HEAD = steps()[-1].revision
EARLIER = [s.revision for s in steps()[:-1]]
# The first schema with each feature: rows of a feature the schema had
# not yet are not part of the state at that schema.
DEPLOYMENTS, SWEEPS, SCHEDULES = "0005", "0009", "0010"


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """The live state, made once by the service's own code (SQLite)."""
    where = tmp_path_factory.mktemp("live")
    url = f"sqlite:///{where}/gpuhub.sqlite"
    ids = make_live_state(url, str(where))
    engine = make_engine(url)
    with engine.connect() as conn:
        rows = read_rows(conn)
    engine.dispose()
    return ids, rows


def at(revision: str, rows: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """The part of the state a service at ``revision`` could have made."""
    def held(w: dict) -> bool:
        return not ((w["kind"] == "deployment" and revision < DEPLOYMENTS)
                    or (w["sweep_id"] and revision < SWEEPS)
                    or (w["schedule_id"] and revision < SCHEDULES))
    kept = {w["id"] for w in rows["workloads"] if held(w)}
    out = {}
    for table, part in rows.items():
        if table == "workloads":
            part = [w for w in part if w["id"] in kept]
        elif part and "workload_id" in part[0]:
            part = [r for r in part if r["workload_id"] in kept]
        out[table] = part
    return out


def schema_and_rows(engine) -> tuple:
    """Everything an upgrade could change: tables, columns, indexes, rows."""
    with engine.connect() as conn:
        insp = inspect(conn)
        schema = {t: (sorted((c["name"], str(c["type"])) for c in insp.get_columns(t)),
                      sorted(i["name"] for i in insp.get_indexes(t)))
                  for t in insp.get_table_names()}
        version = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
        return version, schema, read_rows(conn)


@pytest.mark.parametrize("revision", EARLIER)
def test_an_upgrade_from_each_earlier_schema_keeps_the_live_state(db_url, tmp_path, live,
                                                                  revision):
    ids, rows = live
    engine = make_engine(db_url)
    upgrade(engine, revision)
    with engine.begin() as conn:
        before = write_rows(conn, at(revision, rows))
    said = []
    done = upgrade(engine, log=said.append)
    assert [s.revision for s in done.pending][0] > revision and done.head == HEAD
    with engine.connect() as conn:
        after = read_rows(conn)
        if engine.dialect.name == "sqlite":
            assert conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall() == []
    for table, part in before.items():
        kept = [{k: r[k] for k in part[0]} for r in after[table]] if part else after[table]
        assert kept == part, f"{table} changed in the upgrade from {revision}"
    if engine.dialect.name == "sqlite":
        # A consistent copy of the database as it was, named after its revision.
        copy = next(line.split()[3] for line in said if line.startswith("database copied"))
        assert os.path.basename(copy).startswith(f"gpuhub.sqlite.backup-{revision}-")
        assert oct(os.stat(copy).st_mode & 0o777) == "0o600"
        with sqlite3.connect(copy) as old:
            assert old.execute("SELECT version_num FROM alembic_version").fetchone() == (revision,)
            assert old.execute("SELECT count(*) FROM workloads").fetchone() == \
                (len(before["workloads"]),)
    engine.dispose()

    # The service starts on it and finds its work where it left it.
    clock = Clock(START + 7200)
    service = make_service_engine(db_url, str(tmp_path), clock)
    state = service.scheduler.state
    running = {w["id"] for w in before["workloads"] if w["state"] == "running"}
    assert ids["running_2gpu"] in running and ids["running_cpu"] in running
    assert set(state.running) == running
    assert state.running[ids["running_2gpu"]].placement == (("host", (1, 2)),)
    assert ids["queued"] in state.pending and ids["held"] not in state.pending
    with service.store.session() as s:
        entries = list(s.scalars(select(AuditEntry).order_by(AuditEntry.id)))
        assert verify(entries) is None and len(entries) == len(before["audit_log"])
        assert {w.id: w.state for w in s.scalars(select(WorkloadRow))} == \
            {w["id"]: w["state"] for w in before["workloads"]}
    # ... and goes on writing: a new job, its audit entry chained to the old ones.
    new = service.submit(ALICE, job(1, "after-the-upgrade"))
    with service.store.session() as s:
        entries = list(s.scalars(select(AuditEntry).order_by(AuditEntry.id)))
        assert entries[-1].target == new.id and verify(entries) is None
    service.store.close()


BROKEN = '''\
"""a migration that fails half-way: a column added, a table made and
filled, a table rebuilt, then an error

Revision ID: 9999
Revises: {head}
"""
from alembic import op
import sqlalchemy as sa

revision = '9999'
down_revision = '{head}'
branch_labels = None
depends_on = None


def upgrade():
    op.add_column('workloads', sa.Column('half_way', sa.Integer(), nullable=True))
    op.create_table('half_way', sa.Column('id', sa.Integer(), primary_key=True))
    op.execute("INSERT INTO half_way (id) VALUES (1)")
    op.execute("UPDATE workloads SET reason = 'changed half-way'")
    with op.batch_alter_table('attempts') as batch:
        batch.alter_column('reason', type_=sa.String(length=500), existing_type=sa.Text())
    raise RuntimeError("the disk is full (a stand-in for whatever goes wrong)")


def downgrade():
    pass
'''


@pytest.fixture
def broken_migrations(tmp_path):
    where = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS, where, ignore=shutil.ignore_patterns("__pycache__"))
    (where / "versions" / "9999_broken.py").write_text(BROKEN.format(head=HEAD))
    return str(where)


def test_a_migration_failing_half_way_leaves_the_database_as_it_was(db_url, live,
                                                                    broken_migrations):
    ids, rows = live
    engine = make_engine(db_url)
    upgrade(engine)
    with engine.begin() as conn:
        write_rows(conn, rows)
    before = schema_and_rows(engine)
    with pytest.raises(MigrationFailed) as failed:
        upgrade(engine, script_location=broken_migrations)
    assert schema_and_rows(engine) == before
    message = str(failed.value)
    assert "migration 9999_broken (a migration that fails half-way" in message
    assert "RuntimeError: the disk is full" in message
    assert f"still at revision {HEAD}" in message
    assert "the previous release starts on it as it is" in message
    if engine.dialect.name == "sqlite":
        assert failed.value.backup and failed.value.backup in message
        assert os.path.exists(failed.value.backup)
    # The check says the same before anyone upgrades, and changes nothing.
    with pytest.raises(MigrationFailed, match="9999_broken"):
        dry_run(engine, script_location=broken_migrations)
    assert schema_and_rows(engine) == before
    engine.dispose()


def test_an_upgrade_check_runs_the_migrations_without_keeping_them(db_url, live):
    ids, rows = live
    engine = make_engine(db_url)
    upgrade(engine, EARLIER[-1])
    with engine.begin() as conn:
        write_rows(conn, rows)
    before = schema_and_rows(engine)
    todo, seconds = dry_run(engine)
    assert [s.revision for s in todo.pending] == [HEAD] and seconds >= 0
    assert schema_and_rows(engine) == before
    engine.dispose()


def newer_database(tmp_path) -> str:
    """A database as a release with a migration 0099 left it."""
    url = f"sqlite:///{tmp_path}/gpuhub.sqlite"
    Store(url).close()
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    engine.dispose()
    return url


def test_a_database_a_newer_release_upgraded_is_refused_with_the_way_back(tmp_path):
    url = newer_database(tmp_path)
    engine = make_engine(url)
    with pytest.raises(NewerDatabase, match="revision 0099, which this release does not know"):
        plan(engine)
    with pytest.raises(NewerDatabase, match="restore the copy taken before that upgrade"):
        Store(url)
    engine.dispose()


def test_a_fresh_database_is_made_without_a_backup(tmp_path):
    said = []
    engine = make_engine(f"sqlite:///{tmp_path}/gpuhub.sqlite")
    done = upgrade(engine, log=said.append)
    assert done.fresh and done.pending and not any("copied" in line for line in said)
    assert os.listdir(tmp_path) == ["gpuhub.sqlite"] or \
        not [f for f in os.listdir(tmp_path) if ".backup-" in f]
    engine.dispose()


# ---- before the start: gpuhub upgrade, gpuhub up, the service ---------------------------
def database_at(tmp_path, revision: str, rows) -> str:
    url = f"sqlite:///{tmp_path}/gpuhub.sqlite"
    engine = make_engine(url)
    upgrade(engine, revision)
    with engine.begin() as conn:
        write_rows(conn, at(revision, rows))
    engine.dispose()
    return url


def test_gpuhub_upgrade_check_says_what_changes_and_changes_nothing(tmp_path, live, capsys):
    from gpuspawner.cli import main
    database_at(tmp_path, "0006", live[1])
    assert main(["upgrade", "--check", "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"schema: 0006 -> {HEAD} ({len(steps()) - 6} migration(s))" in out
    assert "0007_start_estimates" in out and "0005_deployments" not in out
    assert "live work: running: deployment 1, job 2, notebook 1" in out
    assert "keep the environment and account they started with" in out
    assert "dry run: the migrations ran on a copy" in out and "nothing blocks" in out
    assert os.listdir(tmp_path) == ["gpuhub.sqlite"]  # no backup, no change
    assert main(["upgrade", "--data-dir", str(tmp_path)]) == 0
    assert f"database at {HEAD}" in capsys.readouterr().out
    assert main(["upgrade", "--check", "--data-dir", str(tmp_path)]) == 0
    assert "nothing to migrate" in capsys.readouterr().out


def test_gpuhub_up_stops_before_starting_anything_when_the_upgrade_cannot_be_made(
        tmp_path, capsys, monkeypatch):
    from gpuspawner.cli import main
    newer_database(tmp_path)
    monkeypatch.delenv("GPUHUB_CONFIG", raising=False)
    started = []
    monkeypatch.setattr(os, "execve", lambda *a: started.append(a))  # the hub and its proxy
    assert main(["up", "--data-dir", str(tmp_path), "--port", "1"]) == 1
    assert started == []
    err = capsys.readouterr().err
    assert "gpuhub up: the database cannot be upgraded, so nothing was started" in err
    assert "revision 0099" in err


def test_the_service_refuses_to_start_with_the_upgrades_reason(tmp_path, caplog):
    import logging

    from gpuspawner.store.db import open_store
    url = newer_database(tmp_path)
    with pytest.raises(SystemExit, match="GPU Hub cannot start: the database is at schema "
                                         "revision 0099"):
        open_store(url, logging.getLogger("test"))
    assert "GPU Hub cannot start" in caplog.text


# ---- workspaces of users who have not come back ------------------------------------------
@pytest.mark.parametrize("template, listed", [
    ("{data_dir}/workspaces/{username}", ["alice", "bob"]),
    ("{data_dir}/w/{username}", []),            # no such folder
    ("/home/{username}", []),                   # not the hub's to hand out
    ("{data_dir}/workspaces/{username}/work", []),
    ("{data_dir}/{username}/workspaces/{username}", []),
])
def test_the_workspaces_listed_at_start_are_the_data_directorys_own(tmp_path, template, listed):
    from gpuspawner.isolation.workspaces import listed_users
    for name in ("alice", "bob"):
        (tmp_path / "workspaces" / name).mkdir(parents=True)
    (tmp_path / "workspaces" / "notes.txt").write_text("not a user")
    assert listed_users(template, str(tmp_path)) == listed


def test_workspaces_from_before_accounts_are_handed_over_at_start(tmp_path, account_prefix):
    from gpuspawner.isolation.accounts import ensure_account, isolating
    from hub_harness import traversable
    from gpuspawner.isolation.workspaces import hand_over_all
    if not isolating():
        pytest.skip("creating accounts needs root (CI runs the tests as root)")
    traversable(str(tmp_path))
    root = tmp_path / "workspaces"
    for name in ("alice", "bob"):
        (root / name / "data").mkdir(parents=True)
        (root / name / "data" / "model.pt").write_text("weights")
    said = []

    def home_of(user):
        return str(root / user)

    done = hand_over_all(lambda user: ensure_account(user, home_of(user), account_prefix),
                         ["alice", "bob", "carol"], home_of, lambda a: a.uid, said.append)
    assert done == ["alice", "bob"]  # carol has no workspace: nothing made for her
    for name in done:
        owner = os.stat(root / name / "data" / "model.pt").st_uid
        assert owner == os.stat(root / name).st_uid != 0
        assert oct(os.stat(root / name).st_mode & 0o777) == "0o700"
    assert said == ["handed 2 workspace(s) from before this release to their users' accounts: "
                    "alice, bob"]
    # The next start finds nothing left to do.
    assert hand_over_all(lambda user: ensure_account(user, home_of(user), account_prefix),
                         ["alice", "bob"], home_of, lambda a: a.uid, said.append) == []


def test_an_upgrade_waits_for_the_old_service_to_stop(tmp_path, live, capsys):
    import subprocess
    import sys

    from gpuspawner.cli import main
    database_at(tmp_path, "0011", live[1])
    # A process that is, by its command line, the scheduler service on this directory.
    service = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                                "-m", "gpuspawner.service"])
    try:
        (tmp_path / "service.pid").write_text(str(service.pid))
        assert main(["upgrade", "--check", "--data-dir", str(tmp_path)]) == 1
        assert f"blocks: the scheduler service (pid {service.pid}) still runs" in \
            capsys.readouterr().out
        assert main(["upgrade", "--data-dir", str(tmp_path)]) == 1
        assert "stop the hub first" in capsys.readouterr().err
    finally:
        service.kill()
        service.wait()
    # Its pid file left behind, the process gone: nothing blocks.
    assert main(["upgrade", "--data-dir", str(tmp_path)]) == 0
    assert f"database at {HEAD}" in capsys.readouterr().out


def test_two_services_starting_at_once_upgrade_once(db_url, live):
    import threading
    engine = make_engine(db_url)
    upgrade(engine, "0006")
    with engine.begin() as conn:
        write_rows(conn, at("0006", live[1]))
    engine.dispose()
    results, barrier = [], threading.Barrier(2)

    def start():
        mine = make_engine(db_url)
        barrier.wait()
        try:
            results.append(len(upgrade(mine).pending))
        except Exception as e:  # noqa: BLE001 - the assertion below shows it
            results.append(e)
        finally:
            mine.dispose()
    threads = [threading.Thread(target=start) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(results, key=str) == [0, len(steps()) - 6]  # one did the work, one found it done
    engine = make_engine(db_url)
    assert plan(engine).current == HEAD
    engine.dispose()
