"""A cheap request's latency beside a row of ``gpuhub bench api``.

A row's p99 is compared with the baseline's, which the hub answered alone.
A row whose requests start jobs loads the same cores with the processes it
starts, and the hub answers slower then too: ``Beside`` asks the hub while
the row runs, so that the row can also be compared with the hub under the
same load. Asking the service's own ``GET /me`` beside a row shows how long
a cheap request waits behind the row's requests in the service's one event
loop (head-of-line blocking), which the row's own latency does not."""
from __future__ import annotations

import threading
import time

import requests

# How long ``Beside`` rests between its requests: at most twenty a
# second, one client's, little load beside the row's eight clients (at a
# hundred a second the hub and the proxy took a tenth of a core, and the
# rows beside it were slower).
PACE_S = 0.05


class Beside:
    """While a row runs: one client asking ``url`` (the hub's baseline
    request, or the service's ``GET /me``) again and again, paced, so that
    each row's latency can be compared with that request's under the same
    load (a row whose jobs start processes loads the cores the hub answers
    on too; a row of costly pages holds the service's loop)."""

    def __init__(self, token: str, url: str):
        self.url = url
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"token {token}"
        self.latencies: list[float] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._ask, name="bench-beside", daemon=True)

    def __enter__(self) -> "Beside":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.thread.join()
        self.session.close()

    def _ask(self) -> None:
        while not self.stopping.is_set():
            t0 = time.perf_counter()
            try:
                ok = self.session.get(self.url, timeout=30).status_code == 200
            except requests.RequestException:
                ok = False
            if ok:
                self.latencies.append(time.perf_counter() - t0)
            self.stopping.wait(PACE_S)
