"""``gpuhub bench serving``: what the router adds in front of a model server.

Starts a temporary hub (tests/hub_harness.py), trains the example iris model
into the bench user's workspace, deploys it (one replica, MLServer), then at
each concurrency (default 1, 16 and 64 client threads) sends the same
inference request ``--requests`` times twice in the same run:

* direct: to the replica's MLServer port on this machine;
* router (service): to the service's own port, so the router without the proxy;
* router (proxy + service): through the hub's proxy, as clients call it.

Throughput is requests over the row's wall time; latencies per request. The
ratio compares the router row with the direct row at the same concurrency.
The client threads run on the same machine, so at high concurrency they
compete with the servers for CPU: the figures are this machine's. What each
process spent per request (CPU milliseconds of MLServer, of the service and
of the proxy, from /proc) does not depend on that contention: it says what
the router costs next to the model server.
"""
from __future__ import annotations

import glob
import json
import os
import sys
import tempfile
import time

import joblib

from ..bench.api import measure, start_temporary_hub
from ..client import GpuHubClient, GpuHubError
from .guard import ReplicaKeys

BODY = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP64",
                    "data": [5.1, 3.5, 1.4, 0.2]}]}


def _train(path: str) -> None:
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression
    X, y = load_iris(return_X_y=True)
    os.makedirs(path, exist_ok=True)
    joblib.dump(LogisticRegression(max_iter=1000).fit(X, y), os.path.join(path, "model.joblib"))


# The ~10 ms model (``--model-ms``): a predictor that holds MLServer as a
# synchronous model does (a GPU call or CPU work), here for a fixed time.
SLOW_PREDICTOR = """import time

import numpy as np


class Model:
    def predict(self, x):
        time.sleep({seconds!r})
        return np.zeros(len(x))
"""


def _write_slow(path: str, model_ms: float) -> None:
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "predictor.py"), "w") as f:
        f.write(SLOW_PREDICTOR.format(seconds=model_ms / 1000))


def _wait_ready(client: GpuHubClient, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        d = client.get_deployment("bench", "iris")
        if d["revisions"] and d["revisions"][0]["ready_replicas"]:
            return
        time.sleep(0.5)
    raise GpuHubError("the deployment did not become ready")


def run(requests_per_row: int = 400, concurrencies=(1, 16, 64), progress=None,
        model_ms: float = 0.0) -> list[dict]:
    """``model_ms`` > 0: the model is a predictor that takes that long per
    batch instead of the (sub-millisecond) iris classifier."""
    with tempfile.TemporaryDirectory(prefix="gpuhub-bench-serving-") as tmp:
        hub = start_temporary_hub(tmp)
        try:
            token = hub.token("bench")
            model_dir = os.path.join(hub.data_dir, "workspaces", "bench", "models", "iris")
            spec = {"name": "iris", "model_dir": "models/iris"}
            if model_ms > 0:
                _write_slow(model_dir, model_ms)
                spec["runtime"] = "predictor"
            else:
                _train(model_dir)
            with GpuHubClient(hub.api, token) as client:
                client.deploy(spec)
                _wait_ready(client)
            [settings] = glob.glob(os.path.join(hub.data_dir, "deployments", "bench", "iris",
                                                "r1", "*", "settings.json"))
            port = json.load(open(settings))["http_port"]
            # Direct calls need the replica's key, as the router's do (guard.py);
            # root reads the service's secret.
            wid = os.path.basename(os.path.dirname(settings))
            key = ReplicaKeys(hub.data_dir).headers(wid, 0)
            path = "services/gpuhub/endpoints/bench/iris/v2/models/iris/infer"
            targets = [("direct (MLServer)", f"http://127.0.0.1:{port}/v2/models/iris/infer"),
                       # the service's own port: the router without the proxy's hop
                       ("router (service)", f"http://127.0.0.1:{hub.port + 2}/{path}"),
                       ("router (proxy + service)", f"{hub.url}/{path}")]
            processes = {"mlserver": _replica_processes(hub.data_dir),
                         "service": _processes("gpuspawner.service", hub.workdir),
                         "proxy": _processes("configurable-http-proxy", f"--port {hub.port} ")}
            if not all(processes.values()):
                raise GpuHubError(f"cannot find the processes to measure: {processes}")
            rows = []
            for c in concurrencies:
                for name, url in targets:
                    before = {k: cpu_seconds(p) for k, p in processes.items()}
                    [row] = measure(token, c, [(name, "POST", url, 200, BODY)], requests_per_row,
                                    headers=key)
                    for k, pids in processes.items():
                        row[f"{k}_cpu_ms"] = round(
                            (cpu_seconds(pids) - before[k]) * 1000 / requests_per_row, 2)
                    rows.append(row)
                    if progress:
                        progress(row)
            return add_ratios(rows)
        finally:
            hub.stop()


def _processes(*needles: str) -> list[int]:
    """Processes whose command line holds every needle."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if all(n in cmdline for n in needles):
            out.append(int(pid))
    return out


def _replica_processes(data_dir: str) -> list[int]:
    """The replica's processes: its runner's process group."""
    [runner] = glob.glob(os.path.join(data_dir, "workloads", "*", "attempt-0", "runner.json"))
    pgid = json.load(open(runner))["pgid"]
    return [int(p) for p in filter(str.isdigit, os.listdir("/proc"))
            if _pgid(int(p)) == pgid]


def _pgid(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except OSError:
        return -1


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of these processes (gone ones count 0)."""
    total = 0
    for pid in pids:
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])   # utime, stime (fields 14, 15)
    return total / os.sysconf("SC_CLK_TCK")


def add_ratios(rows: list[dict]) -> list[dict]:
    direct = {r["concurrency"]: r for r in rows if r["name"].startswith("direct")}
    for r in rows:
        d = direct.get(r["concurrency"])
        if d and not r["name"].startswith("direct"):
            r["rps_ratio"] = round(r["rps"] / d["rps"], 2) if d["rps"] else None
            r["p50_added_ms"] = round(r["p50_ms"] - d["p50_ms"], 2)
            r["p99_added_ms"] = round(r["p99_ms"] - d["p99_ms"], 2)
    return rows


def format_rows(rows: list[dict]) -> str:
    out = [f"{'concurrency':>11}  {'path':<26}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}"
           f"{'errors':>8}   CPU ms/request: MLServer service proxy  vs direct"]
    for r in rows:
        extra = (f"{r['rps_ratio']}× req/s, {r['p50_added_ms']:+} ms p50, "
                 f"{r['p99_added_ms']:+} ms p99" if "rps_ratio" in r else "")
        cpu = "".join(f"{r.get(k + '_cpu_ms', float('nan')):>9.2f}"
                      for k in ("mlserver", "service", "proxy"))
        out.append(f"{r['concurrency']:>11}  {r['name']:<26}{r['rps']:>9.1f}{r['p50_ms']:>9.2f}"
                   f"{r['p99_ms']:>9.2f}{r['errors']:>8}   {' ' * 16}{cpu}  {extra}")
    return "\n".join(out)


def cmd_bench_serving(args) -> int:
    def progress(row):
        if not args.json:
            print(f"  measured {row['name']} at concurrency {row['concurrency']}",
                  file=sys.stderr, flush=True)
    try:
        if not args.json:
            print("starting a temporary hub and a deployment ...", file=sys.stderr, flush=True)
        rows = run(args.requests, tuple(args.serving_concurrency), progress, args.model_ms)
    except GpuHubError as e:
        print(f"gpuhub bench serving: {e}", file=sys.stderr)
        return 1
    if args.json:
        for row in rows:
            print(json.dumps(row, sort_keys=True))
    else:
        model = (f"a predictor that takes {args.model_ms:g} ms" if args.model_ms > 0
                 else "iris, 1 row of 4 features")
        print(f"model serving, {args.requests} inference requests per row ({model}), "
              f"one MLServer replica")
        print(format_rows(rows))
    return 1 if any(r["errors"] for r in rows) else 0
