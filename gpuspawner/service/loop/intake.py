"""Submissions from the API, batched and kept off the event loop's back.

A submit's own checks run as they come (a refusal answers at once), but
what blocks is done elsewhere, and what is written is written together:

- a user's first job makes their system account (``useradd``) and hands
  them their workspace: in a worker thread, once per user and service run;
- the new rows of the submits that came in while the last batch was being
  written are stored in one transaction (``Submitting.store_rows``), their
  events and audit entries with them, in the intake's own writer thread,
  then queued in the core together on the event loop. Under load the
  batches grow with the rate, so each submit pays a share of one commit,
  and the loop never waits for one (on PostgreSQL a commit is round trips;
  on SQLite the rows' ORM work and the fsync). A batch that fails is tried
  again one row at a time, so that a bad row fails alone and the others
  are stored.

The database stays the source of truth: a submit is answered only once its
row is committed. Batches are written one at a time, in the order their
submits came in.
"""
from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

from gpuspawner.scheduler.kinds import kind
from gpuspawner.service.access.identity import Identity
from gpuspawner.store import WorkloadRow
from gpuspawner.vocab.specs import JobSpec

log = logging.getLogger("gpuhub.intake")
# The most rows stored in one transaction; more wait for the next one (on
# SQLite the batch holds the write lock while it is written: 64 rows are
# ~10 ms, and past a few dozen a row costs no less).
MAX_BATCH = 64


class Intake:
    def __init__(self, engine):
        self.engine = engine
        self._batch: list[tuple[WorkloadRow, str, asyncio.Future]] = []
        self._writing: Optional[asyncio.Task] = None
        self._writer: Optional[ThreadPoolExecutor] = None
        self._prepared: set[str] = set()  # users whose workspace is made this run
        self._preparing: dict[str, asyncio.Future] = {}  # ... being made now
        # Transactions stored and the rows in them (service/metrics.py's
        # IntakeCollector reads them).
        self.batches = 0
        self.rows = 0

    async def submit(self, who: Identity, spec: JobSpec,
                     on_behalf_of: Optional[str] = None) -> WorkloadRow:
        """``Engine.submit``, with the user's first workspace preparation in
        a worker thread and the row stored with the other waiting submits
        in the writer thread."""
        engine = self.engine
        loop = asyncio.get_running_loop()
        _team, user = engine.submitting.owner_of(who, spec, on_behalf_of)
        if kind(spec.kind).run_by_backend and user not in self._prepared:
            await self._prepare(user)
        row = engine.submitting.new_row(who, spec, on_behalf_of)
        engine.submitting.check_row(row)
        done = loop.create_future()
        self._batch.append((row, who.name, done))
        if self._writing is None:
            self._writing = loop.create_task(self._write_all())
        return await done

    async def _prepare(self, user: str) -> None:
        """useradd, the workspace's owner and mode (tens of ms), once: the
        submits that come meanwhile wait for the same preparation, and go
        on in the order they came (a burst of a new user's first submits
        made one account each at once, and were stored in the order those
        ended)."""
        preparing = self._preparing.get(user)
        if preparing is None:
            loop = asyncio.get_running_loop()
            preparing = self._preparing[user] = loop.run_in_executor(
                None, self.engine.launcher.workspace, user)
            preparing.add_done_callback(lambda f: self._prepared_or_not(user, f))
        # Shielded: a submit whose request went away does not cancel the others'.
        await asyncio.shield(preparing)

    def _prepared_or_not(self, user: str, preparing: asyncio.Future) -> None:
        self._preparing.pop(user, None)  # failed: the next submit tries again
        if not preparing.cancelled() and preparing.exception() is None:
            self._prepared.add(user)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.shutdown(wait=True)  # a batch being written is finished
            self._writer = None

    async def _write_all(self) -> None:
        """Store the waiting submits batch after batch until none wait."""
        try:
            while self._batch:
                batch, self._batch = self._batch[:MAX_BATCH], self._batch[MAX_BATCH:]
                try:
                    await self._write(batch)
                except Exception as err:  # every submit gets an answer, whatever failed
                    log.exception("storing %d submits failed", len(batch))
                    for _row, _actor, done in batch:
                        _answer(done, error=err)
        finally:
            self._writing = None

    async def _write(self, batch: list[tuple[WorkloadRow, str, asyncio.Future]]) -> None:
        submitting = self.engine.submitting
        try:
            await self._in_writer(submitting.store_rows, [(row, actor) for row, actor, _ in batch])
        except Exception:
            log.warning("storing %d submits together failed; storing them one by one",
                        len(batch), exc_info=True)
            for row, actor, done in batch:
                try:
                    await self._in_writer(submitting.store_rows, [(row, actor)])
                except Exception as err:
                    _answer(done, error=err)
                else:
                    self._stored([(row, actor, done)])
            return
        self._stored(batch)

    def _stored(self, batch: list[tuple[WorkloadRow, str, asyncio.Future]]) -> None:
        """One transaction's rows, committed: into the core, counted, answered."""
        self.engine.submitting.queued([row for row, _actor, _done in batch])
        self.batches += 1
        self.rows += len(batch)
        for row, _actor, done in batch:
            _answer(done, row)

    async def _in_writer(self, fn, *args) -> None:
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="gpuhub-intake")
        await asyncio.get_running_loop().run_in_executor(self._writer, fn, *args)


def _answer(done: asyncio.Future, row: Optional[WorkloadRow] = None,
            error: Optional[BaseException] = None) -> None:
    if done.done():  # its request went away
        return
    if error is not None:
        done.set_exception(error)
    else:
        done.set_result(row)
