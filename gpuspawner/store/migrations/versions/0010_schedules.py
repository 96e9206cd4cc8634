"""schedules: recurring jobs, their firings, and the workloads' schedule_id

Revision ID: 0010
Revises: 0008
Create Date: 2026-12-01
"""
from alembic import op
import sqlalchemy as sa


revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'schedules',
        sa.Column('id', sa.String(length=32), nullable=False),
        sa.Column('name', sa.String(length=128), nullable=False),
        sa.Column('team', sa.String(length=128), nullable=False),
        sa.Column('user', sa.String(length=255), nullable=False),
        sa.Column('cron', sa.String(length=255), nullable=False),
        sa.Column('timezone', sa.String(length=64), nullable=False),
        sa.Column('spec', sa.JSON(), nullable=False),
        sa.Column('paused', sa.Boolean(), nullable=False),
        sa.Column('catch_up', sa.String(length=8), nullable=False),
        sa.Column('next_run_at', sa.Float(), nullable=True),
        sa.Column('last_run_at', sa.Float(), nullable=True),
        sa.Column('last_workload_id', sa.String(length=32), nullable=True),
        sa.Column('created_at', sa.Float(), nullable=False),
        sa.Column('updated_at', sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_schedules_next_run', 'schedules', ['paused', 'next_run_at'])
    op.create_table(
        'schedule_firings',
        sa.Column('schedule_id', sa.String(length=32), nullable=False),
        sa.Column('fire_time', sa.Float(), nullable=False),
        sa.Column('fired_at', sa.Float(), nullable=False),
        sa.Column('workload_id', sa.String(length=32), nullable=False),
        sa.Column('cause', sa.String(length=16), nullable=False),
        sa.PrimaryKeyConstraint('schedule_id', 'fire_time'),
    )
    with op.batch_alter_table('workloads') as batch:
        batch.add_column(sa.Column('schedule_id', sa.String(length=32), nullable=True))
    op.create_index('ix_workloads_schedule', 'workloads', ['schedule_id'])


def downgrade() -> None:
    op.drop_index('ix_workloads_schedule', table_name='workloads')
    with op.batch_alter_table('workloads') as batch:
        batch.drop_column('schedule_id')
    op.drop_table('schedule_firings')
    op.drop_index('ix_schedules_next_run', table_name='schedules')
    op.drop_table('schedules')
