"""A hub-managed service ends with its hub.

JupyterHub starts the scheduler service and the culler as its children and
restarts them when they exit. When the hub itself is killed (``kill -9``,
OOM) its children live on, reparented: a scheduler service answering on
nobody's behalf, whose port the next hub's service then cannot bind, and a
second culler. So each service notes its parent at start and exits when it
changes; jobs run on by design and the next service adopts them.
"""
from __future__ import annotations

import asyncio
import logging
import os
from typing import Callable

log = logging.getLogger("gpuhub.lifeline")


async def exit_with_parent(on_orphaned: Callable[[], None], interval: float = 1.0) -> None:
    """Call ``on_orphaned`` once the process that started this one is gone
    (our parent pid changed). A process started by init (pid 1: systemd,
    a container's entrypoint) has no hub to follow and watches nothing."""
    parent = os.getppid()
    if parent == 1 or interval <= 0:
        return
    while True:
        await asyncio.sleep(interval)
        if os.getppid() != parent:
            log.warning("the hub (pid %d) is gone; stopping, it starts a new service", parent)
            on_orphaned()
            return
