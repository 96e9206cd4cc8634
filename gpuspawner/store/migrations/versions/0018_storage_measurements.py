"""storage counted: each team space's and dataset's measured size over time
(charged per GB-month in the usage report) and the storage price's history

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-04
"""
from alembic import op
import sqlalchemy as sa


revision = '0018'
down_revision = '0017'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'storage_measurements',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('kind', sa.String(length=16), nullable=False),
        sa.Column('name', sa.String(length=128), nullable=False),
        sa.Column('team', sa.String(length=128), nullable=False),
        sa.Column('bytes', sa.BigInteger(), nullable=False),
        sa.Column('files', sa.BigInteger(), nullable=False),
        sa.Column('seconds', sa.Float(), nullable=False),
        sa.Column('since', sa.Float(), nullable=False),
        sa.Column('checked_at', sa.Float(), nullable=False),
        sa.Column('charged', sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint('id'))
    op.create_index('ix_storage_measurements_item', 'storage_measurements',
                    ['kind', 'name', 'id'])
    op.create_index('ix_storage_measurements_since', 'storage_measurements', ['since'])
    op.create_table(
        'storage_prices',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('since', sa.Float(), nullable=False),
        sa.Column('price_per_gb_month', sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint('id'))


def downgrade() -> None:
    op.drop_table('storage_prices')
    op.drop_index('ix_storage_measurements_since', table_name='storage_measurements')
    op.drop_index('ix_storage_measurements_item', table_name='storage_measurements')
    op.drop_table('storage_measurements')
