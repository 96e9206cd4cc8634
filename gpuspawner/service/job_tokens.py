"""Each job's own token: a JupyterHub API token of the job's user, scoped to
act on the scheduler service as that user and nothing more, made for one
attempt and revoked when it ends.

The job gets it as ``GPUHUB_TOKEN`` with ``GPUHUB_URL``, so the ``gpuhub``
CLI and ``GpuHubClient.from_env()`` work inside a job as its user. The
service's own hub token never reaches a job (the backends build a job's
environment from what they keep on purpose, see backends/base.py).
"""
from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from typing import Optional
from urllib.parse import quote

from ..backends.base import LaunchSpec
from ..hub.config import JOB_TOKEN_SCOPES

log = logging.getLogger(__name__)


class JobTokens:
    """Issues and revokes job tokens through the hub's REST API with the
    service's token (its role holds the ``tokens`` scope for this)."""

    def __init__(self, hub_api: str, service_token: str, service_url: str,
                 lifetime_margin: float = 3600.0, default_lifetime: float = 7 * 86400.0,
                 timeout: float = 5.0):
        self.hub_api = hub_api.rstrip("/")
        self.service_token = service_token
        self.service_url = service_url
        self.margin = lifetime_margin
        self.default_lifetime = default_lifetime
        self.timeout = timeout
        self._issued: dict[tuple[str, int], tuple[str, str]] = {}  # attempt -> (user, token id)

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
        self._issued[(spec.workload_id, spec.attempt)] = (spec.user, made["id"])
        env["GPUHUB_TOKEN"] = made["token"]
        return env

    def revoke(self, workload_id: str, attempt: int) -> None:
        """The attempt ended: its token goes (after a restart of the service
        the token expires by itself instead)."""
        issued = self._issued.pop((workload_id, attempt), None)
        if issued is None:
            return
        user, token_id = issued
        try:
            self._call("DELETE", f"/users/{quote(user)}/tokens/{quote(token_id)}")
        except (urllib.error.URLError, OSError, ValueError) as e:
            log.warning("could not revoke the token of %s/%s: %s", workload_id, attempt, e)
