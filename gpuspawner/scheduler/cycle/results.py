"""What a cycle decides, and the quota holds it keeps."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from .. import events as ev
from ..backfill import Reservation


@dataclass
class QuotaHold:
    """A team's quota kept for its first quota-blocked workload from
    ``start`` on; ``spare`` GPUs of it may go to later work that runs past."""

    workload_id: str
    team: str
    pool: str
    start: float
    spare: float

    def allows(self, gpus: int, end: float) -> bool:
        return end <= self.start or gpus <= self.spare

    def consume(self, gpus: int, end: float) -> None:
        if end > self.start:
            self.spare -= gpus


def quota_hold(w, ledger, state, unavailable: set[str]) -> Optional[QuotaHold]:
    """Backfill inside a team: the first workload its team's ceiling
    (nominal + borrowing limit) blocks gets the time the team's running
    work frees enough of it; later work of the team may start only if it
    ends by then or leaves room. None when nothing running frees enough."""
    used = ledger.used.get((w.team, w.pool), 0)
    bound = ledger.quota(w.team, w.pool).ceiling
    if w.gpu_units > bound:
        return None
    running = state.running
    for end, _start, wid in state.team_ends.get((w.team, w.pool), ()):
        if wid in unavailable:
            continue
        used -= running[wid].workload.gpu_units
        if used + w.gpu_units <= bound:
            return QuotaHold(w.id, w.team, w.pool, end, bound - used - w.gpu_units)
    return None


@dataclass
class CycleResult:
    events: list[ev.Event] = field(default_factory=list)
    # workload id -> why it is still waiting
    waiting: dict[str, str] = field(default_factory=dict)
    reservations: list[Reservation] = field(default_factory=list)
    quota_holds: list[QuotaHold] = field(default_factory=list)

    def of_type(self, type_: str) -> list[ev.Event]:
        return [e for e in self.events if e.type == type_]


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
