"""What every backend (local processes, Kubernetes, Slurm) is asked to do.

The service decides; a backend executes. A backend never decides who runs:
it starts exactly what it is told, on exactly the GPUs it is told, and
reports exits. Everything it needs to find its work again after a restart is
in the ``LaunchSpec`` the service persisted.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Optional

from .exits import EXITED, LOST, STOPPED, TIME_LIMIT  # noqa: F401 (why an attempt ended)

if TYPE_CHECKING:
    from ..scheduler.model import Node


@dataclass(frozen=True)
class LaunchSpec:
    """One attempt of one workload, as the backend runs it."""

    workload_id: str
    attempt: int
    argv: tuple[str, ...]
    attempt_dir: str            # logs and the exit record live here
    cwd: str
    env: dict = field(default_factory=dict)
    devices: tuple[int, ...] = ()  # this host's GPU indices: GPUHUB_GPU_INDICES
    # Their UUIDs where the inventory knows them (NVML): CUDA_VISIBLE_DEVICES
    # names them so (gpu_rules.visible_devices); else by index.
    device_uuids: tuple[str, ...] = ()
    time_limit: Optional[float] = None
    grace_period: float = 30.0
    checkpoint_dir: Optional[str] = None
    # Where the scheduler placed it and whose it is, for cluster backends
    # (Kubernetes, Slurm) that run it on those nodes and label it.
    placement: tuple[tuple[str, tuple[int, ...]], ...] = ()  # (node, GPU numbers on it)
    pool: str = ""
    team: str = ""
    user: str = ""
    priority: str = ""
    gpus_per_node: int = 0
    # For a model-deployment replica: {"name", "revision", "server", "model"}
    # (MLServer's settings), so a cluster backend can serve it in its own way.
    serving: dict = field(default_factory=dict)
    # Its kind (job, deployment) and what it asked for besides GPUs (None:
    # its kind's default): the cgroup holds it to them.
    kind: str = "job"
    cpus: Optional[float] = None
    memory: Optional[int] = None   # bytes
    # The datasets it reads: (name, folder), each seen read-only at
    # /datasets/<name> (a private mount namespace locally, a volume on Kubernetes).
    datasets: tuple[tuple[str, str], ...] = ()

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(node for node, _ in self.placement)


# What a job's environment takes from the service's: nothing else (the
# service's environment holds its hub token and database URL).
ENV_KEEP = ("PATH", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR", "LD_LIBRARY_PATH", "CUDA_HOME",
            "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")
ENV_KEEP_PREFIXES = ("LC_", "NVIDIA_")
# ... and, when jobs run as the service's own user, its login variables.
LOGIN_VARS = ("HOME", "USER", "LOGNAME", "SHELL")

def kept_environment(environ, login: bool) -> dict:
    """What of the service's environment ``environ`` a job's starts from."""
    keep = ENV_KEEP + (LOGIN_VARS if login else ())
    return {k: v for k, v in environ.items() if k in keep or k.startswith(ENV_KEEP_PREFIXES)}


def local_replica_address(port: int) -> str:
    """Where a replica that runs on this host listens (the local and Slurm
    backends: MLServer binds to the loopback address at the port the
    service picked)."""
    return f"127.0.0.1:{port}"


@dataclass(frozen=True)
class AttemptExit:
    workload_id: str
    attempt: int
    reason: str                 # EXITED, TIME_LIMIT, STOPPED or LOST
    returncode: Optional[int]
    finished_at: float

    @property
    def succeeded(self) -> bool:
        return self.reason == EXITED and self.returncode == 0


@dataclass(frozen=True)
class Started:
    """A started attempt as its backend names it: ``ref`` is the runner's
    process group id (local), the Job's or replica's name (Kubernetes) or
    the batch job's id (Slurm)."""
    workload_id: str
    attempt: int
    ref: str


class BackendError(RuntimeError):
    """An attempt that could not be started (its runner, pod or batch job
    could not be launched)."""


def account_of(accounts, spec: LaunchSpec):
    """The system account ``spec``'s user's work runs as (made on first use),
    None without accounts; BackendError when there is none to be had."""
    if accounts is None:
        return None
    from ..isolation.accounts import AccountError
    try:
        return accounts.ensure(spec.user)
    except (AccountError, OSError, ValueError) as e:
        raise BackendError(f"attempt {(spec.workload_id, spec.attempt)}: no account for user "
                           f"{spec.user!r}: {e}") from e


# What every backend implements: a class without one of them is refused
# when it is defined (as JupyterHub's Spawner documents its abstract methods).
REQUIRED = ("start", "stop", "kill", "poll", "recover")
# What a backend may be able to do, declared as class attributes (True or
# False), never probed: the engine and the share watch read them.
CAPABILITIES = ("starts_off_loop", "names_attempt_pids")


class Backend:
    """What the engine asks of a backend, and nothing else: the contract
    every backend subclasses (a base class rather than a ``typing.Protocol``
    or an ``abc.ABC`` so that the defaults below are inherited, and so that a
    traitlets-configurable backend can subclass it: their metaclasses
    conflict with traitlets'; ``__init_subclass__`` refuses an incomplete one).

    A backend implements ``start``, ``stop``, ``kill``, ``poll`` and
    ``recover``; the other methods have defaults a backend overrides when it
    has them, and its capabilities are class attributes. The engine calls
    every method from the service's event loop thread, except ``start`` when
    ``starts_off_loop`` is True: then a worker thread calls it (while the loop
    may call ``poll``, ``stop`` and ``kill`` for other attempts), so such a
    backend keeps its start to the attempt it starts.
    """

    # Its start blocks (forks, runs sbatch): the engine runs it off the loop.
    starts_off_loop: bool = False
    # attempt_pids() names an attempt's processes on this host (the GPU
    # shares' memory watch reads them).
    names_attempt_pids: bool = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        missing = [name for name in REQUIRED if getattr(cls, name) is getattr(Backend, name)]
        if missing:
            raise TypeError(f"backend {cls.__qualname__} does not implement "
                            f"{', '.join(missing)} (the contract: backends/base.py's Backend)")
        odd = [name for name in CAPABILITIES if not isinstance(getattr(cls, name), bool)]
        if odd:
            raise TypeError(f"backend {cls.__qualname__}: {', '.join(odd)} must be declared "
                            f"True or False")

    def start(self, spec: LaunchSpec) -> Started:
        """Launch the attempt (on ``spec.placement``'s GPUs) and say what it
        is called there; raise BackendError if it cannot be launched. Its
        exit comes through ``poll``."""
        raise NotImplementedError

    def stop(self, workload_id: str, attempt: int, grace: float) -> None:
        """Ask it to stop (SIGTERM or the like) and kill it after ``grace`` seconds."""
        raise NotImplementedError

    def kill(self, workload_id: str, attempt: int) -> None:
        """End it now."""
        raise NotImplementedError

    def poll(self) -> list[AttemptExit]:
        """Attempts that ended since the last call, each reported once."""
        raise NotImplementedError

    def recover(self, specs: list[LaunchSpec]) -> list[AttemptExit]:
        """After a restart: adopt the attempts of ``specs`` that still run, and
        report those that ended meanwhile (LOST if nothing says how)."""
        raise NotImplementedError

    def attempt_pids(self, workload_id: str, attempt: int) -> Optional[frozenset]:
        """The attempt's processes on this host, or None when they cannot be
        named (a backend with ``names_attempt_pids`` names them)."""
        return None

    def blocking_start(self, spec: LaunchSpec) -> bool:
        """Whether starting ``spec`` blocks (so the engine runs it off the loop)."""
        return self.starts_off_loop

    def take_node_changes(self) -> list[Node]:
        """Nodes (scheduler ``Node``) whose health or state changed since the
        last call; a cluster backend learns of those, a local host does not."""
        return []

    def node_reason(self, node: str) -> str:
        """Why the cluster says ``node`` is unhealthy or drained, as last read
        ("" when it does not say, or the node is fine)."""
        return ""

    def replica_address(self, workload_id: str, attempt: int, port: int) -> Optional[str]:
        """Where a serving replica that listens on ``port`` is reached, or None
        while that is not known yet."""
        return local_replica_address(port)

    @staticmethod
    def log_path(attempt_dir: str) -> str:
        """The attempt's log, as the service reads it."""
        return os.path.join(attempt_dir, "output.log")

    async def run(self) -> None:
        """Background work on the event loop for as long as the service runs
        (a cluster backend's watch); nothing by default."""
        return None

    def log_followed(self, workload_id: str, attempt: int, following: bool) -> None:
        """Someone starts (``following``) or stops following the attempt's
        log (``GET /workloads/{id}/logs?follow=true``): a backend whose log
        file is not written as the job runs (a cluster's pods) copies it
        there while it is followed. Nothing by default: the local backend's
        supervisor writes it all along."""
        return None

    def set_wake(self, wake: Callable[[], None]) -> None:
        """``wake()`` asks the service for a scheduling cycle now: a backend
        that learns of an exit between polls (a cluster's watch) calls it.
        Ignored by default (the engine polls every cycle anyway)."""
        return None
