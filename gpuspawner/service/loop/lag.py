"""How long the event loop stalls: a probe that asks to run every
``period`` seconds and records how late it ran (every request waits that
long too). The service exports it as ``gpuhub_event_loop_lag_seconds``, and
the full garbage collections, one cause of stalls, as
``gpuhub_gc_full_pause_seconds``; another, the loop's waits for another
thread's database transaction, as ``gpuhub_event_loop_write_turn_wait_seconds``."""
from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections import deque
from typing import Callable, Optional

PERIOD = 0.01


async def probe(observe: Callable[[float], None], period: float = PERIOD,
                clock: Callable[[], float] = time.perf_counter,
                gc_pauses: Optional[deque] = None,
                observe_gc: Callable[[float], None] = lambda seconds: None) -> None:
    """Forever: sleep ``period``, then ``observe`` how much later than that
    the loop woke the probe (seconds, never negative), and ``observe_gc``
    each full collection ``watch_full_collections`` put in ``gc_pauses``
    meanwhile."""
    while True:
        t0 = clock()
        await asyncio.sleep(period)
        observe(max(0.0, clock() - t0 - period))
        while gc_pauses:
            observe_gc(gc_pauses.popleft())


def watch_full_collections(observe: Callable[[float], None],
                           clock: Callable[[], float] = time.perf_counter) -> Callable[[], None]:
    """``observe`` how long each of Python's full (generation 2) garbage
    collections held the interpreter: the event loop cannot run meanwhile,
    and with a long queue the service holds hundreds of thousands of
    objects. ``observe`` runs inside the collection, in whatever thread
    started it: it must take no lock (a metric's would deadlock a thread
    that held it when the collection started), so the service passes a
    deque's ``append`` and the probe hands them to the metric. Returns what
    stops watching."""
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


def on_this_thread(observe: Callable[[float], None]) -> Callable[[float], None]:
    """``observe``, for calls from the thread that made it (the event
    loop's) only: the store tells every thread's wait for the write turn,
    and a worker thread's wait stalls nobody else."""
    ident = threading.get_ident()

    def observed(seconds: float) -> None:
        if threading.get_ident() == ident:
            observe(seconds)
    return observed
