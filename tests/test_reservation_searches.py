"""A reservation's search is kept from one cycle to the next while nothing
starts, ends or is set aside (``cycle.reserving.Searches``): the reserved
start is the same as a fresh search's, and a change of what runs where is
seen at once. (That every cycle decides as one without the kept searches
is checked on random clusters in ``test_scheduler_invariants.py``.)"""
from __future__ import annotations

import pytest

from gpuspawner.scheduler import POLICIES, Node, Quota, Scheduler, Team, Workload
from gpuspawner.scheduler.cycle import plan_cycle, reserving


@pytest.fixture
def searches(monkeypatch):
    """How many reservation searches the cycles make."""
    made = []
    search = reserving.find_reservation

    def counted(*args, **kwargs):
        made.append(args[0])
        return search(*args, **kwargs)
    monkeypatch.setattr(reserving, "find_reservation", counted)
    return made


def starts(result) -> dict[str, float]:
    return {r.workload_id: r.start for r in result.reservations}


@pytest.mark.parametrize("policy", ["backfill", "gpuhub"])
def test_a_held_reservation_is_found_again_without_a_search_until_something_ends(policy,
                                                                                 searches):
    s = Scheduler([Node("n0", "a100", 8)], [Team("ml", {"a100": Quota(16)})], POLICIES[policy])
    for wid, limit in (("short", 1000.0), ("long", 3000.0)):
        s.submit(Workload(wid, "ml", "a100", 4, 0.0, time_limit=limit), 0.0)
    s.step(0.0)
    s.submit(Workload("gang", "ml", "a100", 8, 10.0, time_limit=600.0), 10.0)
    assert starts(s.step(10.0)) == {"gang": 3000.0}
    assert len(searches) == 1

    # Submits change nothing that runs: the next cycles reserve the same
    # start without searching again.
    for i, t in enumerate((20.0, 30.0)):
        s.submit(Workload(f"later{i}", "ml", "a100", 8, t, time_limit=600.0), t)
        assert starts(s.step(t))["gang"] == 3000.0
    assert len(searches) == 1

    # One job ends early: its GPUs are free now, the gang's start is what is
    # left of the other job, found by a new search.
    s.finished("long", 500.0)
    assert starts(s.step(500.0))["gang"] == 1000.0
    assert len(searches) == 2
    fresh = plan_cycle(s.state, s.policy, 510.0, explain=False)
    assert starts(fresh)["gang"] == 1000.0
