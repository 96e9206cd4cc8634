"""Datasets on a real hub (run as root, as in CI: each user's job runs as
their own account): alice, who leads team vision, registers a folder of her
workspace as a dataset and shares it read-only with nlp; carol's (nlp) job
reads it at /datasets/NAME and cannot write it; bob's team (bio) is refused
at submit; an EU-only dataset is refused on the US pool and read on the EU
one; the audit log says who read which data, when; a revoked share stops
the next submit. A notebook server spawned with a dataset reads it in a
terminal and cannot write it; one whose team may not read it is refused at
the spawn, saying why."""
from __future__ import annotations

import os
import sys

import pytest

from gpuspawner.isolation.accounts import isolating
from hub_harness import Hub, wait_for

pytestmark = pytest.mark.skipif(not isolating(), reason="each job in a mount namespace of its "
                                                        "own needs root (CI runs the tests as root)")
GROUPS = {"team-vision": ["alice"], "team-nlp": ["carol"], "team-bio": ["bob"]}
TEAMS = {t: {"quotas": {"eu": {"nominal": 1}, "us": {"nominal": 1}}} for t in ("vision", "nlp", "bio")}
LEAD = """
c.JupyterHub.load_roles.append({"name": "lead-vision", "users": ["alice"],
                                "scopes": ["custom:gpuhub:team-admin!group=team-vision"]})
"""
# Two pools on the one host: "eu" and "us".
POOLS = """
c.Inventory.declared = [{"model": "Fake GPU", "count": 1, "memory_mib": 16384, "pool": "eu"},
                        {"model": "Fake GPU", "count": 1, "memory_mib": 16384, "pool": "us"}]
c.GpuHubService.team_space_measure_interval = 0.5
c.GpuHubService.storage_price_per_gb_month = 0.5
"""
READ = r"""
import errno, os
def attempt(f):
    try:
        return f()
    except OSError as e:
        return errno.errorcode[e.errno]
root = os.environ.get("GPUHUB_DATASETS_DIR")
print("DIR", root)
print("LISTED", sorted(os.listdir(root)))
print("READ", attempt(lambda: open(os.path.join(root, "imagenet", "labels.txt")).read()))
print("WRITE", attempt(lambda: open(os.path.join(root, "imagenet", "labels.txt"), "a").write("x")))
# a file whose own permissions let anyone write it: the mount still does not
print("WRITE-OPEN", attempt(lambda: open(os.path.join(root, "imagenet", "open.txt"), "a").write("x")))
print("CREATE", attempt(lambda: open(os.path.join(root, "imagenet", "mine.txt"), "w").write("x")))
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    h = Hub(str(tmp_path_factory.mktemp("datasets")), groups=GROUPS, teams=TEAMS,
            extra_hub_config=LEAD, extra_service_config=POOLS)
    try:
        yield h.start()
    finally:
        h.stop()


@pytest.fixture(scope="module")
def imagenet(hub):
    """alice's folder of labels, registered as dataset imagenet and shared with nlp."""
    folder = hub.workspace_folder("alice")
    with open(os.path.join(folder, "labels.txt"), "w") as f:
        f.write("cat dog")
    os.chmod(os.path.join(folder, "labels.txt"), 0o644)
    with open(os.path.join(folder, "open.txt"), "w") as f:
        f.write("anyone may write me")
    os.chmod(os.path.join(folder, "open.txt"), 0o666)
    hub.give("alice", folder)
    r = hub.client("alice").post("/datasets", json={"name": "imagenet", "path": folder,
                                                    "shared_with": ["nlp"]})
    assert r.status_code == 201, r.text
    return r.json()


def output_of(client, **spec) -> str:
    job = client.submit(command=[sys.executable, "-c", READ], gpus=0, **spec)
    done = client.wait(job["id"], ("succeeded", "failed"), 60)
    log = client.get(f"/workloads/{job['id']}/logs").text
    assert done["state"] == "succeeded", log
    assert done["datasets"] == spec.get("datasets", [])  # what the Lab's resubmit asks for again
    return log


def test_a_lead_registers_a_dataset_and_its_readers_see_it(hub, imagenet):
    alice, carol, bob = hub.client("alice"), hub.client("carol"), hub.client("bob")
    assert imagenet["team"] == "vision" and imagenet["shared_with"] == ["nlp"]
    assert imagenet["mount"] == "/datasets/imagenet" and imagenet["created_by"] == "alice"
    assert [d["name"] for d in carol.get("/datasets").json()["datasets"]] == ["imagenet"]
    assert carol.get("/datasets/imagenet").status_code == 200
    assert bob.get("/datasets").json()["datasets"] == []
    assert bob.get("/datasets/imagenet").status_code == 404  # not told it exists
    r = alice.post("/datasets", json={"name": "imagenet", "path": imagenet["path"]})
    assert r.status_code == 409 and "exists already" in r.json()["error"]
    r = alice.post("/datasets", json={"name": "etc", "path": "/etc"})
    assert r.status_code == 400 and r.json()["field"] == "path"
    r = carol.post("/datasets", json={"name": "mine", "path": "."})
    assert r.status_code == 403 and "lead" in r.json()["error"]
    r = carol.request("DELETE", "/datasets/imagenet")
    assert r.status_code == 403 and "only a lead of team vision" in r.json()["error"]


def test_a_shared_dataset_is_readable_and_not_writable_from_another_teams_job(hub, imagenet):
    log = output_of(hub.client("carol"), pool="us", datasets=["imagenet"])
    assert "DIR /datasets" in log and "LISTED ['imagenet']" in log
    assert "READ cat dog" in log
    assert "WRITE EACCES" in log          # not carol's file
    assert "WRITE-OPEN EROFS" in log and "CREATE EROFS" in log  # the mount is read-only
    with open(os.path.join(imagenet["path"], "labels.txt")) as f:
        assert f.read() == "cat dog"
    # the use is in the audit log: who read which data, when, for which workload
    entries = hub.client("root-admin").get("/audit", params={"action": "dataset-use",
                                                             "target": "imagenet"}).json()
    assert any(e["actor"] == "carol" and e["detail"]["team"] == "nlp"
               for e in entries["entries"]), entries


def test_a_team_it_is_not_shared_with_is_refused_at_submit(hub, imagenet):
    bob = hub.client("bob")
    r = bob.post("/workloads", json={"command": ["true"], "gpus": 0, "pool": "us",
                                     "datasets": ["imagenet"]})
    assert r.status_code == 403 and r.json()["field"] == "datasets"
    assert "may not read dataset imagenet" in r.json()["error"]
    r = bob.post("/workloads", json={"command": ["true"], "gpus": 0, "pool": "us",
                                     "datasets": ["nosuch"]})
    assert r.status_code == 404 and "no dataset nosuch" in r.json()["error"]


def test_an_eu_only_dataset_never_runs_on_a_non_eu_pool(hub, imagenet):
    alice, carol = hub.client("alice"), hub.client("carol")
    folder = hub.workspace_folder("alice")
    r = alice.post("/datasets", json={"name": "census", "path": folder, "pools": ["eu"],
                                      "shared_with": ["nlp"]})
    assert r.status_code == 201, r.text
    r = carol.post("/workloads", json={"command": ["true"], "gpus": 0, "pool": "us",
                                       "datasets": ["census"]})
    assert r.status_code == 403 and r.json()["field"] == "pool"
    assert "dataset census may only be read in pool eu" in r.json()["error"]
    job = carol.submit(command=["true"], gpus=0, pool="eu", datasets=["census"])
    assert carol.wait(job["id"], ("succeeded", "failed"), 60)["state"] == "succeeded"


def test_grants_and_revokes_are_audited_and_a_revoked_team_is_refused(hub, imagenet):
    alice, carol, admin = hub.client("alice"), hub.client("carol"), hub.client("root-admin")
    r = alice.request("PUT", "/datasets/imagenet/shares/bio")
    assert r.status_code == 200 and r.json()["shared_with"] == ["bio", "nlp"]
    r = alice.request("DELETE", "/datasets/imagenet/shares/bio")
    assert r.status_code == 204
    r = alice.request("DELETE", "/datasets/imagenet/shares/bio")
    assert r.status_code == 404 and "not shared with team bio" in r.json()["error"]
    actions = [(e["action"], e["detail"].get("team")) for e in admin.get(
        "/audit", params={"target": "imagenet", "actor": "alice"}).json()["entries"]]
    assert {("dataset-create", "vision"), ("dataset-grant", "nlp"), ("dataset-grant", "bio"),
            ("dataset-revoke", "bio")} <= set(actions)
    assert alice.request("DELETE", "/datasets/imagenet/shares/nlp").status_code == 204
    r = carol.post("/workloads", json={"command": ["true"], "gpus": 0, "pool": "us",
                                       "datasets": ["imagenet"]})
    assert r.status_code == 403 and "may not read dataset imagenet" in r.json()["error"]
    assert carol.get("/datasets/imagenet").status_code == 404
    assert alice.request("PUT", "/datasets/imagenet/shares/nlp").status_code == 200


def test_the_cli_registers_lists_and_submits_with_a_dataset(hub, imagenet, capsys):
    from test_cli_client import run
    svc = hub.url + "/services/gpuhub"

    def as_user(user):
        return ["--url", svc, "--token", hub.token(user)]
    folder = hub.workspace_folder("alice")
    rc, out, err = run(capsys, "dataset", "create", *as_user("alice"), "cli-set", folder,
                       "--share", "nlp", "--pool", "us")
    assert rc == 0, err
    assert out.split("\n")[1].split()[:5] == ["cli-set", "vision", "-", "nlp", "us"]
    rc, out, err = run(capsys, "dataset", "ls", *as_user("carol"))
    assert rc == 0 and "cli-set" in out, err
    rc, out, err = run(capsys, "submit", *as_user("bob"), "--pool", "us", "--gpus", "0",
                       "--dataset", "cli-set", "--", "true")
    assert rc == 1 and "may not read dataset cli-set" in err
    rc, out, err = run(capsys, "submit", *as_user("carol"), "--pool", "us", "--gpus", "0",
                       "--dataset", "cli-set", "--dataset", "imagenet", "--", "sh", "-c",
                       "ls $GPUHUB_DATASETS_DIR")
    assert rc == 0, err
    wid = out.strip().splitlines()[-1]
    carol = hub.client("carol")
    assert carol.wait(wid, ("succeeded", "failed"), 60)["state"] == "succeeded"
    assert carol.get(f"/workloads/{wid}/logs").text.split() == ["cli-set", "imagenet"]
    rc, out, err = run(capsys, "dataset", "rm", *as_user("alice"), "cli-set")
    assert rc == 0 and "deleted" in out, err


def test_a_datasets_size_is_measured_and_charged_to_its_team_beside_gpu_hours(hub, imagenet):
    alice, admin = hub.client("alice"), hub.client("root-admin")
    size = wait_for(lambda: alice.get("/datasets/imagenet").json()["size_bytes"], "a measurement")
    report = admin.get("/usage", params={"group_by": "team"}).json()
    storage = {r["team"]: r for r in report["storage"]["rows"]}
    # vision's datasets (census is the same folder: charged once) and its team space
    assert storage["vision"]["bytes"] >= size > 0
    assert report["storage"]["price_per_gb_month"] == 0.5
    assert "storage_gb_months" in next(r for r in report["rows"] if r["team"] == "vision")
    header = admin.get("/usage", params={"format": "csv"}).text.splitlines()[0]
    assert "storage_gb_months,storage_cost_USD,cost_USD" in header


# ---- notebook servers: the spawn form's datasets ------------------------------------
SERVER_PROBE = ("ls $GPUHUB_DATASETS_DIR; cat /datasets/imagenet/labels.txt; echo; "
                "echo x >> /datasets/imagenet/open.txt; touch /datasets/imagenet/mine.txt; "
                "echo probe-done-$((1+1))")


def test_a_notebook_server_started_with_a_dataset_reads_it_and_cannot_write_it(hub, imagenet):
    import asyncio

    from test_isolation_e2e import terminal_run
    from test_local_spawner import Servers
    carol = Servers(hub, "carol")
    r = carol.start(pool="us", gpus=0, datasets=["imagenet"])
    assert r.status_code in (201, 202), r.text
    try:
        carol.wait_ready()
        assert carol.server_env()["GPUHUB_DATASETS_DIR"] == "/datasets"
        # In a terminal of carol's JupyterLab server, as she would type it.
        out = asyncio.run(terminal_run(hub, "carol", SERVER_PROBE, "probe-done-2"))
        assert "imagenet" in out and "cat dog" in out, out
        assert "open.txt: Read-only file system" in out, out   # anyone may write the file: not here
        assert "mine.txt': Read-only file system" in out, out
        assert not os.path.exists(os.path.join(imagenet["path"], "mine.txt"))
        with open(os.path.join(imagenet["path"], "open.txt")) as f:
            assert f.read() == "anyone may write me"
        # the host's /datasets is not the server's: nothing of imagenet there
        assert not os.path.exists("/datasets/imagenet/labels.txt")
        [server] = carol.workloads()[:1]
        entries = hub.client("root-admin").get("/audit", params={
            "action": "dataset-use", "target": "imagenet", "actor": "carol"}).json()["entries"]
        assert any(e["detail"]["workload"] == server["id"] for e in entries), entries
    finally:
        carol.stop()


@pytest.mark.parametrize("user, options, status, words", [
    ("bob", {"pool": "us", "datasets": ["imagenet"]}, 403,
     "team bio may not read dataset imagenet (it is team vision's and not shared with bio"),
    ("carol", {"pool": "us", "datasets": ["nosuch"]}, 404, "no dataset nosuch"),
    ("carol", {"pool": "us", "datasets": ["Imagenet!"]}, 400, "is not a dataset name"),
])
def test_a_dataset_the_servers_team_may_not_read_is_refused_at_spawn(hub, imagenet, user,
                                                                      options, status, words):
    from test_local_spawner import Servers
    servers = Servers(hub, user)
    before = len(servers.workloads())
    r = servers.start(gpus=0, **options)
    assert r.status_code == status, r.text
    assert words in r.json()["message"], r.text
    assert servers.server() is None
    assert len(servers.workloads()) == before  # nothing queued
