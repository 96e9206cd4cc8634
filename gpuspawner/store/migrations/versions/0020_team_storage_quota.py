"""a team's storage quota set by an admin (bytes; null: the configuration's
``GpuHubService.team_storage_quotas`` applies)

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-04
"""
from alembic import op
import sqlalchemy as sa


revision = '0020'
down_revision = '0019'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # nullable: the teams made before keep the configuration's quota
    with op.batch_alter_table('teams') as batch:
        batch.add_column(sa.Column('storage_quota', sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('teams') as batch:
        batch.drop_column('storage_quota')
