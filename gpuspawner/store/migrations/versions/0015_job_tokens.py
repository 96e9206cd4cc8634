"""each job attempt's hub token, kept across restarts so that the service
revokes it when the attempt ends (its hub id and a SHA-256 of it; the token
itself is never stored)

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-03
"""
from alembic import op
import sqlalchemy as sa


revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'job_tokens',
        sa.Column('workload_id', sa.String(length=32), nullable=False),
        sa.Column('attempt', sa.Integer(), nullable=False),
        sa.Column('user', sa.String(length=255), nullable=False),
        sa.Column('token_id', sa.String(length=64), nullable=False),
        sa.Column('token_sha256', sa.String(length=64), nullable=False),
        sa.Column('issued_at', sa.Float(), nullable=False),
        sa.Column('expires_at', sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint('workload_id', 'attempt'))


def downgrade() -> None:
    op.drop_table('job_tokens')
