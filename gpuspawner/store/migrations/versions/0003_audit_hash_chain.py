"""audit log hash chain: every entry carries SHA-256(previous hash + entry)

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29

Existing entries are chained in id order; the append-only triggers are
lifted for that one rewrite and put back.
"""
import json
from types import SimpleNamespace

from alembic import op
import sqlalchemy as sa

from gpuspawner.store.audit import GENESIS, entry_hash
from gpuspawner.store.triggers import append_only, drop_append_only

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('audit_log', schema=None) as batch_op:
        batch_op.add_column(sa.Column('hash', sa.String(length=64), server_default='',
                                      nullable=False))
    bind = op.get_bind()
    rows = bind.execute(sa.text(
        "SELECT id, time, actor, action, target, detail FROM audit_log ORDER BY id")).fetchall()
    if not rows:
        return
    drop_append_only("audit_log")
    prev = GENESIS
    for id_, time, actor, action, target, detail in rows:
        entry = SimpleNamespace(time=time, actor=actor, action=action, target=target,
                                detail=json.loads(detail) if isinstance(detail, str) else detail)
        prev = entry_hash(prev, entry)
        bind.execute(sa.text("UPDATE audit_log SET hash = :h WHERE id = :id"),
                     {"h": prev, "id": id_})
    append_only("audit_log")


def downgrade() -> None:
    drop_append_only("audit_log")
    with op.batch_alter_table('audit_log', schema=None) as batch_op:
        batch_op.drop_column('hash')
    append_only("audit_log")
