"""The service's cycles (service/loop/driver.py): planned in a worker thread
while the event loop goes on serving, applied on the loop; reasons and
estimates at most every ``reasons_interval``."""
from __future__ import annotations

import asyncio
import threading

import pytest

from gpuspawner.service.loop.driver import CycleDriver, paced
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
        for _ in range(2):  # reasons made, then its reservation's change seen once
            clock[0] += 10.0
            await driver.cycle()
        plans.extend(spy_on_plans(engine))
        for later, event in steps:
            clock[0] += later
            if event == "submit":
                engine.submit(ALICE, job())
            elif event == "cancel":
                engine.cancel(ALICE, waiting)
            elif event == "end":
                finish(engine, holder)
            await driver.cycle()
        driver.close()

    seen = spy_on_plans(engine)
    asyncio.run(cycles())
    assert [explain for _thread, explain in seen[2:]] == explained
    engine.store.close()


def test_paced_steps_return_what_the_generator_returns():
    def steps():
        yield
        yield
        return "result"
    assert paced(steps()) == "result"


def test_the_cycles_worker_gives_way_while_requests_come_in_but_not_for_ever(tmp_path):
    """Between its steps the worker rests longer while API requests arrive,
    so that they get the interpreter first, but only so long a cycle: a
    steady stream of requests must not keep a long queue's plan (1,500
    steps at 100,000 queued) from ending. Once requests stop, or the
    budget is spent, it plans at full pace; the next cycle may rest again."""
    from gpuspawner.service.loop import driver as cycle_driver

    engine = make_engine(f"sqlite:///{tmp_path}/gpuhub.sqlite", tmp_path)
    clock = [100.0]
    driver = CycleDriver(engine, interval=1.0, reasons_interval=0.0, clock=lambda: clock[0])
    assert driver.next_rest() == cycle_driver.STEP_REST
    driver.request_arrived()
    clock[0] += cycle_driver.BUSY_WINDOW / 2
    assert driver.next_rest() == cycle_driver.BUSY_REST > cycle_driver.STEP_REST
    clock[0] += cycle_driver.BUSY_WINDOW
    assert driver.next_rest() == cycle_driver.STEP_REST  # no request lately

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
