"""A user's process starts with an environment made for the user
(gpuspawner/isolation/user_env.py): this environment's bin first (so
``gpuhub`` and ``python`` are found), then the system's directories, and
nothing of the hub's own (root-only tool directories, pyenv, PYTHONPATH)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gpuspawner.backends.local import LocalBackend
from gpuspawner.isolation.user_env import SYSTEM_PATH, for_user, user_path
from test_local_backend import make_spec, output, single_exit

VENV_BIN = os.path.dirname(sys.executable)
HUB_ENV = {"PATH": "/root/.pyenv/shims:/root/bin:/usr/bin:/bin",
           "PYTHONPATH": "/root/lib", "PYENV_VERSION": "3.11", "LANG": "C.UTF-8"}


@pytest.mark.parametrize("keep, expected", [
    ({}, {"PATH": user_path(), "LANG": "C.UTF-8"}),
    # The admin's Spawner.environment (or a job's own env) says otherwise: it stays.
    ({"PATH": "x", "PYTHONPATH": "y"},
     {"PATH": HUB_ENV["PATH"], "PYTHONPATH": "/root/lib", "LANG": "C.UTF-8"}),
], ids=["made-for-the-user", "admin-set-stays"])
def test_a_users_environment_has_nothing_of_the_hubs(keep, expected):
    assert dict(for_user(dict(HUB_ENV), keep=keep)) == expected


def test_the_path_is_the_environments_bin_then_the_systems():
    assert user_path().split(os.pathsep) == [VENV_BIN, *SYSTEM_PATH]
    # A hub run by the system's Python: its bin first, no directory twice.
    assert user_path("/usr/bin/python3").split(os.pathsep) == \
        ["/usr/bin", *(d for d in SYSTEM_PATH if d != "/usr/bin")]


def test_a_job_finds_gpuhub_whatever_the_services_path(tmp_path, monkeypatch):
    """The service started with root's tool directories on its PATH (and a
    venv not activated): a job's shell finds gpuhub in this environment."""
    monkeypatch.setenv("PATH", "/root/.pyenv/shims:/usr/bin:/bin")
    backend = LocalBackend()
    spec = make_spec(tmp_path, argv=("/bin/sh", "-c", 'command -v gpuhub; echo "$PATH"'))
    backend.start(spec)
    assert single_exit(backend).returncode == 0
    found, path = output(spec).split()
    assert found == os.path.join(VENV_BIN, "gpuhub")
    assert path == user_path() and "/root" not in path
    # ... and it runs (the venv comes from /usr/bin/python3, which any account can run).
    assert subprocess.run([found, "--help"], capture_output=True).returncode == 0
