"""initial schema

Revision ID: 0001
Revises: 
Create Date: 2026-11-29

The audit log is made append-only by triggers, so not even a bug in the
service (or a person with the service's credentials using SQL) can rewrite
history without dropping them first.
"""
from alembic import op
import sqlalchemy as sa

from gpuspawner.store.triggers import append_only, drop_append_only


revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('audit_log',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('time', sa.Float(), nullable=False),
    sa.Column('actor', sa.String(length=255), nullable=False),
    sa.Column('action', sa.String(length=64), nullable=False),
    sa.Column('target', sa.String(length=255), nullable=False),
    sa.Column('detail', sa.JSON(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('audit_log', schema=None) as batch_op:
        batch_op.create_index('ix_audit_time', ['time'], unique=False)

    op.create_table('events',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('workload_id', sa.String(length=32), nullable=False),
    sa.Column('type', sa.String(length=32), nullable=False),
    sa.Column('time', sa.Float(), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=True),
    sa.Column('message', sa.Text(), nullable=False),
    sa.Column('data', sa.JSON(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.create_index('ix_events_workload', ['workload_id', 'id'], unique=False)

    op.create_table('pools',
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('description', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('name')
    )
    op.create_table('teams',
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('group', sa.String(length=255), nullable=False),
    sa.Column('weight', sa.Float(), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('name')
    )
    op.create_table('usage',
    sa.Column('workload_id', sa.String(length=32), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('team', sa.String(length=128), nullable=False),
    sa.Column('user', sa.String(length=255), nullable=False),
    sa.Column('project', sa.String(length=255), nullable=False),
    sa.Column('pool', sa.String(length=64), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('gpus', sa.Integer(), nullable=False),
    sa.Column('started_at', sa.Float(), nullable=False),
    sa.Column('ended_at', sa.Float(), nullable=False),
    sa.Column('gpu_seconds', sa.Float(), nullable=False),
    sa.Column('borrowed_gpu_seconds', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('workload_id', 'attempt')
    )
    with op.batch_alter_table('usage', schema=None) as batch_op:
        batch_op.create_index('ix_usage_team_end', ['team', 'ended_at'], unique=False)

    op.create_table('workloads',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('team', sa.String(length=128), nullable=False),
    sa.Column('user', sa.String(length=255), nullable=False),
    sa.Column('project', sa.String(length=255), nullable=False),
    sa.Column('pool', sa.String(length=64), nullable=False),
    sa.Column('gpus_per_node', sa.Integer(), nullable=False),
    sa.Column('num_nodes', sa.Integer(), nullable=False),
    sa.Column('priority', sa.String(length=64), nullable=False),
    sa.Column('time_limit', sa.Float(), nullable=True),
    sa.Column('grace_period', sa.Float(), nullable=True),
    sa.Column('spec', sa.JSON(), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('preempted_by', sa.JSON(), nullable=False),
    sa.Column('submitted_at', sa.Float(), nullable=False),
    sa.Column('started_at', sa.Float(), nullable=True),
    sa.Column('finished_at', sa.Float(), nullable=True),
    sa.Column('exit_code', sa.Integer(), nullable=True),
    sa.Column('cancel_requested', sa.Boolean(), nullable=False),
    sa.Column('preempted_for', sa.String(length=32), nullable=True),
    sa.Column('kill_at', sa.Float(), nullable=True),
    sa.Column('nomination', sa.JSON(), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('workloads', schema=None) as batch_op:
        batch_op.create_index('ix_workloads_state', ['state'], unique=False)
        batch_op.create_index('ix_workloads_team_state', ['team', 'state'], unique=False)
        batch_op.create_index('ix_workloads_user', ['user'], unique=False)

    op.create_table('attempts',
    sa.Column('workload_id', sa.String(length=32), nullable=False),
    sa.Column('number', sa.Integer(), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('placement', sa.JSON(), nullable=False),
    sa.Column('gpus', sa.Integer(), nullable=False),
    sa.Column('started_at', sa.Float(), nullable=False),
    sa.Column('ended_at', sa.Float(), nullable=True),
    sa.Column('exit_code', sa.Integer(), nullable=True),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('attempt_dir', sa.Text(), nullable=False),
    sa.Column('borrowed', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['workload_id'], ['workloads.id'], ),
    sa.PrimaryKeyConstraint('workload_id', 'number')
    )
    op.create_table('nodes',
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('pool', sa.String(length=64), nullable=False),
    sa.Column('gpus', sa.Integer(), nullable=False),
    sa.Column('healthy', sa.Boolean(), nullable=False),
    sa.Column('drained', sa.Boolean(), nullable=False),
    sa.Column('labels', sa.JSON(), nullable=False),
    sa.Column('topology', sa.JSON(), nullable=False),
    sa.Column('source', sa.String(length=32), nullable=False),
    sa.Column('updated_at', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['pool'], ['pools.name'], ),
    sa.PrimaryKeyConstraint('name')
    )
    op.create_table('quotas',
    sa.Column('team', sa.String(length=128), nullable=False),
    sa.Column('pool', sa.String(length=64), nullable=False),
    sa.Column('nominal', sa.Integer(), nullable=False),
    sa.Column('borrowing_limit', sa.Integer(), nullable=True),
    sa.Column('lending_limit', sa.Integer(), nullable=True),
    sa.ForeignKeyConstraint(['team'], ['teams.name'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('team', 'pool')
    )
    op.create_table('allocations',
    sa.Column('node', sa.String(length=128), nullable=False),
    sa.Column('gpu', sa.Integer(), nullable=False),
    sa.Column('workload_id', sa.String(length=32), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['workload_id', 'attempt'], ['attempts.workload_id', 'attempts.number'], ),
    sa.PrimaryKeyConstraint('node', 'gpu')
    )
    with op.batch_alter_table('allocations', schema=None) as batch_op:
        batch_op.create_index('ix_allocations_workload', ['workload_id'], unique=False)

    op.create_table('gpus',
    sa.Column('node', sa.String(length=128), nullable=False),
    sa.Column('index', sa.Integer(), nullable=False),
    sa.Column('uuid', sa.String(length=128), nullable=False),
    sa.Column('model', sa.String(length=128), nullable=False),
    sa.Column('memory_mib', sa.Integer(), nullable=False),
    sa.Column('healthy', sa.Boolean(), nullable=False),
    sa.Column('health_reason', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['node'], ['nodes.name'], ),
    sa.PrimaryKeyConstraint('node', 'index')
    )


    append_only("audit_log")


def downgrade() -> None:
    drop_append_only("audit_log")
    op.drop_table('gpus')
    with op.batch_alter_table('allocations', schema=None) as batch_op:
        batch_op.drop_index('ix_allocations_workload')

    op.drop_table('allocations')
    op.drop_table('quotas')
    op.drop_table('nodes')
    op.drop_table('attempts')
    with op.batch_alter_table('workloads', schema=None) as batch_op:
        batch_op.drop_index('ix_workloads_user')
        batch_op.drop_index('ix_workloads_team_state')
        batch_op.drop_index('ix_workloads_state')

    op.drop_table('workloads')
    with op.batch_alter_table('usage', schema=None) as batch_op:
        batch_op.drop_index('ix_usage_team_end')

    op.drop_table('usage')
    op.drop_table('teams')
    op.drop_table('pools')
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.drop_index('ix_events_workload')

    op.drop_table('events')
    with op.batch_alter_table('audit_log', schema=None) as batch_op:
        batch_op.drop_index('ix_audit_time')

    op.drop_table('audit_log')
