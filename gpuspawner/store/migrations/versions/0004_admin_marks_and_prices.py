"""admin panel: GPUs an admin took out of service, price per GPU-hour per pool

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""
from alembic import op
import sqlalchemy as sa


revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('gpus', schema=None) as batch_op:
        batch_op.add_column(sa.Column('admin_mark', sa.Text(), server_default='', nullable=False))
    with op.batch_alter_table('pools', schema=None) as batch_op:
        batch_op.add_column(sa.Column('price_per_gpu_hour', sa.Float(), server_default='0',
                                      nullable=False))


def downgrade() -> None:
    with op.batch_alter_table('pools', schema=None) as batch_op:
        batch_op.drop_column('price_per_gpu_hour')
    with op.batch_alter_table('gpus', schema=None) as batch_op:
        batch_op.drop_column('admin_mark')
