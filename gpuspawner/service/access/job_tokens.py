"""Each job's own token: made by the service for one attempt, good on the
scheduler service as the job's user and nothing more, and revoked when the
attempt ends.

The job gets it as ``GPUHUB_TOKEN`` with ``GPUHUB_URL``, so the ``gpuhub``
CLI and ``GpuHubClient.from_env()`` work inside a job as its user. The
service's own hub token never reaches a job (the backends build a job's
environment from what they keep on purpose, see backends/base.py).

The service makes the token itself (``gpuhub-job-`` and 256 random bits)
and checks it itself: the hub never sees it, so it is nothing on the hub.
Made through the hub's REST API, as before, every start and every end was a
write of the hub's database and the hub's first answer about the token one
more request: with 200 jobs starting at once the hub spent 80% of its one
thread making and deleting job tokens, and a hub that did not answer cost
the job its token.

Which token each attempt got is kept in the database (``job_tokens``: its
SHA-256, never the token), so a restart loses nothing: the tokens of running
attempts keep working, an attempt that ends after it has its token revoked,
and at start the tokens of attempts that ended meanwhile are revoked. Rows
with a hub token id are tokens the hub made (a service from before this
one): they are still accepted through the hub and deleted there when their
attempt ends.
"""
from __future__ import annotations

import hashlib
import logging
import secrets
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Optional
from urllib.parse import quote

from sqlalchemy import delete, select, tuple_

from gpuspawner.backends.base import LaunchSpec
from gpuspawner.service.access.identity import JobRef
from gpuspawner.store import Attempt, JobTokenRow

log = logging.getLogger(__name__)

# What every token the service makes starts with: a request that carries one
# is checked here, never asked of the hub.
PREFIX = "gpuhub-job-"


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Holder:
    """Whom a job's token acts for: its attempt's user and the attempt."""
    user: str
    job: JobRef
    expires_at: float


class JobTokens:
    """Makes, checks and revokes job tokens. Tokens the hub made (before an
    upgrade) are deleted through the hub's REST API with the service's
    token (its role holds the ``tokens`` scope)."""

    def __init__(self, hub_api: str, service_token: str, service_url: str,
                 lifetime_margin: float = 3600.0, default_lifetime: float = 7 * 86400.0,
                 timeout: float = 5.0, store=None, clock=time.time):
        """``store``: the service's database, where issued tokens are kept
        (None: in memory only, lost at a restart)."""
        self.hub_api = hub_api.rstrip("/")
        self.service_token = service_token
        self.service_url = service_url
        self.margin = lifetime_margin
        self.default_lifetime = default_lifetime
        self.timeout = timeout
        self.store = store
        self.clock = clock
        # SHA-256 -> holder of every live token made here (the start threads
        # add, the event loop reads and the revoker drops: one lock).
        self._lock = threading.Lock()
        self._holders: dict[str, Holder] = {}
        self._digests: dict[JobRef, str] = {}  # attempt -> its token's SHA-256
        self._revoker = ThreadPoolExecutor(1, thread_name_prefix="gpuhub-revoke")
        if store is not None:
            with store.session() as s:
                for row in s.scalars(select(JobTokenRow).where(JobTokenRow.token_id == "")):
                    self._add(row.token_sha256, Holder(
                        row.user, JobRef(row.workload_id, row.attempt), row.expires_at))

    def env_for(self, spec: LaunchSpec) -> dict[str, str]:
        """``GPUHUB_URL`` and, for a job with a user, its own ``GPUHUB_TOKEN``."""
        return self.env_for_all([spec])[(spec.workload_id, spec.attempt)]

    def env_for_all(self, specs: list[LaunchSpec]) -> dict[tuple[str, int], dict[str, str]]:
        """``env_for`` of each (by workload and attempt), their rows written
        in one transaction: a cycle that starts 300 jobs wrote 300 before,
        each a millisecond of the service's interpreter on PostgreSQL."""
        envs: dict[tuple[str, int], dict[str, str]] = {}
        made: list[tuple[str, Holder]] = []
        now = self.clock()
        for spec in specs:
            env = envs[(spec.workload_id, spec.attempt)] = {"GPUHUB_URL": self.service_url}
            if not spec.user or spec.serving:  # a model replica calls nothing
                continue
            lifetime = (spec.time_limit or self.default_lifetime) + spec.grace_period + self.margin
            token = PREFIX + secrets.token_urlsafe(32)
            made.append((digest(token), Holder(spec.user, JobRef(spec.workload_id, spec.attempt),
                                               now + lifetime)))
            env["GPUHUB_TOKEN"] = token
        if self.store is not None and made:
            rows = [JobTokenRow(workload_id=h.job.workload, attempt=h.job.attempt, user=h.user,
                                token_id="", token_sha256=sha, issued_at=now,
                                expires_at=h.expires_at) for sha, h in made]
            with self.store.transaction() as s:
                # A token made again for an attempt (its start tried again)
                # replaces its row: one row is merged (a read and a write,
                # cheaper than a delete and an insert), many replaced in two
                # statements.
                if len(rows) == 1:
                    s.merge(rows[0])
                else:
                    self.drop_rows(s, [(r.workload_id, r.attempt) for r in rows],
                                   made_here_only=False)
                    s.add_all(rows)
        with self._lock:
            for sha, holder in made:
                self._add(sha, holder)
        return envs

    def _add(self, sha256: str, holder: Holder) -> None:
        """(Under the lock, or before any other thread has the object.) A
        token made again for the same attempt (its start tried again)
        replaces the one before."""
        old = self._digests.pop(holder.job, None)
        if old is not None:
            self._holders.pop(old, None)
        self._holders[sha256] = holder
        self._digests[holder.job] = sha256

    def holder(self, token: str) -> Optional[Holder]:
        """Whom ``token`` (one of ``PREFIX``) acts for, or None: never made
        here, revoked (its attempt ended) or expired."""
        with self._lock:
            found = self._holders.get(digest(token))
        return found if found is not None and found.expires_at > self.clock() else None

    def revoke(self, workload_id: str, attempt: int) -> bool:
        """The attempt ended: its token goes, at once for a token made here
        (the next request with it is refused). Returns True when its row is
        to go with the transaction that records the end (``drop_rows``);
        otherwise (a token the hub made, or none known here) the row and
        the hub's token are seen to in a worker thread, which never holds up
        the event loop."""
        with self._lock:
            gone = self._digests.pop(JobRef(workload_id, attempt), None)
            if gone is not None:
                del self._holders[gone]
        if gone is None and self.store is not None:
            self._revoker.submit(self._forget, workload_id, attempt)
        return gone is not None

    @staticmethod
    def drop_rows(session, attempts: list[tuple[str, int]], made_here_only: bool = True) -> None:
        """In the transaction that records the attempts' ends: the rows of
        the tokens made here for them (one the hub made waits for the hub;
        ``made_here_only`` False: that one too), one statement for a poll's ends."""
        for i in range(0, len(attempts), 500):
            which = [tuple_(JobTokenRow.workload_id, JobTokenRow.attempt).in_(attempts[i:i + 500])]
            if made_here_only:
                which.append(JobTokenRow.token_id == "")
            session.execute(delete(JobTokenRow).where(*which))

    def revoke_ended(self) -> int:
        """At start: revoke the kept tokens of attempts that are not running
        any more (they ended while the service was down, or before their
        revocation was done). Returns how many."""
        if self.store is None:
            return 0
        with self.store.session() as s:
            rows = s.execute(select(JobTokenRow.workload_id, JobTokenRow.attempt, Attempt.state)
                             .outerjoin(Attempt, (Attempt.workload_id == JobTokenRow.workload_id)
                                        & (Attempt.number == JobTokenRow.attempt))).all()
        ended = [(wid, attempt) for wid, attempt, state in rows if state != "running"]
        for wid, attempt in ended:
            if self.revoke(wid, attempt):  # no end is recorded now to take its row along
                self._revoker.submit(self._forget, wid, attempt)
        return len(ended)

    def _forget(self, workload_id: str, attempt: int) -> None:
        """Drop the attempt's row, once the hub has deleted a token it made."""
        with self.store.session() as s:
            row = s.get(JobTokenRow, (workload_id, attempt))
            if row is None:
                return
            user, token_id = row.user, row.token_id
        if token_id and not self._delete_at_hub(workload_id, attempt, user, token_id):
            return  # kept: the next start tries again
        with self.store.transaction() as s:
            row = s.get(JobTokenRow, (workload_id, attempt))
            if row is not None:
                s.delete(row)

    def _delete_at_hub(self, workload_id: str, attempt: int, user: str, token_id: str) -> bool:
        req = urllib.request.Request(
            f"{self.hub_api}/users/{quote(user)}/tokens/{quote(token_id)}", method="DELETE",
            headers={"Authorization": f"token {self.service_token}"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout):
                pass
        except urllib.error.HTTPError as e:
            if e.code != 404:  # 404: gone already (expired, or deleted by hand)
                log.warning("could not revoke the token of %s/%s: %s", workload_id, attempt, e)
                return False
        except (urllib.error.URLError, OSError, ValueError) as e:
            log.warning("could not revoke the token of %s/%s: %s", workload_id, attempt, e)
            return False
        return True

    def close(self, wait: bool = True) -> None:
        self._revoker.shutdown(wait=wait)
