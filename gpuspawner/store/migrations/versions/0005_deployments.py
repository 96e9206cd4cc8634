"""deployments and their revisions (model serving)

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""
from alembic import op
import sqlalchemy as sa


revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('deployments',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('team', sa.String(length=128), nullable=False),
    sa.Column('name', sa.String(length=63), nullable=False),
    sa.Column('user', sa.String(length=255), nullable=False),
    sa.Column('pool', sa.String(length=64), nullable=False),
    sa.Column('gpus', sa.Integer(), nullable=False),
    sa.Column('min_replicas', sa.Integer(), nullable=False),
    sa.Column('max_replicas', sa.Integer(), nullable=False),
    sa.Column('target_in_flight', sa.Float(), nullable=False),
    sa.Column('scale_to_zero_after', sa.Float(), nullable=True),
    sa.Column('traffic', sa.JSON(), nullable=False),
    sa.Column('stable_revision', sa.Integer(), nullable=False),
    sa.Column('rollback', sa.JSON(), nullable=False),
    sa.Column('message', sa.Text(), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('updated_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('deployments', schema=None) as batch_op:
        batch_op.create_index('ix_deployments_team_name', ['team', 'name'], unique=True)
    op.create_table('revisions',
    sa.Column('deployment_id', sa.Integer(), nullable=False),
    sa.Column('number', sa.Integer(), nullable=False),
    sa.Column('model_dir', sa.Text(), nullable=False),
    sa.Column('runtime', sa.String(length=32), nullable=False),
    sa.Column('predictor', sa.String(length=255), nullable=False),
    sa.Column('max_batch_size', sa.Integer(), nullable=False),
    sa.Column('max_batch_time', sa.Float(), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('created_by', sa.String(length=255), nullable=False),
    sa.ForeignKeyConstraint(['deployment_id'], ['deployments.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('deployment_id', 'number')
    )


def downgrade() -> None:
    op.drop_table('revisions')
    with op.batch_alter_table('deployments', schema=None) as batch_op:
        batch_op.drop_index('ix_deployments_team_name')
    op.drop_table('deployments')
