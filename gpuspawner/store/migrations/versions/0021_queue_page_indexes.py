"""The admin queue page's pages: a state's workloads (all, or one team's)
oldest first by (submitted_at, id), the keyset of its cursors, read from an
index however deep the page. They replace the two indexes that are their
prefixes ((state, submitted_at) and (team, state)), which answer no query
the longer ones do not.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-04
"""
from alembic import op


revision = '0021'
down_revision = '0020'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_workloads_state_submitted", table_name="workloads")
    op.create_index("ix_workloads_state_submitted", "workloads", ["state", "submitted_at", "id"])
    op.drop_index("ix_workloads_team_state", table_name="workloads")
    op.create_index("ix_workloads_team_state_submitted", "workloads",
                    ["team", "state", "submitted_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_workloads_team_state_submitted", table_name="workloads")
    op.create_index("ix_workloads_team_state", "workloads", ["team", "state"])
    op.drop_index("ix_workloads_state_submitted", table_name="workloads")
    op.create_index("ix_workloads_state_submitted", "workloads", ["state", "submitted_at"])
