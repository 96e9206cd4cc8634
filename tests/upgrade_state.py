"""Live state as a running service leaves it, for the upgrade tests: made by
the service's own code (engine, sweeps, schedules, deployments, admin
operations) on a real database, then read back as plain rows, so that any
earlier schema can be given the part of it that schema can hold.

``make_live_state`` leaves, on 4 GPUs and two teams: a running 2-GPU job
(with its allocations), a running 0-GPU job, a queued job, a job held by an
admin, finished, failed and cancelled jobs, a notebook server's GPU, a
sweep (tasks running and waiting), a schedule that fired, a deployment
whose replica runs, and the audit entries of all of that."""
from __future__ import annotations

import asyncio
import datetime as dt
import os
import shutil
import sys
from typing import Any

from sqlalchemy import MetaData, select, text
from sqlalchemy.engine import Connection

from gpuspawner.backends.base import EXITED, AttemptExit
from gpuspawner.scheduler.model import Node, Quota
from gpuspawner.scheduler.policy import get_policy
from gpuspawner.service.serving.deployments import parse_deploy
from gpuspawner.service.loop.config import EngineConfig
from gpuspawner.service.loop.engine import Engine
from gpuspawner.service.access.identity import Identity
from gpuspawner.service.loop.launch import LocalNode
from gpuspawner.service.workloads.operations import hold, set_price, set_team
from gpuspawner.service.schedules.schedules import Schedules
from gpuspawner.service.wiring import serving_controller
from gpuspawner.vocab.specs import Limits, parse_job, parse_workload
from gpuspawner.service.sweeps import sweeps
from gpuspawner.vocab.sweeps import parse_sweep
from gpuspawner.service.wiring import record_nodes
from gpuspawner.store import Store, WorkloadRow

from test_start_estimates_service import Clock, Scripted

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALICE = Identity("alice", teams=frozenset({"vision"}), can_submit=True)
BOB = Identity("bob", teams=frozenset({"vision"}), can_submit=True)
CAROL = Identity("carol", teams=frozenset({"nlp"}), can_submit=True)
ADMIN = Identity("root", admin=True, can_submit=True)
HUB = Identity("hub", admin=True, can_submit=True)  # the spawner's own identity
START = dt.datetime(2026, 11, 30, 9, 0, tzinfo=dt.timezone.utc).timestamp()


def make_engine(url: str, data_dir: str, clock: Clock, backend=None) -> Engine:
    engine = Engine(Store(url), backend or Scripted(),
                    [LocalNode(Node("host", "default", 4), [0, 1, 2, 3])],
                    get_policy("gpuhub"), EngineConfig(data_dir=data_dir), clock=clock)
    engine.start()
    return engine


def job(gpus: int, name: str, seconds: float = 3600.0, **extra) -> Any:
    return parse_job({"command": [sys.executable, "train.py"], "gpus": gpus,
                      "pool": "default", "name": name, "time_limit": seconds,
                      "env": {"RUN": name}, **extra})


def end(engine: Engine, wid: str, code: int) -> None:
    with engine.store.session() as s:
        attempt = s.get(WorkloadRow, wid).attempt
    engine.backend.running.pop(wid, None)
    engine.backend.exits.append(AttemptExit(wid, attempt, EXITED, code, engine.clock()))


def make_live_state(url: str, data_dir: str) -> dict[str, str]:
    """Fill the database at ``url``; returns the workloads' ids by role."""
    clock = Clock(START)
    engine = make_engine(url, data_dir, clock)
    record_nodes(engine.store, list(engine.nodes.values()), "declared")
    set_price(engine.steering, ADMIN, "default", 2.5)
    for team in ("vision", "nlp"):
        set_team(engine.steering, ADMIN, team, None, {"default": Quota(nominal=2, borrowing_limit=2)})
    ids: dict[str, str] = {}
    ids["succeeded"] = engine.submit(BOB, job(1, "short")).id
    ids["failed"] = engine.submit(CAROL, job(1, "crash")).id
    engine.tick()
    clock.t += 600
    end(engine, ids["succeeded"], 0)
    end(engine, ids["failed"], 1)
    engine.tick()
    clock.t += 60
    ids["running_2gpu"] = engine.submit(ALICE, job(2, "train-resnet")).id
    ids["running_cpu"] = engine.submit(BOB, job(0, "preprocess")).id
    ids["notebook"] = engine.submit(HUB, parse_workload(
        {"kind": "notebook", "team": "nlp", "gpus": 1, "pool": "default"}),
        on_behalf_of="carol").id
    engine.tick()
    clock.t += 60
    ids["queued"] = engine.submit(CAROL, job(4, "big-sweep-base")).id
    ids["held"] = engine.submit(BOB, job(2, "over-quota")).id
    hold(engine.steering, ADMIN, ids["held"])
    ids["cancelled"] = engine.submit(ALICE, job(1, "oops")).id
    engine.cancel(ALICE, ids["cancelled"])
    sweep = sweeps.submit(engine.facades, ALICE, parse_sweep(
        {"name": "lr", "grid": {"lr": [0.1, 0.01]}, "max_running": 1,
         "template": {"command": [sys.executable, "train.py", "--lr", "{lr}"],
                      "gpus": 1, "pool": "default"}}))
    ids["sweep"] = sweep.id
    schedules = Schedules(engine.records, engine.submissions, Limits, 60.0)
    sched = schedules.create(CAROL, {"name": "nightly", "cron": "*/5 * * * *",
                                     "spec": {"command": [sys.executable, "eval.py"],
                                              "gpus": 1, "pool": "default"}})
    clock.t += 600
    schedules.fire_due()
    ids["schedule"] = sched.id
    model = os.path.join(engine.launcher.workspace("alice"), "iris")
    shutil.copytree(os.path.join(ROOT, "examples", "serving", "iris"), model,
                    dirs_exist_ok=True)
    controller = serving_controller(engine)
    dep, _ = controller.deployments.deploy(ALICE, parse_deploy(
        {"name": "iris", "model_dir": "iris", "gpus": 0}, "default"))
    ids["deployment"] = str(dep.id)
    asyncio.run(controller.reconcile())
    engine.tick()
    clock.t += 60
    engine.tick()
    engine.store.close()
    return ids


# ---- rows ---------------------------------------------------------------------------------
def read_rows(conn: Connection) -> dict[str, list[dict]]:
    """Every table's rows (but alembic's), in primary-key order."""
    meta = MetaData()
    meta.reflect(conn)
    out = {}
    for table in meta.sorted_tables:
        if table.name == "alembic_version":
            continue
        order = list(table.primary_key.columns) or list(table.columns)
        out[table.name] = [dict(r._mapping) for r in conn.execute(select(table).order_by(*order))]
    return out


def write_rows(conn: Connection, rows: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """Insert into the schema ``conn`` has the part of ``rows`` it can hold:
    its tables, its columns. Returns what was written, to compare with."""
    meta = MetaData()
    meta.reflect(conn)
    written = {}
    for table in meta.sorted_tables:
        if table.name == "alembic_version":
            continue
        columns = set(table.columns.keys())
        part = [{k: v for k, v in r.items() if k in columns} for r in rows.get(table.name, [])]
        if part:
            conn.execute(table.insert(), part)
        written[table.name] = part
        if conn.dialect.name == "postgresql" and "id" in columns and part and \
                isinstance(part[0].get("id"), int):
            # The rows came with their ids: the next id the service takes follows them.
            conn.execute(text(f"SELECT setval(pg_get_serial_sequence('{table.name}', 'id'), "
                              f"(SELECT max(id) FROM {table.name}))"))
    return written
