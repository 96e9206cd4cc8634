"""Submissions from the API, batched and kept off the event loop's back.

A submit's own checks run as they come (a refusal answers at once), but
what blocks is done elsewhere, and what is written is written together:

- a user's first job makes their system account (``useradd``) and hands
  them their workspace: in a worker thread, once per user and service run;
- the new rows of the submits that came in during one turn of the event
  loop are stored in one transaction (``Engine.queue_rows``), their events
  and audit entries with them, and queued in the core together. Under load
  many submits arrive while the loop is busy, so the batches grow with the
  rate and each submit pays a share of one commit instead of its own. A
  batch that fails is tried again one row at a time, so that a bad row
  fails alone and the others are stored.

The database stays the source of truth: a submit is answered only once its
row is committed.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Optional

from gpuspawner.scheduler.kinds import kind
from gpuspawner.service.access.identity import Identity
from gpuspawner.store import WorkloadRow
from gpuspawner.vocab.specs import JobSpec

log = logging.getLogger("gpuhub.intake")
# The most rows stored in one transaction; more wait for the next turn (a
# batch is one callback on the event loop: 64 rows are ~10 ms of it, and
# past a few dozen a row costs no less).
MAX_BATCH = 64


class Intake:
    def __init__(self, engine):
        self.engine = engine
        self._batch: list[tuple[WorkloadRow, str, asyncio.Future]] = []
        self._flushing: Optional[asyncio.Handle] = None
        self._prepared: set[str] = set()  # users whose workspace is made this run
        # Batches stored and rows in them (the service's metrics read them).
        self.batches = 0
        self.rows = 0

    async def submit(self, who: Identity, spec: JobSpec,
                     on_behalf_of: Optional[str] = None) -> WorkloadRow:
        """``Engine.submit``, with the user's first workspace preparation in
        a worker thread and the row stored with the turn's other submits."""
        engine = self.engine
        loop = asyncio.get_running_loop()
        _team, user = engine.submitting.owner_of(who, spec, on_behalf_of)
        if kind(spec.kind).run_by_backend and user not in self._prepared:
            # useradd, the workspace's owner and mode: tens of ms, once
            await loop.run_in_executor(None, engine.launcher.workspace, user)
            self._prepared.add(user)
        row = engine.submitting.new_row(who, spec, on_behalf_of)
        engine.submitting.check_row(row)
        done = loop.create_future()
        self._batch.append((row, who.name, done))
        if self._flushing is None:
            self._flushing = loop.call_soon(self._flush)
        return await done

    def _flush(self) -> None:
        batch, self._batch = self._batch[:MAX_BATCH], self._batch[MAX_BATCH:]
        self._flushing = (asyncio.get_running_loop().call_soon(self._flush)
                          if self._batch else None)
        try:
            self.engine.submitting.queue_rows([(row, actor) for row, actor, _done in batch])
        except Exception:
            log.warning("storing %d submits together failed; storing them one by one",
                        len(batch), exc_info=True)
            for row, actor, done in batch:
                try:
                    self.engine.submitting.queue_row(row, actor)
                except Exception as err:
                    _answer(done, error=err)
                else:
                    _answer(done, row)
            return
        self.batches += 1
        self.rows += len(batch)
        for row, _actor, done in batch:
            _answer(done, row)


def _answer(done: asyncio.Future, row: Optional[WorkloadRow] = None,
            error: Optional[BaseException] = None) -> None:
    if done.done():  # its request went away
        return
    if error is not None:
        done.set_exception(error)
    else:
        done.set_result(row)
