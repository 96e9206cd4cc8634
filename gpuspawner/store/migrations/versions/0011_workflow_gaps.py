"""deployment revisions that wait for a job, when a released job became
eligible, and a schedule's last failed firing

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""
from alembic import op
import sqlalchemy as sa


revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('revisions') as batch:
        batch.add_column(sa.Column('state', sa.String(length=16), nullable=False,
                                   server_default='ready'))
        batch.add_column(sa.Column('reason', sa.Text(), nullable=False, server_default=''))
        batch.add_column(sa.Column('after', sa.JSON(), nullable=False, server_default='[]'))
        batch.add_column(sa.Column('pending', sa.JSON(), nullable=True))
    with op.batch_alter_table('workloads') as batch:
        batch.add_column(sa.Column('eligible_at', sa.Float(), nullable=True))
    with op.batch_alter_table('schedules') as batch:
        batch.add_column(sa.Column('last_error', sa.Text(), nullable=True))
        batch.add_column(sa.Column('last_error_at', sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('schedules') as batch:
        batch.drop_column('last_error_at')
        batch.drop_column('last_error')
    with op.batch_alter_table('workloads') as batch:
        batch.drop_column('eligible_at')
    with op.batch_alter_table('revisions') as batch:
        batch.drop_column('pending')
        batch.drop_column('after')
        batch.drop_column('reason')
        batch.drop_column('state')
