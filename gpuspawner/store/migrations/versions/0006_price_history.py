"""price history per pool: a new price applies from when it is set

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""
from alembic import op
import sqlalchemy as sa


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('pool_prices',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('pool', sa.String(length=64), nullable=False),
    sa.Column('since', sa.Float(), nullable=False),
    sa.Column('price_per_gpu_hour', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['pool'], ['pools.name'], ),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_pool_prices_pool_since', 'pool_prices', ['pool', 'since'], unique=False)
    # The prices set so far applied to all of history (that was the rule):
    # they stay so, from time 0.
    op.execute("INSERT INTO pool_prices (pool, since, price_per_gpu_hour) "
               "SELECT name, 0, price_per_gpu_hour FROM pools WHERE price_per_gpu_hour > 0")


def downgrade() -> None:
    op.drop_index('ix_pool_prices_pool_since', table_name='pool_prices')
    op.drop_table('pool_prices')
