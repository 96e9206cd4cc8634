"""Alembic environment: run against the connection the service hands in."""
from alembic import context
from sqlalchemy import create_engine

from gpuspawner.store.models import Base

config = context.config
target_metadata = Base.metadata


def run() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        # `alembic` on the command line: connect with the configured URL.
        engine = create_engine(config.get_main_option("sqlalchemy.url"))
        with engine.begin() as connection:
            context.configure(connection=connection, target_metadata=target_metadata,
                              render_as_batch=True)
            with context.begin_transaction():
                context.run_migrations()
        return
    context.configure(connection=connection, target_metadata=target_metadata,
                      render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


run()
