"""Indexes for the lists: workloads newest first (all, a team's, a user's)
and by state oldest first, so that a list reads what it returns, not the
whole table, however long the queue

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03
"""
from alembic import op


revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None

INDEXES = {
    "ix_workloads_submitted": ["submitted_at", "id"],
    "ix_workloads_team_submitted": ["team", "submitted_at", "id"],
    "ix_workloads_user_submitted": ["user", "submitted_at", "id"],
    "ix_workloads_state_submitted": ["state", "submitted_at"],
}


def upgrade() -> None:
    for name, columns in INDEXES.items():
        op.create_index(name, "workloads", columns)


def downgrade() -> None:
    for name in INDEXES:
        op.drop_index(name, table_name="workloads")
