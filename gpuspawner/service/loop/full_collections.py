"""Python's full garbage collections, made between requests.

A full collection walks every object the collector tracks while holding
the interpreter, so the event loop and every thread wait for it: with
100,000 queued ~35 ms on an idle core, up to 150 ms on two loaded ones
(`gpuhub bench api --queued 100000`). CPython starts one whenever the
long-lived objects grew by a quarter, inside whatever request allocates at
that moment: with 100,000 queued one request of a bench row waited for it.
The service turns CPython's own full collections off (the third
``gc.set_threshold`` value) and makes them itself when no API request is in
flight and none arrived for ``IDLE`` seconds, at most every ``EVERY``
seconds; a service never idle that long gets one every ``OVERDUE`` seconds
whatever comes.

Each of them leaves what survived it out of the next (``gc.freeze``): a
queue that grew by 3,000 since is what the next one walks, not the 100,000
before them (~5 ms, not ~150). What is frozen is still freed when nothing
refers to it, as everything is; only garbage that refers to itself (a
cycle) among it waits for a *complete* collection, which walks everything
again: every ``COMPLETE`` seconds when idle, every ``COMPLETE_OVERDUE``
seconds whatever comes. The young generations are collected as before.
"""
from __future__ import annotations

import asyncio
import gc
import time
from typing import Callable, Optional

IDLE = 0.05     # seconds since the last request arrived
EVERY = 10.0    # seconds between full collections at most, when idle
OVERDUE = 60.0  # seconds after which one is made, idle or not
COMPLETE = 600.0           # seconds between complete ones at most, when idle
COMPLETE_OVERDUE = 3600.0  # seconds after which a complete one is made, idle or not
CHECK = 0.1     # how often the loop looks
# CPython makes a full collection once this many young (generation 1)
# collections happened since the last, and the long-lived objects grew by
# a quarter: as many as never happens.
NEVER = 1 << 30
RECENT = "recent"      # what survived the last one is left out
EVERYTHING = "complete"


def collection_due(now: float, last_full: float, last_complete: float, in_flight: int,
                   last_request: float) -> Optional[str]:
    """Which full collection to make at ``now``: RECENT, EVERYTHING or None."""
    idle = in_flight == 0 and now - last_request >= IDLE
    if now - last_complete >= COMPLETE_OVERDUE or (idle and now - last_complete >= COMPLETE):
        return EVERYTHING
    if now - last_full >= OVERDUE or (idle and now - last_full >= EVERY):
        return RECENT
    return None


class FullCollections:
    """Counts the API's requests in flight and makes the full collections
    between them (``run`` on the event loop, after ``take_over``)."""

    def __init__(self, last_request: Callable[[], float],
                 clock: Callable[[], float] = time.monotonic):
        # When the last API request arrived: the cycle's driver keeps it
        # (``CycleDriver.last_request_at``), on the same clock.
        self.last_request = last_request
        self.clock = clock
        self.in_flight = 0
        self.last_full = self.last_complete = clock()

    def request_started(self) -> None:
        self.in_flight += 1

    def request_ended(self) -> None:
        self.in_flight = max(0, self.in_flight - 1)

    @staticmethod
    def take_over() -> None:
        """CPython makes no more full collections of its own."""
        young, middle, _old = gc.get_threshold()
        gc.set_threshold(young, middle, NEVER)

    def maybe_collect(self) -> Optional[str]:
        """Make the full collection due now, if any (which: RECENT or EVERYTHING)."""
        due = collection_due(self.clock(), self.last_full, self.last_complete, self.in_flight,
                             self.last_request())
        if due is None:
            return None
        if due == EVERYTHING:
            gc.unfreeze()
        gc.collect()
        gc.freeze()
        self.last_full = self.clock()
        if due == EVERYTHING:
            self.last_complete = self.last_full
        return due

    async def run(self) -> None:
        while True:
            await asyncio.sleep(CHECK)
            self.maybe_collect()
