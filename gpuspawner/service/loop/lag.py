"""How long the event loop stalls: a probe that asks to run every
``period`` seconds and records how late it ran (every request waits that
long too). The service exports it as ``gpuhub_event_loop_lag_seconds``, and
the full garbage collections, one cause of stalls, as
``gpuhub_gc_full_pause_seconds``."""
from __future__ import annotations

import asyncio
import gc
import time
from typing import Callable

PERIOD = 0.01


async def probe(observe: Callable[[float], None], period: float = PERIOD,
                clock: Callable[[], float] = time.perf_counter) -> None:
    """Forever: sleep ``period``, then ``observe`` how much later than that
    the loop woke the probe (seconds, never negative)."""
    while True:
        t0 = clock()
        await asyncio.sleep(period)
        observe(max(0.0, clock() - t0 - period))


def watch_full_collections(observe: Callable[[float], None],
                           clock: Callable[[], float] = time.perf_counter) -> Callable[[], None]:
    """``observe`` how long each of Python's full (generation 2) garbage
    collections held the interpreter: the event loop cannot run meanwhile,
    and with a long queue the service holds millions of objects. Returns
    what stops watching."""
    started: list[float] = []

    def callback(phase: str, info: dict) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            started[:] = [clock()]
        elif started:
            observe(clock() - started.pop())

    gc.callbacks.append(callback)
    return lambda: gc.callbacks.remove(callback)
