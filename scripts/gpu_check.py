"""Runs the NVML inventory and the local backend on a real GPU host.

GPUs come from NVML; jobs run under the GPU enforcement this host allows
(gpuspawner/isolation/cgroups.py, printed first). One job per GPU asks the
CUDA driver (through ctypes, so it honours CUDA_VISIBLE_DEVICES like any
CUDA program) which devices it sees; a 0-GPU job must see none. The
backend names each job's GPUs by UUID in CUDA_VISIBLE_DEVICES (the host
indices are in GPUHUB_GPU_INDICES): CUDA counts only the devices the cgroup
lets it open, so host GPU N is CUDA's device 0 there, and a job on GPU N
must still see exactly GPU N.

Then the enforcement check, with the device cgroup on the real
/dev/nvidiaN: a 1-GPU job and a 0-GPU job drop CUDA_VISIBLE_DEVICES, ask
CUDA for every device and open every /dev/nvidiaN. The 1-GPU job must see
exactly its GPU and get EPERM on every other node; the 0-GPU job must see
none and get EPERM on all (on a 1-GPU host it is the one that shows the
cgroup working). Where the host allows no device cgroup the check says so
and is not run.

Then one job keeps a GPU busy while the inventory samples utilisation
(what the culler and the admin panel's heat map read), and the panel's
heat map is rendered from the busiest sample to DATA_DIR/heatmap.html.
MIG and memory (read only, nothing here changes a GPU setting): each
GPU's MIG mode (current/pending) and the MIG devices found, then a child
process allocates a known amount (ALLOC_MIB, cuMemAlloc through ctypes on
libcuda, on the first device, a MIG device where there are any) and the
memory NVML accounts to its PID (nvmlDeviceGetComputeRunningProcesses) is
read back: it must be at least that amount (NVML adds the CUDA context's
own memory). A PID that NVML does not list (the script in another PID
namespace than the driver sees) is reported, not failed.

Prints what it saw and exits non-zero on a mismatch.
Usage: python scripts/gpu_check.py [DATA_DIR]
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from typing import Optional

from gpuspawner.backends.local import LocalBackend
from gpuspawner.inventory import Inventory
from gpuspawner.inventory.probe import mig_lines, process_memory
from gpuspawner.isolation.cgroups import GpuEnforcement
from gpuspawner.isolation.gpu_rules import CGROUP_V1
from gpuspawner.scheduler.policy import get_policy
from gpuspawner.service.loop.engine import Engine, EngineConfig
from gpuspawner.service.loop.launch import local_nodes
from gpuspawner.service.access.identity import Identity
from gpuspawner.vocab.specs import parse_job
from gpuspawner.service.panel.cluster import cluster_model
from gpuspawner.store import Store, WorkloadRow

TEMPLATES = os.path.join(os.path.dirname(__file__), "..", "gpuspawner", "service", "panel",
                         "templates")

CUDA_PROBE = r'''
import ctypes, json, os
cuda = ctypes.CDLL("libcuda.so.1")
rc = cuda.cuInit(0)  # 100: CUDA_ERROR_NO_DEVICE, what an empty CUDA_VISIBLE_DEVICES gives
assert rc in (0, 100), rc
n = ctypes.c_int(0)
if rc == 0:
    cuda.cuDeviceGetCount(ctypes.byref(n))
uuids = []
for i in range(n.value):
    dev = ctypes.c_int()
    cuda.cuDeviceGet(ctypes.byref(dev), i)
    raw = (ctypes.c_ubyte * 16)()
    getattr(cuda, "cuDeviceGetUuid_v2", cuda.cuDeviceGetUuid)(raw, dev)  # v2: a MIG device's own
    b = bytes(raw).hex()
    uuids.append("GPU-%s-%s-%s-%s-%s" % (b[:8], b[8:12], b[12:16], b[16:20], b[20:]))
print(json.dumps({"visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "cuInit": rc, "uuids": uuids,
                  "indices": os.environ.get("GPUHUB_GPU_INDICES")}))
'''


# Asks CUDA for every device (no CUDA_VISIBLE_DEVICES, as a job that ignores
# the scheduler would) and tries to open every per-GPU node.
ENFORCE_PROBE = r'''
import ctypes, errno, json, os, re
os.environ.pop("CUDA_VISIBLE_DEVICES")
given = os.environ["GPUHUB_GPU_INDICES"]
cuda = ctypes.CDLL("libcuda.so.1")
rc = cuda.cuInit(0)  # non-zero (100, CUDA_ERROR_NO_DEVICE) when it may open no GPU
n = ctypes.c_int(0)
if rc == 0:
    cuda.cuDeviceGetCount(ctypes.byref(n))
uuids = []
for i in range(n.value):
    dev = ctypes.c_int()
    cuda.cuDeviceGet(ctypes.byref(dev), i)
    raw = (ctypes.c_ubyte * 16)()
    getattr(cuda, "cuDeviceGetUuid_v2", cuda.cuDeviceGetUuid)(raw, dev)
    b = bytes(raw).hex()
    uuids.append("GPU-%s-%s-%s-%s-%s" % (b[:8], b[8:12], b[12:16], b[16:20], b[20:]))
nodes = {}
for name in sorted(os.listdir("/dev")):
    if re.fullmatch(r"nvidia\d+", name):
        try:
            os.close(os.open("/dev/" + name, os.O_RDWR))
            nodes[name] = "opened"
        except OSError as e:
            nodes[name] = errno.errorcode[e.errno]
print(json.dumps({"given": given, "cuInit": rc, "uuids": uuids, "nodes": nodes}))
'''


# A context on CUDA's device 0 with sys.argv[1] MiB allocated at ptr.
CUDA_ALLOCATE = r'''
import ctypes, sys, time
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0
dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
size = int(sys.argv[1]) << 20
cuda.cuDeviceGet(ctypes.byref(dev), 0)
assert cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
assert cuda.cuMemAlloc_v2(ctypes.byref(ptr), size) == 0
'''

# Keeps the GPU busy for a few seconds (memset kernels over the 1 GiB given
# as its argument), so the utilization the culler reads can be seen to move.
CUDA_BUSY = CUDA_ALLOCATE + r'''
end = time.time() + 6
while time.time() < end:
    cuda.cuMemsetD8_v2(ptr, 7, size)
    cuda.cuCtxSynchronize()
print("busy done")
'''

ALLOC_MIB = 512

# Allocates ALLOC_MIB (its argument), says so, and holds it until stdin closes.
CUDA_ALLOC = CUDA_ALLOCATE + r'''
print("allocated", flush=True)
sys.stdin.read()
'''


def same_device(nvml_uuid: str, cuda_uuid: str) -> bool:
    """NVML says GPU-... or MIG-...; the probe formats CUDA's 16 bytes as GPU-..."""
    return nvml_uuid.split("-", 1)[-1].lower() == cuda_uuid.split("-", 1)[-1].lower()


def memory_verdict(found, pid: int, alloc_mib: int) -> tuple[Optional[bool], str]:
    """(ok, what to print) from ``process_memory``'s answer for the child.
    None: not checkable (NVML does not list the PID, or not its memory)."""
    if not found:
        return None, (f"per-process memory: NVML lists no process {pid} (another PID "
                      f"namespace?): not checked")
    lines = [f"  {d.device} {d.uuid}: {d.used_bytes if d.used_bytes is None else d.used_bytes >> 20} "
             f"MiB" for d in found]
    known = [d.used_bytes for d in found if d.used_bytes is not None]
    if not known:
        return None, "per-process memory: NVML does not say how much (no permission?)\n" + "\n".join(lines)
    ok = sum(known) >= alloc_mib << 20
    return ok, (f"per-process memory of {pid} (allocated {alloc_mib} MiB): "
                f"{sum(known) >> 20} MiB {'ok' if ok else 'TOO LITTLE'}\n" + "\n".join(lines))


def memory_read_back(gpus) -> Optional[bool]:
    """The child allocates ALLOC_MIB on the first device (a MIG device if
    any); NVML's per-process accounting must show at least that much."""
    import subprocess
    import pynvml
    target = next((g for g in gpus if g.is_mig), gpus[0])
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": target.uuid}
    child = subprocess.Popen([sys.executable, "-c", CUDA_ALLOC, str(ALLOC_MIB)], env=env,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        if child.stdout.readline().strip() != "allocated":
            print("per-process memory: the child could not allocate (cuMemAlloc failed)")
            return False
        ok, text = memory_verdict(process_memory(pynvml, child.pid), child.pid, ALLOC_MIB)
    finally:
        child.stdin.close()
        child.wait(30)
    print(f"allocated on {target.uuid} ({target.pool}); {text}")
    return ok


def run_jobs(engine, who, pool, command, gpu_counts, data) -> list[tuple]:
    """Submit one job per GPU count; (row, last output line) of each once all ended."""
    ids = [engine.submit(who, parse_job({"command": command, "gpus": n, "pool": pool})).id
           for n in gpu_counts]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        engine.tick()
        with engine.store.session() as s:
            rows = [s.get(WorkloadRow, i) for i in ids]
        if all(r.state in ("succeeded", "failed") for r in rows):
            break
        time.sleep(0.2)
    out = []
    for r in rows:
        log = open(os.path.join(data, "workloads", r.id, "attempt-0", "output.log")).read()
        print(f"job {r.id} gpus={r.gpus_per_node} {r.state}: {log.strip()}")
        out.append((r, log.strip().splitlines()[-1] if log.strip() else ""))
    return out


def enforcement_holds(engine, who, pool, gpus, enforcement, data) -> Optional[bool]:
    """With the device cgroup on: a job sees and opens only its GPUs,
    whatever it does with CUDA_VISIBLE_DEVICES. None: not checkable here."""
    if enforcement.gpu_mode != CGROUP_V1:
        print(f"enforcement check: NOT RUN, GPU enforcement here is {enforcement.gpu_mode} "
              f"({'; '.join(enforcement.notes) or 'no notes'})")
        return None
    by_index = {g.index: g.uuid for g in gpus}
    minor = {g.index: enforcement.device_minor(g.index, g.uuid) for g in gpus}
    ok = True
    for r, line in run_jobs(engine, who, pool, [sys.executable, "-c", ENFORCE_PROBE], [1, 0], data):
        if r.state != "succeeded":
            ok = False
            continue
        out = json.loads(line)
        mine = [int(i) for i in out["given"].split(",") if i]
        want_uuids = [by_index[i] for i in mine]
        mine_minors = {minor[i] for i in mine}
        want_nodes = {f"nvidia{m}": "opened" if m in mine_minors else "EPERM"
                      for m in set(minor.values())}
        if (len(out["uuids"]) != len(want_uuids) or not all(map(same_device, want_uuids, out["uuids"]))
                or out["nodes"] != want_nodes):
            print(f"  ENFORCEMENT MISMATCH: expected {want_uuids} and {want_nodes}")
            ok = False
    print("enforcement check:", "ok" if ok else "FAILED")
    return ok


def busy_gpu_is_seen(engine, who, pool, gpus, data) -> bool:
    """The inventory's utilization sample (what the culler reads through
    GET /gpus) is ~0 for an idle GPU and rises while a job works it. The
    busiest sample is rendered as the admin panel's heat map."""
    inventory = Inventory(source="nvml")
    inventory.discover()
    idle = inventory.sample()
    wid = engine.submit(who, parse_job({"command": [sys.executable, "-c", CUDA_BUSY, "1024"],
                                        "gpus": 1, "pool": pool})).id
    peak: dict[int, float] = {}
    busiest: tuple[float, dict] = (-1.0, {})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        engine.tick()
        sample = inventory.sample()
        for index, (util, _mem) in sample.items():
            peak[index] = max(peak.get(index, 0.0), util)
        if max((u for u, _ in sample.values()), default=0) > busiest[0]:
            busiest = (max(u for u, _ in sample.values()), sample)
        with engine.store.session() as s:
            if s.get(WorkloadRow, wid).state in ("succeeded", "failed"):
                break
        time.sleep(0.2)
    print(f"utilization idle: {idle}; peak while busy: {peak}")
    render_heatmap(gpus, busiest[1], wid, os.path.join(data, "heatmap.html"))
    if all(g.is_mig for g in gpus if g.pool == pool):
        print("utilization: NVML reports none for MIG devices: not checked")
        return True
    return max(peak.values(), default=0) > 10


def render_heatmap(gpus, sample: dict, busy_wid: str, path: str) -> None:
    """The cluster page's live part as the panel renders it, from NVML."""
    import jinja2
    devices = [{"index": g.index, "uuid": g.uuid, "model": g.model, "memory_mib": g.memory_mib,
                "healthy": g.healthy, "health_reason": g.health_reason, "admin_mark": ""}
               for g in gpus]
    samples = [{"node": "gpu-host", "gpu": g.index, "utilization_pct": sample.get(g.index, (None,))[0],
                "memory_used_mib": sample.get(g.index, (None, None))[1],
                "workload": {"id": busy_wid, "kind": "job", "user": "checker", "team": "ops"}
                if g.index == 0 else None} for g in gpus]
    pools = [{"name": gpus[0].pool, "queued_workloads": 0, "queued_gpus": 0,
              "nodes": [{"name": "gpu-host", "gpus": len(gpus), "drained": False,
                         "source": "nvml", "devices": devices}]}]
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True)
    html = env.get_template("_heatmap.html").render(pools=cluster_model(pools, samples))
    with open(path, "w") as f:
        f.write("<!doctype html><meta charset=utf-8><title>heat map</title>" + html)
    print("heat map:", path, "GPU 0 at", samples[0]["utilization_pct"], "%,",
          samples[0]["memory_used_mib"], "MiB used")


def main() -> int:
    data = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp()
    os.makedirs(data, exist_ok=True)
    import pynvml
    print("MIG:", *mig_lines(pynvml), sep="\n  ")
    source, gpus = Inventory(source="nvml").discover()
    print("inventory:", source)
    for g in gpus:
        mig = f" MIG {g.mig_profile} of GPU {g.parent_index} gi={g.gpu_instance} " \
              f"ci={g.compute_instance}" if g.is_mig else ""
        print(f"  {g.index} {g.uuid} {g.model} {g.memory_mib} MiB pool={g.pool} "
              f"healthy={g.healthy} util={g.utilization_pct}% used={g.memory_used_mib} MiB{mig}"
              f"{' note: ' + g.note if g.note else ''}")
    memory_ok = memory_read_back(gpus) if gpus else None
    nodes = local_nodes(gpus, "gpu-host")
    enforcement = GpuEnforcement().detect(processes_as_root=os.geteuid() == 0)  # no accounts
    enforcement.know_devices(gpus)
    print(f"GPU enforcement: {enforcement.gpu_mode}; limits: {enforcement.limits_mode}; "
          f"notes: {enforcement.notes}; minors: {enforcement.minors}")
    engine = Engine(Store(f"sqlite:///{data}/gpuhub.sqlite"),
                    LocalBackend(enforcement=enforcement), nodes,
                    get_policy("gpuhub"), EngineConfig(data_dir=data))
    engine.start()
    who = Identity("checker", teams=frozenset({"ops"}), can_submit=True)
    pool = nodes[0].node.pool
    ok = memory_ok is not False
    by_index = {g.index: g.uuid for g in gpus}
    seen = set()
    for ln in nodes:  # one pool per GPU type: each MIG profile is one
        jobs = run_jobs(engine, who, ln.node.pool, [sys.executable, "-c", CUDA_PROBE],
                        [1] * ln.node.gpus + [0], data)
        for r, line in jobs:
            if r.state != "succeeded":
                ok = False
                continue
            out = json.loads(line)
            want = [by_index[int(i)] for i in out["indices"].split(",") if i]
            if (len(out["uuids"]) != len(want) or len(want) != r.gpus_per_node
                    or not all(map(same_device, want, out["uuids"]))
                    or out["visible"] != ",".join(want)):
                print(f"  MISMATCH: expected {want}, named so in CUDA_VISIBLE_DEVICES")
                ok = False
            seen.update(want)
    if seen != set(by_index.values()):
        print("  not every GPU was used exactly once:", seen)
        ok = False
    enforced = enforcement_holds(engine, who, pool, gpus, enforcement, data)
    ok = enforced is not False and ok
    ok = busy_gpu_is_seen(engine, who, pool, gpus, data) and ok
    print("RESULT:", ("ok" if enforced else f"ok, but GPU enforcement is {enforcement.gpu_mode}")
          if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
