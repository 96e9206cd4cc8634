"""The environment a user's process (notebook server, job, model replica)
starts with: made for the user, nothing of the hub's own.

The hub's PATH may hold directories only root can read (root's tools, a
pyenv under /root) and lacks this environment's bin, so ``gpuhub`` was not
found in a JupyterLab terminal. A user's PATH is this environment's bin
(the venv ``make setup`` makes from /usr/bin/python3, which every account
can run: the hub config refuses to start as root otherwise), then the
system's directories. Variables that point a Python at the hub's own
packages go too.
"""
from __future__ import annotations

import os
import sys
from typing import Mapping, MutableMapping

# The system's directories (Debian's PATH for root, a superset of a user's).
SYSTEM_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
# The hub's Python's settings, which would make a user's Python load the
# hub's packages (or fail to start, as a user, from a root-only prefix).
HUB_ONLY = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYENV_VERSION",
            "PYENV_ROOT", "PYENV_DIR", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "CONDA_ROOT")


def environment_bin(executable: str = sys.executable) -> str:
    """The bin directory of the Python environment that runs the hub
    (``gpuhub``, ``jupyter`` and ``python`` are there)."""
    return os.path.dirname(os.path.abspath(executable))


def user_path(executable: str = sys.executable) -> str:
    """A user's PATH: this environment's bin, then the system's."""
    first = environment_bin(executable)
    return os.pathsep.join([first, *(d for d in SYSTEM_PATH if d != first)])


def for_user(env: MutableMapping[str, str], keep: Mapping[str, str] = {},
             executable: str = sys.executable) -> MutableMapping[str, str]:
    """``env`` made a user's, in place: PATH is ``user_path``, the hub's
    Python settings (HUB_ONLY) are dropped. What ``keep`` names (the admin's
    own ``Spawner.environment``, a job's own env) stays as it is."""
    if "PATH" not in keep:
        env["PATH"] = user_path(executable)
    for name in HUB_ONLY:
        if name not in keep:
            env.pop(name, None)
    return env
