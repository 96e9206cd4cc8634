"""The service warns when its database is anyone's (issue 29, item 7): a
PostgreSQL that takes a TCP login without a password as a superuser (the
tests' own trusts loopback) while users have shells on this host. Checked
against the tests' real PostgreSQL, and on a real hub: its log, /health
and the admin panel."""
from __future__ import annotations

import html
import secrets

import psycopg
import pytest
import requests
from sqlalchemy.engine import make_url

from conftest import PG_ADMIN_URL, fresh_pg_database
from gpuspawner.isolation.accounts import isolating
from gpuspawner.service.access.db_exposure import exposure_warning, superuser_logins
from hub_harness import Hub

PG = make_url(PG_ADMIN_URL)
WARNING = f"The database at {PG.host}:{PG.port or 5432} accepts a TCP login without a password"


@pytest.fixture(scope="module")
def plain_role():
    """A role that logs in without a password (loopback trusts everyone)
    and is no superuser: what docs/service.md tells the service to use."""
    name = "gpuhub_plain_" + secrets.token_hex(3)
    with psycopg.connect(PG_ADMIN_URL.replace("postgresql+psycopg", "postgresql"),
                         autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{name}" LOGIN NOSUPERUSER')
        try:
            yield name
        finally:
            admin.execute(f'DROP ROLE IF EXISTS "{name}"')


def pg_url(user: str = "postgres", port: int = 0) -> str:
    return f"postgresql+psycopg://{user}@{PG.host}:{port or PG.port or 5432}/postgres"


@pytest.mark.parametrize("url, isolated, roles, warned", [
    (lambda r: pg_url(), True, ["postgres"], True),
    # The service's own role is no superuser, but postgres still logs in:
    (lambda r: pg_url(r), True, ["postgres"], True),
    # Without isolation every user is the service's account anyway:
    (lambda r: pg_url(), False, ["postgres"], False),
    (lambda r: pg_url(port=9), True, [], False),  # nothing answers there
    (lambda r: "postgresql+psycopg://postgres@/postgres?host=/var/run/postgresql", True, [], False),
    (lambda r: "sqlite:////tmp/gpuhub.sqlite", True, [], False),
])
def test_a_password_less_superuser_login_is_found(plain_role, url, isolated, roles, warned):
    url = url(plain_role)
    assert superuser_logins(url) == roles
    warning = exposure_warning(url, isolated)
    assert (warning is not None) == warned
    if warned:
        assert warning.startswith(WARNING) and "superuser postgres" in warning


@pytest.mark.skipif(not isolating(), reason="user isolation needs root (CI runs the tests as "
                                            "root)")
def test_a_hub_on_a_database_anyone_can_take_over_says_so(tmp_path):
    with fresh_pg_database() as url:
        hub = Hub(str(tmp_path), groups={"team-a": ["alice"]}, db_url=url,
                  teams={"a": {"quotas": {"default": {"nominal": 1}}}})
        try:
            hub.start()
            health = requests.get(f"{hub.api}/health", timeout=10).json()
            assert health["users_isolated"] is True
            assert [w[:len(WARNING)] for w in health["database_warnings"]] == [WARNING]
            page = requests.get(f"{hub.url}/services/gpuhub/admin/cluster", timeout=30,
                                headers={"Authorization": f"token {hub.token('root-admin')}"})
            assert page.status_code == 200 and WARNING in html.unescape(page.text)
            assert f"GPU Hub: {WARNING}" in hub.tail(400)
        finally:
            hub.stop()
