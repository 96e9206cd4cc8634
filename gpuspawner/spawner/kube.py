"""KubeGPUSpawner: notebook servers as Kubernetes pods on the GPUs the
scheduler service gave them.

The admission path is the one LocalGPUSpawner uses (``GPUSpawnerMixin``):
the server waits in the team's queue until the scheduler places it on a node.
Then the pod asks Kubernetes for that many GPUs of the pool's resource
(``nvidia.com/gpu`` or a MIG resource), on the pool's nodes (node selector,
tolerations), pinned to the node the scheduler chose, with the Kubernetes
PriorityClass of its GPU Hub priority and labels that say whose it is.

What one spawn changes on the spawner (GPU limits, node selector, ...) never
reaches the next spawn: JupyterHub keeps one Spawner object per server for
all its spawns, and KubeSpawner's own overrides (profiles, group overrides)
merge into its dicts in place and stay there, so the configured values are
remembered when the spawner is made and put back by ``clear_state``, and
every change is made on copies.
"""
from __future__ import annotations

import copy
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any, Optional

from kubespawner import KubeSpawner
from tornado import web
from traitlets import Bool, Dict, Integer, TraitError, Unicode, default, validate

from ..backends.kubernetes.labels import label_value
from ..backends.kubernetes.manifests import KubeSettings, dataset_mounts, team_claim
from .admission import GPUSpawnerMixin
from .options import GpuRequest

LABEL_PREFIX = "gpuhub.io/"

# The KubeSpawner traits one GPU spawn sets (and clear_state puts back).
GPU_TRAITS = (
    "extra_resource_limits",
    "extra_resource_guarantees",
    "node_selector",
    "tolerations",
    "node_affinity_required",
    "priority_class_name",
    "extra_labels",
    "extra_annotations",
    "volumes",          # a server's datasets (dataset_volumes) and team space
    "volume_mounts",
)

def _template_literal(text: str) -> str:
    # KubeSpawner expands {username}-style fields in label and annotation
    # values with str.format: a brace in a team name must stay a brace.
    return text.replace("{", "{{").replace("}", "}}")


class KubeGPUSpawner(GPUSpawnerMixin, KubeSpawner):
    """A KubeSpawner whose servers ask the scheduler service for GPUs first
    and run on exactly the node and the number of GPUs it gave them."""

    gpu_pools = Dict(help="""
        How the GPUs of each scheduler pool are asked of Kubernetes, by pool
        name (the pool names the scheduler service reports).

        Keys of each pool:

        - ``resource``: the extended resource the GPUs are counted in, as the
          NVIDIA device plugin advertises it: ``nvidia.com/gpu`` for whole
          GPUs, a MIG resource such as ``nvidia.com/mig-1g.10gb`` (the
          device plugin's mixed strategy) for slices. Default ``nvidia.com/gpu``.
        - ``node_selector``: node labels the pool's nodes have (e.g. the GPU
          feature discovery's ``nvidia.com/gpu.product``), added to
          ``KubeSpawner.node_selector``.
        - ``tolerations``: tolerations for the taints of the pool's nodes,
          added to ``KubeSpawner.tolerations``.
        - ``priority_class_name`` (optional): the Kubernetes PriorityClass of
          the pool's pods, instead of the one ``priority_class_names`` gives.

        A GPU server asking for a pool that is not here fails to start (and
        its GPUs go back to the scheduler): a pod that asks Kubernetes for the
        wrong resource would never be scheduled. CPU-only servers use none of
        this.

        Example::

            c.KubeGPUSpawner.gpu_pools = {
                "a100": {
                    "resource": "nvidia.com/gpu",
                    "node_selector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                     "effect": "NoSchedule"}],
                },
                "a100-mig-1g": {
                    "resource": "nvidia.com/mig-1g.10gb",
                    "node_selector": {"nvidia.com/mig.strategy": "mixed"},
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                     "effect": "NoSchedule"}],
                    "priority_class_name": "gpuhub-mig",
                },
            }
        """).tag(config=True)

    @validate("gpu_pools")
    def _validate_gpu_pools(self, proposal):
        # A misspelt key would silently drop a node selector or a toleration.
        known = {"resource", "node_selector", "tolerations", "priority_class_name"}
        for pool, spec in proposal["value"].items():
            if not isinstance(spec, dict):
                raise TraitError(f"gpu_pools[{pool!r}] must be a dict, not {spec!r}")
            unknown = set(spec) - known
            if unknown:
                raise TraitError(f"gpu_pools[{pool!r}]: unknown keys {sorted(unknown)}; "
                                 f"known: {sorted(known)}")
            if not isinstance(spec.get("node_selector") or {}, dict):
                raise TraitError(f"gpu_pools[{pool!r}]['node_selector'] must be a dict")
            if not isinstance(spec.get("tolerations") or [], list):
                raise TraitError(f"gpu_pools[{pool!r}]['tolerations'] must be a list")
        return proposal["value"]

    pin_to_scheduled_node = Bool(True, help="""
        Require the pod to run on the node the GPU Hub scheduler placed the
        server on (a required node affinity on ``scheduled_node_label``).

        The scheduler decides which node's GPUs a server holds; if the pod
        landed on another node of the pool, the scheduler's bookkeeping and
        the cluster would disagree, and another admitted server would find
        its node full. Turn it off only if the scheduler's node names are not
        the cluster's (then the pool's node selector alone places the pod).

        Example::

            c.KubeGPUSpawner.pin_to_scheduled_node = False
        """).tag(config=True)

    scheduled_node_label = Unicode("kubernetes.io/hostname", help="""
        The node label whose value is the node name the scheduler service
        uses, for ``pin_to_scheduled_node``.

        ``kubernetes.io/hostname`` is the node's name on most clusters; on
        some clouds it is not, then name a label that is (or label the nodes).

        Example::

            c.KubeGPUSpawner.scheduled_node_label = "gpuhub.io/node"
        """).tag(config=True)

    priority_class_names = Dict({"interactive": "gpuhub-interactive"}, help="""
        The Kubernetes PriorityClass of GPU pods, by GPU Hub priority class
        (notebook servers are ``interactive``).

        With these, the cluster's own preemption agrees with the GPU Hub
        scheduler's: a notebook is not evicted by the kubelet or by
        kube-scheduler for lower priority pods. The PriorityClasses must
        exist in the cluster (a pod naming a missing one is refused). A
        priority with no entry leaves ``KubeSpawner.priority_class_name``;
        an empty dict turns this off.

        Example::

            c.KubeGPUSpawner.priority_class_names = {
                "interactive": "gpuhub-interactive",
                "production": "gpuhub-production",
            }
        """).tag(config=True)

    workspace_claim = Unicode("", help="""
        The users' workspaces' claim (ReadWriteMany), as the service's
        ``KubernetesBackend.workspace_claim``: a server's dataset whose
        folder is in a workspace is a read-only subPath of it at
        /datasets/NAME, as a job's is. "" for none.

        Example: ``c.KubeGPUSpawner.workspace_claim = "gpuhub-workspaces"``
        """).tag(config=True)

    workspace_mount = Unicode("/home", help="""
        Where the service mounts ``workspace_claim`` (its
        ``KubernetesBackend.workspace_mount``): the datasets' registered
        paths start there.
        """).tag(config=True)

    dataset_claim = Unicode("", help="""
        The claim of datasets kept outside the workspaces, as the service's
        ``KubernetesBackend.dataset_claim`` (mounted read-only in the pod
        when a dataset of it is asked for). "" for none.

        Example: ``c.KubeGPUSpawner.dataset_claim = "gpuhub-datasets"``
        """).tag(config=True)

    dataset_mount = Unicode("/datasets-store", help="""
        Where the service mounts ``dataset_claim`` (its
        ``KubernetesBackend.dataset_mount``).
        """).tag(config=True)

    team_space_claim = Unicode("", help="""
        Each team's space: a ReadWriteMany claim per team, with ``{team}``
        for its name, in the namespace the notebook pods run in. A server
        started for a team mounts that team's claim read-write at
        ``team_space_mount`` and gets it as ``$GPUHUB_TEAM_DIR``, as the
        team's jobs do (the service's ``KubernetesBackend.team_space_claim``
        names the same claims; ``gpuhub kube-manifests`` prints them). A
        pod can mount only a claim of its own namespace: with the service's
        ``team_namespaces``, the claims live in the teams' namespaces and
        this stays "" (docs/storage.md). "" (the default): none.

        Example: ``c.KubeGPUSpawner.team_space_claim = "gpuhub-team-{team}"``
        """).tag(config=True)

    team_space_mount = Unicode("/team", help="""
        Where a server sees its team's space (``team_space_claim``), as the
        service's ``KubernetesBackend.team_space_mount`` puts it in jobs.
        """).tag(config=True)

    pod_start_timeout = Integer(600, help="""
        Seconds a pod may take to start once the scheduler has given the
        server its GPUs (image pull included), and to disappear when stopped.

        ``start_timeout`` (24 hours by default here) bounds the whole spawn,
        waiting in the GPU queue included; this bounds the part that holds
        GPUs, so that a pod stuck Pending gives its GPUs back.

        Example::

            c.KubeGPUSpawner.pod_start_timeout = 1200  # large images
        """).tag(config=True)

    @default("start_timeout")
    def _start_timeout_default(self):
        # A spawn may wait in the GPU queue; the progress page says why.
        return 24 * 3600

    _pod_starting = False
    _configured: Optional[dict] = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The configured values, before any spawn changes them (copies: what
        # KubeSpawner's overrides merge in place must not reach them).
        self._configured = {name: copy.deepcopy(getattr(self, name)) for name in GPU_TRAITS}
        self._restore_configured()

    def _restore_configured(self):
        for name, value in self._configured.items():
            setattr(self, name, copy.deepcopy(value))

    def clear_state(self):
        super().clear_state()
        # Nothing of a spawn's GPU settings may leak into the next one (a
        # failed GPU spawn must not make the next CPU spawn ask for GPUs).
        if self._configured is not None:
            self._restore_configured()
        self._pod_starting = False

    # ---- what a spawn applies ------------------------------------------
    def gpu_settings(self, request: Optional[GpuRequest], workload: Optional[dict]) -> dict:
        """What this spawn adds to the pod, from the request and the running
        workload ``admit()`` returned (None for CPU-only). Pure: no I/O, no
        change to the spawner.

        Returns one entry per trait of ``GPU_TRAITS``, each GPU Hub's part
        only (``apply_gpu_settings`` merges them with the configured values):
        ``node_affinity_required`` is a list of at most one node selector
        term, whose expressions are required on top of the configured ones.
        """
        settings: dict[str, Any] = {
            "extra_resource_limits": {}, "extra_resource_guarantees": {}, "node_selector": {},
            "tolerations": [], "node_affinity_required": [], "priority_class_name": "",
            "extra_labels": {}, "extra_annotations": {},
        }
        if request is None:
            return settings
        labels, annotations = settings["extra_labels"], settings["extra_annotations"]
        labels[LABEL_PREFIX + "team"] = label_value(request.team)
        annotations[LABEL_PREFIX + "team"] = request.team
        if request.cpu_only:
            annotations[LABEL_PREFIX + "gpus"] = "0"
            return settings
        if not workload:
            raise ValueError(f"a request for {request.gpus} GPUs has no running workload")
        pool = workload.get("pool") or request.pool
        if pool not in self.gpu_pools:
            raise ValueError(f"GPU pool {pool!r} is not configured in KubeGPUSpawner.gpu_pools "
                             f"(configured: {', '.join(sorted(self.gpu_pools)) or 'none'})")
        spec = self.gpu_pools[pool]
        placement = workload.get("placement") or []
        if placement:  # a notebook runs on one node; "gpus": its device indices there
            held = placement[0]["gpus"]
            gpus = len(held) if isinstance(held, (list, tuple)) else int(held)
        else:
            gpus = int(workload.get("gpus") or request.gpus)
        resource = spec.get("resource") or "nvidia.com/gpu"
        settings["extra_resource_limits"] = {resource: str(gpus)}
        # Extended resources: requests must equal limits.
        settings["extra_resource_guarantees"] = {resource: str(gpus)}
        settings["node_selector"] = copy.deepcopy(dict(spec.get("node_selector") or {}))
        settings["tolerations"] = copy.deepcopy(list(spec.get("tolerations") or []))
        if self.pin_to_scheduled_node and placement:
            settings["node_affinity_required"] = [{"matchExpressions": [{
                "key": self.scheduled_node_label, "operator": "In",
                "values": [placement[0]["node"]]}]}]
        priority = workload.get("priority") or "interactive"
        settings["priority_class_name"] = (spec.get("priority_class_name")
                                           or self.priority_class_names.get(priority) or "")
        wid = str(workload.get("id") or "")
        labels[LABEL_PREFIX + "pool"] = label_value(pool)
        labels[LABEL_PREFIX + "workload"] = label_value(wid)
        annotations.update({LABEL_PREFIX + "pool": pool, LABEL_PREFIX + "workload": wid,
                            LABEL_PREFIX + "gpus": str(gpus)})
        if placement:
            annotations[LABEL_PREFIX + "node"] = str(placement[0]["node"])
        return settings

    def apply_gpu_settings(self, settings: dict) -> None:
        """Set ``gpu_settings()``'s result on the traits, merged with their
        present values (configured, or changed by group overrides for this
        spawn) into new objects: the configured ones are never changed."""
        s = copy.deepcopy(settings)

        def current(name):
            return copy.deepcopy(getattr(self, name))

        for name in ("extra_resource_limits", "extra_resource_guarantees", "node_selector"):
            setattr(self, name, {**current(name), **s.get(name, {})})
        for name in ("extra_labels", "extra_annotations"):
            ours = {k: _template_literal(v) for k, v in s.get(name, {}).items()}
            setattr(self, name, {**current(name), **ours})
        tolerations = list(self._sorted_dict_values(current("tolerations")) or [])
        self.tolerations = tolerations + list(s.get("tolerations", []))
        # Node selector terms are ORed: our expressions are ANDed into each
        # configured term (a term of their own would allow any node).
        terms = list(self._sorted_dict_values(current("node_affinity_required")) or [])
        ours = [e for t in s.get("node_affinity_required", [])
                for e in t.get("matchExpressions", t.get("match_expressions", []))]
        if ours:
            if terms:
                for term in terms:
                    key = "match_expressions" if "match_expressions" in term else "matchExpressions"
                    term[key] = list(term.get(key) or []) + copy.deepcopy(ours)
            else:
                terms = [{"matchExpressions": ours}]
        self.node_affinity_required = terms
        if s.get("priority_class_name"):
            self.priority_class_name = s["priority_class_name"]

    def dataset_volumes(self, datasets) -> tuple[list[dict], list[dict]]:
        """The volumes and read-only mounts that show each of ``datasets``
        ((name, folder), as the service gave them) at /datasets/NAME: the
        jobs' manifests' own (backends/kubernetes/manifests.py)."""
        settings = KubeSettings(workspace_claim=self.workspace_claim,
                                workspace_mount=self.workspace_mount,
                                dataset_claim=self.dataset_claim, dataset_mount=self.dataset_mount)
        mounts = dataset_mounts(SimpleNamespace(datasets=tuple(datasets)), settings)
        claims = {"workspaces": self.workspace_claim, "datasets": self.dataset_claim}
        volumes = [{"name": f"gpuhub-{v}", "persistentVolumeClaim": {
            "claimName": claims[v], "readOnly": True}}
            for v in sorted({m["name"] for m in mounts})]
        return volumes, [dict(m, name=f"gpuhub-{m['name']}") for m in mounts]

    def apply_datasets(self, datasets) -> None:
        """Add ``dataset_volumes`` to the configured volumes (on copies)."""
        if not datasets:
            return
        try:
            volumes, mounts = self.dataset_volumes(datasets)
        except ValueError as e:
            raise web.HTTPError(500, f"cannot start the server with its datasets: {e}") from e
        self.volumes = list(self._sorted_dict_values(copy.deepcopy(self.volumes)) or []) + volumes
        self.volume_mounts = (list(self._sorted_dict_values(copy.deepcopy(self.volume_mounts))
                                   or []) + mounts)

    def team_space_volume(self, team: str) -> tuple[list[dict], list[dict]]:
        """The volume and read-write mount of ``team``'s space claim (none
        without ``team_space_claim``), named as the jobs' manifests name it."""
        claim = team_claim(team, KubeSettings(team_space_claim=self.team_space_claim))
        if not claim:
            return [], []
        return ([{"name": "gpuhub-team-space", "persistentVolumeClaim": {"claimName": claim}}],
                [{"name": "gpuhub-team-space", "mountPath": self.team_space_mount}])

    def apply_team_space(self, team: str) -> None:
        """Add ``team_space_volume`` to the configured volumes (on copies)."""
        volumes, mounts = self.team_space_volume(team)
        if volumes:
            self.volumes = list(self._sorted_dict_values(copy.deepcopy(self.volumes)) or []) \
                + volumes
            self.volume_mounts = list(self._sorted_dict_values(
                copy.deepcopy(self.volume_mounts)) or []) + mounts

    # ---- lifecycle ---------------------------------------------------------
    @contextmanager
    def _pod_timeouts(self):
        # KubeSpawner waits start_timeout for the pod to run and to vanish;
        # once GPUs are held, that is pod_start_timeout.
        saved = self.start_timeout
        self.start_timeout = min(saved, self.pod_start_timeout)
        try:
            yield
        finally:
            self.start_timeout = saved

    async def start(self):
        self._pod_starting = False
        self._start_future = None  # KubeSpawner's, for progress(); not the last spawn's
        workload = await self.admit()
        try:
            try:
                self.apply_gpu_settings(self.gpu_settings(self.gpu_request, workload))
            except ValueError as e:
                raise web.HTTPError(500, f"cannot start the server: {e}")
            self.apply_datasets(self.datasets)
            self.apply_team_space(self.gpu_request.team if self.gpu_request else "")
            with self._pod_timeouts():
                future = super().start()
                self._pod_starting = True
                return await future
        except BaseException:
            await self.release("the server failed to start")
            raise

    def get_env(self):
        env = super().get_env()
        # The device plugin gives the container its GPUs, numbered from 0:
        # the scheduler's host device indices mean nothing inside it.
        env.update(self.gpu_env())
        if self.gpu_request is not None and self.team_space_volume(self.gpu_request.team)[0]:
            env["GPUHUB_TEAM_DIR"] = self.team_space_mount
        if self.gpu_request is not None and self.gpu_request.cpu_only:
            # With the NVIDIA runtime as the default, a CUDA image's own
            # NVIDIA_VISIBLE_DEVICES=all would show a CPU-only pod every GPU
            # of its node.
            env["NVIDIA_VISIBLE_DEVICES"] = "none"
            env["CUDA_VISIBLE_DEVICES"] = ""
        return env

    async def poll(self):
        return await self.poll_and_check(super().poll)

    async def stop(self, now=False):
        async def base_stop():
            with self._pod_timeouts():
                await KubeSpawner.stop(self, now=now)
        await self.stop_and_release(base_stop)

    async def progress(self):
        """The queue's messages while admission waits, then the pod's events."""
        async for event in self.admission_progress(until=lambda: self._pod_starting):
            yield event
        if not self._pod_starting:
            return
        async for event in KubeSpawner.progress(self):
            if isinstance(event.get("progress"), (int, float)):
                # KubeSpawner counts from 0; admission has had the first half.
                event = dict(event, progress=50 + int(event["progress"]) // 2)
            yield event
