"""CPUs and memory in team quotas (ceilings per pool, none: no limit) and in
the usage ledger (CPU-seconds and memory GiB-seconds of each attempt)

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03
"""
from alembic import op
import sqlalchemy as sa


revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('quotas') as batch:
        batch.add_column(sa.Column('cpus', sa.Float(), nullable=True))
        batch.add_column(sa.Column('memory', sa.BigInteger(), nullable=True))
    with op.batch_alter_table('usage') as batch:
        batch.add_column(sa.Column('cpu_seconds', sa.Float(), nullable=False,
                                   server_default='0'))
        batch.add_column(sa.Column('memory_gib_seconds', sa.Float(), nullable=False,
                                   server_default='0'))


def downgrade() -> None:
    with op.batch_alter_table('usage') as batch:
        batch.drop_column('memory_gib_seconds')
        batch.drop_column('cpu_seconds')
    with op.batch_alter_table('quotas') as batch:
        batch.drop_column('memory')
        batch.drop_column('cpus')
