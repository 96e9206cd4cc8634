"""Tables. Times are UNIX seconds (floats), the scheduler core's clock.

Invariants the schema itself enforces:
- a GPU is held by at most one attempt (``allocations`` is keyed by node and
  GPU index), so a bug elsewhere cannot double-book hardware;
- the audit log and the event log are only ever inserted into.
"""
from __future__ import annotations

from typing import Any, Optional

from sqlalchemy import (JSON, BigInteger, Boolean, Float, ForeignKey, ForeignKeyConstraint, Index,
                        Integer, String, Text, text)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class PoolRow(Base):
    __tablename__ = "pools"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    description: Mapped[str] = mapped_column(Text, default="")
    # What one GPU-hour of this pool costs now (the admin panel's
    # chargeback); what it cost before is in ``pool_prices``.
    price_per_gpu_hour: Mapped[float] = mapped_column(Float, default=0.0)


class PriceRow(Base):
    """A pool's price from ``since`` until the next row's: a price change
    applies from then on and never reprices earlier usage."""

    __tablename__ = "pool_prices"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    pool: Mapped[str] = mapped_column(ForeignKey("pools.name"))
    since: Mapped[float] = mapped_column(Float)
    price_per_gpu_hour: Mapped[float] = mapped_column(Float)
    __table_args__ = (Index("ix_pool_prices_pool_since", "pool", "since"),)


class NodeRow(Base):
    __tablename__ = "nodes"
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    pool: Mapped[str] = mapped_column(ForeignKey("pools.name"))
    gpus: Mapped[int] = mapped_column(Integer)
    healthy: Mapped[bool] = mapped_column(Boolean, default=True)
    # Admin drain: no new work is placed here; running work finishes.
    drained: Mapped[bool] = mapped_column(Boolean, default=False)
    labels: Mapped[dict[str, Any]] = mapped_column(default=dict)
    topology: Mapped[dict[str, Any]] = mapped_column(default=dict)
    source: Mapped[str] = mapped_column(String(32), default="declared")
    updated_at: Mapped[float] = mapped_column(Float, default=0.0)


class GpuRow(Base):
    __tablename__ = "gpus"
    node: Mapped[str] = mapped_column(ForeignKey("nodes.name"), primary_key=True)
    index: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(128), default="")
    model: Mapped[str] = mapped_column(String(128), default="")
    memory_mib: Mapped[int] = mapped_column(Integer, default=0)
    healthy: Mapped[bool] = mapped_column(Boolean, default=True)
    health_reason: Mapped[str] = mapped_column(Text, default="")
    # Set when an admin took the GPU out of service ("by alice: fan noise"):
    # it stays out whatever the inventory says, across restarts.
    admin_mark: Mapped[str] = mapped_column(Text, default="")


class TeamRow(Base):
    __tablename__ = "teams"
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    group: Mapped[str] = mapped_column(String(255))
    weight: Mapped[float] = mapped_column(Float, default=1.0)
    created_at: Mapped[float] = mapped_column(Float, default=0.0)
    # The team's storage quota (bytes) an admin set; None: the configuration's
    # (``GpuHubService.team_storage_quotas``) applies.
    storage_quota: Mapped[Optional[int]] = mapped_column(BigInteger, nullable=True)


class QuotaRow(Base):
    __tablename__ = "quotas"
    team: Mapped[str] = mapped_column(ForeignKey("teams.name", ondelete="CASCADE"), primary_key=True)
    pool: Mapped[str] = mapped_column(String(64), primary_key=True)
    nominal: Mapped[int] = mapped_column(Integer, default=0)
    borrowing_limit: Mapped[Optional[int]] = mapped_column(Integer, nullable=True)
    lending_limit: Mapped[Optional[int]] = mapped_column(Integer, nullable=True)
    # Ceilings on the CPUs and memory (bytes) the team's running work in the
    # pool asks for; None: no limit.
    cpus: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    memory: Mapped[Optional[int]] = mapped_column(BigInteger, nullable=True)


class WorkloadRow(Base):
    __tablename__ = "workloads"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(255), default="")
    kind: Mapped[str] = mapped_column(String(16))
    team: Mapped[str] = mapped_column(String(128))
    user: Mapped[str] = mapped_column(String(255))
    project: Mapped[str] = mapped_column(String(255), default="")
    pool: Mapped[str] = mapped_column(String(64))
    gpus_per_node: Mapped[int] = mapped_column(Integer)
    num_nodes: Mapped[int] = mapped_column(Integer, default=1)
    # Its share of one GPU (0.25: a quarter, in GPU units), 0 for whole GPUs.
    gpu_share: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    priority: Mapped[str] = mapped_column(String(64))
    time_limit: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    grace_period: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    # The job as submitted: command or notebook, env, working dir, ...
    spec: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # queued, running, stopping, succeeded, failed, cancelled
    state: Mapped[str] = mapped_column(String(16))
    # Why it waits, or why it ended.
    reason: Mapped[str] = mapped_column(Text, default="")
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    preempted_by: Mapped[list[Any]] = mapped_column(default=list)
    submitted_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    finished_at: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    exit_code: Mapped[Optional[int]] = mapped_column(Integer, nullable=True)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    # While stopping after a preemption: for whom, and the end of the grace.
    preempted_for: Mapped[Optional[str]] = mapped_column(String(32), nullable=True)
    kill_at: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    # GPUs set aside for it while its victims exit: [[node, [gpu, ...]], ...]
    nomination: Mapped[Optional[list[Any]]] = mapped_column(nullable=True)
    # The first start estimate made for it while it waited (the plan's start,
    # and when it was made): what the estimates' accuracy is judged by.
    estimated_start: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    estimate_made_at: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    # What it waits for while ``waiting``: [{"id": wid or sweep id, "condition": "ok"|"any"|"failed"}]
    after: Mapped[list[Any]] = mapped_column(default=list)
    # The sweep it is a task of, and its index there (None: not a sweep task).
    sweep_id: Mapped[Optional[str]] = mapped_column(String(32), nullable=True)
    sweep_index: Mapped[Optional[int]] = mapped_column(Integer, nullable=True)
    # The schedule whose firing made it (None: submitted by hand).
    schedule_id: Mapped[Optional[str]] = mapped_column(String(32), nullable=True)
    # When it became eligible to run: its release from ``waiting`` (None:
    # it was queued at submit, so ``submitted_at``). Ordering and aging count
    # from it, as Slurm's EligibleTime; users see ``submitted_at``.
    eligible_at: Mapped[Optional[float]] = mapped_column(Float, nullable=True)

    __table_args__ = (
        Index("ix_workloads_sweep", "sweep_id", "state"),
        Index("ix_workloads_state", "state"),
        Index("ix_workloads_schedule", "schedule_id"),
        Index("ix_workloads_user", "user"),
        # The lists, newest first (the API, the Jobs panel, ``gpuhub ls``):
        # read from an index, not sorted from the whole table (migration 0014).
        Index("ix_workloads_submitted", "submitted_at", "id"),
        Index("ix_workloads_team_submitted", "team", "submitted_at", "id"),
        Index("ix_workloads_user_submitted", "user", "submitted_at", "id"),
        # The Jobs panel's page (a user's jobs outside sweeps): not a walk past
        # every task of the user's sweeps (migration 0023).
        Index("ix_workloads_user_unswept_submitted", "user", "submitted_at", "id",
              postgresql_where=text("sweep_id IS NULL"), sqlite_where=text("sweep_id IS NULL")),
        # A state's workloads (all, or a team's) oldest first by the keyset of
        # the queue page's cursors (migration 0021).
        Index("ix_workloads_state_submitted", "state", "submitted_at", "id"),
        Index("ix_workloads_team_state_submitted", "team", "state", "submitted_at", "id"),
        # The serving controller's replicas (kind, then queued/running/stopping),
        # not a walk of every queued job (migration 0017).
        Index("ix_workloads_kind_state", "kind", "state"),
    )


class Attempt(Base):
    """One run of a workload on some GPUs."""

    __tablename__ = "attempts"
    workload_id: Mapped[str] = mapped_column(ForeignKey("workloads.id"), primary_key=True)
    number: Mapped[int] = mapped_column(Integer, primary_key=True)
    # running, succeeded, failed, preempted, evicted, lost, cancelled
    state: Mapped[str] = mapped_column(String(16))
    placement: Mapped[list[Any]] = mapped_column(default=list)
    # GPU units it holds: whole GPUs, or its share of one (0.25).
    gpus: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float] = mapped_column(Float)
    ended_at: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    exit_code: Mapped[Optional[int]] = mapped_column(Integer, nullable=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    attempt_dir: Mapped[str] = mapped_column(Text, default="")
    borrowed: Mapped[float] = mapped_column(Float, default=0.0)


class Allocation(Base):
    """A slot of a GPU held by a running attempt. The primary key is the
    slot: a GPU of a pool that shares its GPUs in N slots is N rows when held
    whole and k rows for a k/N share, so the database itself refuses a GPU
    given twice or shared past 100%. A GPU of a pool that does not share is
    one row, slot 0."""

    __tablename__ = "allocations"
    node: Mapped[str] = mapped_column(String(128), primary_key=True)
    gpu: Mapped[int] = mapped_column(Integer, primary_key=True)
    slot: Mapped[int] = mapped_column(Integer, primary_key=True, default=0)
    workload_id: Mapped[str] = mapped_column(String(32))
    attempt: Mapped[int] = mapped_column(Integer)

    __table_args__ = (
        ForeignKeyConstraint(["workload_id", "attempt"],
                             ["attempts.workload_id", "attempts.number"]),
        Index("ix_allocations_workload", "workload_id"),
    )


class EventRow(Base):
    __tablename__ = "events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    workload_id: Mapped[str] = mapped_column(String(32))
    type: Mapped[str] = mapped_column(String(32))
    time: Mapped[float] = mapped_column(Float)
    attempt: Mapped[Optional[int]] = mapped_column(Integer, nullable=True)
    message: Mapped[str] = mapped_column(Text, default="")
    data: Mapped[dict[str, Any]] = mapped_column(default=dict)

    __table_args__ = (Index("ix_events_workload", "workload_id", "id"),
                      # the queue page's recent preemptions (migration 0022)
                      Index("ix_events_type_time", "type", "time"))


class UsageRow(Base):
    """GPU-seconds of one finished attempt: the usage ledger."""

    __tablename__ = "usage"
    workload_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    team: Mapped[str] = mapped_column(String(128))
    user: Mapped[str] = mapped_column(String(255))
    project: Mapped[str] = mapped_column(String(255), default="")
    pool: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(16))
    gpus: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float] = mapped_column(Float)
    ended_at: Mapped[float] = mapped_column(Float)
    gpu_seconds: Mapped[float] = mapped_column(Float)
    # GPU-seconds of it that ran on borrowed quota.
    borrowed_gpu_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    # What it asked for besides GPUs, over its run (on all its nodes).
    cpu_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    memory_gib_seconds: Mapped[float] = mapped_column(Float, default=0.0)

    __table_args__ = (Index("ix_usage_team_end", "team", "ended_at"),)


class JobTokenRow(Base):
    """The token made for one job attempt (service/access/job_tokens.py):
    whom it acts for while the attempt runs and which token to revoke when
    it ends, kept across restarts. The token itself is never stored, only
    its SHA-256. ``token_id``: "" for a token the service made; the hub's
    id of one the hub made (before the service made them itself)."""

    __tablename__ = "job_tokens"
    workload_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    user: Mapped[str] = mapped_column(String(255))
    token_id: Mapped[str] = mapped_column(String(64))
    token_sha256: Mapped[str] = mapped_column(String(64))
    issued_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float)


class AuditEntry(Base):
    """Who did what. Append-only: never updated, never deleted."""

    __tablename__ = "audit_log"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    time: Mapped[float] = mapped_column(Float)
    actor: Mapped[str] = mapped_column(String(255))
    action: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(255), default="")
    detail: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # SHA-256 of the previous entry's hash and this entry (store/audit.py).
    hash: Mapped[str] = mapped_column(String(64), default="", server_default="")

    __table_args__ = (Index("ix_audit_time", "time"),)


class NoticeRow(Base):
    """A message for one user's server, e.g. the culler's warning; shown by
    the hub's pages and the lab extension until it expires or is cleared."""

    __tablename__ = "notices"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user: Mapped[str] = mapped_column(String(255))
    server: Mapped[str] = mapped_column(String(255), default="")
    kind: Mapped[str] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    cleared_at: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    data: Mapped[dict[str, Any]] = mapped_column(default=dict)

    __table_args__ = (Index("ix_notices_user", "user", "cleared_at"),)


class DeploymentRow(Base):
    """A served model: its revisions, how traffic splits between them, and
    how many replicas (workloads of kind ``deployment``) it may run."""

    __tablename__ = "deployments"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    team: Mapped[str] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(63))
    user: Mapped[str] = mapped_column(String(255))
    pool: Mapped[str] = mapped_column(String(64))
    gpus: Mapped[int] = mapped_column(Integer, default=0)
    # Each replica's share of one GPU (0.25), 0 for whole GPUs (``gpus``).
    gpu_share: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    min_replicas: Mapped[int] = mapped_column(Integer, default=1)
    max_replicas: Mapped[int] = mapped_column(Integer, default=1)
    target_in_flight: Mapped[float] = mapped_column(Float, default=4.0)
    scale_to_zero_after: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    # revision number (as a string) -> percent of the traffic
    traffic: Mapped[dict[str, Any]] = mapped_column(default=dict)
    stable_revision: Mapped[int] = mapped_column(Integer, default=1)
    # {"error_rate": 0.05, "p99_ms": 500, "min_requests": 20}; {} for none
    rollback: Mapped[dict[str, Any]] = mapped_column(default=dict)
    message: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)

    __table_args__ = (Index("ix_deployments_team_name", "team", "name", unique=True),)


class RevisionRow(Base):
    """One deploy of a deployment: a model directory served by a runtime."""

    __tablename__ = "revisions"
    deployment_id: Mapped[int] = mapped_column(
        ForeignKey("deployments.id", ondelete="CASCADE"), primary_key=True)
    number: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_dir: Mapped[str] = mapped_column(Text)
    runtime: Mapped[str] = mapped_column(String(32))
    predictor: Mapped[str] = mapped_column(String(255), default="")
    max_batch_size: Mapped[int] = mapped_column(Integer, default=16)
    max_batch_time: Mapped[float] = mapped_column(Float, default=0.005)
    created_at: Mapped[float] = mapped_column(Float)
    created_by: Mapped[str] = mapped_column(String(255))
    # "ready" (deployed: it may take traffic), "waiting" (for ``after``),
    # "failed" (its dependency failed or its model was then invalid: ``reason``).
    state: Mapped[str] = mapped_column(String(16), default="ready")
    reason: Mapped[str] = mapped_column(Text, default="")
    # What it waits for: [{"id", "condition"}], as a workload's ``after``.
    after: Mapped[list[Any]] = mapped_column(default=list)
    # While waiting: the deployment settings and traffic it rolls out with
    # (DeploySpec's pool, gpus, replicas, canary_percent, ...).
    pending: Mapped[Optional[dict[str, Any]]] = mapped_column(nullable=True)


class PreviewRow(Base):
    """A what-if preview (service/whatif/previews.py): the period's history replayed
    under the settings of ``baseline`` and with ``changes``; ``result`` once
    done (sim/whatif.py's figures)."""

    __tablename__ = "whatif_previews"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    actor: Mapped[str] = mapped_column(String(255))
    # The teams whose figures the actor may see; None: all (an admin).
    teams: Mapped[Optional[list[Any]]] = mapped_column(nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    since: Mapped[float] = mapped_column(Float)
    until: Mapped[float] = mapped_column(Float)
    # setting key -> value, as validated
    changes: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # team -> {weight, quotas}: the settings replayed as "current"
    baseline: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # running, done, failed, cancelled, interrupted
    state: Mapped[str] = mapped_column(String(16))
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    error: Mapped[str] = mapped_column(Text, default="")
    result: Mapped[Optional[dict[str, Any]]] = mapped_column(nullable=True)
    finished_at: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    applied_at: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    applied_by: Mapped[str] = mapped_column(String(255), default="")

    __table_args__ = (Index("ix_whatif_previews_created", "created_at"),)


class SweepRow(Base):
    """One notebook or command over a parameter grid: its tasks are
    workloads (``sweep_tasks`` says which is the current one of each index)."""

    __tablename__ = "sweeps"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(255), default="")
    team: Mapped[str] = mapped_column(String(128))
    user: Mapped[str] = mapped_column(String(255))
    # At most this many of its tasks queued or running at once (None: no cap).
    max_running: Mapped[Optional[int]] = mapped_column(Integer, nullable=True)
    # {"name": ..., "goal": "max"|"min"} or None
    metric: Mapped[Optional[dict[str, Any]]] = mapped_column(nullable=True)
    after: Mapped[list[Any]] = mapped_column(default=list)
    # running, succeeded, failed, cancelled
    state: Mapped[str] = mapped_column(String(16))
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    submitted_at: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[Optional[float]] = mapped_column(Float, nullable=True)

    __table_args__ = (Index("ix_sweeps_team_state", "team", "state"),)


class SweepTaskRow(Base):
    """One index of a sweep: its parameters, its current workload (a retry
    makes a new one) and the metric its output reported."""

    __tablename__ = "sweep_tasks"
    sweep_id: Mapped[str] = mapped_column(ForeignKey("sweeps.id", ondelete="CASCADE"),
                                          primary_key=True)
    index: Mapped[int] = mapped_column(Integer, primary_key=True)
    parameters: Mapped[dict[str, Any]] = mapped_column(default=dict)
    workload_id: Mapped[str] = mapped_column(String(32))
    metric: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    output_notebook: Mapped[Optional[str]] = mapped_column(Text, nullable=True)


class ScheduleRow(Base):
    """A recurring job: ``spec`` (a JobSpec body) submitted at each firing of
    ``cron`` read in ``timezone``. ``next_run_at`` is the next firing not yet
    handled (None while paused)."""

    __tablename__ = "schedules"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    team: Mapped[str] = mapped_column(String(128))
    user: Mapped[str] = mapped_column(String(255))
    cron: Mapped[str] = mapped_column(String(255))
    timezone: Mapped[str] = mapped_column(String(64))
    spec: Mapped[dict[str, Any]] = mapped_column(default=dict)
    paused: Mapped[bool] = mapped_column(Boolean, default=False)
    # "once": a firing missed while the service was down runs once; "skip": none.
    catch_up: Mapped[str] = mapped_column(String(8), default="once")
    next_run_at: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    last_run_at: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    last_workload_id: Mapped[Optional[str]] = mapped_column(String(32), nullable=True)
    # Why the last firing could not be submitted, and when (None since the
    # last firing that could).
    last_error: Mapped[Optional[str]] = mapped_column(Text, nullable=True)
    last_error_at: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)

    __table_args__ = (Index("ix_schedules_next_run", "paused", "next_run_at"),)


class FiringRow(Base):
    """One firing of a schedule, written in the transaction that creates its
    workload. The key makes a firing happen at most once, whatever restarts
    or second service processes try."""

    __tablename__ = "schedule_firings"
    schedule_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    # The firing's scheduled instant; for "run now", the instant it was asked.
    fire_time: Mapped[float] = mapped_column(Float, primary_key=True)
    fired_at: Mapped[float] = mapped_column(Float)
    workload_id: Mapped[str] = mapped_column(String(32))
    # "cron", "catch-up" (the one run of firings missed while down) or "manual"
    cause: Mapped[str] = mapped_column(String(16), default="cron")


class DatasetRow(Base):
    """A folder registered under a name by a lead of its team (service/datasets/):
    workloads that ask for it see it read-only at ``/datasets/<name>``."""

    __tablename__ = "datasets"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    team: Mapped[str] = mapped_column(String(128))
    # The folder, resolved (no link in it) when it was registered.
    path: Mapped[str] = mapped_column(Text)
    created_by: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[float] = mapped_column(Float)
    # Residency: the pools its readers' workloads may run in ([]: any).
    pools: Mapped[list[Any]] = mapped_column(default=list)
    # Residency: node labels every node its readers' workloads run on must
    # carry ({}: any node), migration 0019.
    node_labels: Mapped[dict[str, Any]] = mapped_column(default=dict)


class DatasetShareRow(Base):
    """A team other than the dataset's own that may read it."""

    __tablename__ = "dataset_shares"
    dataset: Mapped[str] = mapped_column(ForeignKey("datasets.name", ondelete="CASCADE"),
                                         primary_key=True)
    team: Mapped[str] = mapped_column(String(128), primary_key=True)
    granted_by: Mapped[str] = mapped_column(String(255))
    granted_at: Mapped[float] = mapped_column(Float)
    __table_args__ = (Index("ix_dataset_shares_team", "team"),)


class StorageRow(Base):
    """What a team space or a dataset held (service/teams/storage.py): ``bytes``
    and ``files`` as measured from ``since`` until the item's next row (the
    usage report charges them for that long), last found unchanged at
    ``checked_at``. A row is added only when the numbers change, so an
    unchanged space costs one row however often it is measured."""

    __tablename__ = "storage_measurements"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(16))       # "space" or "dataset"
    name: Mapped[str] = mapped_column(String(128))      # the team, or the dataset
    team: Mapped[str] = mapped_column(String(128))      # who is charged
    bytes: Mapped[int] = mapped_column(BigInteger)
    files: Mapped[int] = mapped_column(BigInteger)
    seconds: Mapped[float] = mapped_column(Float)       # how long the last walk took
    since: Mapped[float] = mapped_column(Float)
    checked_at: Mapped[float] = mapped_column(Float)
    # False: a dataset inside its team's space, counted there already.
    charged: Mapped[bool] = mapped_column(Boolean, default=True)
    __table_args__ = (Index("ix_storage_measurements_item", "kind", "name", "id"),
                      Index("ix_storage_measurements_since", "since"))


class StoragePriceRow(Base):
    """The price of one GB-month of storage from ``since`` until the next
    row's (``GpuHubService.storage_price_per_gb_month``, recorded at start
    when it changed): a new price never reprices storage held before it."""

    __tablename__ = "storage_prices"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    since: Mapped[float] = mapped_column(Float)
    price_per_gb_month: Mapped[float] = mapped_column(Float)
