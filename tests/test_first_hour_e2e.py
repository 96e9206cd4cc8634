"""What a new admin and a new user met in their first hour (issue 33), from
where each stands, on the embedded hub as ``gpuhub up`` starts it:

- a JupyterLab terminal and a job find ``gpuhub`` on their PATH;
- ``gpuhub up --gpu-sharing default=4`` (docs/gpus.md) shares this host's
  GPUs, and a sharing config naming a pool this host lacks stops the hub
  with the reason, leaving no proxy behind;
- a server killed from outside or preempted says why on the next page load;
- the authorize page does not let an admin unauthorize themselves.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from embedded import EmbeddedHub
from gpuspawner.isolation.accounts import isolating

pytestmark = pytest.mark.skipif(not isolating(), reason="the embedded hub's user accounts "
                                                        "need root (CI runs the tests as root)")


def proxies_of(port: int) -> list[int]:
    """PIDs of configurable-http-proxy processes serving ``port``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if any("configurable-http-proxy" in a for a in argv[:3]) and \
                any(a == "--port" and argv[i + 1] == str(port) for i, a in enumerate(argv[:-1])):
            found.append(int(pid))
    return found


def test_a_service_that_cannot_start_stops_the_hub_and_its_proxy(tmp_path):
    """`gpuhub up --gpu-sharing h200=4` on a host whose pool is "default":
    the hub exits non-zero, saying why, and leaves no proxy running."""
    hub = EmbeddedHub(str(tmp_path))
    gpuhub = os.path.join(os.path.dirname(sys.executable), "gpuhub")
    began = time.monotonic()
    try:
        with open(os.path.join(tmp_path, "hub.log"), "wb") as log:
            hub.proc = subprocess.Popen(
                [gpuhub, "up", "--data-dir", hub.data_dir, "--port", str(hub.port),
                 "--gpu-sharing", "h200=4"], cwd=str(tmp_path), env=hub.env, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)
            returncode = hub.proc.wait(300)
        took = time.monotonic() - began
        out = open(os.path.join(tmp_path, "hub.log"), errors="replace").read()
        print(f"the hub gave up after {took:.1f} s")
        assert returncode == 1, out[-3000:]
        last = out.strip().splitlines()[-1]
        assert last.startswith("GPU Hub stopped: the gpuhub service could not start:"), out[-3000:]
        assert "pool(s) h200 are not GPUs of this host (its pools: default)" in last
        assert out.count("exited with status 1 while the hub starts") == 2  # two more tries
        assert proxies_of(hub.port) == []
        assert not os.path.exists(os.path.join(hub.data_dir, "jupyterhub.pid"))
    finally:
        for pid in proxies_of(hub.port):  # (a failure above: leave nothing behind)
            os.kill(pid, 9)
        hub.stop()
