"""The request bodies and answers the OpenAPI document spells out in place.

Generated from gpuspawner/service/api/openapi.yaml by scripts/gen_client.py
(``make client``): do not edit; change the document and run it again."""
from __future__ import annotations

from typing import Any, Optional, TypedDict

from .schemas import (AuditEntry, Dataset, Deployment, Event, Notice, Pool, Schedule, Sweep, Team,
                      Workload)


class ListWorkloadsAnswer(TypedDict, total=False):
    workloads: list[Workload]
    next_cursor: Optional[str]


class ReleaseWorkloadBody(TypedDict, total=False):
    reason: str


class ListWorkloadEventsAnswer(TypedDict, total=False):
    events: list[Event]


class SetWorkloadPriorityBody(TypedDict, total=False):
    priority: str


class ListSweepsAnswer(TypedDict, total=False):
    sweeps: list[Sweep]


class ListPoolsAnswer(TypedDict, total=False):
    pools: list[Pool]


class EditPoolBody(TypedDict, total=False):
    price_per_gpu_hour: float


class EditNodeBody(TypedDict, total=False):
    drained: bool
    reason: str


class EditGpuBody(TypedDict, total=False):
    in_service: bool
    reason: str


class ListDeploymentsAnswer(TypedDict, total=False):
    deployments: list[Deployment]


class GetDeploymentMetricsAnswer(TypedDict, total=False):
    interval: float
    revisions: dict[str, list[dict[str, Any]]]


class SetDeploymentTrafficBody(TypedDict, total=False):
    traffic: dict[str, int]


class ScaleDeploymentBody(TypedDict, total=False):
    min_replicas: int
    max_replicas: int
    scale_to_zero_after: Optional[float]


class ListTeamsAnswer(TypedDict, total=False):
    teams: list[Team]


class ListGpusAnswer(TypedDict, total=False):
    sampled_at: str
    gpus: list[dict[str, Any]]


class ListNoticesAnswer(TypedDict, total=False):
    notices: list[Notice]


class PostNoticeBody(TypedDict, total=False):
    user: str
    server: Optional[str]
    kind: str
    message: str
    expires_at: Optional[float]
    data: Optional[dict[str, Any]]


class ListAuditAnswer(TypedDict, total=False):
    entries: list[AuditEntry]


class PostAuditEntryBody(TypedDict, total=False):
    action: str
    target: Optional[str]
    detail: Optional[dict[str, Any]]


class GetHistoryTraceAnswer(TypedDict, total=False):
    since: str
    until: str
    jobs: list[dict[str, Any]]
    cluster: dict[str, Any]
    left_out: dict[str, int]


class ApplyPreviewAnswer(TypedDict, total=False):
    id: str
    applied: list[str]
    warnings: list[str]


class ListSchedulesAnswer(TypedDict, total=False):
    schedules: list[Schedule]


class ListDatasetsAnswer(TypedDict, total=False):
    datasets: list[Dataset]


class MountServerDatasetsAnswer(TypedDict, total=False):
    datasets: list[dict[str, Any]]


class GetHealthAnswer(TypedDict, total=False):
    status: str
    gpu_enforcement: str
    limits: str
    notes: list[str]
    users_isolated: Optional[bool]
    database_warnings: list[str]
