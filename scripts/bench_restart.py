"""How fast the scheduler service is back after `kill -9`: the time from the
kill to /health answering 200 through the hub's proxy, with the hub polling
its services every second (GPU Hub's setting) and every 30 s (JupyterHub's
default, the baseline), and what the service's imports cost with and without
kubespawner (which it no longer loads unless it runs on Kubernetes).

    .venv/bin/python scripts/bench_restart.py [--kills 3]
"""
from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

import requests  # noqa: E402

from hub_harness import Hub  # noqa: E402


def restart_times(poll: int, kills: int) -> list[float]:
    os.environ["GPUHUB_SERVICE_POLL_SECONDS"] = str(poll)
    with tempfile.TemporaryDirectory() as tmp:
        hub = Hub(tmp, groups={"team-a": ["alice"]},
                  teams={"a": {"quotas": {"default": {"nominal": 1}}}}, gpus=1).start(120)
        try:
            out = []
            for _ in range(kills):
                old = hub.service_pid()
                t0 = time.monotonic()
                os.kill(old, signal.SIGKILL)
                while True:
                    try:
                        if (requests.get(f"{hub.api}/health", timeout=2).status_code == 200
                                and hub.service_pid() != old):
                            break
                    except (requests.RequestException, OSError, ValueError):
                        pass
                    time.sleep(0.1)
                out.append(time.monotonic() - t0)
            return out
        finally:
            hub.stop()


def import_seconds(extra: str) -> float:
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", f"{extra}import gpuspawner.service.app"], check=True)
    return time.monotonic() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=3)
    args = p.parse_args()
    base_imp = statistics.median(import_seconds("import kubespawner; ") for _ in range(3))
    now_imp = statistics.median(import_seconds("") for _ in range(3))
    print(f"service import: {now_imp:.2f}s (with kubespawner, as before: {base_imp:.2f}s; "
          f"{base_imp / now_imp:.1f}x)")
    base = restart_times(30, args.kills)
    now = restart_times(1, args.kills)
    print(f"kill -9 -> /health OK, hub polls every 30 s (JupyterHub default): "
          + ", ".join(f"{t:.1f}s" for t in base) + f" (median {statistics.median(base):.1f}s)")
    print(f"kill -9 -> /health OK, hub polls every 1 s (GPU Hub): "
          + ", ".join(f"{t:.1f}s" for t in now) + f" (median {statistics.median(now):.1f}s; "
          f"{statistics.median(base) / statistics.median(now):.1f}x faster)")


if __name__ == "__main__":
    main()
