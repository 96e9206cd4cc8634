"""Storage counted: the GB-month arithmetic as tables (a price change, no
measurement yet, a restart's gap), then against a real database (SQLite and
PostgreSQL): the measurements a dataset's and a space's walk record, kept
across a restart, a deleted dataset's charge ending, the usage report and
its CSV charging each team its storage to the cent, and the team's quota
counting its datasets."""
from __future__ import annotations

import csv
import io
import os
from types import SimpleNamespace

import pytest
from sqlalchemy import select

from gpuspawner.isolation.space_usage import Usage
from gpuspawner.service.access.identity import Identity
from gpuspawner.service.datasets.registry import Datasets
from gpuspawner.service.teams import accounting
from gpuspawner.service.teams.accounting import GB, MONTH, Measurement
from gpuspawner.service.teams.spaces import SpaceSync
from gpuspawner.service.teams.storage import DATASET, SPACE, StorageLedger
from gpuspawner.service.teams.usage import usage_report
from gpuspawner.store import StorageRow, Store

M = MONTH
T0 = 1_800_000_000.0
ALICE = Identity("alice", teams=frozenset({"vision"}), leads=frozenset({"vision"}),
                 can_submit=True)


def m(bytes_: float, since: float, item: str = "space:vision", team: str = "vision"):
    return Measurement(team, item, since, int(bytes_))


@pytest.mark.parametrize("measurements, window, prices, gb_months, cost", [
    pytest.param([m(100 * GB, 0)], (0, M), [(0, 0.02)], 100, 2.00, id="a month of 100 GB"),
    pytest.param([m(100 * GB, 0), m(300 * GB, M / 2)], (0, M), [(0, 0.02)], 50 + 150, 4.00,
                 id="each size held until the next measurement"),
    pytest.param([m(100 * GB, M / 2)], (0, M), [(0, 0.02)], 50, 1.00,
                 id="nothing before the first measurement"),
    pytest.param([], (0, M), [(0, 0.02)], 0, 0.0, id="no measurement: nothing"),
    # the service was down from 0.1 M to 0.9 M: the data stayed on disk
    pytest.param([m(100 * GB, 0), m(100 * GB, 0.9 * M)], (0, M), [(0, 0.02)], 100, 2.00,
                 id="a restart's gap is held at the last measurement"),
    pytest.param([m(100 * GB, -5 * M)], (0, M / 10), [(-9 * M, 0.02)], 10, 0.20,
                 id="a measurement before the window counts inside it only"),
    pytest.param([m(100 * GB, 0)], (0, M), [(0, 0.02), (M / 2, 0.04)], 100, 1.00 + 2.00,
                 id="a new price applies from when it was set"),
    pytest.param([m(100 * GB, 0)], (0, M), [(M / 4, 0.04)], 100, 3.00,
                 id="before the first price: free"),
    pytest.param([m(100 * GB, 0), m(0, M / 2)], (0, M), [(0, 0.02)], 50, 1.00,
                 id="a deleted dataset stops being charged"),
    pytest.param([m(10 * GB, 0), m(20 * GB, 0, item="dataset:imagenet")], (0, M), [(0, 0.5)],
                 30, 15.00, id="a team's space and datasets add up"),
])
def test_storage_is_gb_months_held_between_measurements(measurements, window, prices,
                                                        gb_months, cost):
    totals = accounting.storage_totals(measurements, *window, prices)
    if not measurements:
        assert totals == {}
        return
    assert totals["vision"].gb_months == pytest.approx(gb_months)
    assert totals["vision"].cost == pytest.approx(cost)


def test_storage_is_charged_to_each_items_team_and_rows_merge_it_per_team():
    storage = accounting.storage_totals(
        [m(2 * GB, 0), m(5 * GB, 0, item="dataset:census", team="nlp"), m(4 * GB, M / 2)],
        0, M, [(0, 1.0)])
    assert {t: (s.gb_months, s.bytes) for t, s in storage.items()} == \
        {"vision": (pytest.approx(3.0), 4 * GB), "nlp": (pytest.approx(5.0), 5 * GB)}
    gpu = accounting.totals([accounting.Interval("vision", "u", "", "a100", "job", 1, 0, 3600)],
                            ["team"], 0, M, {"a100": [(0, 2.0)]})
    rows = {r["team"]: r for r in accounting.rows(gpu, ["team"], storage)}
    # a team with storage only gets a row; the row's cost is GPUs' and storage's
    assert (rows["nlp"]["gpu_hours"], rows["nlp"]["storage_gb_months"], rows["nlp"]["cost"]) == \
        (0, 5.0, 5.0)
    assert (rows["vision"]["storage_cost"], rows["vision"]["cost"]) == (3.0, 5.0)
    # per user, storage (a team's) is not in the rows
    assert "storage_gb_months" not in accounting.rows(gpu, ["user"], storage)[0]


# ---- against the database ----------------------------------------------------------------

class Clock:
    def __init__(self, t: float):
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def world(db_url, tmp_path):
    """alice's workspace with a 3 MiB dataset folder; team vision's space."""
    store = Store(db_url)
    clock = Clock(T0)
    work = tmp_path / "workspaces" / "alice" / "imagenet"
    work.mkdir(parents=True)
    (work / "shard").write_bytes(os.urandom(3 << 20))
    space = tmp_path / "teams" / "vision"
    (space / "inside").mkdir(parents=True)
    (space / "inside" / "x").write_bytes(os.urandom(1 << 20))
    ledger = StorageLedger(store)  # the service's one, shared by the spaces and the datasets
    datasets = Datasets(SimpleNamespace(store=store, clock=clock),
                        SimpleNamespace(state=SimpleNamespace(capacity={"a100": 4})),
                        lambda: ["nlp", "vision"], lambda user: str(tmp_path / "workspaces" / user),
                        team_dir=lambda team: str(tmp_path / "teams" / team), ledger=ledger)
    yield SimpleNamespace(store=store, clock=clock, datasets=datasets, space=space,
                          ledger=ledger)
    store.close()


def test_a_submits_quota_check_reads_the_database_only_after_a_write(world):
    """Every submit asks what its team holds: asked again, the answer comes
    from memory; a measurement written makes the next ask read it anew."""
    ledger = world.ledger
    ledger.record(SPACE, "vision", "vision", Usage(5, 1, 0.1, 100.0))
    assert ledger.latest_of(SPACE, "vision").bytes == 5 and ledger.datasets_bytes("vision") == 0
    reads = []
    session = world.store.session
    world.store.session = lambda *a, **k: reads.append(1) or session(*a, **k)
    assert ledger.latest_of(SPACE, "vision").bytes == 5 and ledger.datasets_bytes("vision") == 0
    assert reads == []
    ledger.record(SPACE, "vision", "vision", Usage(9, 2, 0.1, 200.0))
    assert ledger.latest_of(SPACE, "vision").bytes == 9 and reads == [1]


def rows_of(store) -> list[tuple]:
    with store.session() as s:
        return [(r.kind, r.name, r.team, r.since, r.checked_at, r.charged)
                for r in s.scalars(select(StorageRow).order_by(StorageRow.id))]


def test_a_datasets_measurement_is_kept_in_the_database_and_outlives_a_restart(world, db_url):
    world.datasets.create(ALICE, {"name": "imagenet", "path": "imagenet"})
    world.datasets.measure_all()
    size = world.datasets.sizes["imagenet"]
    assert size.bytes >= 3 << 20 and size.files == 1 and size.measured_at == T0
    world.clock.t = T0 + 300
    world.datasets.measure_all()  # the same numbers: the row is confirmed, not repeated
    assert rows_of(world.store) == [("dataset", "imagenet", "vision", T0, T0 + 300, True)]
    # a restart: a new service on the same database knows what was measured, and when
    again = Store(db_url)
    try:
        kept = StorageLedger(again).latest(DATASET)["imagenet"]
        assert (kept.bytes, kept.files, kept.measured_at) == (size.bytes, 1, T0 + 300)
    finally:
        again.close()
    # deleted: its charge ends then (its folder stays: nothing is deleted)
    world.clock.t = T0 + 600
    world.datasets.delete(ALICE, "imagenet")
    assert world.datasets.sizes["imagenet"].bytes == 0
    assert (world.space.parent.parent / "workspaces" / "alice" / "imagenet" / "shard").exists()


def test_a_dataset_inside_its_teams_space_or_another_dataset_is_not_charged_twice(world):
    world.datasets.create(ALICE, {"name": "inside", "path": str(world.space / "inside")})
    world.datasets.create(ALICE, {"name": "imagenet", "path": "imagenet"})
    world.datasets.create(ALICE, {"name": "again", "path": "imagenet"})  # the same folder
    world.datasets.measure_all()
    assert world.datasets.sizes["inside"].bytes >= 1 << 20
    assert {name: charged for _, name, _, _, _, charged in rows_of(world.store)} == \
        {"inside": False, "again": True, "imagenet": False}
    assert world.ledger.datasets_bytes("vision") == world.datasets.sizes["imagenet"].bytes


def test_the_usage_report_and_csv_charge_each_teams_storage_to_the_cent(world):
    world.ledger.set_price(0.02, T0 - 1)
    # vision: a space of 100 GB all month, 300 GB from the middle; nlp: a 50 GB dataset
    world.ledger.record(SPACE, "vision", "vision", Usage(100 * 10**9, 10, 0.1, T0))
    world.ledger.record(DATASET, "census", "nlp", Usage(50 * 10**9, 5, 0.1, T0))
    world.ledger.record(SPACE, "vision", "vision", Usage(300 * 10**9, 12, 0.1, T0 + M / 2))
    with world.store.session() as s:
        report = usage_report(s, T0, T0 + M, T0 + M, "team", None)
        nlp_only = usage_report(s, T0, T0 + M, T0 + M, "team", ["nlp"])
        halfway = usage_report(s, T0, T0 + M, T0 + M / 4, "team", None)
    rows = {r["team"]: r for r in report["rows"]}
    assert (rows["vision"]["storage_gb_months"], rows["vision"]["storage_cost"]) == (200, 4.00)
    assert (rows["nlp"]["storage_gb_months"], rows["nlp"]["cost"]) == (50, 1.00)
    assert report["storage"]["total_cost"] == 5.00 and report["total_cost"] == 5.00
    assert report["storage"]["price_per_gb_month"] == 0.02
    assert {r["team"]: r["bytes"] for r in report["storage"]["rows"]} == \
        {"vision": 300 * 10**9, "nlp": 50 * 10**9}
    # a lead sees her teams' storage only; storage is charged up to now, not the window's end
    assert [r["team"] for r in nlp_only["rows"]] == ["nlp"]
    assert halfway["storage"]["total_gb_months"] == pytest.approx((100 + 50) / 4)
    table = list(csv.DictReader(io.StringIO(accounting.to_csv(report["rows"], ["team"], "EUR"))))
    assert [(r["team"], r["storage_gb_months"], r["storage_cost_EUR"], r["cost_EUR"])
            for r in table] == [("vision", "200.0000", "4.00", "4.00"),
                                ("nlp", "50.0000", "1.00", "1.00")]


def test_a_new_storage_price_is_recorded_once_and_never_reprices_before_it(world):
    assert world.ledger.set_price(0.02, T0) is True
    assert world.ledger.set_price(0.02, T0 + 10) is False  # a restart with the same price
    world.ledger.record(SPACE, "vision", "vision", Usage(10**12, 1, 0.1, T0))
    assert world.ledger.set_price(0.10, T0 + M / 2) is True
    with world.store.session() as s:
        report = usage_report(s, T0, T0 + M, T0 + M, "team", None)
    # 1000 GB: half a month at 0.02, half at 0.10
    assert report["storage"]["total_cost"] == 10.00 + 50.00


def test_a_teams_datasets_count_against_its_storage_quota(world):
    sync = SpaceSync(SimpleNamespace(path=lambda team: str(world.space)), None,
                     members_of=None, teams=lambda: ["vision"], ledger=world.ledger,
                     quota_of=lambda team: 10 << 20)
    sync.applied["vision"] = ("alice",)
    sync.measure_all()
    view = sync.storage_view("vision")
    assert view["state"] == "ok" and view["datasets_bytes"] == 0 and sync.refusal("vision") is None
    world.datasets.create(ALICE, {"name": "imagenet", "path": "imagenet"})
    (world.space.parent.parent / "workspaces" / "alice" / "imagenet" / "more").write_bytes(
        os.urandom(6 << 20))
    world.datasets.measure_all()
    view = sync.storage_view("vision")
    assert view["used_bytes"] == view["space_bytes"] + view["datasets_bytes"] >= 10 << 20
    assert view["state"] == "full"
    assert "space and datasets hold" in sync.refusal("vision")
    assert "nothing was deleted" in sync.refusal("vision")
