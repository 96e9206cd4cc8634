"""An index of events by type and time: the queue page's preemptions of the
last 7 days read those events alone, where without it the query walked every
event (an admin's) or every workload of a lead's teams, however old

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-04
"""
from alembic import op


revision = '0022'
down_revision = '0021'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_events_type_time", "events", ["type", "time"])


def downgrade() -> None:
    op.drop_index("ix_events_type_time", table_name="events")
