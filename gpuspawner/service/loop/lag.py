"""How long the event loop stalls: a probe that asks to run every
``period`` seconds and records how late it ran (every request waits that
long too). The service exports it as ``gpuhub_event_loop_lag_seconds``."""
from __future__ import annotations

import asyncio
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
