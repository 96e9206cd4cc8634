"""Submits from the API (loop/intake.py): those that come in during one turn
of the event loop are stored in one transaction, each answered only once
its row is committed; a bad row in a batch fails alone; a user's first
workspace preparation (``useradd``) runs in a worker thread, not on the
event loop, and once. A real database (SQLite and PostgreSQL)."""
from __future__ import annotations

import asyncio
import os
import threading

import pytest
from sqlalchemy import func, select

from gpuspawner.service.loop.intake import MAX_BATCH
from gpuspawner.store import AuditEntry, EventRow, WorkloadRow
from gpuspawner.vocab.states import QUEUED
from test_start_estimates_service import ALICE, BOB, Clock, job, make_engine


@pytest.fixture
def engine(db_url, tmp_path):
    engine = make_engine(db_url, tmp_path, Clock())
    yield engine
    engine.store.close()


def count(engine, model, **where) -> int:
    with engine.store.session() as s:
        q = select(func.count()).select_from(model)
        for name, value in where.items():
            q = q.where(getattr(model, name) == value)
        return s.scalar(q)


def test_submits_of_one_turn_are_stored_together_and_each_is_answered_stored(engine):
    async def main():
        first = [await engine.intake.submit(who, job(1, 3600, "first")) for who in (ALICE, BOB)]
        return first + list(await asyncio.gather(*(
            engine.intake.submit(ALICE if i % 2 else BOB, job(1, 3600, f"j{i}"))
            for i in range(60))))
    rows = asyncio.run(main())
    assert len({r.id for r in rows}) == 62 and all(r.state == QUEUED for r in rows)
    # one batch each for the first two (one after the other), one for the 60 together
    assert engine.intake.batches == 3 and engine.intake.rows == 62
    assert count(engine, WorkloadRow) == 62
    assert count(engine, EventRow, type="submitted") == 62
    assert count(engine, AuditEntry, action="submit") == 62
    assert set(engine.scheduler.state.pending) == {r.id for r in rows}  # queued in the core
    engine.tick()
    assert len(engine.scheduler.state.running) == 4  # the 4 GPUs: it schedules them


def test_more_than_a_batch_is_stored_over_several_turns(engine):
    async def main():
        await engine.intake.submit(ALICE, job(0, 60, "first"))
        return await asyncio.gather(*(engine.intake.submit(ALICE, job(0, 60, f"j{i}"))
                                      for i in range(MAX_BATCH + 7)))
    rows = asyncio.run(main())
    assert engine.intake.batches == 3 and count(engine, WorkloadRow) == MAX_BATCH + 8
    assert len(rows) == MAX_BATCH + 7


def test_a_bad_row_in_a_batch_fails_alone_and_the_others_are_stored(engine, monkeypatch):
    taken = engine.submit(ALICE, job(1, 3600, "first")).id
    made = engine.submitting.new_row

    def new_row(who, spec, on_behalf_of=None):
        row = made(who, spec, on_behalf_of)
        if spec.name == "clash":
            row.id = taken  # a row the database already has: the batch's insert fails
        return row
    monkeypatch.setattr(engine.submitting, "new_row", new_row)

    async def main():
        return await asyncio.gather(*(engine.intake.submit(ALICE, job(1, 3600, name))
                                      for name in ("a", "clash", "b")),
                                    return_exceptions=True)
    a, clash, b = asyncio.run(main())
    assert isinstance(clash, Exception) and "workloads" in str(clash).lower()
    assert a.state == QUEUED and b.state == QUEUED
    with engine.store.session() as s:
        stored = {r.id: r.name for r in s.scalars(select(WorkloadRow))}
    assert stored == {taken: "first", a.id: "a", b.id: "b"}
    assert count(engine, EventRow, type="submitted") == 3
    assert set(engine.scheduler.state.pending) == {taken, a.id, b.id}
    # the metrics count what was stored: two transactions of one row each
    assert (engine.intake.batches, engine.intake.rows) == (2, 2)


def test_a_users_first_workspace_is_made_in_a_worker_thread_once(engine):
    made_in = []

    def prepare(user):
        os.makedirs(engine.launcher.workspace_path(user), exist_ok=True)
        made_in.append((user, threading.current_thread() is threading.main_thread()))
    engine.launcher.prepare_workspace = prepare

    async def main():
        for i in range(3):
            await engine.intake.submit(ALICE, job(1, 3600, f"j{i}"))
    asyncio.run(main())
    # Once off the loop (the first submit), then only the cheap check, on it.
    assert made_in[0] == ("alice", False)
    assert [on_loop for _u, on_loop in made_in].count(False) == 1


def test_a_new_users_burst_of_submits_makes_one_account_and_keeps_its_order(engine, monkeypatch):
    """Submits that come while the user's workspace is being made wait for
    that one making, then are stored in the order they came."""
    gate, made = threading.Event(), []

    def prepare(user):
        gate.wait(5)  # useradd under load
        os.makedirs(engine.launcher.workspace_path(user), exist_ok=True)
        if threading.current_thread() is not threading.main_thread():
            made.append(user)  # (each row's own check asks again, on the loop: cheap then)
    engine.launcher.prepare_workspace = prepare
    stored: list[str] = []
    store_rows = engine.submitting.store_rows
    monkeypatch.setattr(engine.submitting, "store_rows",
                        lambda batch: (stored.extend(r.name for r, _ in batch), store_rows(batch)))

    async def main():
        burst = [asyncio.ensure_future(engine.intake.submit(ALICE, job(1, 3600, f"j{i}")))
                 for i in range(6)]
        await asyncio.sleep(0.05)
        gate.set()
        return await asyncio.gather(*burst)
    rows = asyncio.run(main())
    assert made == ["alice"]
    assert stored == [f"j{i}" for i in range(6)] == [r.name for r in rows]


def test_a_burst_whose_workspace_cannot_be_made_is_refused_whole_and_the_next_submit_tries_again(
        engine):
    """Every submit that waited on a failed making gets its refusal, bob's
    submits meanwhile are not held by alice's, and alice's next submit
    makes her workspace anew (once it can be made)."""
    from gpuspawner.isolation.accounts import AccountError
    from gpuspawner.service.errors import Forbidden
    gate, broken = threading.Event(), {"alice"}

    def prepare(user):
        if user == "alice":
            gate.wait(5)
        if user in broken:
            raise AccountError(f"{user}'s workspace belongs to another account")
        os.makedirs(engine.launcher.workspace_path(user), exist_ok=True)
    engine.launcher.prepare_workspace = prepare

    async def burst():
        alice = [asyncio.ensure_future(engine.intake.submit(ALICE, job(1, 3600, f"a{i}")))
                 for i in range(3)]
        bob = await engine.intake.submit(BOB, job(1, 3600, "b"))  # alice's wait holds it not
        gate.set()
        return bob, await asyncio.gather(*alice, return_exceptions=True)
    bob, alice = asyncio.run(burst())
    assert bob.name == "b"
    assert [type(r) for r in alice] == [Forbidden] * 3
    assert "belongs to another account" in str(alice[0])
    broken.clear()
    again = asyncio.run(engine.intake.submit(ALICE, job(1, 3600, "a3")))
    assert again.state == QUEUED
    with engine.store.session() as s:
        assert sorted(r.name for r in s.scalars(select(WorkloadRow))) == ["a3", "b"]


def test_a_refused_submit_is_refused_at_once_and_stores_nothing(engine):
    from gpuspawner.vocab.specs import SpecError

    async def main():
        return await engine.intake.submit(ALICE, job(99, 3600, "too-big"))
    with pytest.raises(SpecError):
        asyncio.run(main())
    assert count(engine, WorkloadRow) == 0 and engine.intake.batches == 0


def test_rows_are_written_off_the_event_loop_and_submits_meanwhile_wait_for_the_next_batch(
        engine, monkeypatch):
    """A commit never blocks the event loop: the rows are written in the
    intake's writer thread, while the loop takes more submits, which form
    the next batch (written after, in order)."""
    # alice's workspace is made first: its making is not what this times
    asyncio.run(engine.intake.submit(ALICE, job(1, 3600, "warm")))
    store_rows = engine.submitting.store_rows
    written: list[tuple[list[str], bool]] = []
    gate = threading.Event()

    def slow_store(batch):
        gate.wait(5)  # the first batch is being written...
        written.append(([row.name for row, _ in batch],
                        threading.current_thread() is threading.main_thread()))
        store_rows(batch)
    monkeypatch.setattr(engine.submitting, "store_rows", slow_store)

    async def main():
        first = asyncio.ensure_future(engine.intake.submit(ALICE, job(1, 3600, "first")))
        await asyncio.sleep(0.05)  # ...its batch is in the writer now
        assert not first.done() and engine.intake.batches == 1  # the warm-up's
        # the loop is free: more submits are taken meanwhile
        later = [asyncio.ensure_future(engine.intake.submit(ALICE, job(1, 3600, f"j{i}")))
                 for i in range(5)]
        await asyncio.sleep(0.05)
        gate.set()
        return await first, await asyncio.gather(*later)
    first, later = asyncio.run(main())
    assert written == [(["first"], False), ([f"j{i}" for i in range(5)], False)]
    assert engine.intake.batches == 3 and count(engine, WorkloadRow) == 7
    assert {first.id, *(r.id for r in later)} <= set(engine.scheduler.state.pending)
    engine.intake.close()
