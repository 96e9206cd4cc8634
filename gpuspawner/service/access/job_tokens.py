"""Each job's own token: a JupyterHub API token of the job's user, scoped to
act on the scheduler service as that user and nothing more, made for one
attempt and revoked when it ends.

The job gets it as ``GPUHUB_TOKEN`` with ``GPUHUB_URL``, so the ``gpuhub``
CLI and ``GpuHubClient.from_env()`` work inside a job as its user. The
service's own hub token never reaches a job (the backends build a job's
environment from what they keep on purpose, see backends/base.py).

Which token each attempt got is kept in the database (``job_tokens``: the
hub's id of it and its SHA-256, never the token), so a restart loses
nothing: an attempt that ends after it still has its token revoked, and at
start the tokens of attempts that ended meanwhile are revoked. A row goes
once the hub has deleted the token (or says it is gone).
"""
from __future__ import annotations

import hashlib
import json
import logging
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Optional
from urllib.parse import quote

from sqlalchemy import select

from gpuspawner.backends.base import LaunchSpec
from gpuspawner.hub.config import JOB_TOKEN_SCOPES
from gpuspawner.store import Attempt, JobTokenRow

log = logging.getLogger(__name__)


class JobTokens:
    """Issues and revokes job tokens through the hub's REST API with the
    service's token (its role holds the ``tokens`` scope for this)."""

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
        self._issued: dict[tuple[str, int], tuple[str, str]] = {}  # attempt -> (user, token id)
        self._revoker = ThreadPoolExecutor(1, thread_name_prefix="gpuhub-revoke")

    def _call(self, method: str, path: str, body: Optional[dict] = None) -> dict:
        req = urllib.request.Request(
            f"{self.hub_api}{path}", method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"token {self.service_token}",
                     "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            data = resp.read()
        return json.loads(data) if data else {}

    def env_for(self, spec: LaunchSpec) -> dict[str, str]:
        """``GPUHUB_URL`` and, for a job with a user, its own ``GPUHUB_TOKEN``.
        A hub that does not answer costs the job its token, not its start."""
        env = {"GPUHUB_URL": self.service_url}
        if not spec.user or spec.serving:  # a model replica calls nothing
            return env
        lifetime = (spec.time_limit or self.default_lifetime) + spec.grace_period + self.margin
        try:
            made = self._call("POST", f"/users/{quote(spec.user)}/tokens", {
                "scopes": JOB_TOKEN_SCOPES, "expires_in": int(lifetime),
                "note": f"gpuhub job {spec.workload_id} attempt {spec.attempt}"})
        except (urllib.error.URLError, OSError, ValueError) as e:
            log.warning("no token for %s/%s of %s: %s", spec.workload_id, spec.attempt,
                        spec.user, e)
            return env
        self._remember(spec, made, lifetime)
        env["GPUHUB_TOKEN"] = made["token"]
        return env

    def _remember(self, spec: LaunchSpec, made: dict, lifetime: float) -> None:
        key = (spec.workload_id, spec.attempt)
        self._issued[key] = (spec.user, made["id"])
        if self.store is None:
            return
        now = self.clock()
        with self.store.transaction() as s:
            s.merge(JobTokenRow(workload_id=spec.workload_id, attempt=spec.attempt,
                                user=spec.user, token_id=str(made["id"]),
                                token_sha256=hashlib.sha256(made["token"].encode()).hexdigest(),
                                issued_at=now, expires_at=now + lifetime))

    def revoke(self, workload_id: str, attempt: int) -> None:
        """The attempt ended: its token goes. The hub is asked in a worker
        thread: its answer never holds up the event loop."""
        issued = self._issued.pop((workload_id, attempt), None)
        if issued is None and self.store is not None:
            with self.store.session() as s:
                row = s.get(JobTokenRow, (workload_id, attempt))
                issued = (row.user, row.token_id) if row is not None else None
        if issued is not None:
            self._revoker.submit(self._delete, workload_id, attempt, *issued)

    def revoke_ended(self) -> int:
        """At start: revoke the kept tokens of attempts that are not running
        any more (they ended while the service was down, or before their
        revocation was done). Returns how many."""
        if self.store is None:
            return 0
        with self.store.session() as s:
            rows = s.execute(select(JobTokenRow, Attempt.state).outerjoin(
                Attempt, (Attempt.workload_id == JobTokenRow.workload_id)
                & (Attempt.number == JobTokenRow.attempt))).all()
            ended = [(r.workload_id, r.attempt, r.user, r.token_id) for r, state in rows
                     if state != "running"]
        for row in ended:
            self._revoker.submit(self._delete, *row)
        return len(ended)

    def _delete(self, workload_id: str, attempt: int, user: str, token_id: str) -> None:
        try:
            self._call("DELETE", f"/users/{quote(user)}/tokens/{quote(token_id)}")
        except urllib.error.HTTPError as e:
            if e.code != 404:  # 404: gone already (expired, or deleted by hand)
                log.warning("could not revoke the token of %s/%s: %s", workload_id, attempt, e)
                return
        except (urllib.error.URLError, OSError, ValueError) as e:
            log.warning("could not revoke the token of %s/%s: %s", workload_id, attempt, e)
            return
        if self.store is not None:
            with self.store.transaction() as s:
                row = s.get(JobTokenRow, (workload_id, attempt))
                if row is not None:
                    s.delete(row)

    def close(self, wait: bool = True) -> None:
        self._revoker.shutdown(wait=wait)
