"""Holding each share of a shared GPU to its memory: the pure decision.

Several workloads may share one GPU, each with a share of its memory
(a limit in MiB, e.g. a quarter of an H200's 141 GiB). Nothing in the
driver stops a CUDA process from allocating past its share, so the
service watches: every few seconds it reads NVML's per-process memory
(gpuspawner/inventory/processes.py) for the GPUs with shares, finds each
attempt's processes (gpuspawner/isolation/attempt_pids.py) and calls
:func:`judge_gpu` for each such GPU. It logs what comes back into the
workload's log and the audit trail and stops the attempts told to stop.

The rules, per share (its processes' memory summed):

- at or below its limit: nothing (a share that had been warned gets one
  ``recovered`` note, and its warning is forgotten);
- above it for the first time: ``warn``, and the time is kept;
- still above ``grace_s`` after the warning: ``stop``;
- above its hard ceiling (``limit x hard_factor``), or above its limit
  while the GPU is nearly full (``gpu_full_fraction`` of its memory used,
  where the next allocation of any share fails): ``stop`` at once.

A stop is given once per attempt (the service takes a while to end it).
Readings NVML cannot give (``None``: no permission, a lost GPU) are
*unknown*: nothing is decided on them, and the state is kept as it was.
A process NVML lists on a shared GPU that belongs to no share of it is
reported in ``unaccounted`` (with its owner where another GPU's share
claims it), never counted against a share.

State is plain data the service keeps between calls: ``{share key:
{"over_since": seconds, "stopping": bool}}`` with :func:`share_key` keys;
:func:`judge_gpu` returns the new state for the GPU's shares (shares no
longer there are dropped). ``now`` is seconds on any clock the caller
keeps using (``time.time()``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

__all__ = ["Share", "GpuMemory", "MemoryWatch", "Action", "Unaccounted", "Judgement",
           "WARN", "STOP", "RECOVERED", "judge_gpu", "share_key", "share_label", "gib"]

WARN, STOP, RECOVERED = "warn", "stop", "recovered"


@dataclass(frozen=True)
class Share:
    """One workload attempt's share of a GPU."""
    workload_id: str
    attempt: int
    limit_mib: int
    # The attempt's processes; None: not known (its cgroup cannot be read).
    pids: Optional[frozenset] = frozenset()
    # How users know the share, for the reasons: "1/4 of an H200" (share_label).
    label: str = ""


@dataclass(frozen=True)
class GpuMemory:
    """What NVML says of one GPU's memory now. The reader's
    ``inventory.processes.ProcessReading`` has these fields and may be
    passed as it is."""
    uuid: str
    total_mib: Optional[int] = None
    used_mib: Optional[int] = None
    # pid -> MiB NVML accounts to it (None: it does not say for that
    # process); the whole mapping None: the process list cannot be read.
    memory_mib: Optional[Mapping[int, Optional[int]]] = None


@dataclass(frozen=True)
class MemoryWatch:
    """How strictly shares are held (the service's configuration)."""
    grace_s: float = 30.0           # between the warning and the stop
    hard_factor: float = 1.1        # above limit x this: stop at once
    gpu_full_fraction: float = 0.98  # GPU this full and the share above its limit: stop at once

    def __post_init__(self):
        if not self.grace_s >= 0:
            raise ValueError(f"MemoryWatch.grace_s must be >= 0, got {self.grace_s!r}")
        if not self.hard_factor >= 1:
            raise ValueError(f"MemoryWatch.hard_factor must be >= 1, got {self.hard_factor!r}")
        if not 0 < self.gpu_full_fraction <= 1:
            raise ValueError("MemoryWatch.gpu_full_fraction must be in (0, 1], got "
                             f"{self.gpu_full_fraction!r}")


@dataclass(frozen=True)
class Action:
    """Something to tell (warn, recovered) or do (stop) about one attempt."""
    kind: str                   # WARN | STOP | RECOVERED
    workload_id: str
    attempt: int
    used_mib: int
    limit_mib: int
    reason: str                 # for the workload's log and the audit trail
    numbers: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Unaccounted:
    """A process on a shared GPU that no share of that GPU holds."""
    gpu_uuid: str
    pid: int
    used_mib: Optional[int]
    owner: Optional[str] = None  # "workload/attempt" of another GPU's share it belongs to


@dataclass(frozen=True)
class Judgement:
    actions: list
    unaccounted: list
    state: dict                 # the new state of this GPU's shares
    used_mib: dict              # share key -> MiB its processes use (None: unknown)
    unknown: dict               # share key -> why its use is not known


def share_key(workload_id: str, attempt: int) -> str:
    return f"{workload_id}/{attempt}"


def gib(mib: float) -> str:
    """``41.2 GiB`` (one decimal)."""
    return f"{mib / 1024:.1f} GiB"


_FRACTIONS = [(n, d) for d in (2, 3, 4, 8) for n in range(1, d)]


def share_label(limit_mib: int, total_mib: int, model: str) -> str:
    """``1/4 of an H200`` where the share is (within 1%) a simple fraction of
    the GPU's memory, else ``23% of an H200``; ``model`` as NVML names it."""
    name = model.removeprefix("NVIDIA ").strip() or "GPU"
    article = "an" if name[:1].upper() in "AEFHILMNORSX8" else "a"
    ratio = limit_mib / total_mib if total_mib else 0.0
    for n, d in _FRACTIONS:
        if abs(ratio - n / d) <= 0.01:
            return f"{n}/{d} of {article} {name}"
    return f"{ratio * 100:.0f}% of {article} {name}"


def _share_use(share: Share, gpu: GpuMemory) -> tuple[Optional[int], str]:
    """MiB the share's processes use on ``gpu`` (what NVML says of them),
    or None with why. Processes NVML does not list use nothing there."""
    if gpu.memory_mib is None:
        return None, "NVML cannot list this GPU's processes"
    if share.pids is None:
        return None, "the attempt's processes cannot be found"
    mine = [gpu.memory_mib[p] for p in share.pids if p in gpu.memory_mib]
    known = [m for m in mine if m is not None]
    if len(known) < len(mine) and not known:
        return None, "NVML does not report these processes' memory"
    # Some figures missing: the known ones are a lower bound, enough to act on.
    return sum(known), ""


def _subject(share: Share) -> str:
    return f"this share's {gib(share.limit_mib)}" + (f" ({share.label})" if share.label else "")


def _gpu_full(gpu: GpuMemory, watch: MemoryWatch) -> bool:
    return (gpu.total_mib is not None and gpu.used_mib is not None and gpu.total_mib > 0
            and gpu.used_mib >= watch.gpu_full_fraction * gpu.total_mib)


def _judge_share(share: Share, used: int, gpu: GpuMemory, watch: MemoryWatch, now: float,
                 prior: Optional[dict]) -> tuple[Optional[Action], Optional[dict]]:
    """The action on one share whose use is known, and its new state."""
    numbers = {"used_mib": used, "limit_mib": share.limit_mib, "gpu_uuid": gpu.uuid,
               "gpu_used_mib": gpu.used_mib, "gpu_total_mib": gpu.total_mib,
               "grace_s": watch.grace_s, "hard_limit_mib": int(share.limit_mib * watch.hard_factor)}

    def act(kind: str, reason: str) -> Action:
        return Action(kind, share.workload_id, share.attempt, used, share.limit_mib, reason,
                      numbers)

    if prior is not None and prior.get("stopping"):
        return None, prior                       # told once; the stop is under way
    if used <= share.limit_mib:
        if prior is None:
            return None, None
        return act(RECOVERED, f"GPU memory {gib(used)} back within {_subject(share)}; "
                              f"not stopping"), None
    over = f"GPU memory {gib(used)} above {_subject(share)}"
    since = now if prior is None else prior["over_since"]
    numbers["over_s"] = round(now - since, 3)
    stopping = {"over_since": since, "stopping": True}
    hard = int(share.limit_mib * watch.hard_factor)
    if used > hard:
        return act(STOP, f"{over}, past its ceiling of {gib(hard)}; stopping"), stopping
    if _gpu_full(gpu, watch):
        return act(STOP, f"{over} while the GPU is full ({gib(gpu.used_mib)} of "
                         f"{gib(gpu.total_mib)} used); stopping"), stopping
    if prior is None:
        return act(WARN, f"{over}; it is stopped if still above in {watch.grace_s:g} s "
                         f"(free GPU memory to keep it)"), {"over_since": now, "stopping": False}
    if now - since >= watch.grace_s:
        return act(STOP, f"{over} for {now - since:.0f} s, past the {watch.grace_s:g} s grace "
                         f"after the warning; stopping"), stopping
    return None, prior


def judge_gpu(shares: list, gpu: GpuMemory, state: Mapping[str, dict], now: float,
              watch: MemoryWatch = MemoryWatch(),
              owners: Optional[Mapping[int, str]] = None) -> Judgement:
    """Warn, stop or leave each share of one GPU (module docstring).

    ``shares``: the GPU's shares now; ``state``: as returned last time
    (entries of other GPUs' shares are ignored, and not returned);
    ``owners``: pid -> share key of the other shared GPUs' processes, so
    that a process straying onto this GPU is named as theirs.
    """
    actions, new_state, used_by, unknown = [], {}, {}, {}
    claimed: set = set()
    for share in shares:
        key = share_key(share.workload_id, share.attempt)
        claimed |= set(share.pids or ())
        used, why = _share_use(share, gpu)
        used_by[key] = used
        if used is None:
            unknown[key] = why
            if key in state:
                new_state[key] = dict(state[key])  # nothing decided on missing data
            continue
        action, entry = _judge_share(share, used, gpu, watch, now, state.get(key))
        if action is not None:
            actions.append(action)
        if entry is not None:
            new_state[key] = entry
    strays = [Unaccounted(gpu.uuid, pid, mib, (owners or {}).get(pid))
              for pid, mib in sorted((gpu.memory_mib or {}).items()) if pid not in claimed]
    return Judgement(actions, strays, new_state, used_by, unknown)
