"""Database triggers that make a table append-only (SQLite and PostgreSQL),
for migrations: a migration that must rewrite such a table drops them,
does its work and creates them again."""
from alembic import op


def append_only(table: str) -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for verb in ("UPDATE", "DELETE"):
            op.execute(f"""
                CREATE TRIGGER {table}_no_{verb.lower()} BEFORE {verb} ON {table}
                BEGIN SELECT RAISE(ABORT, '{table} is append-only'); END""")
    elif dialect == "postgresql":
        op.execute(f"""
            CREATE FUNCTION {table}_append_only() RETURNS trigger AS $$
            BEGIN RAISE EXCEPTION '{table} is append-only'; END $$ LANGUAGE plpgsql""")
        op.execute(f"""
            CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table}
            FOR EACH ROW EXECUTE FUNCTION {table}_append_only()""")


def drop_append_only(table: str) -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for verb in ("update", "delete"):
            op.execute(f"DROP TRIGGER IF EXISTS {table}_no_{verb}")
    elif dialect == "postgresql":
        op.execute(f"DROP TRIGGER IF EXISTS {table}_append_only ON {table}")
        op.execute(f"DROP FUNCTION IF EXISTS {table}_append_only()")
