"""The service's view of its own event loop: the lag probe sees a stall,
full garbage collections and the loop's waits for another thread's
transaction are timed, and the benchmark reads them from the service's
metrics."""
from __future__ import annotations

import asyncio
import gc
import threading
import time
import weakref
from collections import deque

import pytest

from gpuspawner.bench import service_metrics
from gpuspawner.service.loop.lag import (
    RUNNING, WAITING_FOR_CPU, WAITING_OTHER, on_this_thread, probe, stall_causes, thread_times,
    watch_full_collections)
from gpuspawner.store import Store


def test_the_probe_sees_a_callback_that_held_the_loop():
    seen: list[float] = []

    async def main():
        task = asyncio.create_task(probe(seen.append, period=0.005))
        await asyncio.sleep(0.02)
        time.sleep(0.08)  # a handler that blocks the loop for 80 ms
        await asyncio.sleep(0.02)
        task.cancel()

    asyncio.run(main())
    assert max(seen) >= 0.07, seen


@pytest.mark.parametrize("lag, ran, queued, for_cpu, running, other", [
    (0.08, 0.0, 0.0, 0.0, 0.0, 0.08),     # asleep: a blocking call, or another thread's turn
    (0.08, 0.09, 0.0, 0.0, 0.08, 0.0),    # a callback ran 90 ms (10 of them within the period)
    (0.08, 0.0, 0.1, 0.08, 0.0, 0.0),     # runnable, but the machine gave it no CPU
    (0.08, 0.03, 0.02, 0.02, 0.03, 0.03),  # some of each
    (0.06, 0.05, 0.04, 0.04, 0.02, 0.0),  # the wait for a CPU is counted first
])
def test_a_stall_is_divided_by_what_the_loops_thread_did(lag, ran, queued, for_cpu, running,
                                                         other):
    causes = stall_causes(lag, ran, queued)
    assert causes == pytest.approx({WAITING_FOR_CPU: for_cpu, RUNNING: running,
                                    WAITING_OTHER: other})
    assert sum(causes.values()) == pytest.approx(lag)


def test_the_probe_divides_each_stall_by_the_threads_times_around_it():
    """With a fake account of the thread (1 s waiting for a CPU whenever it
    is read again), a stall of ~80 ms is all "waiting for a CPU", the
    probe's wakes without a stall are not told, and the account is read on
    each wake, so a stall's division starts from the wake before it."""
    reads: list[int] = []
    stalls: list[dict] = []

    def times():
        reads.append(1)
        return 0.0, float(len(reads))

    async def main():
        task = asyncio.create_task(probe(lambda lag: None, period=0.005,
                                         observe_causes=stalls.append, times=times))
        await asyncio.sleep(0.03)
        time.sleep(0.08)
        await asyncio.sleep(0.03)
        task.cancel()

    asyncio.run(main())
    assert len(reads) >= 4  # the first read, then one per wake
    big = [c for c in stalls if sum(c.values()) >= 0.07]
    assert len(big) == 1 and big[0][WAITING_FOR_CPU] == pytest.approx(sum(big[0].values()))


@pytest.mark.parametrize("account", [None, "not numbers\n"])
def test_where_the_kernel_does_not_tell_the_probe_times_stalls_without_dividing_them(
        tmp_path, monkeypatch, account):
    from gpuspawner.service.loop import lag
    path = tmp_path / "schedstat"
    if account is not None:
        path.write_text(account)
    monkeypatch.setattr(lag, "SCHEDSTAT", str(path))
    assert lag.thread_times() is None
    seen, stalls = [], []

    async def main():
        task = asyncio.create_task(probe(seen.append, period=0.005,
                                         observe_causes=stalls.append))
        await asyncio.sleep(0.02)
        time.sleep(0.08)
        await asyncio.sleep(0.02)
        task.cancel()

    asyncio.run(main())
    assert max(seen) >= 0.07 and stalls == []


def busy(seconds: float) -> None:
    """Compute for ``seconds`` (of the clock on the wall)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        sum(range(1000))


@pytest.mark.parametrize("hold, cause", [
    (lambda: time.sleep(0.1), WAITING_OTHER),  # a blocking call on the loop
    (lambda: busy(0.1), RUNNING),               # the loop's own work (or a wait for a CPU)
])
def test_the_probe_says_what_held_the_loop_as_the_kernel_counted_it(hold, cause):
    if thread_times() is None:
        pytest.skip("this kernel does not tell a thread's times (/proc/thread-self/schedstat)")
    stalls: list[dict] = []

    async def main():
        task = asyncio.create_task(probe(lambda lag: None, period=0.005,
                                         observe_causes=stalls.append))
        await asyncio.sleep(0.02)
        hold()
        await asyncio.sleep(0.02)
        task.cancel()

    asyncio.run(main())
    assert stalls, "no stall seen"
    stall = max(stalls, key=lambda causes: sum(causes.values()))  # the hold's
    if cause == RUNNING:  # on a busy machine part of its run is a wait for a CPU
        assert stall[RUNNING] + stall[WAITING_FOR_CPU] >= 0.8 * sum(stall.values()), stall
    else:
        assert stall[WAITING_OTHER] >= 0.8 * sum(stall.values()), stall


def test_only_full_collections_are_timed_until_the_watch_stops():
    seen: list[float] = []
    stop = watch_full_collections(seen.append)
    try:
        gc.collect(0)
        gc.collect(1)
        assert seen == []
        gc.collect()
        assert len(seen) == 1 and seen[0] >= 0
    finally:
        stop()
    gc.collect()
    assert len(seen) == 1


def test_the_probe_hands_the_collections_to_the_metric_from_the_event_loop():
    pauses, handed = deque(), []
    stop = watch_full_collections(pauses.append)  # inside a collection: no lock taken

    async def main():
        task = asyncio.create_task(probe(lambda lag: None, period=0.005, gc_pauses=pauses,
                                         observe_gc=handed.append))
        gc.collect()
        await asyncio.sleep(0.03)
        task.cancel()

    try:
        asyncio.run(main())
    finally:
        stop()
    assert len(handed) >= 1 and not pauses


def metrics(lag: dict, gc_full: dict, turn: dict, lag_sum: float = 0.0) -> str:
    lines = []
    for name, buckets in (("gpuhub_event_loop_lag_seconds", lag),
                          ("gpuhub_gc_full_pause_seconds", gc_full),
                          ("gpuhub_event_loop_write_turn_wait_seconds", turn)):
        lines += [f'{name}_bucket{{le="{le}"}} {n}' for le, n in buckets.items()]
    lines.append(f"gpuhub_event_loop_lag_seconds_sum {lag_sum}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("before, after, stall_ms, over_50, gcs, gc_ms, waits, wait_ms", [
    # nothing happened between the scrapes
    (({"0.05": 10, "0.1": 10, "+Inf": 10}, {"0.05": 1, "0.3": 1, "+Inf": 1},
      {"0.01": 2, "+Inf": 2}),
     ({"0.05": 10, "0.1": 10, "+Inf": 10}, {"0.05": 1, "0.3": 1, "+Inf": 1},
      {"0.01": 2, "+Inf": 2}), 0, 0, 0, 0, 0, 0),
    # two stalls of 50–100 ms, one full collection of 100–300 ms, and three
    # waits for the write turn, the longest 10–75 ms
    (({"0.05": 10, "0.1": 10, "+Inf": 10}, {"0.1": 0, "0.3": 0, "+Inf": 0},
      {"0.01": 2, "0.075": 2, "+Inf": 2}),
     ({"0.05": 30, "0.1": 32, "+Inf": 32}, {"0.1": 0, "0.3": 1, "+Inf": 1},
      {"0.01": 4, "0.075": 5, "+Inf": 5}), 100, 2, 1, 300, 3, 75),
])
def test_the_benchmark_reads_stalls_collections_and_write_turn_waits_between_two_scrapes(
        before, after, stall_ms, over_50, gcs, gc_ms, waits, wait_ms):
    row = service_metrics.summary("x", service_metrics.parse(metrics(*before)),
                                  service_metrics.parse(metrics(*after)))
    assert (row["loop_stall_max_ms"], row["loop_stalls_over_50ms"]) == (stall_ms, over_50)
    assert (row["gc_full"], row["gc_full_max_ms"]) == (gcs, gc_ms)
    assert (row["write_turn_waits"], row["write_turn_wait_max_ms"]) == (waits, wait_ms)
    line = service_metrics.format_summary(row)
    assert f"{gcs} full GCs" in line and f"write turn {waits} times" in line


def causes_text(seconds: dict[str, float]) -> str:
    return "".join(f'{service_metrics.STALL_CAUSES}{{cause="{c}"}} {v}\n'
                   for c, v in seconds.items())


@pytest.mark.parametrize("before, after, said", [
    ({}, {}, None),  # a service that does not tell them: nothing said
    ({"waiting_for_cpu": 0.0, "running": 0.0, "waiting_other": 0.0},
     {"waiting_for_cpu": 0.0, "running": 0.0, "waiting_other": 0.0}, None),  # no stall
    ({"waiting_for_cpu": 1.0, "running": 0.5, "waiting_other": 0.0},
     {"waiting_for_cpu": 1.3, "running": 0.6, "waiting_other": 0.1},
     "(60% waiting for a CPU, 20% running on the loop, 20% waiting for the interpreter or a call)"),
])
def test_the_benchmark_divides_the_stalls_time_between_two_scrapes(before, after, said):
    stalls = (metrics({"0.05": 10, "+Inf": 10}, {"+Inf": 0}, {"+Inf": 0}),
              metrics({"0.05": 10, "+Inf": 12}, {"+Inf": 0}, {"+Inf": 0}))
    row = service_metrics.summary("x", service_metrics.parse(stalls[0] + causes_text(before)),
                                  service_metrics.parse(stalls[1] + causes_text(after)))
    line = service_metrics.format_summary(row)
    assert (f"2 over 50 ms {said};" if said else "2 over 50 ms;") in line


def intake_text(rows: int, batches: int) -> str:
    return (f"{service_metrics.INTAKE_ROWS} {rows}.0\n"
            f"{service_metrics.INTAKE_BATCHES} {batches}.0\n")


@pytest.mark.parametrize("before, after, said", [
    ("", "", None),  # a service that does not tell them: nothing said
    (intake_text(5, 2), intake_text(5, 2), None),  # nothing submitted between the scrapes
    (intake_text(5, 2), intake_text(105, 42), "; stored 100 submits in 40 transactions "
                                              "(2.5 a transaction)"),
])
def test_the_benchmark_says_how_many_submits_each_intake_transaction_stored(before, after,
                                                                            said):
    stalls = metrics({"+Inf": 10}, {"+Inf": 0}, {"+Inf": 0})
    row = service_metrics.summary("x", service_metrics.parse(stalls + before),
                                  service_metrics.parse(stalls + after))
    line = service_metrics.format_summary(row)
    assert line.endswith(said) if said else "transaction" not in line


def reasons_text(done: int, gave_way: int) -> str:
    return (f'gpuhub_reasons_remade_total{{outcome="done"}} {done}.0\n'
            f'gpuhub_reasons_remade_total{{outcome="gave_way"}} {gave_way}.0\n')


@pytest.mark.parametrize("before, after, said", [
    ("", "", None),  # a service that does not tell them: nothing said
    (reasons_text(3, 1), reasons_text(3, 1), None),  # neither between the scrapes
    (reasons_text(3, 1), reasons_text(5, 9), "; reasons remade 2 times, 8 more stopped "
                                             "part-way for a cycle"),
])
def test_the_benchmark_says_how_often_the_reasons_gave_way_to_a_cycle(before, after, said):
    stalls = metrics({"+Inf": 10}, {"+Inf": 0}, {"+Inf": 0})
    row = service_metrics.summary("x", service_metrics.parse(stalls + before),
                                  service_metrics.parse(stalls + after))
    line = service_metrics.format_summary(row)
    assert line.endswith(said) if said else "reasons" not in line


@pytest.mark.parametrize("held_by, waits", [
    (None, 0),             # nobody holds the turn: it is taken at once, nothing told
    ("this thread", 0),    # a transaction inside its own thread's: no wait
    ("another thread", 1),  # the cycle's worker writing: the wait is told, as long as it was
])
def test_a_transaction_tells_how_long_it_waited_for_anothers(tmp_path, held_by, waits):
    store = Store(f"sqlite:///{tmp_path}/db.sqlite")
    told: list[float] = []
    store.waited_for_turn = told.append
    held, release = threading.Event(), threading.Event()

    def hold():
        with store.transaction():
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    if held_by == "another thread":
        holder.start()
        assert held.wait(5)
        threading.Timer(0.1, release.set).start()
    try:
        if held_by == "this thread":
            with store.transaction():
                with store.transaction():
                    pass
        else:
            with store.transaction():
                pass
    finally:
        release.set()
        if holder.is_alive():
            holder.join()
        store.close()
    assert len(told) == waits
    assert all(seconds >= 0.05 for seconds in told), told


def test_only_the_event_loops_own_waits_are_counted():
    seen: list[float] = []
    observe = on_this_thread(seen.append)  # made on the loop's thread
    observe(0.01)
    worker = threading.Thread(target=observe, args=(0.5,))
    worker.start()
    worker.join()
    assert seen == [0.01]


@pytest.mark.parametrize("now, last_full, last_complete, in_flight, last_request, due", [
    (100.0, 95.0, 0.0, 0, 0.0, None),          # the last one was 5 s ago
    (100.0, 89.0, 0.0, 0, 0.0, "recent"),      # 11 s ago, nothing in flight, quiet
    (100.0, 89.0, 0.0, 1, 0.0, None),          # a request is being answered
    (100.0, 89.0, 0.0, 0, 99.98, None),        # one arrived 20 ms ago: more may follow
    (100.0, 89.0, 0.0, 0, 99.9, "recent"),     # 100 ms ago
    (100.0, 39.0, 0.0, 3, 99.99, "recent"),    # overdue: never idle for a minute
    (700.0, 695.0, 99.0, 0, 0.0, "complete"),  # a complete one 601 s ago: due when idle
    (700.0, 689.0, 99.0, 1, 0.0, None),        # ... but not in a request
    (700.0, 639.0, 99.0, 1, 0.0, "recent"),    # ... where a recent one is overdue
    (3700.0, 3699.0, 99.0, 2, 3699.99, "complete"),  # an hour without one: whatever comes
])
def test_full_collections_wait_for_a_gap_between_requests(now, last_full, last_complete,
                                                         in_flight, last_request, due):
    from gpuspawner.service.loop.full_collections import collection_due
    assert collection_due(now, last_full, last_complete, in_flight, last_request) == due


class Cycle:
    """Garbage that refers to itself: only a collection frees it."""

    def __init__(self):
        self.me = self


def test_the_service_makes_the_full_collections_cpython_no_longer_does():
    """After ``take_over`` CPython makes no full collection however much
    survives; ``maybe_collect`` makes one once the requests leave a gap, and
    what survived it is left out of the next ones but the complete one."""
    from gpuspawner.service.loop.full_collections import COMPLETE, FullCollections
    now = [1000.0]
    arrived = [float("-inf")]
    full = FullCollections(last_request=lambda: arrived[0], clock=lambda: now[0])
    seen: list[float] = []
    stop = watch_full_collections(seen.append)
    threshold = gc.get_threshold()
    try:
        full.take_over()
        kept = [[i] for i in range(300_000)]  # long-lived, and tracked: a quarter more and more
        assert seen == []
        full.request_started()
        arrived[0] = now[0]
        now[0] += 11
        assert full.maybe_collect() is None and seen == []
        full.request_ended()
        now[0] += 0.1
        assert full.maybe_collect() == "recent" and len(seen) == 1
        assert full.maybe_collect() is None   # not again before EVERY seconds
        assert gc.get_freeze_count() >= 300_000  # the next ones walk none of them
        cycle = Cycle()
        dead = weakref.ref(cycle)
        now[0] += 11
        assert full.maybe_collect() == "recent"  # the cycle, still in use, survives it
        del cycle
        now[0] += 11
        assert full.maybe_collect() == "recent" and dead() is not None  # out of that one
        now[0] = full.last_complete + COMPLETE
        assert full.maybe_collect() == "complete" and dead() is None
        del kept
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
        stop()
