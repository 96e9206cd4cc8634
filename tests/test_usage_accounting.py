"""Usage and cost: the arithmetic as tables, then a scripted set of jobs with
known run times through the real engine and database (a scripted clock and
backend stand in for time and processes), checked to the second and the cent,
and the CSV checked against the report."""
from __future__ import annotations

import csv
import io
import sys

import pytest

from gpuspawner.backends.base import EXITED, STOPPED, AttemptExit, Backend
from gpuspawner.scheduler.model import Node, Quota
from gpuspawner.scheduler.policy import get_policy
from gpuspawner.service.teams import accounting
from gpuspawner.service.workloads import operations as ops
from gpuspawner.service.teams.accounting import Interval
from gpuspawner.service.loop.config import EngineConfig
from gpuspawner.service.loop.engine import Engine
from gpuspawner.service.loop.launch import LocalNode
from gpuspawner.service.access.identity import Identity
from gpuspawner.vocab.specs import parse_job
from gpuspawner.service.teams.usage import usage_report
from gpuspawner.store import PoolRow, Store

H = 3600.0


def iv(team, gpus, start, end, pool="a100", user="u", kind="job", project=""):
    return Interval(team, user, project, pool, kind, gpus, start, end)


@pytest.mark.parametrize(
    "intervals, window, keys, expected",
    [
        pytest.param([iv("a", 2, 0, H)], (0, H), ["team"], {("a",): 2 * H}, id="whole"),
        pytest.param([iv("a", 2, 0, H)], (H / 2, 2 * H), ["team"], {("a",): H}, id="clipped-start"),
        pytest.param([iv("a", 1, 0, H)], (2 * H, 3 * H), ["team"], {}, id="outside"),
        pytest.param([iv("a", 1, 0, H), iv("b", 4, 0, 60), iv("a", 1, 0, 30)], (0, H),
                     ["team"], {("a",): H + 30, ("b",): 240}, id="per-team"),
        pytest.param([iv("a", 1, 0, 10, pool="t4"), iv("a", 1, 0, 10)], (0, H),
                     ["team", "pool"], {("a", "a100"): 10, ("a", "t4"): 10}, id="two-keys"),
    ],
)
def test_totals_count_overlap_with_the_window(intervals, window, keys, expected):
    got = accounting.totals(intervals, keys, *window, prices={})
    assert {k: t.gpu_seconds for k, t in got.items()} == expected


@pytest.mark.parametrize(
    "intervals, prices, cost",
    [
        pytest.param([iv("a", 2, 0, H)], {"a100": [(0, 2.5)]}, 5.0, id="two-gpu-hours"),
        pytest.param([iv("a", 1, 0, H, pool="t4"), iv("a", 1, 0, H)],
                     {"a100": [(0, 3)], "t4": [(0, 0.5)]}, 3.5, id="price-per-pool"),
        pytest.param([iv("a", 8, 0, 90)], {}, 0.0, id="unpriced-pool-is-free"),
        # a new price applies from when it was set: the first hour keeps the old one
        pytest.param([iv("a", 2, 0, 3 * H)], {"a100": [(0, 1.0), (H, 4.0)]}, 2 + 16,
                     id="price-change-mid-interval"),
        pytest.param([iv("a", 1, 0, 2 * H)], {"a100": [(0, 1.0), (H, 4.0), (1.5 * H, 2.0)]},
                     1 + 2 + 1, id="two-changes"),
        pytest.param([iv("a", 1, 0, 2 * H)], {"a100": [(H, 6.0)]}, 6.0,
                     id="before-the-first-price-is-free"),
        pytest.param([iv("a", 1, 0, 20 * H)], {"a100": [(0, 1.0), (30 * H, 9.0)]}, 10.0,
                     id="window-clips-before-a-later-price"),
    ],
)
def test_cost_is_gpu_hours_times_the_pools_price(intervals, prices, cost):
    [total] = accounting.totals(intervals, ["team"], 0, 10 * H, prices).values()
    assert total.cost == pytest.approx(cost)


@pytest.mark.parametrize("cpus, memory_gib, seconds, window, prices, cpu_hours, gib_hours, cost", [
    pytest.param(1.0, 8.0, H, (0, 10 * H), accounting.ResourcePrices(), 1.0, 8.0, 0.0,
                 id="counted, not charged by default"),
    pytest.param(2.0, 16.0, 2 * H, (0, 10 * H), accounting.ResourcePrices(0.05, 0.01),
                 4.0, 32.0, 4 * 0.05 + 32 * 0.01, id="priced per CPU-hour and GiB-hour"),
    pytest.param(0.5, 2.0, 4 * H, (H, 2 * H), accounting.ResourcePrices(0.10, 0.0),
                 0.5, 2.0, 0.05, id="only the window's overlap"),
    pytest.param(0.0, 0.0, H, (0, 10 * H), accounting.ResourcePrices(1.0, 1.0), 0.0, 0.0, 0.0,
                 id="stored before requests: nothing"),
])
def test_cpu_hours_and_memory_gib_hours_are_counted_and_priced_beside_gpu_hours(
        cpus, memory_gib, seconds, window, prices, cpu_hours, gib_hours, cost):
    interval = Interval("a", "u", "", "a100", "job", 0, 0, seconds, 0.0, cpus, memory_gib)
    table = accounting.totals([interval], ["team"], *window, prices={"a100": [(0, 2.0)]},
                              resource_prices=prices)
    [row] = accounting.rows(table, ["team"])
    assert (row["gpu_hours"], row["cpu_hours"], row["memory_gib_hours"]) == \
        (0, cpu_hours, gib_hours)
    assert row["cost"] == pytest.approx(cost)


def test_the_csv_has_cpu_hours_and_memory_gib_hours_columns():
    table = accounting.totals([Interval("a", "u", "", "a100", "job", 1, 0, H, 0.0, 2.0, 8.0)],
                              ["team"], 0, H, prices={})
    [line] = csv.DictReader(io.StringIO(accounting.to_csv(accounting.rows(table, ["team"]),
                                                          ["team"], "EUR")))
    assert (line["gpu_hours"], line["cpu_hours"], line["memory_gib_hours"], line["cost_EUR"]) == \
        ("1.0000", "2.0000", "8.0000", "0.00")


@pytest.mark.parametrize("span, bucket", [(H, H), (2 * 86400, H), (3 * 86400, 86400),
                                          (90 * 86400, 7 * 86400)])
def test_bucket_size_follows_the_span(span, bucket):
    assert accounting.bucket_for(span) == bucket


def test_series_buckets_add_up_to_the_totals():
    intervals = [iv("a", 2, 1800, 3 * H + 600), iv("b", 1, 0, 10 * H), iv("a", 3, 9 * H, 11 * H)]
    start, end = 0.0, 10 * H
    starts, values = accounting.series(intervals, "team", start, end, H)
    assert starts == [k * H for k in range(10)]
    assert values["a"][0] == pytest.approx(1.0)      # 2 GPUs × half an hour
    assert values["a"][3] == pytest.approx(2 * 600 / H)
    totals = accounting.totals(intervals, ["team"], start, end, {})
    for team, hours in values.items():
        assert sum(hours) * H == pytest.approx(totals[(team,)].gpu_seconds)


def test_group_by_names_the_unknown_key():
    with pytest.raises(ValueError, match="unknown grouping 'colour'"):
        accounting.totals([], ["team", "colour"], 0, 1, {})


def test_culled_idle_gpu_hours_from_audit_details():
    culls = [{"gpu_count": 2, "gpu_idle_s": 1800}, {"gpu_count": 0, "idle_s": 99999},
             {"gpu_count": 1, "gpu_idle_s": 3600}, {"reason": "max age"},
             # A quarter share of one GPU idle for 4 h: one GPU-hour.
             {"gpu_count": 1, "gpu_units": 0.25, "gpu_idle_s": 4 * 3600}]
    assert accounting.culled_idle_gpu_hours(culls) == (3, 3.0)


# ---- through the engine --------------------------------------------------------------------

class Clock:
    def __init__(self, t: float):
        self.t = t

    def __call__(self) -> float:
        return self.t


class ScriptedBackend(Backend):
    """Starts nothing; a job "exits" when the test says so."""

    def __init__(self, clock: Clock):
        self.clock = clock
        self.started: set[tuple[str, int]] = set()
        self.exits: list[AttemptExit] = []

    def start(self, spec):
        self.started.add((spec.workload_id, spec.attempt))

    def finish(self, wid: str, attempt: int = 0, code: int = 0):
        self.exits.append(AttemptExit(wid, attempt, EXITED, code, self.clock()))

    def poll(self):
        out, self.exits = self.exits, []
        return out

    def stop(self, wid, attempt, grace):
        self.exits.append(AttemptExit(wid, attempt, STOPPED, -15, self.clock()))

    kill = stop

    def recover(self, specs):
        return []


ADMIN = Identity("root", admin=True, can_submit=True)
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def person(name, team):
    return Identity(name, teams=frozenset({team}), can_submit=True)


@pytest.fixture
def engine(db_url, tmp_path):
    clock = Clock(T0)
    nodes = [LocalNode(Node("h1", "a100", 4), [0, 1, 2, 3]),
             LocalNode(Node("h2", "t4", 2), [4, 5])]
    store = Store(db_url)
    engine = Engine(store, ScriptedBackend(clock), nodes, get_policy("gpuhub"),
                    EngineConfig(data_dir=str(tmp_path), default_quota=Quota(0, None, None)),
                    clock=clock)
    engine.start()
    for pool, price in (("a100", 2.40), ("t4", 0.35)):
        with store.transaction() as s:
            s.merge(PoolRow(name=pool))
        ops.set_price(engine.steering, ADMIN, pool, price)
    yield engine
    store.close()


def run_job(engine: Engine, who: Identity, gpus: int, pool: str, start: float, seconds: float,
            project: str = "") -> str:
    """Submit at ``start`` (the GPUs are free), run exactly ``seconds``."""
    engine.clock.t = start
    body = {"command": [sys.executable, "-c", "pass"], "gpus": gpus, "pool": pool}
    if project:
        body["project"] = project
    wid = engine.submit(who, parse_job(body)).id
    engine.tick()
    assert (wid, 0) in engine.backend.started
    engine.clock.t = start + seconds
    engine.backend.finish(wid)
    engine.tick()
    return wid


def test_scripted_jobs_give_gpu_hours_and_cost_to_the_second(engine):
    alice, bob, carol = person("alice", "vision"), person("bob", "vision"), person("carol", "nlp")
    # (who, gpus, pool, start offset, run seconds)
    script = [(alice, 2, "a100", 0, 5400), (bob, 1, "a100", 600, 1801), (carol, 1, "t4", 0, 7200),
              (carol, 2, "a100", 7200, 3600), (alice, 1, "t4", 9000, 61)]
    for who, gpus, pool, offset, seconds in script:
        run_job(engine, who, gpus, pool, T0 + offset, seconds, project="resnet" if who is alice else "")
    engine.clock.t = T0 + 86400
    with engine.store.session() as s:
        by_team = usage_report(s, T0, T0 + 86400, engine.clock(), "team", None)
        by_user_pool = usage_report(s, T0, T0 + 86400, engine.clock(), "user,pool", None)
        clipped = usage_report(s, T0 + 1800, T0 + 3600, engine.clock(), "team", None)
    rows = {r["team"]: r for r in by_team["rows"]}
    # vision: 2×5400 + 1×1801 on a100, 1×61 on t4
    assert rows["vision"]["gpu_seconds"] == 2 * 5400 + 1801 + 61
    assert rows["vision"]["cost"] == round((2 * 5400 + 1801) / H * 2.40 + 61 / H * 0.35, 2)
    # nlp: 1×7200 on t4, 2×3600 on a100
    assert rows["nlp"]["gpu_seconds"] == 7200 + 7200
    assert rows["nlp"]["cost"] == round(7200 / H * 0.35 + 7200 / H * 2.40, 2) == 5.50
    assert by_team["total_gpu_seconds"] == 12662 + 14400
    cells = {(r["user"], r["pool"]): r["gpu_seconds"] for r in by_user_pool["rows"]}
    assert cells == {("alice", "a100"): 10800, ("alice", "t4"): 61, ("bob", "a100"): 1801,
                     ("carol", "t4"): 7200, ("carol", "a100"): 7200}
    # a window in the middle counts only the overlap: 30 min of alice's 2 GPUs,
    # bob's 1 GPU from 1800 s to 2401 s, carol's t4 GPU for 30 min
    clipped_rows = {r["team"]: r["gpu_seconds"] for r in clipped["rows"]}
    assert clipped_rows == {"vision": 2 * 1800 + 601, "nlp": 1800}
    # the CSV carries exactly the report's numbers
    table = list(csv.DictReader(io.StringIO(accounting.to_csv(by_team["rows"], ["team"], "USD"))))
    assert [(r["team"], float(r["gpu_seconds"]), float(r["cost_USD"])) for r in table] == \
        [(r["team"], r["gpu_seconds"], r["cost"]) for r in by_team["rows"]]


def test_a_new_price_applies_from_when_it_is_set_and_history_keeps_its_price(engine):
    alice = person("alice", "vision")
    engine.clock.t = T0
    wid = engine.submit(alice, parse_job({"command": ["true"], "gpus": 2, "pool": "a100"})).id
    engine.tick()
    engine.clock.t = T0 + H
    ops.set_price(engine.steering, ADMIN, "a100", 4.00)
    engine.clock.t = T0 + 2 * H
    engine.backend.finish(wid)
    engine.tick()
    with engine.store.session() as s:
        report = usage_report(s, T0, T0 + 86400, engine.clock(), "team", None)
        first_hour = usage_report(s, T0, T0 + H, engine.clock(), "team", None)
    # 2 GPU-hours at 2.40, then 2 at 4.00; the report shows today's price
    assert report["rows"][0]["cost"] == 2 * 2.40 + 2 * 4.00
    assert report["prices"]["a100"] == 4.00
    assert first_hour["rows"][0]["cost"] == 2 * 2.40


def test_running_attempts_count_up_to_now(engine):
    alice = person("alice", "vision")
    engine.clock.t = T0
    wid = engine.submit(alice, parse_job({"command": ["true"], "gpus": 3, "pool": "a100"})).id
    engine.tick()
    engine.clock.t = T0 + 100
    with engine.store.session() as s:
        report = usage_report(s, T0, T0 + 1000, engine.clock(), "team", None)
    assert report["rows"][0]["gpu_seconds"] == 300
    engine.backend.finish(wid)
    engine.tick()


def test_a_cpu_only_jobs_usage_shows_its_cpu_hours_and_memory_and_their_cost(engine):
    """bob's 0-GPU job with 2 CPUs and 4G for half an hour: 1 CPU-hour and
    2 GiB-hours, on the usage report and in its cost, while it runs and
    after it ended."""
    bob = person("bob", "vision")
    engine.clock.t = T0
    wid = engine.submit(bob, parse_job({"command": ["true"], "gpus": 0, "pool": "a100",
                                        "cpus": 2, "memory": "4G"})).id
    engine.tick()
    prices = accounting.ResourcePrices(cpu_hour=0.10, memory_gib_hour=0.01)
    engine.clock.t = T0 + 900
    with engine.store.session() as s:
        running = usage_report(s, T0, T0 + H, engine.clock(), "user", None,
                               resource_prices=prices)
    engine.clock.t = T0 + 1800
    engine.backend.finish(wid)
    engine.tick()
    with engine.store.session() as s:
        ended = usage_report(s, T0, T0 + H, engine.clock(), "user", None, resource_prices=prices)
    assert (running["rows"][0]["cpu_hours"], running["rows"][0]["memory_gib_hours"]) == (0.5, 1.0)
    [row] = ended["rows"]
    assert (row["user"], row["gpu_hours"], row["cpu_hours"], row["memory_gib_hours"]) == \
        ("bob", 0, 1.0, 2.0)
    assert row["cost"] == 0.12 and ended["total_cpu_hours"] == 1.0
    assert ended["total_memory_gib_hours"] == 2.0 and ended["cpu_hour_price"] == 0.10
