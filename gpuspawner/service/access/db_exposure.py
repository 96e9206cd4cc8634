"""Whether local accounts can take the service's database over.

With user isolation on, every user has a shell on this host; a PostgreSQL
that trusts TCP logins (``host all all 127.0.0.1/32 trust``, as CI's does)
lets any of them connect as a superuser: read every table, every token
digest, and run programs as the database's account (``COPY ... PROGRAM``).
At start the service tries exactly that, with no password: the same host
and port as its own URL, as ``postgres`` and as its own role. A login that
succeeds as a superuser is warned of in the log, ``/health`` and the admin
panel (docs/service.md, "Trust model"). SQLite and Unix-socket URLs are not
checked (the socket's peer auth and file modes are the host's).
"""
from __future__ import annotations

from typing import Optional

from sqlalchemy.engine import make_url

TIMEOUT = 3  # seconds; a database that does not answer is not a finding
NO_FILE = "/dev/null/none"


def superuser_logins(db_url: str) -> list[str]:
    """The roles (of ``postgres`` and the URL's own) that log in over TCP
    at the URL's host and port without a password and are superusers."""
    url = make_url(db_url)
    if not url.drivername.startswith("postgresql") or not url.host or url.host.startswith("/"):
        return []
    found = []
    for role in dict.fromkeys(["postgres", url.username or "postgres"]):
        if _superuser_without_password(url.host, url.port or 5432, role,
                                       url.database or "postgres"):
            found.append(role)
    return found


def _superuser_without_password(host: str, port: int, role: str, dbname: str) -> bool:
    import psycopg
    try:
        # password="" and a password file that cannot exist: libpq then sends
        # none (the empty value keeps PGPASSWORD out, the path ~/.pgpass).
        with psycopg.connect(host=host, port=port, user=role, dbname=dbname, password="",
                             passfile=NO_FILE, connect_timeout=TIMEOUT) as conn:
            row = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
                               ).fetchone()
    except psycopg.Error:
        return False
    return bool(row and row[0])


def exposure_warning(db_url: str, users_isolated: Optional[bool]) -> Optional[str]:
    """The warning to give, or None: only while users are isolated (without
    isolation every user is the service's account anyway)."""
    if not users_isolated:
        return None
    roles = superuser_logins(db_url)
    if not roles:
        return None
    url = make_url(db_url)
    return (f"The database at {url.host}:{url.port or 5432} accepts a TCP login without a "
            f"password as superuser {', '.join(roles)}: every local account (each user's "
            f"shell, job and notebook) can read and change all of GPU Hub's data and run "
            f"programs as the database's account. Require passwords (scram-sha-256) or peer "
            f"auth in pg_hba.conf and give the service a non-superuser role "
            f"(docs/service.md, \"The database\").")
