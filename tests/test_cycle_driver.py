"""The service's cycles (service/loop/driver.py): planned in a worker thread
while the event loop goes on serving, applied on the loop; reasons and
estimates at most every ``reasons_interval``."""
from __future__ import annotations

import asyncio
import threading

import pytest

from gpuspawner.service.loop.driver import GAVE_WAY, CycleDriver, paced
from test_dependencies import finish
from test_engine_steps import ALICE, job, make_engine, row_of


def spy_on_plans(engine) -> list[tuple[int, bool]]:
    """(thread, explain) of every cycle planned from now on."""
    seen = []
    plan = engine.scheduler.cycle_steps

    def spied(now, explain=True):
        seen.append((threading.get_ident(), explain))
        return (yield from plan(now, explain=explain))
    engine.scheduler.cycle_steps = spied
    return seen


def test_a_cycle_is_planned_off_the_event_loop_and_a_submit_meanwhile_is_queued(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path}/gpuhub.sqlite", tmp_path)
    holder = engine.submit(ALICE, job(gpus=4)).id
    engine.tick()
    waiting = [engine.submit(ALICE, job()).id for _ in range(200)]
    plans = spy_on_plans(engine)

    async def cycle_with_a_submit() -> str:
        driver = CycleDriver(engine, interval=1.0, reasons_interval=0.0)
        cycle = asyncio.ensure_future(driver.cycle())
        await asyncio.sleep(0)  # the cycle is under way: a request comes in
        late = engine.submit(ALICE, job()).id
        await cycle
        driver.close()
        return late

    late = asyncio.run(cycle_with_a_submit())
    assert plans and plans[0][0] != threading.get_ident(), "planned in the worker thread"
    assert row_of(engine, holder).state == "running"
    pending = engine.scheduler.state.pending
    assert all(w in pending for w in waiting) and late in pending
    assert row_of(engine, waiting[0]).reason != "queued", "the cycle wrote why it waits"
    engine.store.close()


@pytest.mark.parametrize("steps, explained", [
    # (seconds later, what happens first): reasons_interval is 10 s
    ([(1.0, None), (10.0, "submit")], [False, True]),      # too soon, then a new job
    ([(11.0, None)], [False]),                              # nothing changed: not remade
    ([(11.0, None), (20.0, None)], [False, True]),          # ... but not older than 30 s
    ([(11.0, "cancel")], [True]),                           # a cancel changes the queue
    ([(11.0, "end")], [True]),                              # so does a job's end
])
def test_reasons_are_remade_every_reasons_interval_once_something_changed(
        tmp_path, steps, explained):
    engine = make_engine(f"sqlite:///{tmp_path}/gpuhub.sqlite", tmp_path)
    holder = engine.submit(ALICE, job(gpus=4)).id
    engine.tick()
    waiting = engine.submit(ALICE, job()).id
    clock = [100.0]
    plans = []

    async def cycles():
        driver = CycleDriver(engine, interval=1.0, reasons_interval=10.0, clock=lambda: clock[0])
        clock[0] += 10.0
        await driver.cycle()  # reasons made (after its reservation was taken)
        for later, event in steps:
            clock[0] += later
            if event == "submit":
                engine.submit(ALICE, job())
            elif event == "cancel":
                engine.cancel(ALICE, waiting)
            elif event == "end":
                finish(engine, holder)
            planned = len(seen)
            await driver.cycle()
            # Every cycle plans without reasons; one that remakes them plans
            # again with them, after its own decisions.
            plans.append([explain for _thread, explain in seen[planned:]])
        driver.close()

    seen = spy_on_plans(engine)
    asyncio.run(cycles())
    assert plans == [[False, True] if remade else [False] for remade in explained]
    engine.store.close()


@pytest.mark.parametrize("stop_after, expected, closed", [
    (None, "result", False),   # never asked to stop: run to the end
    (1, GAVE_WAY, True),       # asked after the first step: stopped, the generator closed
    (2, GAVE_WAY, True),
    (3, "result", False),      # it ended before
])
def test_paced_steps_return_what_the_generator_returns_or_give_way(stop_after, expected, closed):
    done = []

    def steps():
        try:
            yield
            yield
            return "result"
        finally:
            done.append(True)
    taken = []

    def give_way() -> bool:
        taken.append(1)
        return stop_after is not None and len(taken) >= stop_after
    result = paced(steps(), rest=lambda: None, give_way=give_way)
    assert result is expected if closed else result == expected
    assert done == [True]  # finished or closed, its cleanup ran


@pytest.mark.parametrize("last_reasons_age, woken, remade", [
    (11.0, False, True),    # due, nothing waits for a cycle: remade
    (11.0, True, False),    # a submit woke the loop: the next cycle goes first
    (31.0, True, True),     # ... unless the last reasons are too old to keep
])
def test_reasons_being_remade_give_way_to_the_cycle_a_wake_asks_for(
        tmp_path, monkeypatch, last_reasons_age, woken, remade):
    """A long queue's reasons and estimates take seconds under requests; a
    job that could start meanwhile waited for them. Now a wake stops them
    part-way (after their first step here) and they are tried again
    ``reasons_interval`` later, but not where the last complete ones are
    ``STALEST_REASONS`` old: then they finish whatever waits."""
    from gpuspawner.service.loop import driver as cycle_driver

    monkeypatch.setattr(cycle_driver, "GIVE_WAY_AFTER", 0.0)
    engine = make_engine(f"sqlite:///{tmp_path}/gpuhub.sqlite", tmp_path)
    engine.submit(ALICE, job(gpus=4))
    engine.tick()
    clock = [100.0]

    async def cycles() -> list[str]:
        driver = CycleDriver(engine, interval=1.0, reasons_interval=10.0, clock=lambda: clock[0])
        driver.wake_event = asyncio.Event()
        await driver.cycle()  # reasons made
        # More than a plan's step (64 workloads): it stops before any reason is written.
        late = [engine.submit(ALICE, job()).id for _ in range(100)]
        clock[0] += last_reasons_age
        if woken:
            driver.wake_event.set()
        await driver.cycle()
        reasons = [row_of(engine, wid).reason for wid in late]
        if not remade:  # tried again reasons_interval later, once no cycle waits
            driver.wake_event.clear()
            await driver.cycle()
            assert all(row_of(engine, wid).reason == "queued" for wid in late), "too soon"
            clock[0] += 10.0
            await driver.cycle()
            assert all(row_of(engine, wid).reason != "queued" for wid in late)
        driver.close()
        return reasons

    reasons = asyncio.run(cycles())
    assert [reason != "queued" for reason in reasons] == [remade] * len(reasons)
    engine.store.close()


def test_the_cycles_worker_gives_way_while_requests_come_in_but_not_for_ever(tmp_path):
    """Between its steps the worker rests longer while API requests arrive,
    so that they get the interpreter first, but only so long a cycle: a
    steady stream of requests must not keep a long queue's plan (1,500
    steps at 100,000 queued) from ending. Once requests stop, or the
    budget is spent, it rests 0.5 ms, and none at all once none came for
    ``IDLE_AFTER``; the next cycle may rest longer again."""
    from gpuspawner.service.loop import driver as cycle_driver

    engine = make_engine(f"sqlite:///{tmp_path}/gpuhub.sqlite", tmp_path)
    clock = [100.0]
    driver = CycleDriver(engine, interval=1.0, reasons_interval=0.0, clock=lambda: clock[0])
    assert driver.next_rest() == 0.0  # no request ever: nothing to give way to
    driver.request_arrived()
    clock[0] += cycle_driver.BUSY_WINDOW / 2
    assert driver.next_rest() == cycle_driver.BUSY_REST > cycle_driver.STEP_REST
    clock[0] += cycle_driver.BUSY_WINDOW
    assert driver.next_rest() == cycle_driver.STEP_REST  # no request lately
    clock[0] += cycle_driver.IDLE_AFTER
    assert driver.next_rest() == 0.0  # none for a while: full pace

    driver.rests_anew()
    rests = []
    for _ in range(2000):  # requests all along
        driver.request_arrived()
        rests.append(driver.next_rest())
    assert sum(rests) < cycle_driver.BUSY_BUDGET + 2000 * cycle_driver.STEP_REST
    assert rests[0] == cycle_driver.BUSY_REST and rests[-1] == cycle_driver.STEP_REST
    driver.rests_anew()
    assert driver.next_rest() == cycle_driver.BUSY_REST
    driver.close()
    engine.store.close()
