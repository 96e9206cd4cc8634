"""Configuration of jobs on Kubernetes (``c.KubernetesJobs.*``), used when
``c.GpuHubService.backend = "kubernetes"``."""
from __future__ import annotations

from traitlets import Bool, Dict, Float, Int, Unicode
from traitlets.config import LoggingConfigurable

from .manifests import KubeSettings


class KubernetesJobs(LoggingConfigurable):
    namespace = Unicode("gpuhub-jobs", help="""
        The namespace jobs run in; with ``team_namespaces``, the prefix of
        the teams' namespaces ("gpuhub-jobs-vision"). The service's service
        account needs to create, list and delete Jobs, Pods (list, log) and
        Services there, and list Nodes (the Helm chart's RBAC grants that).
        """).tag(config=True)

    image = Unicode("quay.io/gpuhub/runner:latest", help="""
        The image jobs run in: the job runner image of ``images/`` or any
        image with the user's software. The job's command runs as given.

        Example: ``c.KubernetesJobs.image = "registry.example.org/ml/pytorch:2.5-cuda12"``
        """).tag(config=True)

    pools = Dict(help="""
        How each scheduler pool's GPUs are asked of Kubernetes, with the same
        keys as ``KubeGPUSpawner.gpu_pools``: ``resource`` (default
        ``nvidia.com/gpu``; a MIG resource for slices), ``node_selector``,
        ``tolerations``, ``priority_class_name``. A job in a pool not listed
        here fails at start with that message, rather than waiting forever
        for a resource no node has. Pools and nodes themselves come from the
        cluster: node capacity and the GPU feature discovery labels.

        Example::

            c.KubernetesJobs.pools = {
                "a100-sxm4-80gb": {
                    "node_selector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                     "effect": "NoSchedule"}],
                },
            }
        """).tag(config=True)

    priority_class_names = Dict(help="""
        Kubernetes PriorityClass per GPU Hub priority class, so that the
        kubelet's own evictions follow the same order as the scheduler's.

        Example: ``{"production": "gpuhub-production", "batch": "gpuhub-batch"}``
        """).tag(config=True)

    checkpoint_claim = Unicode("", help="""
        A ReadWriteMany PersistentVolumeClaim mounted in every job at
        ``checkpoint_mount``; each job gets ``$GPUHUB_CHECKPOINT_DIR`` under
        it, so a preempted job resumes from its checkpoint on another node.
        Empty: no checkpoint volume.
        """).tag(config=True)

    checkpoint_mount = Unicode("/checkpoints", help="Where ``checkpoint_claim`` is mounted."
                               ).tag(config=True)

    workspace_claim = Unicode("", help="""
        The ReadWriteMany PersistentVolumeClaim of the users' workspaces,
        which the service also mounts at ``GpuHubService.workspace_root``:
        mounted in every job at ``workspace_mount``, and a job runs in the
        directory it was submitted from (its notebook or script is there).
        Empty: jobs get no workspace; their command must find its files in
        the image or the checkpoint volume.
        """).tag(config=True)

    workspace_mount = Unicode("/home", help="Where ``workspace_claim`` is mounted (the "
                              "same path as in the service's pod).").tag(config=True)

    dataset_claim = Unicode("", help="""
        The claim holding datasets that are not in the users' workspaces (the
        service mounts it at ``dataset_mount`` and ``GpuHubService.dataset_roots``
        names folders there): a job that asks for a dataset gets its folder
        read-only at ``/datasets/NAME``, a subPath of this claim or of
        ``workspace_claim``. Empty: datasets only from the workspaces.
        """).tag(config=True)

    dataset_mount = Unicode("/datasets-store", help="Where ``dataset_claim`` is mounted in "
                            "the service's pod.").tag(config=True)

    team_space_claim = Unicode("", help="""
        Each team's shared folder (docs/storage.md): the ReadWriteMany
        PersistentVolumeClaim, ``{team}`` filled in, mounted in every job of
        the team at ``team_space_mount`` (``$GPUHUB_TEAM_DIR``).
        ``gpuhub kube-manifests`` prints one claim per team (in its namespace,
        of ``team_space_size`` or its ``GpuHubService.team_storage_quotas``).
        Empty: no team spaces. Example: ``"gpuhub-team-{team}"``.
        """).tag(config=True)

    team_space_mount = Unicode("/team", help="Where ``team_space_claim`` is mounted."
                               ).tag(config=True)

    team_space_class = Unicode("", help="""
        The StorageClass of the team spaces' claims (one with ReadWriteMany:
        NFS, CephFS, EFS, Filestore). Empty: the cluster's default.
        """).tag(config=True)

    team_space_size = Unicode("100Gi", help="""
        The size a team space's claim asks for when its team has no storage quota.
        """).tag(config=True)

    service_account = Unicode("", help="""
        The service account of the jobs' pods (empty: the namespace's default).
        """).tag(config=True)

    team_namespaces = Bool(False, help="""
        Run each team's jobs in a namespace of its own, with a NetworkPolicy
        that lets in only the team's pods and the hub's namespace
        (``gpuhub kube-manifests`` prints them).
        """).tag(config=True)

    hub_namespace = Unicode("jupyterhub", help="""
        The hub's namespace, allowed through the teams' NetworkPolicies.
        """).tag(config=True)

    kueue = Bool(False, help="""
        Label jobs with ``kueue.x-k8s.io/queue-name: team-<team>`` for sites
        that already run Kueue; the ClusterQueues and LocalQueues that carry
        GPU Hub's quotas are printed by ``gpuhub kube-manifests``.
        """).tag(config=True)

    watch = Bool(True, help="""
        List the Jobs, Deployments, Pods and nodes once, then watch them
        (from the list's resourceVersion, with bookmarks; a new list only
        after 410 Gone): an ended job or a failed node is acted on within
        milliseconds, and the API server sends only what changed. False: a
        full list of each every ``refresh_interval`` (for API servers or
        proxies that do not stream watches). The RBAC needs ``watch`` on
        them (the Helm chart grants it).
        """).tag(config=True)

    watch_timeout = Int(300, min=1, help="""
        Seconds each watch request asks the API server to stay open
        (``timeoutSeconds``); when it ends the backend watches again from
        the last resourceVersion, at once. A watch silent 30 s longer than
        this (not even a bookmark) counts as broken.
        """).tag(config=True)

    watch_backoff = Float(0.5, min=0.01, help="""
        Seconds before the first reconnect after a watch or list fails (a
        dropped connection, a 5xx); doubled on each failure in a row, up to
        ``watch_backoff_max``, with a random part of up to half taken off
        (jitter). Back to this once an event gets through.
        """).tag(config=True)

    watch_backoff_max = Float(30.0, min=0.01, help="""
        The longest wait between reconnects (see ``watch_backoff``).
        """).tag(config=True)

    refresh_interval = Float(2.0, help="""
        With ``watch = False``: seconds between listings of the jobs, pods
        and nodes, i.e. how soon an ended job or a failed node is noticed.
        """).tag(config=True)

    def backend_options(self) -> dict:
        """The keyword arguments of ``KubernetesBackend`` these traits set."""
        return dict(refresh_interval=self.refresh_interval, watch=self.watch,
                    watch_timeout=self.watch_timeout, backoff_base=self.watch_backoff,
                    backoff_cap=self.watch_backoff_max)

    def settings(self) -> KubeSettings:
        return KubeSettings(namespace=self.namespace, image=self.image, pools=self.pools,
                            priority_class_names=self.priority_class_names,
                            checkpoint_claim=self.checkpoint_claim,
                            checkpoint_mount=self.checkpoint_mount,
                            workspace_claim=self.workspace_claim,
                            workspace_mount=self.workspace_mount,
                            team_space_claim=self.team_space_claim,
                            team_space_mount=self.team_space_mount,
                            team_space_class=self.team_space_class,
                            team_space_size=self.team_space_size,
                            dataset_claim=self.dataset_claim,
                            dataset_mount=self.dataset_mount,
                            service_account=self.service_account,
                            team_namespaces=self.team_namespaces,
                            hub_namespace=self.hub_namespace, kueue=self.kueue)
