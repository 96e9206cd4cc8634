"""Expected start times in the service, on a scripted clock: the engine with
a real database (SQLite and PostgreSQL) and a backend that runs nothing, so
that the test says when each job ends. What a user sees is
``expected_start`` in the API's view of a queued workload."""
from __future__ import annotations

import gc
import sys

import pytest

from gpuspawner.backends.base import EXITED, AttemptExit, Backend
from gpuspawner.scheduler.model import Node, Quota
from gpuspawner.scheduler.policy import get_policy
from gpuspawner.service.loop.config import EngineConfig
from gpuspawner.service.loop.engine import Engine
from gpuspawner.service.workloads.operations import set_team
from gpuspawner.service.loop.launch import LocalNode
from gpuspawner.service.access.identity import Identity
from gpuspawner.vocab.specs import parse_job
from gpuspawner.service.workloads.views import iso
from gpuspawner.store import Store, WorkloadRow

H = 3600.0
ALICE = Identity("alice", teams=frozenset({"a"}), can_submit=True)
BOB = Identity("bob", teams=frozenset({"b"}), can_submit=True)


class Clock:
    def __init__(self, t: float = 1_800_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


class Scripted(Backend):
    """Starts nothing; an attempt ends when the test says (``end``)."""

    def __init__(self):
        self.running: dict[str, int] = {}
        self.exits: list[AttemptExit] = []

    def start(self, spec):
        self.running[spec.workload_id] = spec.attempt

    def stop(self, wid, attempt, grace):
        self.running.pop(wid, None)

    def kill(self, wid, attempt):
        self.running.pop(wid, None)

    def recover(self, specs):
        return []

    def poll(self):
        out, self.exits = self.exits, []
        return out

    def end(self, wid: str, now: float) -> None:
        self.exits.append(AttemptExit(wid, self.running.pop(wid), EXITED, 0, now))


def make_engine(url, tmp_path, clock, **config):
    store = Store(url)
    engine = Engine(store, Scripted(), [LocalNode(Node("host", "default", 4), [0, 1, 2, 3])],
                    get_policy("gpuhub"), EngineConfig(data_dir=str(tmp_path), **config),
                    clock=clock)
    engine.start()
    for team in ("a", "b"):
        set_team(engine.steering, Identity("root", admin=True), team, None,
                        {"default": Quota(nominal=2, borrowing_limit=2)})
    return engine


def job(gpus: int, limit: float, name: str = "train"):
    return parse_job({"command": [sys.executable, "train.py"], "gpus": gpus, "pool": "default",
                      "time_limit": limit, "name": name})


def expected(engine, wid):
    return engine.estimates.view(wid)


def test_a_queued_job_shows_when_it_starts_and_the_estimate_moves_when_work_ends_early(
        db_url, tmp_path):
    clock = Clock()
    t0 = clock.t
    engine = make_engine(db_url, tmp_path, clock)
    r1 = engine.submit(BOB, job(2, 2 * H)).id
    r2 = engine.submit(ALICE, job(2, 3 * H)).id
    engine.tick()
    clock.t += 60
    w = engine.submit(ALICE, job(4, H)).id   # the full pool, after both
    engine.tick()
    view = expected(engine, w)
    # No history yet: running work ends at its time limit, the range is the prior.
    assert view["time"] == iso(t0 + 3 * H) and view["basis"] == "rollout"  # the policy run forward
    assert view["calibrated_on"] == 0
    assert view["text"].startswith("expected to start in ~3 h")
    with engine.store.session() as s:
        row = s.get(WorkloadRow, w)
        assert (row.estimated_start, row.estimate_made_at) == (t0 + 3 * H, t0 + 60)
    # alice's long job ends early: only bob's stands in the way now.
    clock.t += 600
    engine.backend.end(r2, clock.t)
    engine.tick()
    assert expected(engine, w)["time"] == iso(t0 + 2 * H)
    # The first estimate persisted is kept, later ones are not written over it.
    with engine.store.session() as s:
        assert s.get(WorkloadRow, w).estimated_start == t0 + 3 * H
    engine.backend.end(r1, clock.t + 1)
    clock.t += 1
    engine.tick()
    assert expected(engine, w) is None  # it runs: nothing to estimate
    engine.store.close()


@pytest.mark.parametrize("rollout_pending, basis", [(300, "rollout"), (1, "plan"), (0, "plan")])
def test_the_operator_bounds_the_queue_the_policy_is_run_forward_for(db_url, tmp_path,
                                                                     rollout_pending, basis):
    """``GpuHubService.estimate_rollout_pending``: with more queued than
    that, the estimate is the plan's (the same start here)."""
    clock = Clock()
    t0 = clock.t
    engine = make_engine(db_url, tmp_path, clock, estimate_rollout_pending=rollout_pending)
    engine.submit(BOB, job(4, 2 * H)).id
    engine.tick()
    waits = []
    for _ in range(2):
        clock.t += 1  # one after the other: the order does not come down to their ids
        waits.append(engine.submit(ALICE, job(4, H)).id)
    engine.tick()
    assert [(expected(engine, w)["time"], expected(engine, w)["basis"]) for w in waits] == [
        (iso(t0 + 2 * H), basis), (iso(t0 + 3 * H), basis)]
    engine.store.close()


def test_learned_run_times_and_calibration_survive_a_restart(db_url, tmp_path):
    clock = Clock()
    engine = make_engine(db_url, tmp_path, clock)
    # alice's "train" jobs run a quarter of their 4 h limit, one after the other
    # behind a job that holds the rest of the pool.
    engine.submit(BOB, job(2, 100 * H, name="hold")).id
    from gpuspawner.scheduler.forecast.calibration import MIN_SAMPLES
    for _ in range(MIN_SAMPLES + 1):
        first = engine.submit(ALICE, job(2, 4 * H)).id
        engine.tick()
        waiting = engine.submit(ALICE, job(2, 4 * H)).id
        engine.tick()
        clock.t += H
        engine.backend.end(first, clock.t)
        engine.tick()  # the waiting one starts: its estimate is judged
        clock.t += 1
        engine.backend.end(waiting, clock.t)
        engine.tick()
    engine.store.close()
    restarted = make_engine(db_url, tmp_path, clock)
    running = restarted.submit(ALICE, job(2, 4 * H)).id
    restarted.tick()
    queued = restarted.submit(ALICE, job(2, 4 * H)).id
    restarted.tick()
    view = expected(restarted, queued)
    # alice's "train" runs 1 h of its 4: the running one is expected to end
    # in about an hour, not at its limit.
    assert restarted.estimates.planned(queued) == pytest.approx(clock.t + H, abs=2)
    # Once the run times were learned, each waited as planned: the median
    # error is none and no start came later than planned; the first few, planned
    # at the 4 h limit, started at 1 h, which is what the range's low end says.
    assert view["calibrated_on"] == MIN_SAMPLES + 1
    planned = iso(restarted.estimates.planned(queued))
    assert view["time"] == view["latest"] == planned
    assert view["earliest"] < planned
    assert running in restarted.backend.running
    restarted.store.close()


def _tracked_by(make) -> int:
    """How many more objects the garbage collector tracks while what
    ``make()`` returns is alive."""
    gc.collect()
    before = len(gc.get_objects())
    made = make()
    gc.collect()
    grown = len(gc.get_objects()) - before
    made.store.close()
    return grown


def test_each_queued_workload_is_one_object_in_a_full_garbage_collection(tmp_path):
    """A full collection stops the event loop for as long as it walks every
    object the collector tracks: with 100,000 queued, what each queued
    workload adds to that walk is what an API request behind it waits.
    Restarted with 100 and with 700 queued (each with its start estimate),
    the 600 more cost the collector one object each (its ``Workload``), not
    one per estimate, range and empty set beside it."""
    clock = Clock()
    urls = {}
    for queued in (100, 700):
        url = f"sqlite:///{tmp_path}/q{queued}.sqlite"
        engine = make_engine(url, tmp_path, clock)
        engine.submit(BOB, job(4, 100 * H, name="hold"))
        engine.tick()
        for _ in range(queued):
            engine.submit(ALICE, job(1, H))
        engine.store.close()
        urls[queued] = url

    def restarted(url):
        def make():
            engine = make_engine(url, tmp_path, clock)
            engine.tick()
            assert len(engine.estimates.current) == len(engine.scheduler.state.pending)
            return engine
        return make

    _tracked_by(restarted(urls[100]))  # the first engine's imports and caches
    small = _tracked_by(restarted(urls[100]))
    large = _tracked_by(restarted(urls[700]))
    # (what else grows is the database layer's statement caches: ~0.15 an item)
    assert (large - small) / 600 <= 1.5, (small, large)
