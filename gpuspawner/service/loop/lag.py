"""How long the event loop stalls: a probe that asks to run every
``period`` seconds and records how late it ran (every request waits that
long too). The service exports it as ``gpuhub_event_loop_lag_seconds``, and
the full garbage collections, one cause of stalls, as
``gpuhub_gc_full_pause_seconds``; another, the loop's waits for another
thread's database transaction, as ``gpuhub_event_loop_write_turn_wait_seconds``.
Each stall of ``STALL`` or more is also divided by what the loop's thread did
meanwhile, as the kernel counts it (``gpuhub_event_loop_stall_seconds_total``,
``stall_causes``): waited for a CPU (the machine is busy), ran (the loop's
own work), or neither (it waited for the interpreter another thread held,
or in a blocking call)."""
from __future__ import annotations

import asyncio
import gc
import os
import threading
import time
from collections import deque
from typing import Callable, Optional

PERIOD = 0.01
# A stall this long or longer has its causes counted (the target:
# the loop never stalls over 50 ms).
STALL = 0.05
# The kernel's account of one thread: ns on a CPU, ns runnable but waiting
# for one, time slices (Linux with CONFIG_SCHED_INFO).
SCHEDSTAT = "/proc/thread-self/schedstat"
WAITING_FOR_CPU, RUNNING, WAITING_OTHER = "waiting_for_cpu", "running", "waiting_other"
CAUSES = (WAITING_FOR_CPU, RUNNING, WAITING_OTHER)


class ThreadTimes:
    """The calling thread's seconds on a CPU and waiting for one, since it
    began (read from any thread, it reads the one that made it)."""

    def __init__(self, fd: int):
        self.fd = fd

    def __call__(self) -> tuple[float, float]:
        ran, queued, _slices = os.pread(self.fd, 64, 0).split()
        return int(ran) / 1e9, int(queued) / 1e9

    def close(self) -> None:
        os.close(self.fd)


def thread_times() -> Optional[ThreadTimes]:
    """The calling thread's ``ThreadTimes``; None where the kernel does
    not tell them."""
    try:
        fd = os.open(SCHEDSTAT, os.O_RDONLY)
    except OSError:
        return None
    times = ThreadTimes(fd)
    try:
        times()
    except (OSError, ValueError):
        times.close()
        return None
    return times


def stall_causes(lag: float, ran: float, queued: float) -> dict[str, float]:
    """How a stall of ``lag`` seconds divides among its causes, from how
    long the loop's thread ran and waited for a CPU while the probe slept:
    the wait for a CPU first (no change in the service gives it one
    sooner), then its own running (a callback that held the loop), and the
    rest it spent waiting for something else (the interpreter, held by
    another of the service's threads, or a blocking call)."""
    for_cpu = min(max(queued, 0.0), lag)
    running = min(max(ran, 0.0), lag - for_cpu)
    return {WAITING_FOR_CPU: for_cpu, RUNNING: running,
            WAITING_OTHER: lag - for_cpu - running}


async def probe(observe: Callable[[float], None], period: float = PERIOD,
                clock: Callable[[], float] = time.perf_counter,
                gc_pauses: Optional[deque] = None,
                observe_gc: Callable[[float], None] = lambda seconds: None,
                observe_causes: Optional[Callable[[dict[str, float]], None]] = None,
                times: Optional[Callable[[], tuple[float, float]]] = None) -> None:
    """Forever: sleep ``period``, then ``observe`` how much later than that
    the loop woke the probe (seconds, never negative), and ``observe_gc``
    each full collection ``watch_full_collections`` put in ``gc_pauses``
    meanwhile. ``observe_causes``: each stall of ``STALL`` or more, divided
    by ``stall_causes`` (``times``: the loop thread's ``thread_times``, made
    on it when not given; nothing is divided where the kernel does not
    tell them)."""
    made = observe_causes is not None and times is None
    if made:
        times = thread_times()
    before = times() if times is not None and observe_causes is not None else None
    try:
        while True:
            t0 = clock()
            await asyncio.sleep(period)
            lag = max(0.0, clock() - t0 - period)
            observe(lag)
            if before is not None:
                after = times()
                if lag >= STALL:
                    observe_causes(stall_causes(lag, after[0] - before[0],
                                                after[1] - before[1]))
                before = after
            while gc_pauses:
                observe_gc(gc_pauses.popleft())
    finally:
        if made and times is not None:
            times.close()


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
