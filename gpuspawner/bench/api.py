"""``gpuhub bench api``: the REST API's throughput and latency through the proxy.

Against a live hub (``--url`` of the hub, ``--token`` of a user who may
submit), or a temporary one started for the run (``--start-hub``, on SQLite
or ``--db postgresql``), these rows are measured, each with ``--requests``
requests from ``--concurrency`` threads (one ``requests.Session`` per
thread), after a few warm-up requests:

* baseline: JupyterHub's own ``GET /hub/api/user`` (same proxy, same token),
* where the token may list the hub's users (a temporary hub gives its user
  that role, and 60 users to list): the hub's own page of 50,
  ``GET /hub/api/users?limit=50``, a second baseline the size of the
  service's pages (the rows' ``p99_vs_hub_page``),
* submit: ``POST /workloads`` of a tiny job (``true``, 0 GPUs: it starts at
  once, so the row also measures the processes started on the same cores),
* list: ``GET /workloads?limit=50``,
* ``GET /me``, and the Jobs panel's list (the user's jobs, ``detail=1``).

A temporary hub's user first runs 60 jobs, so that the lists return a full
page (50) in every row. With ``--start-hub --queued N`` the rows are measured
again behind N queued jobs, with a submit of a 1-GPU job (which waits behind
the queue: the API alone), the rate the queue was filled at, and the
service's own cycle timing and event-loop stalls while each set of rows ran
(its metrics: bench/service_metrics.py).

Throughput is requests over the wall time of the row; latencies are per
request, body read included. While each row runs, one more client asks the
baseline's request of the hub, at most 20 times a second (bench/beside.py):
each row also says the hub's p99 then, and that over the hub's p99 beside
the baseline's row: how much the row's load on the machine slowed the hub
itself (a row slower than the baseline while the hub beside it is not is
slow in the service). Another asks the service's own ``GET /me`` (its
cheapest request) the same way: how long a cheap request waits behind the
row's requests in the service's one event loop.
On a temporary hub each row also says the CPU that the service's own
process and the hub's spent per request (from ``/proc``): a row's latency
under eight clients follows what a request costs the one interpreter that
answers it. The ratios compare each row with the baseline of the same run. Only the given URL is contacted, and by default only a hub
on this machine (loopback).
"""
from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import socket
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Optional
from urllib.parse import urlsplit

import requests

from ..client import GpuHubClient, GpuHubError, TokenMissing, hub_url_of, resolve_token, resolve_url
from ..client.operations import Unsent
from ..client.request import Request
from . import databases as bench_db, service_metrics, turnover
from .beside import Beside

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WARMUP = 5
# () -> {"service": CPU seconds, "hub": CPU seconds} of the processes measured
CpuReader = Callable[[], dict[str, float]]
# () -> the service's metrics now (service_metrics.scrape): its loop's stalls
StallsReader = Callable[[], dict]
BENCH_JOB = {"command": "true", "gpus_per_node": 0, "name": "gpuhub-bench", "project": "bench",
             "time_limit": 60}


def percentile(values: list[float], p: float) -> float:
    """Linear-interpolated percentile (p in 0..100) of unsorted values."""
    if not values:
        return 0.0
    xs = sorted(values)
    k = (len(xs) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summarize(name: str, latencies_s: list[float], wall_s: float, errors: int,
              concurrency: int) -> dict:
    n = len(latencies_s)
    return {"name": name, "requests": n, "errors": errors, "concurrency": concurrency,
            "wall_s": round(wall_s, 4),
            "rps": round(n / wall_s, 2) if wall_s > 0 else 0.0,
            "p50_ms": round(percentile(latencies_s, 50) * 1000, 2),
            "p99_ms": round(percentile(latencies_s, 99) * 1000, 2),
            "mean_ms": round(sum(latencies_s) / n * 1000, 2) if n else 0.0}


HUB_PAGE = "(the hub's page"  # the name of the second baseline's row begins "GET ... (the hub's page"


def add_ratios(rows: list[dict]) -> list[dict]:
    """Each row's throughput and latency relative to the first (the baseline),
    and its p99 relative to the hub's own page where that row was measured."""
    base = rows[0]
    page = next((r for r in rows if HUB_PAGE in r["name"]), None)
    for r in rows:
        r["rps_vs_baseline"] = round(r["rps"] / base["rps"], 3) if base["rps"] else None
        r["p50_vs_baseline"] = round(r["p50_ms"] / base["p50_ms"], 3) if base["p50_ms"] else None
        r["p99_vs_baseline"] = round(r["p99_ms"] / base["p99_ms"], 3) if base["p99_ms"] else None
        if page is not None:
            r["p99_vs_hub_page"] = (round(r["p99_ms"] / page["p99_ms"], 3) if page["p99_ms"]
                                    else None)
        if r.get("hub_beside_p99_ms") and base.get("hub_beside_p99_ms"):
            # How much the row's load slowed the hub: its p99 beside this row
            # over its p99 beside the baseline's.
            r["hub_beside_vs_baseline"] = round(r["hub_beside_p99_ms"]
                                                / base["hub_beside_p99_ms"], 3)
    return rows


def _ratio(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.2f}x"


def format_rows(rows: list[dict]) -> str:
    cpu = any("service_cpu_ms" in r for r in rows)
    page = any("p99_vs_hub_page" in r for r in rows)
    beside = any("hub_beside_p99_ms" in r for r in rows)
    me_beside = any("me_beside_p99_ms" in r for r in rows)
    stalls = any("loop_stalls_over_50ms" in r for r in rows)
    header = (f"{'request':<34} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>6} "
              f"{'req/s vs base':>13} {'p50 vs base':>11} {'p99 vs base':>11}"
              + (f" {'p99 vs hub page':>15}" if page else "")
              + (f" {'hub beside: p99 ms':>18} {'vs base':>7}" if beside else "")
              + (f" {'/me beside: p99 ms':>18}" if me_beside else "")
              + (f" {'CPU ms/req: service':>20} {'hub':>5}" if cpu else "")
              + (f"  {'loop stalls > 50 ms'}" if stalls else ""))
    lines = [header]
    for r in rows:
        lines.append(f"{r['name']:<34} {r['rps']:>8.1f} {r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f} "
                     f"{r['errors']:>6} {_ratio(r.get('rps_vs_baseline')):>13} "
                     f"{_ratio(r.get('p50_vs_baseline')):>11} "
                     f"{_ratio(r.get('p99_vs_baseline')):>11}"
                     + (f" {_ratio(r.get('p99_vs_hub_page')):>15}" if page else "")
                     + (f" {r.get('hub_beside_p99_ms', 0):>18.1f} "
                        f"{_ratio(r.get('hub_beside_vs_baseline')):>7}" if beside else "")
                     + (f" {r.get('me_beside_p99_ms', 0):>18.1f}" if me_beside else "")
                     + (f" {r.get('service_cpu_ms', 0):>20.2f} {r.get('hub_cpu_ms', 0):>5.2f}"
                        if cpu else "")
                     + (f"  {service_metrics.stalls_words(r)}" if stalls else ""))
    return "\n".join(lines)


def hub_page_row(hub_url: str, token: str, timeout: float = 10.0) -> Optional[tuple]:
    """The plan row of JupyterHub's own page of (up to) 50 users, named with
    how many it returned, if ``token`` may list the hub's users; else None
    (most users' tokens may not: the row is then left out)."""
    url = hub_url + "/hub/api/users?limit=50"
    try:
        r = requests.get(url, headers={"Authorization": f"token {token}"}, timeout=timeout)
    except requests.RequestException:
        return None
    if r.status_code != 200:
        return None
    return (f"GET /hub/api/users {HUB_PAGE} of {len(r.json())})", "GET", url, 200, None)


def service_stalls(hub_url: str, admin_token: str) -> StallsReader:
    """The reader of the service's metrics, for its loop's stalls (an admin's token)."""
    return lambda: service_metrics.scrape(hub_url, admin_token)


def process_cpu(hub) -> CpuReader:
    """The CPU reader of a temporary hub: its service's own process (not the
    jobs it starts) and the hub's."""
    service_pid, hub_pid = hub.service_pid(), hub.proc.pid
    return lambda: {"service": turnover.cpu_seconds(service_pid, children=False),
                    "hub": turnover.cpu_seconds(hub_pid, children=False)}


def is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos)


class _Runner:
    """N requests over C threads, one Session per thread (closed at the end)."""

    def __init__(self, token: str, concurrency: int, timeout: float = 30.0,
                 headers: Optional[dict] = None):
        self.token = token
        self.headers = headers or {}
        self.concurrency = max(1, concurrency)
        self.timeout = timeout
        self.local = threading.local()
        self.sessions: list[requests.Session] = []
        self.lock = threading.Lock()

    def session(self) -> requests.Session:
        s = getattr(self.local, "session", None)
        if s is None:
            s = requests.Session()
            s.headers["Authorization"] = f"token {self.token}"
            s.headers.update(self.headers)
            adapter = requests.adapters.HTTPAdapter(pool_connections=1, pool_maxsize=1)
            s.mount("http://", adapter)
            s.mount("https://", adapter)
            self.local.session = s
            with self.lock:
                self.sessions.append(s)
        return s

    def one(self, method: str, url: str, expect: int, body: Optional[dict]) -> tuple[float, bool]:
        t0 = time.perf_counter()
        try:
            r = self.session().request(method, url, json=body, timeout=self.timeout)
            _ = r.content
            ok = r.status_code == expect
        except requests.RequestException:
            ok = False
        return time.perf_counter() - t0, ok

    def run(self, pool: ThreadPoolExecutor, name: str, method: str, url: str, expect: int,
            body: Optional[dict], n: int, cpu: Optional[CpuReader] = None,
            besides: Optional[dict[str, str]] = None,
            stalls: Optional[StallsReader] = None) -> dict:
        """The row; ``besides``: name -> URL to ask meanwhile (``Beside``),
        each said as ``{name}_beside_*``; ``stalls``: the service's loop
        stalls while the row ran, said with it."""
        list(pool.map(lambda _: self.one(method, url, expect, body), range(WARMUP)))
        cpu0 = cpu() if cpu else {}
        stalls0 = stalls() if stalls else None
        with contextlib.ExitStack() as stack:
            probes = {who: stack.enter_context(Beside(self.token, where))
                      for who, where in (besides or {}).items()}
            t0 = time.perf_counter()
            results = list(pool.map(lambda _: self.one(method, url, expect, body), range(n)))
            wall = time.perf_counter() - t0
        row = summarize(name, [lat for lat, _ in results], wall,
                        sum(1 for _, ok in results if not ok), self.concurrency)
        for who, probe in probes.items():
            row.update({f"{who}_beside_requests": len(probe.latencies),
                        f"{who}_beside_p50_ms": round(percentile(probe.latencies, 50) * 1000, 2),
                        f"{who}_beside_p99_ms": round(percentile(probe.latencies, 99) * 1000, 2)})
        if cpu:
            row.update({f"{who}_cpu_ms": round((spent - cpu0[who]) * 1000 / max(1, n), 2)
                        for who, spent in cpu().items()})
        if stalls:
            loop = service_metrics.summary(name, stalls0, stalls())
            row.update({k: loop[k] for k in ("loop_stall_max_ms", "loop_stalls_over_50ms",
                                             "stall_causes_ms")})
        return row

    def close(self) -> None:
        for s in self.sessions:
            s.close()


def run_api_bench(hub_url: str, token: str, *, n: int = 200, concurrency: int = 8,
                  team: Optional[str] = None, user: Optional[str] = None,
                  progress: Optional[Callable[[dict], None]] = None,
                  waiting_submit: bool = False, cpu: Optional[CpuReader] = None,
                  stalls: Optional[StallsReader] = None) -> list[dict]:
    """The rows (baseline first), with ratios to the baseline. With
    ``waiting_submit`` (behind a queue that holds every GPU) also a submit
    of a 1-GPU job, which waits: the API's own cost, no process started.
    ``cpu``: each row's CPU per request of those processes, ``stalls``: the
    service's loop stalls while it ran (``measure``)."""
    hub_url = hub_url_of(hub_url)
    api = hub_url + "/services/gpuhub/api/v1"
    job = dict(BENCH_JOB, **({"team": team} if team else {}))
    calls = Unsent()  # the generated client's requests, unsent: the runner times them
    # The submits come last: each of their jobs starts a process (0 GPUs), and
    # hundreds of those starting would be measured in the rows after them.
    plan = [("GET /hub/api/user (baseline)", "GET", hub_url + "/hub/api/user", 200, None),
            _row("GET /workloads?limit=50 (list)", api, calls.list_workloads(limit=50), 200),
            _row("GET /me", api, calls.get_me(), 200),
            # the Jobs panel's poll: its first page (gpuhub_lab's JOBS_PAGE), detailed
            _row("GET /workloads, the Jobs panel's", api, calls.list_workloads(
                kind="job", sweep_id=["none"], limit=50, detail=1, user=user or "bench"), 200),
            _row("POST /workloads (submit)", api, calls.submit_workload(job), 201)]
    page = hub_page_row(hub_url, token)
    if page is not None:
        plan.insert(1, page)
    if waiting_submit:
        plan.insert(-1, _row("POST /workloads (submit, 1 GPU: waits)", api,
                             calls.submit_workload(dict(job, gpus_per_node=1)), 201))
    return add_ratios(measure(token, concurrency, plan, max(1, n), progress, cpu=cpu,
                              besides={"hub": hub_url + "/hub/api/user",
                                       "me": api + calls.get_me().target}, stalls=stalls))


def measure(token: str, concurrency: int, plan, n: int,
            progress: Optional[Callable[[dict], None]] = None,
            headers: Optional[dict] = None, cpu: Optional[CpuReader] = None,
            besides: Optional[dict[str, str]] = None,
            stalls: Optional[StallsReader] = None) -> list[dict]:
    """One row per (name, method, url, expected status, body) of ``plan``
    (``headers``: sent with every request, besides the token; ``cpu``: the
    CPU seconds of the processes whose share of each request the row says;
    ``besides``: the URLs whose latency each row also says (the hub's
    ``hub``, the service's ``GET /me`` ``me``), each asked by one more client
    while the row runs; ``stalls``: the service's metrics, read around each
    row for its loop stalls)."""
    runner = _Runner(token, concurrency, headers=headers)
    rows = []
    try:
        with ThreadPoolExecutor(max_workers=runner.concurrency) as pool:
            for name, method, url, expect, body in plan:
                rows.append(runner.run(pool, name, method, url, expect, body, n, cpu, besides,
                                       stalls))
                if progress:
                    progress(rows[-1])
    finally:
        runner.close()
    return rows


def submitter(hub_url: str, token: str, job: dict, concurrency: int) -> Callable[[int], dict]:
    """``submit(n)``: ``n`` submits of ``job`` from ``concurrency`` clients, their row."""
    plan = [_row("submit", hub_url_of(hub_url) + "/services/gpuhub/api/v1",
                 Unsent().submit_workload(job), 201)]
    return lambda n: measure(token, concurrency, plan, n)[0]


def _row(name: str, api: str, request: Request, expect: int) -> tuple:
    """A plan row of one of the service's calls, as the generated client makes it."""
    return (name, request.method, api + request.target, expect, request.body)


def _check_first(hub_url: str, token: str) -> str:
    """Before measuring: the service answers and the token's user may submit
    (else the server's reason, not a table of errors). Returns the user."""
    with GpuHubClient(hub_url_of(hub_url), token, timeout=10) as client:
        me = client.get_me()
    if not me.get("can_submit"):
        raise GpuHubError(f"user {me.get('name')} may not submit jobs")
    return me["name"]


DIRECTORY_USERS = 60


def start_temporary_hub(workdir: str, queue_teams: int = 0, db_url: str = ""):
    """A hub from the test harness (tests/hub_harness.py) with one bench team
    owning its 4 GPUs, and ``queue_teams`` more teams (q00, q01, ...) of one
    user each, with no quota of their own (``db_url``: its database; "":
    SQLite in ``workdir``)."""
    path = os.path.join(ROOT, "tests")
    if not os.path.exists(os.path.join(path, "hub_harness.py")):
        raise GpuHubError("--start-hub needs a source checkout (tests/hub_harness.py)")
    if path not in sys.path:
        sys.path.insert(0, path)
    from hub_harness import Hub  # noqa: E402

    # The harness turns the group cache off for its tests; a benchmark wants
    # the service's default (10 s), as a deployed hub has it.
    groups = {"team-bench": ["bench"],
              **{f"team-q{i:02d}": [f"q{i:02d}"] for i in range(queue_teams)},
              # users for the hub's own page of 50, which the bench user may list
              "bench-directory": [f"d{i:03d}" for i in range(DIRECTORY_USERS)]}
    # The harness's fast cycles are for tests; a benchmark runs the default.
    hub = Hub(workdir, groups=groups, db_url=db_url,
              teams={"bench": {"quotas": {"default": {"nominal": 4}}}}, gpus=4,
              extra_service_config="c.GpuHubService.group_cache_seconds = 10.0\n"
                                   "c.GpuHubService.cycle_interval = 1.0\n",
              extra_hub_config='c.JupyterHub.load_roles.append({"name": "bench-directory", '
                               '"users": ["bench"], "scopes": ["list:users", "read:users"]})\n')
    try:
        hub.start()
    except BaseException:
        hub.stop()
        raise
    return hub


def add_arguments(parser) -> None:
    """The options of ``gpuhub bench api`` (added to the ``bench`` parser)."""
    g = parser.add_argument_group("bench api")
    g.add_argument("--url", help="the hub's URL (default $GPUHUB_URL, else "
                                 "http://127.0.0.1:8000)")
    g.add_argument("--token", help="a user's API token (default $GPUHUB_TOKEN, else "
                                   "$JUPYTERHUB_API_TOKEN)")
    g.add_argument("--team", help="team the benchmark's jobs are charged to")
    g.add_argument("--requests", type=int, default=200, help="requests per row (default 200)")
    g.add_argument("--concurrency", type=int, default=8, help="client threads (default 8)")
    g.add_argument("--start-hub", action="store_true",
                   help="start a temporary hub (tests/hub_harness.py) for the run, then stop it;"
                        " also measures spawn and job-start latency, CPU-only against 1 GPU")
    g.add_argument("--queued", type=int, default=0, metavar="N",
                   help="with --start-hub: then queue N one-GPU jobs of 50 teams behind a job "
                        "holding every GPU and measure the API again, with the cycle time "
                        "(10000, 100000)")
    g.add_argument("--fill-clients", type=int, default=32, metavar="N",
                   help="with --queued: client threads submitting the queue at once (default "
                        "32, 50 teams' users submitting; the intake's rate is bounded by what "
                        "the clients offer: 8 closed-loop clients measure 8 over a submit's "
                        "latency, not what the service can take)")
    g.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite",
                   help="with --start-hub: the temporary hub's database (default sqlite; "
                        "postgresql: a scratch database made on --pg-url's server, dropped "
                        "afterwards)")
    g.add_argument("--pg-url", default=bench_db.PG_ADMIN_URL,
                   help="with --db postgresql: a server where the bench may create a database "
                        "(default $GPUHUB_TEST_PG, else postgresql://postgres@127.0.0.1:5432/"
                        "postgres)")
    g.add_argument("--allow-remote", action="store_true",
                   help="allow a hub that is not on this machine")


def _refuse(args) -> Optional[str]:
    if args.requests < 1 or args.requests > 100_000 or args.concurrency < 1 \
            or args.concurrency > 256:
        return "--requests must be 1..100000 and --concurrency 1..256"
    if not 1 <= args.fill_clients <= 256:
        return "--fill-clients must be 1..256"
    if args.queued and not args.start_hub:
        return "--queued needs --start-hub (it makes the teams it queues for)"
    if args.db != "sqlite" and not args.start_hub:
        return "--db is the database of the hub --start-hub starts"
    return None


def cmd_bench_api(args) -> int:
    refusal = _refuse(args)
    if refusal:
        print(f"gpuhub bench: {refusal}", file=sys.stderr)
        return 2

    def progress(row):
        if not args.json:
            print(f"  measured {row['name']}", file=sys.stderr, flush=True)

    with contextlib.ExitStack() as stack:
        try:
            return _run(args, stack, progress)
        except GpuHubError as e:
            print(f"gpuhub bench: {e}", file=sys.stderr)
            return 2 if isinstance(e, TokenMissing) else 1


def _run(args, stack: contextlib.ExitStack, progress) -> int:
    hub = None
    extra: list[dict] = []
    if args.start_hub:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="gpuhub-bench-"))
        db_url = (stack.enter_context(bench_db.scratch_pg(args.pg_url))
                  if args.db == "postgresql" else "")
        if not args.json:
            print(f"starting a temporary hub ({args.db}) ...", file=sys.stderr, flush=True)
        hub = start_temporary_hub(tmp, QUEUE_TEAMS if args.queued else 0, db_url)
        stack.callback(hub.stop)
        url, token, team = hub.url, hub.token("bench"), "bench"
    else:
        url = hub_url_of(resolve_url(args.url))
        token = resolve_token(args.token)
        team = args.team
        if not args.allow_remote and not is_loopback(url):
            print(f"gpuhub bench: {url} is not on this machine; bench api only loads a "
                  f"local hub unless --allow-remote is given", file=sys.stderr)
            return 2
    user = _check_first(url, token)
    if hub is not None:
        from . import admission as adm
        adm.fill_page(hub.url + "/services/gpuhub/api/v1", token, dict(BENCH_JOB, team=team))
    admin = hub.token("root-admin") if hub is not None else None
    before = service_metrics.scrape(url, admin) if admin else None
    rows = run_api_bench(url, token, n=args.requests, concurrency=args.concurrency,
                         team=team, user=user, progress=progress,
                         cpu=process_cpu(hub) if hub is not None else None,
                         stalls=service_stalls(url, admin) if admin else None)
    if hub is not None:
        extra = [service_metrics.summary("service, idle", before,
                                         service_metrics.scrape(url, admin))]
        extra += measure_hub(hub, url, token, args, progress)
    if args.json:
        for row in rows + extra:
            print(json.dumps(dict(row, url=url, db=args.db), sort_keys=True))
    else:
        print(f"gpuhub API through the proxy at {url}: {args.requests} requests per row, "
              f"concurrency {args.concurrency}; baseline: JupyterHub's GET /hub/api/user "
              f"in the same run" + (f"; database: {args.db}" if hub is not None else ""))
        print(format_rows(rows))
        print(format_extra(extra))
    return 1 if any(r.get("errors") for r in rows + extra) else 0


QUEUE_TEAMS = 50


def measure_hub(hub, url: str, token: str, args, progress) -> list[dict]:
    """On the temporary hub: admission latency with free GPUs, then (with
    ``--queued``) the API rows again behind a long queue, with the rate the
    queue was filled at and the service's cycle and loop stalls meanwhile."""
    from . import admission as adm

    if not args.json:
        print("  measuring spawn and job-start latency ...", file=sys.stderr, flush=True)
    rows = adm.admission_rows(url, "bench", token, "bench", "default")
    if not args.json:
        print("  measuring job turnover ...", file=sys.stderr, flush=True)
    rows.append(turnover.job_turnover(hub, token, BENCH_JOB["project"], submitter(
        url, token, dict(BENCH_JOB, team="bench"), args.concurrency)))
    admin = hub.token("root-admin")
    rows.append({"name": "cycle, idle", "mean_cycle_ms": adm.mean_cycle_ms(url, admin, 5)})
    if args.queued:
        api = url + "/services/gpuhub/api/v1"
        note = None if args.json else (lambda line: print(line, file=sys.stderr, flush=True))
        tokens = {f"q{i:02d}": hub.token(f"q{i:02d}") for i in range(QUEUE_TEAMS)}
        before = service_metrics.scrape(url, admin)
        t0 = time.perf_counter()
        adm.fill_queue(api, token, "bench", tokens, args.queued, note, args.fill_clients)
        rate = args.queued / (time.perf_counter() - t0)
        rows.append({"name": f"submit intake, filling {args.queued} ({args.fill_clients} clients)",
                     "queued": args.queued, "intake_per_s": round(rate, 1),
                     "clients": args.fill_clients})
        rows.append(service_metrics.summary(f"service, filling {args.queued}", before,
                                            service_metrics.scrape(url, admin)))
        before = service_metrics.scrape(url, admin)
        queued = run_api_bench(url, token, n=args.requests, concurrency=args.concurrency,
                               team="bench", user="bench", progress=progress,
                               waiting_submit=True, cpu=process_cpu(hub),
                               stalls=service_stalls(url, admin))
        for r in queued:
            r["name"] += f", {args.queued} queued"
            r["queued"] = args.queued
        rows += add_ratios(queued)
        rows.append(service_metrics.summary(f"service, {args.queued} queued", before,
                                            service_metrics.scrape(url, admin)))
        before = service_metrics.scrape(url, admin)
        rows.append(adm.queued_start_row(api, token, "bench", args.queued))
        rows.append(service_metrics.summary(f"service, 0-GPU jobs starting, {args.queued} queued",
                                            before, service_metrics.scrape(url, admin)))
        rows.append({"name": f"cycle, {args.queued} queued",
                     "mean_cycle_ms": adm.mean_cycle_ms(url, admin, 10), "queued": args.queued})
    return rows


def format_extra(rows: list[dict]) -> str:
    lines = []
    for r in rows:
        if "median_s" in r:
            added = f"  (+{r['added_ms']} ms)" if "added_ms" in r else ""
            lines.append(f"{r['name']:<44} median {r['median_s']:.2f} s  "
                         f"[{r['min_s']:.2f}-{r['max_s']:.2f}] of {r['runs']}{added}")
        elif r["name"].startswith("job turnover"):
            lines.append(turnover.format_turnover(r))
        elif "mean_cycle_ms" in r:
            lines.append(f"{r['name']:<44} mean {r['mean_cycle_ms']:.1f} ms")
        elif "intake_per_s" in r:
            lines.append(f"{r['name']:<44} {r['intake_per_s']:.0f} submits/s")
        elif "cycles" in r:
            lines.append(service_metrics.format_summary(r))
    api_rows = [r for r in rows if "rps" in r]
    if api_rows:
        lines.append(format_rows(api_rows))
    return "\n".join(lines)
