"""The scheduling loop, off the event loop.

Each cycle's database work is done in a worker thread: the ends and failed
starts the backend reported are recorded there first, then the cycle is
planned on the core as it stands and its decisions committed in one
transaction. The plan only reads the core, and the requests served
meanwhile keep their changes to it waiting (``Engine.change``), so the plan
sees one consistent state. The committed decisions are then applied on the
event loop: the core, the changes that waited, the backend's starts and
stops (the starts themselves run in the starter's threads). The waiting
reasons and start estimates, which scale with the queue, are made in the
worker again. What stays on the event loop scales with the cycle's
decisions, not with the queue, and waits on no database.

The waiting reasons (a plan with ``explain``) and the start estimates (a
forecast) cost most with a long queue; they are remade at most every
``reasons_interval`` seconds, and at most a fifth of the time. A cycle
plans without them, and decides the same; where they are due, they are
remade after its decisions were applied, from the queue as it is then. A
wake (a submit, an exit) that comes while they are being remade stops them
part-way (the last ones stay shown), so that no job that could start waits
seconds for 10,000 reasons, unless the last ones are ``STALEST_REASONS``
old. The worker rests after each step, so the event loop's thread gets the
interpreter as soon as it asks.
"""
from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Optional


log = logging.getLogger("gpuhub.engine")
# How long the worker may hold the interpreter before the event loop's
# thread gets it back (CPython's default, 5 ms, would add that to every
# request's every database call while a cycle is planned).
SWITCH_INTERVAL = 0.0002
# The worker rests this long after each step of a cycle (64 workloads
# planned, 500 reasons written), leaving the interpreter to the event loop;
# BUSY_REST while requests are coming in (one arrived in the last
# BUSY_WINDOW seconds), so that they are answered first and the plan takes
# the time they leave: under a steady stream of reads with 10,000 queued, a
# plan of ~40 ms of the interpreter taken half and half with the loop
# doubled the time of every request that came in meanwhile. At most
# BUSY_BUDGET seconds of such rests a cycle: with 100,000 queued a plan is
# 1,500 steps, and unbounded rests under a steady stream of requests kept
# every cycle from ending for over a minute (no admissions meanwhile).
STEP_REST = 0.0005
BUSY_REST = 0.002
BUSY_BUDGET = 0.25
BUSY_WINDOW = 0.05
# No rest once no request arrived for IDLE_AFTER seconds: the event loop
# then has nothing to go first with, and the switch interval hands it the
# interpreter at once when one comes. With 100,000 queued the reasons and
# estimates are ~1,650 steps, and 0.5 ms rests after each doubled the time
# a job that could start waited for them (docs/service.md).
IDLE_AFTER = 0.5
# A cycle with reasons comes at most this many of its own durations after
# the last one: with a long queue the worker explains a fifth of the time.
EXPLAIN_SPACING = 5.0
# Pause after a wake, so that a burst of requests lands in one cycle. Each
# cycle costs the interpreter the same however few it admits (its trips to
# the worker, its transactions): with 20 ms, once the decisions were written
# faster, a stream of starting submits ran half again as many cycles, and
# each submit cost the service 35% more CPU (`gpuhub bench api`, docs/
# service.md); 40 ms adds that much to an idle start, which a spawn's
# seconds do not notice.
SETTLE = 0.04
# While nothing changed in the core since the last cycle with reasons (no
# submit, cancel, start, end, reservation or node change), the next one waits
# this long: its reasons and estimates would be the same but for how far off
# they say a start is ("within 12 min"). A long queue waiting behind busy GPUs
# is that case, and remaking 10,000 reasons took the interpreter from the
# requests every few seconds.
UNCHANGED_REASONS_FOR = 30.0
# Reasons and estimates being remade give way to a wake (a cycle waiting to
# decide) once they took this long: a short queue's are done by then (ms);
# 10,000 queued take 1-5 s under requests, a fifth of the time, and a job
# that could start at once waited that long for them.
GIVE_WAY_AFTER = 0.1
# ... but not once the last complete ones are this old: under a steady
# stream of submits they would otherwise never be remade.
STALEST_REASONS = 30.0
# What ``paced`` returns for steps stopped part-way.
GAVE_WAY = object()


class CycleDriver:
    def __init__(self, engine, interval: float, reasons_interval: float,
                 clock: Callable[[], float] = time.monotonic):
        self.engine = engine
        self.interval = interval
        self.reasons_interval = reasons_interval
        self.clock = clock
        self.worker = ThreadPoolExecutor(1, thread_name_prefix="gpuhub-cycle")
        self._explained_at = float("-inf")  # the last complete reasons and estimates
        self._explain_tried_at = float("-inf")  # ... and the last begun, complete or not
        self._request_at = float("-inf")
        self._busy_rested = 0.0
        self._explain_every = reasons_interval
        self._explained_state: tuple = ()  # (the core's state, its changes) then
        self._cycled: Optional[asyncio.Event] = None
        self.wake_event: Optional[asyncio.Event] = None  # set: a cycle is asked for

    async def cycle_done(self, timeout: float) -> None:
        """Wait (at most ``timeout`` s) for the next cycle to end: long polls
        answer as soon as a cycle changed what they wait on."""
        if self._cycled is None:
            self._cycled = asyncio.Event()
        try:
            await asyncio.wait_for(self._cycled.wait(), max(0.0, timeout))
        except asyncio.TimeoutError:
            pass

    async def run(self) -> None:
        """Cycles until the loop stops: after each one, the next when woken
        (a submit, a cancel, an exit) or after ``interval`` seconds."""
        sys.setswitchinterval(SWITCH_INTERVAL)
        wake = self.wake_event = asyncio.Event()
        self.engine.wake = self.waker(wake)
        self.engine.backend.set_wake(self.engine.wake)  # a watch event that ends an attempt
        self.engine.starter.wake = self.engine.wake     # starts finish in worker threads
        while True:
            try:
                await self.cycle()
            except Exception:
                log.exception("scheduling cycle failed")
            if self._cycled is not None:
                self._cycled.set()  # wakes every waiter; the next ones wait anew
                self._cycled = None
            try:
                await asyncio.wait_for(wake.wait(), self.interval)
            except asyncio.TimeoutError:
                pass
            wake.clear()
            await asyncio.sleep(SETTLE)

    def request_arrived(self) -> None:
        """An API request came in (its handler says so, on the loop)."""
        self._request_at = self.clock()

    def last_request_at(self) -> float:
        """When the last API request arrived (``clock``)."""
        return self._request_at

    def rests_anew(self) -> None:
        """A cycle begins: its longer rests start from nothing."""
        self._busy_rested = 0.0

    def next_rest(self) -> float:
        """How long the worker rests after this step of a cycle."""
        since = self.clock() - self._request_at
        if since < BUSY_WINDOW and self._busy_rested < BUSY_BUDGET:
            self._busy_rested += BUSY_REST
            return BUSY_REST
        return STEP_REST if since < IDLE_AFTER else 0.0

    def rest(self) -> None:
        """In the worker, after each step of a cycle (``sleep(0)``: the
        interpreter is let go, as for any rest)."""
        time.sleep(self.next_rest())

    def explain_due(self, seen: tuple) -> bool:
        """Whether this cycle also remakes the reasons and estimates:
        ``reasons_interval`` (or five of their last complete durations)
        after they were last begun, and then only if the core changed since
        the last complete ones (``seen``: the state and its ``changes``), or
        ``UNCHANGED_REASONS_FOR`` passed."""
        now = self.clock()
        if now - self._explain_tried_at < self._explain_every:
            return False  # also after they gave way: one that gives way costs too
        return seen != self._explained_state or now - self._explained_at >= UNCHANGED_REASONS_FOR

    def gives_way(self) -> bool:
        """In the worker, after each step of the reasons and estimates being
        remade (begun at ``_explain_tried_at``): whether they stop there, for
        the cycle a wake asks for."""
        now = self.clock()
        return (self.wake_event is not None and self.wake_event.is_set()
                and now - self._explain_tried_at >= GIVE_WAY_AFTER
                and now - self._explained_at < STALEST_REASONS)

    @staticmethod
    def waker(wake: asyncio.Event) -> Callable[[], None]:
        """``wake.set`` callable from any thread."""
        loop = asyncio.get_running_loop()
        owner = threading.get_ident()

        def set_wake() -> None:
            if threading.get_ident() == owner:
                wake.set()
            else:
                loop.call_soon_threadsafe(wake.set)
        return set_wake

    async def cycle(self) -> None:
        """One cycle: planned in the worker, applied here, then (where due)
        the reasons and estimates in the worker (the core's changes waiting
        meanwhile)."""
        engine = self.engine
        loop = asyncio.get_running_loop()
        t0 = time.perf_counter()
        self.rests_anew()
        begun = engine.take_begun()
        if begun or engine.dependencies_pending:
            with engine.changes_held():
                now = await loop.run_in_executor(self.worker, engine.record_begun, begun)
        else:  # nothing to record: no trip to the worker
            now = engine.clock()
        state = engine.scheduler.state
        explain = self.explain_due((id(state), state.changes))
        with engine.changes_held(apply=False):
            result = await loop.run_in_executor(
                self.worker, paced, engine.planned_steps(now, explain=False), self.rest)
        t1 = time.perf_counter()
        engine.apply_cycle(result, now)  # no await since the plan: the core is as planned
        t2 = time.perf_counter()
        with engine.changes_held():  # its own reasons (a preemptor's wait for its victims)
            await loop.run_in_executor(self.worker, paced,
                                       engine.after_cycle_steps(result, now, estimate=False),
                                       self.rest)
        if explain:
            await self.explain(loop)
        if engine.metrics is not None:
            engine.metrics.cycle_seconds.observe(time.perf_counter() - t0)
            engine.metrics.cycle_plan_seconds.observe(t1 - t0)
            engine.metrics.cycle_apply_seconds.observe(t2 - t1)

    async def explain(self, loop) -> None:
        """The reasons and estimates remade in the worker, unless a wake
        stops them part-way (``gives_way``: then they are tried again once
        ``explain_due`` says so)."""
        engine = self.engine
        state = engine.scheduler.state
        seen = (id(state), state.changes)
        t0 = time.perf_counter()
        self._explain_tried_at = self.clock()
        with engine.changes_held():
            outcome = await loop.run_in_executor(
                self.worker, paced, explained_steps(engine, engine.clock()), self.rest,
                self.gives_way)
        if engine.metrics is not None:
            engine.metrics.reasons_remade.labels(
                "gave_way" if outcome is GAVE_WAY else "done").inc()
        if outcome is not GAVE_WAY:
            self._explained_at, self._explained_state = self.clock(), seen
            self._explain_every = max(self.reasons_interval,
                                      EXPLAIN_SPACING * (time.perf_counter() - t0))

    def close(self) -> None:
        self.worker.shutdown(wait=False)


def explained_steps(engine, now: float):
    """The waiting reasons and start estimates of the queue as it is now, in
    steps (changes held): a plan with explanations whose decisions are
    dropped (the cycle's own plan, without them, made and applied its
    decisions first, so that a long queue's explanations keep no start
    waiting), then the engine's ``after_cycle_steps`` on it."""
    result = yield from engine.scheduler.cycle_steps(now, explain=True)
    yield from engine.after_cycle_steps(result, now)


def paced(steps, rest: Callable[[], None] = lambda: time.sleep(STEP_REST),
          give_way: Callable[[], bool] = lambda: False):
    """Run a generator of steps to its end (its return value), resting
    (``rest``) after each step; ``GAVE_WAY`` where ``give_way`` said to stop
    after one (the generator is closed there)."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
        if give_way():
            steps.close()
            return GAVE_WAY
        rest()
