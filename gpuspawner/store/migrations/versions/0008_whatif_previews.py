"""what-if previews: a history replayed under proposed settings

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-08
"""
from alembic import op
import sqlalchemy as sa


revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'whatif_previews',
        sa.Column('id', sa.String(length=32), nullable=False),
        sa.Column('actor', sa.String(length=255), nullable=False),
        sa.Column('teams', sa.JSON(), nullable=True),
        sa.Column('created_at', sa.Float(), nullable=False),
        sa.Column('since', sa.Float(), nullable=False),
        sa.Column('until', sa.Float(), nullable=False),
        sa.Column('changes', sa.JSON(), nullable=False),
        sa.Column('baseline', sa.JSON(), nullable=False),
        sa.Column('state', sa.String(length=16), nullable=False),
        sa.Column('progress', sa.Float(), nullable=False),
        sa.Column('error', sa.Text(), nullable=False),
        sa.Column('result', sa.JSON(), nullable=True),
        sa.Column('finished_at', sa.Float(), nullable=True),
        sa.Column('applied_at', sa.Float(), nullable=True),
        sa.Column('applied_by', sa.String(length=255), nullable=False),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_whatif_previews_created', 'whatif_previews', ['created_at'])


def downgrade() -> None:
    op.drop_index('ix_whatif_previews_created', table_name='whatif_previews')
    op.drop_table('whatif_previews')
