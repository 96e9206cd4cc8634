"""What the end of an attempt means for its workload: pure, table-tested.

Given how the attempt ended (the backend's ``AttemptExit``), what was asked
of it (cancelled, preempted, replaced by the service) and its kind's rules,
``ending`` says whether the workload is requeued as its next attempt or
ends, in which state, what the attempt is recorded as, and the message.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from gpuspawner.backends.base import EXITED, LOST, TIME_LIMIT
from gpuspawner.scheduler.kinds import Kind
from gpuspawner.vocab.states import CANCELLED, FAILED, SUCCEEDED


@dataclass(frozen=True)
class Ending:
    requeue: bool
    state: Optional[str]  # the workload's final state when it is not requeued
    outcome: str          # the attempt's state
    message: str


@dataclass(frozen=True)
class Asked:
    """What the workload was asked to do before the attempt ended."""

    cancelled: bool = False
    preempted_for: Optional[str] = None
    replaced: Optional[str] = None  # why the service itself ended it (a replica)
    stopped: Optional[str] = None   # why the service stopped it for good (a share over its memory)


def describe_returncode(returncode: Optional[int], reason: str) -> str:
    if returncode is None:
        return f"ended ({reason})"
    if returncode < 0:
        return f"killed by signal {-returncode}"
    return f"exited with code {returncode}"


def ending(kind: Kind, attempt: int, reason: str, returncode: Optional[int], asked: Asked,
           *, lost_before: int, time_limit: Optional[float], max_replica_restarts: int,
           max_lost_attempts: int, detail: str = "") -> Ending:
    ended = describe_returncode(returncode, reason)
    if asked.cancelled:
        return Ending(False, CANCELLED, "cancelled", "cancelled; stopped")
    if asked.preempted_for is not None:
        return Ending(True, None, "preempted",
                      f"preempted for {asked.preempted_for}; requeued as attempt {attempt + 1}")
    if asked.stopped is not None and not kind.replaced_on_exit:
        return Ending(False, FAILED, "failed", asked.stopped)
    if kind.replaced_on_exit:
        if attempt + 1 < max_replica_restarts:
            return Ending(True, None, "lost" if reason == LOST else "failed",
                          f"replica ended ({asked.replaced or asked.stopped or ended}); "
                          f"replaced by attempt "
                          f"{attempt + 1}")
        return Ending(False, FAILED, "failed",
                      f"replica ended ({ended}) {max_replica_restarts} times; not restarted "
                      f"again")
    if reason == LOST:
        if lost_before + 1 >= max_lost_attempts:
            return Ending(False, FAILED, "lost",
                          f"attempt {attempt} was lost; lost {max_lost_attempts} times, so it "
                          f"is not requeued again")
        return Ending(True, None, "lost",
                      f"attempt {attempt} was lost; requeued as attempt {attempt + 1}")
    if reason == TIME_LIMIT:
        return Ending(False, FAILED, "failed", f"killed at its time limit of {time_limit:.0f} s")
    if reason == EXITED and returncode == 0:
        return Ending(False, SUCCEEDED, "succeeded", "exited with code 0")
    return Ending(False, FAILED, "failed", detail or ended)
