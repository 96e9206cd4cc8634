"""A user's list pages read the page, however many jobs and sweep tasks the
user has: an index of a user's workloads outside sweeps, newest first, and on
PostgreSQL statistics that tell the planner a workload's user decides its
team.

The Jobs panel lists a user's jobs outside sweeps (``sweep_id IS NULL``):
read through ``ix_workloads_user_submitted`` (or the whole list's index), a
page walked past every newer task of the user's sweeps (10,000 tasks: 1.8 ms
a page on PostgreSQL, growing with the sweep).
``ix_workloads_user_unswept_submitted`` holds only the workloads outside
sweeps (a partial index: both databases use it where the query says
``sweep_id IS NULL``, and in its order).

A user's jobs are (nearly) all in their own team, but the planner takes the
two conditions of a user's list (``"user" = $1 AND team IN (...)``, the Jobs
panel's page) as independent and multiplies their selectivities: with 10,000
jobs of 50 teams queued and 670 of one user, it expected 57 of that user's
rows, so it read all 670 through two bitmap indexes and sorted them for a
page of 50 (0.6-2 ms), instead of walking ``ix_workloads_user_submitted``
backwards for 51 rows (0.07 ms). Functional-dependency statistics on the two
columns (filled by each ANALYZE, which ``store/statistics.py`` keeps running)
let it see that. SQLite has no dependency statistics; its plans for these
come from the index.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-06
"""
import sqlalchemy as sa
from alembic import op


revision = '0023'
down_revision = '0022'
branch_labels = None
depends_on = None

NAME = "st_workloads_user_team"


def upgrade() -> None:
    op.create_index("ix_workloads_user_unswept_submitted", "workloads",
                    ["user", "submitted_at", "id"], postgresql_where=sa.text("sweep_id IS NULL"),
                    sqlite_where=sa.text("sweep_id IS NULL"))
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f'CREATE STATISTICS IF NOT EXISTS {NAME} (dependencies) ON "user", team '
               f'FROM workloads')
    op.execute("ANALYZE workloads")  # the statistics are empty until the next ANALYZE


def downgrade() -> None:
    op.drop_index("ix_workloads_user_unswept_submitted", table_name="workloads")
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"DROP STATISTICS IF EXISTS {NAME}")
