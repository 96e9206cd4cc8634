"""dataset residency by node labels: the labels every node a dataset's
readers run on must carry ({}: any node)

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-04
"""
from alembic import op
import sqlalchemy as sa


revision = '0019'
down_revision = '0018'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # server_default: the datasets registered before allow any node
    with op.batch_alter_table('datasets') as batch:
        batch.add_column(sa.Column('node_labels', sa.JSON(), nullable=False,
                                   server_default='{}'))


def downgrade() -> None:
    with op.batch_alter_table('datasets') as batch:
        batch.drop_column('node_labels')
