"""An upgrade as an operator makes one, with work running: the embedded hub
of an earlier release (a commit of this repository, checked out in a git
worktree) on a data directory with demo teams, finished, failed and
cancelled jobs, a held job, a running 0-GPU job, a running 2-GPU job and a
deployment; stopped the documented way (SIGTERM: jobs run on), then this
checkout's ``gpuhub up`` on the same data directory. Prints the table
"item, before, after" (docs/service.md, "Upgrading").

    sudo .venv/bin/python scripts/upgrade_drill.py --from 6174034
    sudo .venv/bin/python scripts/upgrade_drill.py --from 6174034 \\
        --db-url postgresql://postgres@127.0.0.1:5432/gpuhub_drill

Needs root (the hub's per-user accounts), git history and the project's
node_modules (the proxy). Leaves nothing running: both hubs are stopped,
their accounts deleted and the worktree removed.
"""
from __future__ import annotations

import argparse
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import requests

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

from embedded import EmbeddedHub  # noqa: E402
from hub_harness import Client, wait_for  # noqa: E402

JOB_SECONDS = 150  # the 2-GPU job outlives the upgrade and ends after it


def release(commit: str) -> tuple[str, str]:
    """The earlier release's code (a git worktree) and a venv that runs it:
    this venv's files hard-linked, its editable install pointed at the
    worktree (every process of the old hub, its job runners (``python -I``)
    included, imports the old package)."""
    where = tempfile.mkdtemp(prefix=f"gpuhub-release-{commit[:7]}-")
    os.chmod(where, 0o755)
    code, venv = os.path.join(where, "code"), os.path.join(where, "venv")
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", code, commit],
                   check=True, capture_output=True)
    os.symlink(os.path.join(ROOT, "node_modules"), os.path.join(code, "node_modules"))
    subprocess.run(["cp", "-al", os.path.dirname(os.path.dirname(sys.executable)), venv],
                   check=True)
    os.unlink(os.path.join(venv, "bin", "gpuhub"))  # its #! is this venv's python
    for finder in glob.glob(os.path.join(venv, "lib", "python3*", "site-packages",
                                         "__editable__*gpuhub*finder.py")):
        text = open(finder).read().replace(os.path.join(ROOT, "gpuspawner"),
                                           os.path.join(code, "gpuspawner"))
        os.unlink(finder)  # a hard link: write a new file, not into the shared one
        with open(finder, "w") as f:
            f.write(text)
    return where, os.path.join(venv, "bin", "python3")


def start_old(hub: EmbeddedHub, python: str, *args: str) -> None:
    """EmbeddedHub.start with the earlier release's interpreter."""
    import embedded
    mine = embedded.sys.executable
    embedded.sys.executable = python
    try:
        hub.start(*args, timeout=240)
    finally:
        embedded.sys.executable = mine


def sleep_job(seconds: float) -> list[str]:
    return ["/usr/bin/python3", "-c",
            f"import time, os; print('job', os.getpid(), flush=True); time.sleep({seconds}); "
            f"print('done', flush=True)"]


def make_work(hub: EmbeddedHub, python: str) -> dict:
    alice, bob, carol = (Client(hub.api, hub.token(u)) for u in ("alice", "bob", "carol"))
    admin = Client(hub.api, hub.token("admin"))
    ids = {}
    ids["succeeded"] = carol.submit(command=["/bin/echo", "hello from carol"], gpus=1)["id"]
    ids["failed"] = carol.submit(command=["/bin/sh", "-c", "echo failing; exit 3"], gpus=1)["id"]
    carol.wait(ids["succeeded"], "succeeded", 120)
    carol.wait(ids["failed"], "failed", 120)
    ids["running_2gpu"] = alice.submit(command=sleep_job(JOB_SECONDS), gpus=2,
                                       name="train")["id"]
    ids["running_cpu"] = bob.submit(command=sleep_job(3600), gpus=0, name="prep")["id"]
    alice.wait(ids["running_2gpu"], "running", 120)
    bob.wait(ids["running_cpu"], "running", 120)
    ids["held"] = bob.submit(command=sleep_job(60), gpus=4, name="big")["id"]
    r = admin.post(f"/workloads/{ids['held']}/hold")
    assert r.status_code == 200, r.text
    ids["cancelled"] = carol.submit(command=sleep_job(60), gpus=4)["id"]
    r = carol.post(f"/workloads/{ids['cancelled']}/cancel")
    assert r.status_code == 202, r.text
    # The serving quick start (docs/serving.md): train the example as a job, deploy it.
    train = alice.submit(command=[python, os.path.join(ROOT, "examples", "serving", "iris",
                                                       "train.py"), "models/iris-v1"],
                         gpus=0, name="train-iris")["id"]
    assert alice.wait(train, ("succeeded", "failed"), 180)["state"] == "succeeded"
    r = alice.post("/deployments", json={"name": "iris", "model_dir": "models/iris-v1",
                                         "gpus": 0})
    assert r.status_code in (200, 201), r.text
    wait_for(lambda: ready_replicas(alice) > 0, "the deployment's replica", 240)
    return ids


def ready_replicas(client: Client) -> int:
    r = client.get("/deployments/vision/iris")
    if r.status_code != 200:
        return 0
    return sum(rev.get("ready_replicas", 0) for rev in r.json().get("revisions", []))


def infer(hub: EmbeddedHub, tries: int = 3) -> str:
    """What the deployment's endpoint answers (a busy machine: a few tries)."""
    answer = ""
    for _ in range(tries):
        try:
            r = requests.post(
                f"{hub.url}/services/gpuhub/endpoints/vision/iris/v2/models/iris/infer",
                headers={"Authorization": f"token {hub.token('alice')}"},
                json={"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP64",
                                  "data": [5.1, 3.5, 1.4, 0.2]}]}, timeout=60)
        except requests.RequestException as e:
            answer = f"no answer ({type(e).__name__})"
            continue
        if r.status_code == 200:
            return "answers"
        answer = f"HTTP {r.status_code}"
        time.sleep(5)
    return answer


def work_table(hub: EmbeddedHub) -> str:
    """Every workload with its state and reason, for a drill that went wrong."""
    work = Client(hub.api, hub.token("admin")).get("/workloads?limit=1000").json()["workloads"]
    return "\n".join(f"{w['id']} {w['kind']:10s} {w['user']:6s} {w['state']:10s} "
                     f"{w.get('reason', '')}" for w in work)


def replica_logs(hub: EmbeddedHub) -> str:
    """The output of the newest replica attempts."""
    logs = sorted(glob.glob(os.path.join(hub.data_dir, "workloads", "*", "attempt-*",
                                         "output.log")), key=os.path.getmtime)
    return "\n".join(f"== {path}\n{open(path, errors='replace').read()[-3000:]}"
                     for path in logs[-3:])


def quotas(text: str) -> list:
    """The teams and their quotas, without what changes as work runs (used)."""
    import json
    teams = json.loads(text)
    teams = teams.get("teams", teams) if isinstance(teams, dict) else teams
    return sorted((t["name"], t.get("group"), t.get("weight"),
                   json.dumps({pool: {k: v for k, v in q.items() if k != "used"}
                               for pool, q in t.get("quotas", {}).items()}, sort_keys=True))
                  for t in teams)


def snapshot(hub: EmbeddedHub, ids: dict, until: str) -> dict:
    alice, admin = Client(hub.api, hub.token("alice")), Client(hub.api, hub.token("admin"))
    work = admin.get("/workloads?limit=1000").json()["workloads"]
    states = {w["id"]: w["state"] for w in work}
    logs = {k: admin.get(f"/workloads/{ids[k]}/logs").text for k in ("succeeded", "failed")}
    audit = subprocess.run([sys.executable, "-m", "gpuspawner.cli", "audit", "verify",
                            "--data-dir", hub.data_dir, *(["--db-url", hub.db_url]
                                                          if hub.db_url else [])],
                           capture_output=True, text=True, env=hub.env)
    return {
        "workloads": len(states),
        "states": {k: states.get(v) for k, v in ids.items()},
        "logs": logs,
        "quotas": admin.get("/teams").text,
        # A window that ended before the upgrade: what was used then must not change.
        "usage": admin.get("/usage", params={"format": "csv", "to": until,
                                             "group_by": "team,user,pool"}).text,
        "audit": (audit.stdout or audit.stderr).strip(),
        "replica": infer(hub),
        "old token": alice.get("/me").status_code,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="commit", required=True, help="the earlier release")
    parser.add_argument("--db-url", default="", help="PostgreSQL (default: SQLite)")
    args = parser.parse_args()
    where, old_python = release(args.commit)
    workdir = tempfile.mkdtemp(prefix="gpuhub-drill-")
    os.chmod(workdir, 0o755)
    old = EmbeddedHub(workdir)
    old.db_url = args.db_url
    new = None
    try:
        extra = ["--db-url", args.db_url] if args.db_url else []
        start_old(old, old_python, "--demo", *extra)
        ids = make_work(old, old_python)
        until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        before = snapshot(old, ids, until)
        pid = int(Client(old.api, old.token("alice")).get(
            f"/workloads/{ids['running_2gpu']}/logs").text.split()[1])
        # The documented stop: SIGTERM to gpuhub up; jobs run on.
        old.proc.send_signal(signal.SIGTERM)
        old.proc.wait(90)
        began = time.monotonic()
        new = EmbeddedHub(workdir)
        new.data_dir, new.account_prefix, new.db_url = old.data_dir, old.account_prefix, args.db_url
        new.env["GPUHUB_ACCOUNT_PREFIX"] = old.account_prefix
        new.port, new.url, new.api = old.port, old.url, old.api
        new.passwords, new.tokens = old.passwords, old.tokens
        new.start(*extra, timeout=240)
        took = time.monotonic() - began
        alive = os.path.exists(f"/proc/{pid}")
        adopted = Client(new.api, new.token("alice")).workload(ids["running_2gpu"])["state"]
        try:
            wait_for(lambda: ready_replicas(Client(new.api, new.token("alice"))) > 0,
                     "the replica after the upgrade", 240)
        except AssertionError:
            print(work_table(new), file=sys.stderr)
            print(replica_logs(new), file=sys.stderr)
        after = snapshot(new, ids, until)
        ended = Client(new.api, new.token("alice")).wait(ids["running_2gpu"], "succeeded",
                                                         JOB_SECONDS + 120)
        backups = sorted(f for f in os.listdir(new.data_dir) if ".backup-" in f)
        spaces = os.path.join(new.data_dir, "workspaces")
        owners = {u: os.stat(os.path.join(spaces, u)).st_uid for u in sorted(os.listdir(spaces))}
        print(f"\nupgrade from {args.commit} on {'PostgreSQL' if args.db_url else 'SQLite'}: "
              f"new release serving {took:.1f} s after the old one stopped\n")
        print(f"| item | before | after |\n|---|---|---|")
        rows = [("workloads", before["workloads"], after["workloads"])]
        rows += [(f"{k} job state", before["states"][k], after["states"][k]) for k in ids]
        rows += [(f"log of the {k} job", f"{len(before['logs'][k])} B",
                  "identical" if after["logs"][k] == before["logs"][k] else "CHANGED")
                 for k in before["logs"]]
        rows += [("teams and quotas", len(quotas(before["quotas"])),
                  "identical" if quotas(after["quotas"]) == quotas(before["quotas"])
                  else "CHANGED")]
        kept = set(before["usage"].splitlines()) <= set(after["usage"].splitlines())
        if not kept:
            print("usage CSV before:\n" + before["usage"] + "\nafter:\n" + after["usage"],
                  file=sys.stderr)
        rows += [("usage CSV rows", f"{len(before['usage'].splitlines())} lines",
                  f"all kept ({len(after['usage'].splitlines())} lines now)" if kept
                  else "SOME LOST")]
        rows += [("audit chain", before["audit"], after["audit"])]
        rows += [("deployment replica", before["replica"], after["replica"])]
        rows += [("alice's old token (/me)", before["old token"], after["old token"])]
        rows += [("2-GPU job's process", f"pid {pid}",
                  f"same process, {adopted}" if alive else f"gone ({adopted})")]
        rows += [("2-GPU job at its end", "-", f"{ended['state']} (exit {ended.get('exit_code')})")]
        rows += [("backup taken", "-", ", ".join(backups) or "none (PostgreSQL: pg_dump)")]
        rows += [("workspaces' owners (uid)", "root (no accounts)",
                  ", ".join(f"{u} {uid}" for u, uid in owners.items()))]
        for item, b, a in rows:
            print(f"| {item} | {b} | {a} |")
        return 0
    finally:
        for hub in (new, old):
            if hub is not None:
                try:
                    hub.stop()
                except Exception as e:  # noqa: BLE001 - keep cleaning up
                    print(f"stopping a hub: {e}", file=sys.stderr)
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force",
                        os.path.join(where, "code")], capture_output=True)
        shutil.rmtree(where, ignore_errors=True)
        print(f"(hub logs in {workdir})", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
