"""A first run as the README says it: GPUs for the first admin without any
setup (the default team), `--demo` on an existing data directory, and a
stop of the hub that is quick and leaves no GPU booked."""
from __future__ import annotations

import json
import os
import re
import sqlite3

import pytest
import requests

from embedded import EmbeddedHub
from gpuspawner.backends.local import LocalBackend
from gpuspawner.hub.up import DEMO_TEAMS, banner, initial_users
from gpuspawner.scheduler.model import Node, Quota
from gpuspawner.scheduler.policy import get_policy
from gpuspawner.service.loop.config import EngineConfig
from gpuspawner.service.loop.engine import Engine
from gpuspawner.service.workloads.operations import set_team
from gpuspawner.service.loop.launch import LocalNode
from gpuspawner.service.access.identity import Identity
from gpuspawner.vocab.specs import SpecError
from gpuspawner.store import QuotaRow, Store, TeamRow
from test_spawn_browser import wait_for

DEMO_USERS = {u for t in DEMO_TEAMS.values() for u in t["users"]}


# ---- --demo, first start or later ----------------------------------------------------------

@pytest.mark.parametrize("starts, new_at_last, demo_teams", [
    # (the --demo flag of each start), users created at the last start, teams afterwards
    ([False], {"admin"}, set()),
    ([True], {"admin"} | DEMO_USERS, {"vision", "nlp"}),
    ([False, True], DEMO_USERS, {"vision", "nlp"}),       # --demo on an existing directory
    ([False, True, True], set(), {"vision", "nlp"}),      # ... twice: nothing new
    ([True, False], set(), {"vision", "nlp"}),            # later starts keep the demo
])
def test_demo_on_first_or_later_start(tmp_path, starts, new_at_last, demo_teams):
    for demo in starts:
        spec, created = initial_users(str(tmp_path), "admin", demo, "default")
    assert set(created) == new_at_last
    assert set(spec["teams"]) == demo_teams
    path = tmp_path / "initial-users.json"
    assert json.loads(path.read_text()) == spec
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    if demo_teams:
        assert "admin" in spec["groups"]["team-vision"]
        assert spec["leads"] == {"vision": ["alice"], "nlp": ["carol"]}
    text = banner(spec, created, "http://127.0.0.1:8000", str(path))
    for user in created:
        assert re.search(rf"^  {user}\s+{re.escape(created[user])}\s", text, re.M), text
    if set(spec["users"]) - set(created):
        assert "from an earlier start" in text
    assert ("team 'default'" in text) == (not demo_teams)


# ---- the default team ----------------------------------------------------------------------

ADMIN = Identity("root", admin=True, can_submit=True)


def nominal(engine: Engine, team: str) -> int:
    with engine.store.session() as s:
        return s.get(QuotaRow, (team, "default")).nominal


def test_default_team_guarantees_what_no_other_team_owns(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/gpuhub.sqlite")
    with store.transaction() as s:
        s.add(TeamRow(name="default", group="", weight=1.0, created_at=0.0))
    engine = Engine(store, LocalBackend(), [LocalNode(Node("host", "default", 4), [0, 1, 2, 3])],
                    get_policy("gpuhub"),
                    EngineConfig(data_dir=str(tmp_path), default_team="default"))
    engine.start()
    assert nominal(engine, "default") == 4                      # the whole pool at first
    set_team(engine.steering, ADMIN, "vision", None, {"default": Quota(3, 0, None)})
    assert nominal(engine, "default") == 1                      # less as teams get quotas
    assert engine.scheduler.state.teams["default"].quotas["default"].nominal == 1
    set_team(engine.steering, ADMIN, "vision", None, {"default": Quota(1, 0, None)})
    assert nominal(engine, "default") == 3
    with pytest.raises(SpecError) as e:                         # its own quota is not set
        set_team(engine.steering, ADMIN, "default", None, {"default": Quota(2, 0, None)})
    assert e.value.field == "quotas" and e.value.status == 409
    set_team(engine.steering, ADMIN, "default", 2.0, None)                # its weight is
    # A restart computes the same.
    engine = Engine(store, LocalBackend(), [LocalNode(Node("host", "default", 4), [0, 1, 2, 3])],
                    get_policy("gpuhub"),
                    EngineConfig(data_dir=str(tmp_path), default_team="default"))
    engine.start()
    assert nominal(engine, "default") == 3


# ---- the embedded hub: first start, stop, --demo on the same directory ---------------------

def running_workloads(data_dir: str) -> list[tuple]:
    with sqlite3.connect(os.path.join(data_dir, "gpuhub.sqlite")) as db:
        return db.execute("select id, kind, user, state from workloads "
                          "where state in ('running', 'stopping')").fetchall()


def test_first_start_gpu_notebook_then_quick_clean_stop_then_demo(tmp_path):
    hub = EmbeddedHub(str(tmp_path))
    try:
        hub.start()
        assert set(hub.created) == {"admin"}
        assert "team 'default'" in hub.banner
        admin = hub.login("admin")
        api = requests.Session()
        api.headers["Authorization"] = f"token {hub.token('admin')}"
        # The first admin is in the default team, which owns the machine's GPUs.
        me = api.get(f"{hub.api}/me", timeout=10).json()
        assert me["teams"] == ["default"] and me["admin"], me
        teams = api.get(f"{hub.api}/teams", timeout=10).json()["teams"]
        pools = api.get(f"{hub.api}/pools", timeout=10).json()["pools"]
        assert [(t["name"], t["default"], t["quotas"]["default"]["nominal"]) for t in teams] \
            == [("default", True, pools[0]["capacity"])]
        # The spawn page offers GPUs (not only "CPU only").
        form = admin.get(f"{hub.url}/hub/spawn", timeout=30).text
        assert 'value="default:1"' in form, form
        r = admin.post(f"{hub.url}/hub/spawn", data={"team": "default",
                                                     "gpu_choice": "default:1",
                                                     "_xsrf": admin.cookies.get("_xsrf")},
                       timeout=60)
        assert r.status_code == 200, r.text[:500]
        wait_for(lambda: (api.get(f"{hub.url}/hub/api/users/admin", timeout=10).json()
                          .get("servers", {}).get("", {}).get("ready")), 180,
                 "the admin's GPU notebook server")
        assert [(k, u) for _, k, u, _ in running_workloads(hub.data_dir)] == [("notebook", "admin")]

        took = hub.stop()
        log = open(os.path.join(hub.workdir, "hub.log"), errors="replace").read()
        print(f"hub stop with a running 1-GPU notebook server: {took:.1f} s")
        # The servers stop while the service still answers, then the services.
        assert log.index("releasing admin's workload") < log.index("Cleaning up 2 services")
        # No fixed waits (JupyterHub's 10 s per SIGINT that nobody answers, which made a
        # stop take 32-37 s, and the server's own SIGINT swallowed for 10 s, 14.5 s in CI),
        # no backoff between looks at an exiting server: the server's own exit on SIGTERM,
        # 0.2-2.0 s on the loaded 2-core machine (the figure is printed).
        assert "did not stop within" not in log
        assert took < 10, f"stopping took {took:.1f}s"
        assert "AttributeError" not in log
        assert "could not release" not in log
        # Nothing stays booked: the server's GPU was released as it stopped.
        assert running_workloads(hub.data_dir) == []

        # `make run ARGS=--demo` on the same data directory adds the demo.
        hub.start("--demo")
        assert set(hub.created) == DEMO_USERS
        assert "from an earlier start (admin)" in hub.banner
        alice = requests.Session()
        alice.headers["Authorization"] = f"token {hub.token('alice')}"
        assert alice.get(f"{hub.api}/me", timeout=10).json()["leads"] == ["vision"]
        teams = {t["name"]: t["quotas"]["default"]["nominal"]
                 for t in api.get(f"{hub.api}/teams", timeout=10).json()["teams"]}
        # The default team keeps what the demo teams do not own.
        assert teams == {"default": 0, "vision": 2, "nlp": 2}
        assert api.get(f"{hub.api}/workloads", params={"state": "running"},
                       timeout=10).json()["workloads"] == []
        took = hub.stop()
        print(f"hub stop without running work: {took:.1f} s")
        # The issue asks for < 5 s. The services' exits, watched closely, and no
        # interpreter teardown: 0.1-0.2 s measured on the loaded 2-core machine
        # (1.3-4.1 s before, most of it the hub's teardown and JupyterHub's backoff).
        assert took < 2, f"stopping took {took:.1f}s"
    except BaseException:
        print(f"---- hub log (tail) ----\n{hub.tail(80)}")
        raise
    finally:
        hub.stop()
