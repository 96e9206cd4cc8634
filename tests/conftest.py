"""Shared fixtures: databases for the store and service tests."""
from __future__ import annotations

import contextlib
import os
import secrets
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

# PostgreSQL answers here on the project's machines and in CI (trust auth);
# GPUHUB_TEST_PG points elsewhere.
PG_ADMIN_URL = os.environ.get("GPUHUB_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


@contextlib.contextmanager
def fresh_pg_database():
    """A new PostgreSQL database's URL, the database dropped afterwards."""
    import psycopg
    name = "gpuhub_test_" + secrets.token_hex(4)
    try:
        admin = psycopg.connect(PG_ADMIN_URL.replace("postgresql+psycopg", "postgresql"),
                                autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as e:
        pytest.fail(f"PostgreSQL is not reachable at {PG_ADMIN_URL} ({e}); start it or set "
                    f"GPUHUB_TEST_PG to a server where the tests may create databases")
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        base = PG_ADMIN_URL.rsplit("/", 1)[0]
        try:
            yield f"{base}/{name}"
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def account_prefix():
    """A system-account prefix no other test or hub uses; the accounts made
    with it are deleted afterwards."""
    import pwd
    import subprocess
    p = f"t{secrets.token_hex(3)}-"
    yield p
    for entry in pwd.getpwall():
        if entry.pw_name.startswith(p):
            subprocess.run(["userdel", "-f", entry.pw_name], capture_output=True)


@pytest.fixture
def pg_url():
    """A fresh PostgreSQL database, dropped afterwards."""
    with fresh_pg_database() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/gpuhub.sqlite"
    return request.getfixturevalue("pg_url")


@pytest.fixture(autouse=True)
def jp_asyncio_loop():
    """pytest-jupyter's event loop for every test (the lab tests load its plugin,
    which makes its fixtures autouse for the whole session), except that a loop
    still running is not closed: Playwright's sync API runs its own loop in the
    test's thread, and closing that one fails the browser tests' teardown."""
    from jupyter_core.utils import ensure_event_loop
    loop = ensure_event_loop(prefer_selector_loop=True)
    yield loop
    if not loop.is_running():
        loop.close()


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium under Playwright, one per test module (the browser
    tests; `make test` installs it: no browser download)."""
    from playwright import sync_api
    from test_spawn_browser import CHROMIUM, CHROMIUM_ARGS
    assert os.path.exists(CHROMIUM), f"no Chromium at {CHROMIUM}: `make test` installs it"
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()
