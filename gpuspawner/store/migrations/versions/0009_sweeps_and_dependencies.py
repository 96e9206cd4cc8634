"""sweeps (array jobs) and dependencies between workloads

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""
from alembic import op
import sqlalchemy as sa


revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('workloads') as batch:
        batch.add_column(sa.Column('after', sa.JSON(), nullable=False, server_default='[]'))
        batch.add_column(sa.Column('sweep_id', sa.String(length=32), nullable=True))
        batch.add_column(sa.Column('sweep_index', sa.Integer(), nullable=True))
    op.create_index('ix_workloads_sweep', 'workloads', ['sweep_id', 'state'])
    op.create_table(
        'sweeps',
        sa.Column('id', sa.String(length=32), nullable=False),
        sa.Column('name', sa.String(length=255), nullable=False),
        sa.Column('team', sa.String(length=128), nullable=False),
        sa.Column('user', sa.String(length=255), nullable=False),
        sa.Column('max_running', sa.Integer(), nullable=True),
        sa.Column('metric', sa.JSON(), nullable=True),
        sa.Column('after', sa.JSON(), nullable=False),
        sa.Column('state', sa.String(length=16), nullable=False),
        sa.Column('cancel_requested', sa.Boolean(), nullable=False),
        sa.Column('submitted_at', sa.Float(), nullable=False),
        sa.Column('finished_at', sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_sweeps_team_state', 'sweeps', ['team', 'state'])
    op.create_table(
        'sweep_tasks',
        sa.Column('sweep_id', sa.String(length=32), nullable=False),
        sa.Column('index', sa.Integer(), nullable=False),
        sa.Column('parameters', sa.JSON(), nullable=False),
        sa.Column('workload_id', sa.String(length=32), nullable=False),
        sa.Column('metric', sa.Float(), nullable=True),
        sa.Column('output_notebook', sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(['sweep_id'], ['sweeps.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('sweep_id', 'index'),
    )


def downgrade() -> None:
    op.drop_table('sweep_tasks')
    op.drop_index('ix_sweeps_team_state', table_name='sweeps')
    op.drop_table('sweeps')
    op.drop_index('ix_workloads_sweep', table_name='workloads')
    with op.batch_alter_table('workloads') as batch:
        batch.drop_column('sweep_index')
        batch.drop_column('sweep_id')
        batch.drop_column('after')
