"""The service's database: SQLAlchemy 2 models and Alembic migrations.

SQLite by default, PostgreSQL in production. Everything the service must
not forget across a restart lives here; the scheduler core's in-memory state
is rebuilt from it at start.
"""
from .db import Store, migrate
from .models import (Allocation, Attempt, AuditEntry, Base, DatasetRow, DatasetShareRow,
                     DeploymentRow, EventRow, FiringRow,
                     GpuRow, JobTokenRow, NodeRow, NoticeRow, PoolRow, PreviewRow, PriceRow,
                     QuotaRow, RevisionRow, ScheduleRow, StoragePriceRow, StorageRow, SweepRow,
                     SweepTaskRow, TeamRow, UsageRow, WorkloadRow)

__all__ = ["Store", "migrate", "Base", "PoolRow", "NodeRow", "GpuRow", "TeamRow", "QuotaRow",
           "WorkloadRow", "Attempt", "Allocation", "EventRow", "UsageRow", "AuditEntry", "NoticeRow",
           "DeploymentRow", "RevisionRow", "PriceRow", "PreviewRow", "SweepRow", "SweepTaskRow",
           "ScheduleRow", "FiringRow", "JobTokenRow", "DatasetRow", "DatasetShareRow",
           "StorageRow", "StoragePriceRow"]
