"""A sweep in its team's queue (issue 21, item 5): its later tasks are
ordered later (``Policy.sweep_task_spacing``), so one big sweep interleaves
with the rest of its team's work, its user's other jobs included, instead
of going first whole; and the sweep still makes progress."""
from __future__ import annotations

import pytest

from gpuspawner.scheduler import POLICIES, Node, Quota, Scheduler, Team, Workload
from gpuspawner.scheduler import events as ev


def run_order(spacing, others, tasks=10, gpus=1, limit=100.0):
    """Who starts, in order, on one GPU of a team that owns it: a sweep of
    ``tasks`` by alice at t=0 and ``others`` ((id, user, submit time)) of its
    team; each runs ``limit`` seconds."""
    policy = POLICIES["gpuhub"].with_(sweep_task_spacing=spacing)
    s = Scheduler([Node("n1", "a100", gpus)], [Team("t", {"a100": Quota(gpus, 0, 0)})], policy)
    for i in range(tasks):
        s.submit(Workload(f"s{i}", "t", "a100", 1, 0.0, user="alice", time_limit=limit,
                          sweep_index=i), 0.0)
    now, order = 0.0, []
    pending = sorted(others, key=lambda o: o[2])
    while len(order) < tasks + len(others):
        while pending and pending[0][2] <= now:
            wid, user, t = pending.pop(0)
            s.submit(Workload(wid, "t", "a100", 1, t, user=user, time_limit=limit), now)
        result = s.cycle(now)
        s.apply_result(result, now)
        started = [e.workload_id for e in result.events if e.type == ev.ADMITTED]
        order += started
        now += limit
        for wid in started:
            s.finished(wid, now)
    return order


@pytest.mark.parametrize("spacing,others,bob_starts", [
    # bob (same team) submits 150 s after a 10-task sweep: with 60 s spacing
    # he comes after the sweep's tasks 0-2 (ordered at 0, 60, 120 s) ...
    (60.0, [("bob", "bob", 150.0)], 3),
    # ... with no spacing, after all ten.
    (0.0, [("bob", "bob", 150.0)], 10),
    # alice's own later job interleaves with her sweep the same way.
    (60.0, [("mine", "alice", 150.0)], 3),
    # bob is not there yet when the GPU frees at 100 s: s1 takes it.
    (300.0, [("bob", "bob", 150.0)], 2),
])
def test_a_big_sweep_interleaves_with_its_teams_other_work(spacing, others, bob_starts):
    order = run_order(spacing, others)
    assert order.index(others[0][0]) == bob_starts


def test_a_sweep_is_not_starved_by_a_stream_of_later_jobs():
    """A job every 100 s after the sweep: the sweep's tasks keep their places
    (task k at k × 60 s), so the sweep finishes, interleaved."""
    others = [(f"j{k}", "bob", 100.0 * k + 1) for k in range(1, 12)]
    order = run_order(60.0, others)
    sweep_positions = [order.index(f"s{i}") for i in range(10)]
    assert sweep_positions == sorted(sweep_positions)
    assert max(sweep_positions) < len(order) - 1  # done before bob's stream is
    # Oldest order time first, whoever: s2 (120 s) after j1 (101 s), s3 (180 s) before j2 (201 s).
    assert order[:5] == ["s0", "s1", "j1", "s2", "s3"]
