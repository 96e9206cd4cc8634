"""A scratch PostgreSQL database for a benchmark's temporary hub: made on a
server where the bench may create databases, dropped afterwards."""
from __future__ import annotations

import contextlib
import os
import secrets
from typing import Iterator

from ..client import GpuHubError

# The server the tests use too (tests/conftest.py): trust auth on loopback.
PG_ADMIN_URL = os.environ.get("GPUHUB_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


@contextlib.contextmanager
def scratch_pg(admin_url: str = PG_ADMIN_URL) -> Iterator[str]:
    """The URL of a new, empty database on ``admin_url``'s server."""
    import psycopg

    name = "gpuhub_bench_" + secrets.token_hex(4)
    plain = admin_url.replace("postgresql+psycopg://", "postgresql://")
    try:
        admin = psycopg.connect(plain, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as e:
        raise GpuHubError(f"--db postgresql: cannot reach {admin_url} ({e})") from None
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield plain.rsplit("/", 1)[0] + "/" + name
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
