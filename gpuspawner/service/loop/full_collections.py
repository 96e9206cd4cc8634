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
whatever comes. The young generations are collected as before, and cyclic
garbage that reached the old one waits at most ``EVERY`` seconds (while
idle) or ``OVERDUE``.
"""
from __future__ import annotations

import asyncio
import gc
import time
from typing import Callable

IDLE = 0.05     # seconds since the last request arrived
EVERY = 10.0    # seconds between full collections at most, when idle
OVERDUE = 60.0  # seconds after which one is made, idle or not
CHECK = 0.1     # how often the loop looks
# CPython makes a full collection once this many young (generation 1)
# collections happened since the last, and the long-lived objects grew by
# a quarter: as many as never happens.
NEVER = 1 << 30


def collect_now(now: float, last_full: float, in_flight: int, last_request: float) -> bool:
    """Whether to make a full collection at ``now``."""
    if now - last_full >= OVERDUE:
        return True
    return now - last_full >= EVERY and in_flight == 0 and now - last_request >= IDLE


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
        self.last_full = clock()
        self.made = 0

    def request_started(self) -> None:
        self.in_flight += 1

    def request_ended(self) -> None:
        self.in_flight = max(0, self.in_flight - 1)

    @staticmethod
    def take_over() -> None:
        """CPython makes no more full collections of its own."""
        young, middle, _old = gc.get_threshold()
        gc.set_threshold(young, middle, NEVER)

    def maybe_collect(self) -> bool:
        now = self.clock()
        if not collect_now(now, self.last_full, self.in_flight, self.last_request()):
            return False
        gc.collect()
        self.last_full = self.clock()
        self.made += 1
        return True

    async def run(self) -> None:
        while True:
            await asyncio.sleep(CHECK)
            self.maybe_collect()
