"""Job traces for the simulator: a small CSV format and a Philly-like synthetic generator.

A trace is what the simulator replays: when each job is submitted, by whom, how many GPUs it asks for
and how long it really runs (``duration_s``, unknown to the scheduler) versus what the user declared
(``time_limit_s``, which backfill relies on). The CSV has one row per job with the columns named in
``REQUIRED_COLUMNS`` and, optionally, ``OPTIONAL_COLUMNS`` (``sweep`` and ``after``: sweeps and
dependencies, sim/pipelines.py; ``gpu_share``: a share of one GPU, 0 < s < 1, with ``num_gpus`` 1;
``cpus`` and ``memory_gib``: what it asks for besides GPUs on each of its nodes, which nodes and team
quotas that count them admit against); an empty optional cell means "not given".
Unknown extra columns are ignored so traces exported from other tools can be replayed as they are.

Synthetic traces (``generate_philly_trace``) follow the Microsoft Philly cluster as characterised by
Jeon et al., "Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN Training Workloads" (USENIX
ATC'19). The parameters, and why they were chosen:

* GPUs per job (``GPU_SIZE_SHARES``): 1 GPU 69%, 2 GPUs 3%, 4 GPUs 13%, 8 GPUs 12.6%, and the 2.4% of
  jobs asking for 16 or more split 1.6% / 0.8% between 16 and 32 GPUs (larger gangs are rarer). Jobs
  above 8 GPUs span whole 8-GPU servers, as in Philly, so they carry ``num_nodes = num_gpus // 8``;
  smaller jobs leave ``num_nodes`` unset (single node).
* Run time: log-normal with median 2.5 h (``mu = ln 9000 s``) and ``sigma = 1.8``, clipped to
  [60 s, 14 days]. The paper reports run times from minutes to weeks with a heavy tail; with these
  parameters the 10th percentile is about 15 minutes, the 90th about 25 hours, the 99th about 7 days,
  the mean (about 12 h) is five times the median, and only ~0.3% of jobs hit each clip. Run times are
  drawn independently of GPU count: a deliberate simplification.
* Declared time limit: ``duration * uniform(time_limit_factor)`` rounded up to whole minutes, because
  users overestimate (default factor 1.2-3.0), so the limit is never below the real run time. With
  ``blanket_share`` > 0 that share of the jobs instead declares a blanket ``blanket_limit_s`` (7 days,
  or the run time rounded up when it is longer), as users do who always ask for the maximum.
* Teams: Zipf weights (team k of n submits in proportion to 1/k), so a few big teams submit most jobs,
  like Philly's virtual clusters. Each team has 3-10 users named ``first.team``, again Zipf-weighted.
* Arrivals: a Poisson process with a diurnal rate, ``1 + 0.3 cos(2 pi (t - 14 h) / 24 h)`` (busiest
  at 14:00, quietest at 02:00, t = 0 is midnight). The sizes and durations are drawn first, then the
  arrival window ``[0, T]`` is set so that the offered load ``sum(num_gpus * duration_s) /
  (capacity_gpus * T)`` equals ``load`` exactly; ``num_jobs`` arrivals are placed in it as independent
  draws from the rate's density, which is exactly a Poisson process conditioned on its job count.

A notebook-heavy trace (``generate_notebook_trace``) adds to such batch jobs many interactive
notebook servers that each ask for a share of one GPU (``NOTEBOOK_SHARES``: 1/4 or 1/2) and run for
hours (log-normal, median ``NOTEBOOK_MEDIAN_S`` 3 h, sigma 0.8, clipped to 15 min-24 h, no time
limit: a server has none), arriving over the same span with the same diurnal rate.

Everything random comes from one ``random.Random(seed)``: the same arguments give the same trace.
"""

from __future__ import annotations

import csv
import io
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .pipelines import check_references, parse_after_cell


@dataclass(frozen=True)
class TraceJob:
    """One job of a trace; ``duration_s`` is how long it runs once started, uninterrupted."""

    job_id: str
    team: str
    user: str
    submit_time_s: float
    num_gpus: int
    duration_s: float
    time_limit_s: float | None = None
    gpu_type: str | None = None
    priority: str | None = None
    num_nodes: int | None = None
    # "job", "notebook" or "deployment" (None: a job). A notebook server or
    # a model replica preempts at once, and a preempted server ends.
    kind: str | None = None
    # The sweep (a name) it is a task of, and what it waits for:
    # "TARGET[:ok|any|failed] ..." with job ids or sweep names (sim/pipelines.py).
    sweep: str | None = None
    after: str | None = None
    # A share of one GPU (0 < s < 1, with num_gpus 1); None: whole GPUs.
    gpu_share: float | None = None
    # CPUs and memory (GiB) it asks for on each of its nodes; None: not counted.
    cpus: float | None = None
    memory_gib: float | None = None


class TraceError(ValueError):
    """A trace file is malformed; the message names the file, line and column."""


REQUIRED_COLUMNS = ("job_id", "team", "user", "submit_time_s", "num_gpus", "duration_s")
OPTIONAL_COLUMNS = ("time_limit_s", "gpu_type", "priority", "num_nodes", "kind", "sweep", "after",
                    "gpu_share", "cpus", "memory_gib")
KINDS = ("job", "notebook", "deployment")


def read_trace(path: str | Path) -> list[TraceJob]:
    """Read and validate a CSV trace; return its jobs sorted by submit time (ties keep file order)."""
    path = Path(path)
    # utf-8-sig: spreadsheets often save CSV with a byte-order mark before the header.
    with path.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        header = [name.strip() for name in next(reader, [])]
        for column in REQUIRED_COLUMNS:
            if column not in header:
                raise _error(path, 1, column, "required column is missing from the header")
        for column in set(header):
            if column and header.count(column) > 1:
                raise _error(path, 1, column, "column appears more than once in the header")
        index = {name: i for i, name in enumerate(header)}
        jobs: list[TraceJob] = []
        first_line: dict[str, int] = {}
        for row in reader:
            if not any(cell.strip() for cell in row):
                continue
            line = reader.line_num
            if len(row) > len(header):
                raise TraceError(f"{path}, line {line}: {len(row)} fields but the header has {len(header)}")
            cells = {name: (row[i].strip() if i < len(row) else "") for name, i in index.items()}
            job = _parse_row(cells, path, line)
            if job.job_id in first_line:
                raise _error(path, line, "job_id",
                             f"duplicate job_id {job.job_id!r} (first on line {first_line[job.job_id]})")
            first_line[job.job_id] = line
            jobs.append(job)
    problem = check_references(jobs)
    if problem:
        raise TraceError(f"{path}: {problem}")
    return sorted(jobs, key=lambda job: job.submit_time_s)


def write_trace(path: str | Path, jobs: Iterable[TraceJob]) -> None:
    """Write jobs as a CSV that ``read_trace`` reads back unchanged.

    Optional columns are written only when some job sets them, so simple traces stay simple.
    """
    with Path(path).open("w", newline="", encoding="utf-8") as f:
        _write(f, jobs)


def trace_csv(jobs: Iterable[TraceJob]) -> str:
    """The CSV ``write_trace`` writes, as a string."""
    out = io.StringIO(newline="")
    _write(out, jobs)
    return out.getvalue()


def _write(f, jobs: Iterable[TraceJob]) -> None:
    jobs = list(jobs)
    optional = [c for c in OPTIONAL_COLUMNS if any(getattr(job, c) is not None for job in jobs)]
    columns = [*REQUIRED_COLUMNS, *optional]
    writer = csv.writer(f)
    writer.writerow(columns)
    for job in jobs:
        writer.writerow([_format_cell(getattr(job, c)) for c in columns])


PHILLY_TEAMS = ("vision", "nlp", "speech", "recsys", "robotics", "research", "platform", "ads")
GPU_SIZE_SHARES = {1: 0.69, 2: 0.03, 4: 0.13, 8: 0.126, 16: 0.016, 32: 0.008}
GPUS_PER_SERVER = 8
DURATION_MEDIAN_S = 2.5 * 3600
DURATION_SIGMA = 1.8
DURATION_RANGE_S = (60.0, 14 * 86400.0)
DIURNAL_AMPLITUDE = 0.3
DIURNAL_PEAK_S = 14 * 3600
_DAY_S = 86400.0
_FIRST_NAMES = (
    "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy",
    "mallory", "niaj", "olivia", "peggy", "rupert", "sybil", "trent", "victor", "walter", "yara",
)


def generate_philly_trace(
    num_jobs: int,
    *,
    teams: Sequence[str] | int = PHILLY_TEAMS,
    seed: int = 0,
    capacity_gpus: int = 2000,
    load: float = 1.2,
    gpu_type: str | None = None,
    time_limit_factor: tuple[float, float] = (1.2, 3.0),
    blanket_share: float = 0.0,
    blanket_limit_s: float = 7 * 86400.0,
) -> list[TraceJob]:
    """Draw a synthetic trace shaped like Philly (see the module docstring for the model).

    ``teams`` is a list of team names, or a count ``n`` meaning ``team00 .. team{n-1}``; the default is
    eight realistically named teams. ``load`` is the offered load relative to ``capacity_gpus`` (above
    1.0 the cluster is oversubscribed and queues grow). Every job gets ``gpu_type`` (None: any pool).
    """
    team_names = _team_names(teams)
    low, high = time_limit_factor
    if num_jobs < 0:
        raise ValueError(f"num_jobs must be >= 0, got {num_jobs}")
    if capacity_gpus < 1:
        raise ValueError(f"capacity_gpus must be >= 1, got {capacity_gpus}")
    if not load > 0:
        raise ValueError(f"load must be > 0, got {load}")
    if not 1.0 <= low <= high:
        raise ValueError(f"time_limit_factor must satisfy 1 <= low <= high, got {time_limit_factor}")
    if not 0.0 <= blanket_share <= 1.0:
        raise ValueError(f"blanket_share must be in [0, 1], got {blanket_share}")

    rng = random.Random(seed)
    team_weights = _zipf_weights(len(team_names))
    users = {team: _team_users(rng, team) for team in team_names}
    user_weights = {team: _zipf_weights(len(names)) for team, names in users.items()}
    sizes, size_weights = list(GPU_SIZE_SHARES), list(GPU_SIZE_SHARES.values())
    mu = math.log(DURATION_MEDIAN_S)

    drawn = []
    for _ in range(num_jobs):
        team = rng.choices(team_names, team_weights)[0]
        user = rng.choices(users[team], user_weights[team])[0]
        gpus = rng.choices(sizes, size_weights)[0]
        duration = float(round(min(max(rng.lognormvariate(mu, DURATION_SIGMA), DURATION_RANGE_S[0]),
                                   DURATION_RANGE_S[1])))
        limit = math.ceil(duration * rng.uniform(low, high) / 60) * 60.0
        # Drawn only when asked for, so traces without blanket limits stay the same.
        if blanket_share and rng.random() < blanket_share:
            limit = max(blanket_limit_s, math.ceil(duration / 60) * 60.0)
        drawn.append((team, user, gpus, duration, limit))

    work = sum(gpus * duration for _, _, gpus, duration, _ in drawn)
    span = work / (load * capacity_gpus)
    arrivals = sorted(_diurnal_arrival(rng, span) for _ in drawn)

    width = max(6, len(str(num_jobs - 1)))
    return [
        TraceJob(
            job_id=f"job{i:0{width}d}", team=team, user=user, submit_time_s=round(submit, 3),
            num_gpus=gpus, duration_s=duration, time_limit_s=limit, gpu_type=gpu_type,
            num_nodes=gpus // GPUS_PER_SERVER if gpus > GPUS_PER_SERVER else None,
        )
        for i, (submit, (team, user, gpus, duration, limit)) in enumerate(zip(arrivals, drawn))
    ]


NOTEBOOK_SHARES = {0.25: 0.65, 0.5: 0.35}
NOTEBOOK_MEDIAN_S = 3 * 3600
NOTEBOOK_SIGMA = 0.8
NOTEBOOK_RANGE_S = (15 * 60.0, 24 * 3600.0)


def generate_notebook_trace(
    num_jobs: int,
    num_notebooks: int,
    *,
    teams: Sequence[str] | int = PHILLY_TEAMS,
    seed: int = 0,
    capacity_gpus: int = 256,
    load: float = 0.8,
    gpu_type: str | None = None,
) -> list[TraceJob]:
    """Batch jobs as ``generate_philly_trace`` (``load`` is theirs alone) plus
    ``num_notebooks`` notebook servers asking for shares of one GPU, over the
    same span (see the module docstring)."""
    if num_notebooks < 0:
        raise ValueError(f"num_notebooks must be >= 0, got {num_notebooks}")
    jobs = generate_philly_trace(num_jobs, teams=teams, seed=seed, capacity_gpus=capacity_gpus,
                                 load=load, gpu_type=gpu_type)
    team_names = _team_names(teams)
    rng = random.Random(seed + 1)  # the batch jobs stay those of generate_philly_trace
    team_weights = _zipf_weights(len(team_names))
    users = {team: _team_users(rng, team) for team in team_names}
    span = max((j.submit_time_s for j in jobs), default=_DAY_S)
    shares, share_weights = list(NOTEBOOK_SHARES), list(NOTEBOOK_SHARES.values())
    mu = math.log(NOTEBOOK_MEDIAN_S)
    width = max(6, len(str(num_notebooks - 1)))
    notebooks = []
    for i in range(num_notebooks):
        team = rng.choices(team_names, team_weights)[0]
        duration = float(round(min(max(rng.lognormvariate(mu, NOTEBOOK_SIGMA),
                                       NOTEBOOK_RANGE_S[0]), NOTEBOOK_RANGE_S[1])))
        notebooks.append(TraceJob(
            job_id=f"nb{i:0{width}d}", team=team, user=rng.choice(users[team]),
            submit_time_s=round(_diurnal_arrival(rng, span), 3), num_gpus=1,
            duration_s=duration, gpu_type=gpu_type, kind="notebook",
            gpu_share=rng.choices(shares, share_weights)[0]))
    return sorted(jobs + notebooks, key=lambda job: (job.submit_time_s, job.job_id))


def _parse_row(cells: dict[str, str], path: Path, line: int) -> TraceJob:
    def text(column: str) -> str:
        if not cells[column]:
            raise _error(path, line, column, "value is empty")
        return cells[column]

    def number(column: str) -> float:
        try:
            value = float(text(column))
        except ValueError:
            raise _error(path, line, column, f"expected a number, got {cells[column]!r}") from None
        if not math.isfinite(value):
            raise _error(path, line, column, f"expected a finite number, got {cells[column]!r}")
        return value

    def integer(column: str) -> int:
        try:
            return int(text(column))
        except ValueError:
            raise _error(path, line, column, f"expected a whole number, got {cells[column]!r}") from None

    def check(column: str, ok: bool, requirement: str) -> None:
        if not ok:
            raise _error(path, line, column, f"must be {requirement}, got {cells[column]!r}")

    def given(column: str) -> bool:
        return bool(cells.get(column))

    def optional(column: str, parse, ok, requirement: str):
        """The column's value, checked, if the cell is given; else None."""
        if not given(column):
            return None
        value = parse(column)
        check(column, ok(value), requirement)
        return value

    submit, gpus, duration = number("submit_time_s"), integer("num_gpus"), number("duration_s")
    check("submit_time_s", submit >= 0, ">= 0")
    check("num_gpus", gpus >= 1, ">= 1")
    check("duration_s", duration > 0, "> 0")
    time_limit = optional("time_limit_s", number, lambda v: v > 0, "> 0")
    num_nodes = optional("num_nodes", integer, lambda v: v >= 1, ">= 1")
    kind = optional("kind", text, lambda v: v in KINDS, f"one of {', '.join(KINDS)}")
    gpu_share = optional("gpu_share", number, lambda v: 0 < v < 1,
                         "between 0 and 1 (a share of one GPU)")
    if gpu_share is not None:
        check("num_gpus", gpus == 1, "1 for a share of one GPU")
        if num_nodes is not None:
            check("num_nodes", num_nodes == 1, "1 for a share of one GPU")
    cpus = optional("cpus", number, lambda v: v > 0, "> 0 (CPUs on each of its nodes)")
    memory_gib = optional("memory_gib", number, lambda v: v > 0, "> 0 (GiB on each of its nodes)")
    after = _after(cells, path, line)
    return TraceJob(
        job_id=text("job_id"), team=text("team"), user=text("user"), submit_time_s=submit,
        num_gpus=gpus, duration_s=duration, time_limit_s=time_limit,
        gpu_type=cells["gpu_type"] if given("gpu_type") else None,
        priority=cells["priority"] if given("priority") else None,
        num_nodes=num_nodes, kind=kind, sweep=cells["sweep"] if given("sweep") else None,
        after=after, gpu_share=gpu_share, cpus=cpus, memory_gib=memory_gib,
    )


def _after(cells: dict[str, str], path: Path, line: int) -> str | None:
    """The ``after`` cell (what the job waits for), checked; None if empty."""
    after = cells.get("after") or None
    if after is not None:
        try:
            parse_after_cell(after)
        except ValueError as e:
            raise _error(path, line, "after", str(e)) from None
    return after


def _error(path: Path, line: int, column: str, problem: str) -> TraceError:
    return TraceError(f"{path}, line {line}, column {column!r}: {problem}")


def _format_cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        # Whole numbers without ".0" keep the CSV readable; repr round-trips every other float.
        return str(int(value)) if value.is_integer() else repr(value)
    return str(value)


def _team_names(teams: Sequence[str] | int) -> list[str]:
    if isinstance(teams, int):
        if teams < 1:
            raise ValueError(f"teams must be >= 1, got {teams}")
        width = max(2, len(str(teams - 1)))
        return [f"team{i:0{width}d}" for i in range(teams)]
    names = list(teams)
    if not names or len(set(names)) != len(names) or not all(names):
        raise ValueError(f"teams must be distinct non-empty names, got {names}")
    return names


def _team_users(rng: random.Random, team: str) -> list[str]:
    return [f"{first}.{team}" for first in rng.sample(_FIRST_NAMES, rng.randint(3, 10))]


def _zipf_weights(n: int) -> list[float]:
    return [1 / rank for rank in range(1, n + 1)]


def _diurnal_arrival(rng: random.Random, span: float) -> float:
    """One arrival time in [0, span] with density proportional to the diurnal rate (rejection sampling)."""
    while True:
        t = rng.uniform(0.0, span)
        rate = 1 + DIURNAL_AMPLITUDE * math.cos(2 * math.pi * (t - DIURNAL_PEAK_S) / _DAY_S)
        if rng.random() * (1 + DIURNAL_AMPLITUDE) <= rate:
            return t
