"""An index of workloads by kind and state: the serving controller reads
the deployments' replicas that are queued, running or stopping at every
reconcile, and by state alone that read walked every queued job

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-04
"""
from alembic import op


revision = '0017'
down_revision = '0016'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_workloads_kind_state", "workloads", ["kind", "state"])


def downgrade() -> None:
    op.drop_index("ix_workloads_kind_state", table_name="workloads")
