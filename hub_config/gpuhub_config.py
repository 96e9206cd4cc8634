# The scheduler service's configuration (traitlets). Every option and its
# help text: `python -m gpuspawner.service --help-all`.
import json
import os

c = get_config()  # noqa: F821

# GPUs: NVML when the host has NVIDIA GPUs, else four fake GPUs in the pool
# "default" (see Inventory.declared).
c.Inventory.source = "auto"

# Each job and replica may open only its GPUs' device nodes (a device cgroup
# where the host allows one; docs/service.md, "GPU enforcement and limits").
# Memory/CPU limits per team or pool; the same lines in jupyterhub_config.py
# hold notebook servers to them:
# c.GpuEnforcement.team_limits = {"vision": {"memory": "64G", "cpus": 16}}

# Everyone in no other team is in the team "default", which guarantees the
# GPUs no other team owns (all of them until teams are made on the admin
# panel's Teams & quotas page), so a first start gives GPUs at once.
c.GpuHubService.default_team = "default"

# Teams and quotas created at first start (`gpuhub up --demo` writes some).
data_dir = os.environ.get("GPUHUB_DATA_DIR", "gpuhub-data")
initial = os.path.join(data_dir, "initial-users.json")
if os.path.exists(initial):
    with open(initial) as f:
        c.GpuHubService.teams = json.load(f).get("teams", {})

c.GpuHubService.default_grace_period = 30

# GPU sharing (docs/gpus.md, "Sharing a GPU"): several notebooks or jobs on
# one GPU, each GPU of a pool in N slots. `gpuhub up --gpu-sharing default=4`
# sets it for this host's pool "default" (GPUHUB_GPU_SHARING); or here:
# c.GpuHubService.gpu_sharing = {"default": {"share_units": 4}}
if os.environ.get("GPUHUB_GPU_SHARING"):
    c.GpuHubService.gpu_sharing = {
        pool: {"share_units": int(units)}
        for pool, units in (p.split("=") for p in os.environ["GPUHUB_GPU_SHARING"].split(","))}
