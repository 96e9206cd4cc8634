"""the first start estimate of each workload, to judge estimates by

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""
from alembic import op
import sqlalchemy as sa


revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('workloads') as batch:
        batch.add_column(sa.Column('estimated_start', sa.Float(), nullable=True))
        batch.add_column(sa.Column('estimate_made_at', sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('workloads') as batch:
        batch.drop_column('estimate_made_at')
        batch.drop_column('estimated_start')
