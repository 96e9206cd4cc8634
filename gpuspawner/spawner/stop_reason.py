"""Why a notebook server stopped, in a sentence its user can act on.

A server killed from outside said nothing ("server is gone (-9)") and the
next page load was a bare 424. The spawner now records who or what stopped
each server (``StopReasonMixin``): the hub's API on someone's request (its
owner, an admin, the culler with its reason), the scheduler taking its GPUs
back (preemption), the kernel's OOM killer (its memory cgroup counted a
kill), or a signal from outside the hub. The reason is kept in the
spawner's state (JupyterHub's database, across the stop and hub restarts)
until its next start, logged by the hub, and shown on the "not running"
page (templates/not_running.html).
"""
from __future__ import annotations

import json
import os
import signal
import time
from typing import Iterable, Optional

CULLER = "gpuhub-culler"


def oom_kills(cgroup_dirs: Iterable[str]) -> int:
    """Processes the OOM killer ended in these cgroups: cgroup v1's
    memory.oom_control ``oom_kill``, v2's memory.events ``oom_kill``."""
    kills = 0
    for d in cgroup_dirs:
        for name in ("memory.oom_control", "memory.events"):
            try:
                with open(os.path.join(d, name)) as f:
                    for line in f:
                        key, _, value = line.partition(" ")
                        if key == "oom_kill":
                            kills += int(value)
            except (OSError, ValueError):
                continue
    return kills


def exit_reason(status: int, oom: int = 0) -> str:
    """Why a server that nobody asked to stop ended (``status``: its exit
    status, negative for a signal, as Popen says)."""
    if oom:
        return (f"it ran out of memory: the kernel's OOM killer ended {oom} of its processes "
                f"at its memory limit (ask for more memory when you start it)")
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return (f"it was killed by {name} from outside the hub (not by the culler, an admin or "
                f"the scheduler: by a process on the host, or the server itself)")
    if status == 0:
        return "it exited by itself (status 0): shut down from JupyterLab, or its process ended"
    return f"it exited with status {status} (it crashed; its log is the hub's)"


def requested_reason(requester: Optional[str], requester_kind: str, said: str = "", *,
                     owner: str) -> str:
    """Why a server stopped through the hub's API or pages, by whom."""
    if requester_kind == "service" and requester == CULLER:
        return "the idle culler stopped it" + (f": {said}" if said else "")
    if requester_kind == "service":
        return f"the service {requester} stopped it" + (f": {said}" if said else "")
    if requester == owner:
        return "you stopped it"
    if requester:
        return f"the admin {requester} stopped it" + (f": {said}" if said else "")
    return "the hub stopped it (it was shutting down)"


class StopReasonMixin:
    """What a spawner records of its server's end: ``stop_reason`` and
    ``stopped_at`` (kept in its state, past clear_state, until the next start)."""

    stop_reason: str = ""
    stopped_at: float = 0.0

    def note_stop(self, reason: str, when: Optional[float] = None) -> None:
        """Record why the server stopped: the first reason of a run stands
        (a preemption's stop also makes the server exit)."""
        if self.stop_reason:
            return
        self.stop_reason, self.stopped_at = reason, when or time.time()
        self.log.warning("%s stopped: %s", self._log_name, reason)

    def forget_stop(self) -> None:
        self.stop_reason, self.stopped_at = "", 0.0

    def stop_sentence(self) -> str:
        """The not-running page's sentence, or ""."""
        if not self.stop_reason:
            return ""
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.stopped_at))
        return f"Your server stopped at {when}: {self.stop_reason}."

    def _load_stop(self, state: dict) -> None:
        self.stop_reason = state.get("gpuhub_stop_reason", "")
        self.stopped_at = state.get("gpuhub_stopped_at", 0.0)

    def _save_stop(self, state: dict) -> dict:
        if self.stop_reason:
            state["gpuhub_stop_reason"] = self.stop_reason
            state["gpuhub_stopped_at"] = self.stopped_at
        return state


def note_stop_requests() -> None:
    """Tell a spawner who asked the hub to stop its server (its owner, an
    admin, the culler: a service, with the ``reason`` of its request's
    body) before the stop, so that it can say so. Every stop through the
    hub's API and pages goes through this handler method; installed once,
    when the GPU spawners are imported (admission.py), in any hub that
    uses them."""
    from jupyterhub.handlers.base import BaseHandler
    original = BaseHandler.stop_single_user
    if getattr(original, "notes_requester", False):
        return

    async def stop_single_user(self, user, server_name=""):
        who = self.current_user
        if who is not None and server_name in user.spawners:
            try:
                said = str((json.loads(self.request.body or b"{}") or {}).get("reason") or "")
            except (ValueError, AttributeError):
                said = ""
            user.spawners[server_name]._stop_request = (who.name, getattr(who, "kind", "user"),
                                                         said[:500])
        return await original(self, user, server_name)
    stop_single_user.notes_requester = True
    BaseHandler.stop_single_user = stop_single_user
