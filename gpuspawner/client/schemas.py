"""The service's objects, as the OpenAPI document's components describe them
(every key optional: answers leave out what does not apply).

Generated from gpuspawner/service/api/openapi.yaml by scripts/gen_client.py
(``make client``): do not edit; change the document and run it again."""
from __future__ import annotations

from typing import Any, Optional, TypedDict, Union


class Notice(TypedDict, total=False):
    id: int
    user: str
    server: str
    kind: str
    message: str
    created_at: str
    expires_at: Optional[str]
    cleared_at: Optional[str]
    data: dict[str, Any]


class AuditEntry(TypedDict, total=False):
    id: int
    time: str
    actor: str
    action: str
    target: str
    detail: dict[str, Any]


class Me(TypedDict, total=False):
    name: str
    teams: list[str]
    leads: list[str]
    admin: bool
    can_submit: bool
    workspace: str


class JobSpec(TypedDict, total=False):
    """Give exactly one of command and notebook."""
    name: str
    kind: str
    command: Union[str, list[str]]
    notebook: str
    parameters: dict[str, Any]
    output_notebook: str
    working_dir: str
    env: dict[str, str]
    pool: str
    gpus_per_node: int
    gpus: int
    gpu_share: Optional[Union[str, float]]
    gpu_memory: Optional[Union[str, float]]
    cpus: Union[float, str]
    memory: Union[str, int]
    nodes: int
    topology: str
    topology_key: str
    time_limit: Union[float, str]
    grace_period: Union[float, str]
    priority: str
    checkpoint_dir: str
    project: str
    team: str
    after: list[Dependency]
    datasets: list[str]


class Dependency(TypedDict, total=False):
    id: str
    condition: str


class SweepRequest(TypedDict, total=False):
    """Give exactly one of grid and tasks (at most 10000 tasks)."""
    name: str
    team: str
    template: JobSpec
    grid: dict[str, list[Any]]
    tasks: list[dict[str, Any]]
    max_running: Optional[int]
    metric: SweepMetric
    after: list[Dependency]


class SweepMetric(TypedDict, total=False):
    """Read when a task succeeds: from its output notebook's scraps (scrapbook's glue,
    `application/scrapbook.scrap.json+json`, or papermill's record) named `name`, else from
    `metrics.json` (`{"<name>": number}`) in its attempt directory (GPUHUB_ATTEMPT_DIR), then
    its working directory."""
    name: str
    goal: str


class SweepCounts(TypedDict, total=False):
    waiting: int
    queued: int
    held: int
    running: int
    stopping: int
    succeeded: int
    failed: int
    cancelled: int
    stopped: int


class SweepTask(TypedDict, total=False):
    index: int
    parameters: dict[str, Any]
    workload_id: str
    state: str
    reason: str
    metric: Optional[float]
    output_notebook: Optional[str]


class Sweep(TypedDict, total=False):
    id: str
    name: str
    team: str
    user: str
    state: str
    max_running: Optional[int]
    total: int
    counts: SweepCounts
    metric: SweepMetric
    best: Optional[SweepBest]
    after: list[Dependency]
    tasks: list[SweepTask]
    submitted_at: str
    finished_at: Optional[str]


class ScheduleRequest(TypedDict, total=False):
    name: str
    team: str
    cron: str
    timezone: str
    spec: JobSpec
    paused: bool
    catch_up: str


class ScheduleEdit(TypedDict, total=False):
    name: str
    cron: str
    timezone: str
    spec: JobSpec
    catch_up: str


class Schedule(TypedDict, total=False):
    id: str
    name: str
    team: str
    user: str
    cron: str
    timezone: str
    spec: dict[str, Any]
    paused: bool
    catch_up: str
    next_run_at: Optional[str]
    last_run_at: Optional[str]
    last_workload_id: Optional[str]
    last_error: Optional[str]
    last_error_at: Optional[str]
    created_at: str
    updated_at: str
    recent: list[dict[str, Any]]


class ServerRequest(TypedDict, total=False):
    """GPUs for a notebook server, asked for by the hub's spawner on a user's behalf."""
    kind: str
    user: str
    team: str
    pool: str
    gpus_per_node: int
    gpus: int
    gpu_share: Optional[Union[str, float]]
    gpu_memory: Optional[Union[str, float]]
    cpus: Union[float, str]
    memory: Union[str, int]
    name: str
    priority: str
    project: str
    datasets: list[str]


class Workload(TypedDict, total=False):
    after: list[Dependency]
    sweep_id: Optional[str]
    sweep_index: Optional[int]
    devices: list[int]
    device_uuids: list[str]
    share_env: dict[str, str]
    share_enforcement: WorkloadShare_enforcement
    queue_position: int
    expected_start: ExpectedStart
    output_notebook: str
    id: str
    name: str
    kind: str
    team: str
    user: str
    project: str
    state: str
    reason: str
    pool: str
    gpus_total: int
    gpus: int
    gpus_per_node: int
    gpu_share: Optional[float]
    cpus: Optional[float]
    memory: Optional[int]
    nodes: int
    priority: str
    time_limit: Optional[float]
    grace_period: Optional[float]
    command: Optional[list[str]]
    notebook: Optional[str]
    parameters: dict[str, Any]
    working_dir: Optional[str]
    env: dict[str, str]
    env_redacted: bool
    checkpoint_dir: Optional[str]
    attempt: int
    exit_code: Optional[int]
    cancel_requested: bool
    submitted_at: str
    started_at: Optional[str]
    finished_at: Optional[str]
    eligible_at: Optional[str]
    schedule_id: Optional[str]
    datasets: list[str]
    placement: list[PlacedNode]
    attempts: list[Attempt]


class PlacedNode(TypedDict, total=False):
    node: str
    devices: list[int]
    gpus: list[int]


class ExpectedStart(TypedDict, total=False):
    """While queued: when it is expected to start, from the scheduler's own plan (running work
    ends at its learned run time, capped by its time limit; every workload ahead is booked in
    turn), and the range it falls in with 80% coverage, calibrated on how earlier estimates
    turned out. `time` is null when the start cannot be told (`reason` says why). Remade
    after every scheduling cycle; null until the first cycle after submission."""
    time: Optional[str]
    earliest: str
    latest: str
    in_seconds: int
    text: str
    basis: str
    reason: str
    calibrated_on: int
    made_at: str


class Attempt(TypedDict, total=False):
    number: int
    state: str
    gpus: float
    borrowed: float
    placement: list[PlacedNode]
    started_at: str
    ended_at: Optional[str]
    exit_code: Optional[int]
    reason: str


class Event(TypedDict, total=False):
    id: int
    type: str
    time: str
    attempt: Optional[int]
    message: str
    data: dict[str, Any]


class Pool(TypedDict, total=False):
    name: str
    capacity: int
    total: int
    used: float
    free: int
    queued_workloads: int
    queued_gpus: int
    teams: dict[str, float]
    sharing: Any
    nodes: list[PoolNode]


class PoolSharing(TypedDict, total=False):
    """A pool whose GPUs several workloads may share (GpuHubService.gpu_sharing)."""
    share_units: int
    gpu_memory_mib: int
    share_memory_mib: int
    smallest_share: str
    enforcement: PoolSharingEnforcement


class PoolNode(TypedDict, total=False):
    name: str
    gpus: int
    drained: bool
    source: str
    devices: list[dict[str, Any]]


class QuotaUse(TypedDict, total=False):
    """A team's quota in a pool, and what it holds there now."""
    nominal: int
    borrowing_limit: Optional[int]
    lending_limit: Optional[int]
    used: float
    cpus: Optional[float]
    memory: Optional[int]
    used_cpus: float
    used_memory: int


class Quota(TypedDict, total=False):
    nominal: int
    borrowing_limit: Optional[int]
    lending_limit: Optional[int]
    cpus: Optional[float]
    memory: Optional[Union[int, str]]


class Team(TypedDict, total=False):
    name: str
    group: str
    weight: float
    default: bool
    quotas: dict[str, QuotaUse]
    notebook_gpu_limits: dict[str, int]
    storage: TeamStorage
    storage_quota: Optional[int]
    warnings: list[str]


class DatasetRequest(TypedDict, total=False):
    name: str
    path: str
    team: str
    pools: list[str]
    node_labels: dict[str, str]
    shared_with: list[str]


class Dataset(TypedDict, total=False):
    name: str
    team: str
    path: str
    mount: str
    created_by: str
    created_at: str
    shared_with: list[str]
    pools: list[str]
    node_labels: dict[str, str]
    size_bytes: Optional[int]
    files: Optional[int]
    measured_at: Optional[str]


class TeamStorage(TypedDict, total=False):
    """the team's space (docs/storage.md) as last measured; null: it has none"""
    path: str
    used_bytes: int
    space_bytes: int
    datasets_bytes: int
    quota_bytes: Optional[int]
    files: Optional[int]
    measured_at: Optional[float]
    state: str


class TeamChange(TypedDict, total=False):
    weight: Optional[float]
    quotas: dict[str, Quota]
    storage_quota: Optional[Union[int, str]]


class Deploy(TypedDict, total=False):
    name: str
    team: str
    model_dir: str
    runtime: str
    predictor: str
    pool: str
    gpus: int
    gpu_share: Optional[Union[str, float]]
    gpu_memory: Optional[Union[str, float]]
    min_replicas: int
    max_replicas: int
    target_in_flight: float
    scale_to_zero_after: float
    canary_percent: int
    rollback: DeployRollback
    max_batch_size: int
    max_batch_time: float
    after: list[Dependency]


class Revision(TypedDict, total=False):
    number: int
    model_dir: str
    runtime: str
    predictor: str
    created_at: str
    created_by: str
    state: str
    reason: str
    after: list[Dependency]
    replicas: list[str]
    ready_replicas: int
    in_flight: int


class Deployment(TypedDict, total=False):
    team: str
    name: str
    gpus: int
    gpu_share: Optional[float]
    endpoint: str
    traffic: dict[str, int]
    stable_revision: int
    canary_revision: Optional[int]
    message: str
    revisions: list[Revision]


class PreviewRequest(TypedDict, total=False):
    since: str
    set: dict[str, Optional[Union[float, bool]]]


class Preview(TypedDict, total=False):
    id: str
    actor: str
    state: str
    progress: float
    since: str
    until: str
    created_at: str
    finished_at: Optional[str]
    changes: dict[str, Any]
    error: Optional[str]
    result: Optional[dict[str, Any]]
    applied_at: Optional[str]
    applied_by: Optional[str]
    apply_refusal: Optional[str]


Usage = TypedDict("Usage", {
    "from": "str",
    "to": "str",
    "group_by": "list[str]",
    "total_gpu_seconds": "float",
    "total_cpu_hours": "float",
    "total_memory_gib_hours": "float",
    "total_cost": "float",
    "cpu_hour_price": "float",
    "memory_gib_hour_price": "float",
    "currency": "str",
    "prices": "dict[str, float]",
    "culler": "dict[str, Any]",
    "storage": "UsageStorage",
    "series": "UsageSeries",
    "rows": "list[dict[str, Any]]",
}, total=False)


class SweepBest(TypedDict, total=False):
    index: int
    parameters: dict[str, Any]
    value: float
    workload_id: str


class WorkloadShare_enforcement(TypedDict, total=False):
    """a running share: how it is held to its part (memory, compute labels and notes)"""
    memory: str
    compute: str
    notes: list[str]


class PoolSharingEnforcement(TypedDict, total=False):
    """how shares are held to their part, as people read it"""
    memory: str
    compute: str


class DeployRollback(TypedDict, total=False):
    error_rate: float
    p99_ms: float
    min_requests: int


class UsageStorage(TypedDict, total=False):
    """team spaces and datasets, per team (docs/storage.md): each measurement's bytes held until
    the next, up to now"""
    price_per_gb_month: float
    total_gb_months: float
    total_cost: float
    rows: list[dict[str, Any]]


class UsageSeries(TypedDict, total=False):
    by: str
    bucket_seconds: float
    starts: list[str]
    gpu_hours: dict[str, list[float]]
