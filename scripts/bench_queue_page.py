"""How long the admin queue page takes with a long queue: a temporary hub on
SQLite, ``--queued`` jobs queued (sweeps of 1-GPU tasks of team a, whose one
GPU of quota a sleeper holds, so none starts), then the page's first page
and one deep in the queue (followed by its "Next" links), as the admin and
as team a's lead, each the median of ``--requests`` GETs through the proxy.
The hub's own ``GET /hub/api/user`` (same proxy, same token) is the baseline.

    .venv/bin/python scripts/bench_queue_page.py [--queued 10000] [--requests 10]
"""
from __future__ import annotations

import argparse
import html
import os
import re
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

import requests  # noqa: E402

from hub_harness import Hub, wait_for  # noqa: E402

LEAD_ROLE = """
c.JupyterHub.load_roles.append({"name": "lead-a", "users": ["alice"],
                                "scopes": ["custom:gpuhub:team-admin!group=team-a"]})
"""
SWEEP_MAX = 10000  # tasks per sweep (gpuspawner.vocab.sweeps.MAX_TASKS)


def median_ms(url: str, token: str, n: int) -> float:
    headers = {"Authorization": f"token {token}"}
    requests.get(url, headers=headers, timeout=120).raise_for_status()  # warm-up
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = requests.get(url, headers=headers, timeout=120)
        times.append(time.perf_counter() - t0)
        r.raise_for_status()
    return statistics.median(times) * 1000


def next_link(hub: Hub, page: str):
    found = re.search(r'id="queued-next" href="([^"]+)"', page)
    return found and hub.url + html.unescape(found.group(1))


def deep_url(hub: Hub, token: str, pages: int) -> tuple[str, int]:
    """The URL of the ``pages``-th page (or the last, if fewer), and which it is."""
    url, n = f"{hub.url}/services/gpuhub/admin/queue", 1
    while n < pages:
        page = requests.get(url, headers={"Authorization": f"token {token}"}, timeout=120).text
        following = next_link(hub, page)
        if following is None:
            break
        url, n = following, n + 1
    return url, n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--queued", type=int, default=10000)
    p.add_argument("--requests", type=int, default=10)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        hub = Hub(tmp, groups={"team-a": ["alice"], "team-b": ["bob"]},
                  teams={"a": {"quotas": {"default": {"nominal": 1, "borrowing_limit": 0}}},
                         "b": {"quotas": {"default": {"nominal": 0, "borrowing_limit": 0}}}},
                  gpus=1, extra_hub_config=LEAD_ROLE).start(180)
        try:
            alice = hub.client("alice")
            blocker = alice.submit(command=[sys.executable, "-c", "import time; time.sleep(3600)"],
                                   gpus=1, pool="default", name="holds-a")["id"]
            alice.wait(blocker, ("running",))
            t0, left = time.monotonic(), args.queued
            while left:
                n = min(left, SWEEP_MAX)
                r = alice.post("/sweeps", json={"template": {"command": ["true"], "gpus": 1,
                                                             "pool": "default"},
                                                "grid": {"i": list(range(n))}})
                r.raise_for_status()
                left -= n
            wait_for(lambda: int(re.search(r'id="queued-count">(\d+)<', requests.get(
                f"{hub.url}/services/gpuhub/admin/queue", timeout=120,
                headers={"Authorization": f"token {hub.token('root-admin')}"}).text).group(1))
                >= args.queued, f"{args.queued} queued", timeout=600)
            print(f"queued {args.queued} in {time.monotonic() - t0:.1f}s (SQLite)")
            base = median_ms(f"{hub.url}/hub/api/user", hub.token("root-admin"), args.requests)
            print(f"baseline GET /hub/api/user: {base:.1f} ms")
            for who in ("root-admin", "alice"):
                token = hub.token(who)
                first = f"{hub.url}/services/gpuhub/admin/queue"
                deep, n = deep_url(hub, token, (args.queued + 499) // 500)
                print(f"{who}: queue page 1: {median_ms(first, token, args.requests):.1f} ms; "
                      f"page {n} (rows {(n - 1) * 500 + 1}-): "
                      f"{median_ms(deep, token, args.requests):.1f} ms")
        finally:
            hub.stop()


if __name__ == "__main__":
    main()
