"""fractional GPUs: a workload's (and a deployment's replicas') share of one
GPU, GPU counts in fractional units, and allocations by slot of a GPU

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01
"""
from alembic import op
import sqlalchemy as sa


revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def _allocations(slot: bool) -> None:
    op.create_table(
        'allocations',
        sa.Column('node', sa.String(length=128), nullable=False),
        sa.Column('gpu', sa.Integer(), nullable=False),
        *([sa.Column('slot', sa.Integer(), nullable=False)] if slot else []),
        sa.Column('workload_id', sa.String(length=32), nullable=False),
        sa.Column('attempt', sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(['workload_id', 'attempt'],
                                ['attempts.workload_id', 'attempts.number']),
        sa.PrimaryKeyConstraint('node', 'gpu', *(['slot'] if slot else [])))
    op.create_index('ix_allocations_workload', 'allocations', ['workload_id'], unique=False)


def _rebuild_allocations(slot: bool) -> None:
    """Allocations only describe running attempts: the table is remade with
    (or without) the slot in its key and its rows carried over (slot 0)."""
    bind = op.get_bind()
    rows = bind.execute(sa.text(
        'SELECT DISTINCT node, gpu, workload_id, attempt FROM allocations')).fetchall()
    op.drop_index('ix_allocations_workload', table_name='allocations')
    op.drop_table('allocations')
    _allocations(slot)
    if rows:
        table = sa.table('allocations', sa.column('node'), sa.column('gpu'),
                         sa.column('workload_id'), sa.column('attempt'),
                         *([sa.column('slot')] if slot else []))
        op.bulk_insert(table, [{"node": r[0], "gpu": r[1], "workload_id": r[2],
                                "attempt": r[3], **({"slot": 0} if slot else {})}
                               for r in rows])


def upgrade() -> None:
    with op.batch_alter_table('workloads') as batch:
        batch.add_column(sa.Column('gpu_share', sa.Float(), nullable=False, server_default='0'))
    with op.batch_alter_table('deployments') as batch:
        batch.add_column(sa.Column('gpu_share', sa.Float(), nullable=False, server_default='0'))
    with op.batch_alter_table('attempts') as batch:
        batch.alter_column('gpus', type_=sa.Float(), existing_type=sa.Integer())
        batch.alter_column('borrowed', type_=sa.Float(), existing_type=sa.Integer())
    with op.batch_alter_table('usage') as batch:
        batch.alter_column('gpus', type_=sa.Float(), existing_type=sa.Integer())
    _rebuild_allocations(slot=True)


def downgrade() -> None:
    _rebuild_allocations(slot=False)
    with op.batch_alter_table('usage') as batch:
        batch.alter_column('gpus', type_=sa.Integer(), existing_type=sa.Float())
    with op.batch_alter_table('attempts') as batch:
        batch.alter_column('borrowed', type_=sa.Integer(), existing_type=sa.Float())
        batch.alter_column('gpus', type_=sa.Integer(), existing_type=sa.Float())
    with op.batch_alter_table('deployments') as batch:
        batch.drop_column('gpu_share')
    with op.batch_alter_table('workloads') as batch:
        batch.drop_column('gpu_share')
