"""datasets: folders registered under a name by a team's lead, the teams they
are shared with (read-only) and the pools their readers may run in

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-04
"""
from alembic import op
import sqlalchemy as sa


revision = '0016'
down_revision = '0015'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'datasets',
        sa.Column('name', sa.String(length=64), nullable=False),
        sa.Column('team', sa.String(length=128), nullable=False),
        sa.Column('path', sa.Text(), nullable=False),
        sa.Column('created_by', sa.String(length=255), nullable=False),
        sa.Column('created_at', sa.Float(), nullable=False),
        sa.Column('pools', sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint('name'))
    op.create_table(
        'dataset_shares',
        sa.Column('dataset', sa.String(length=64), nullable=False),
        sa.Column('team', sa.String(length=128), nullable=False),
        sa.Column('granted_by', sa.String(length=255), nullable=False),
        sa.Column('granted_at', sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(['dataset'], ['datasets.name'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('dataset', 'team'))
    op.create_index('ix_dataset_shares_team', 'dataset_shares', ['team'])


def downgrade() -> None:
    op.drop_index('ix_dataset_shares_team', table_name='dataset_shares')
    op.drop_table('dataset_shares')
    op.drop_table('datasets')
