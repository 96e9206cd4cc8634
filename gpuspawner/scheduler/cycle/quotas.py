"""A team's quota in one cycle: whether it lets a workload start, and what
a refusal keeps for the rest of the cycle (the team's smallest refusal, its
quota hold, lending that would break)."""
from __future__ import annotations

from ..model import Workload
from .results import QuotaHold, quota_hold


class QuotaGate:
    """The quota checks of ``_Cycle`` (``cycle``: its ledger, reservations,
    preemption attempts and waiting reasons)."""

    def __init__(self, cycle):
        self.cycle = cycle
        # (team, pool) -> (smallest GPU units refused, why, refused only for a full pool)
        self.quota_blocked: dict[tuple[str, str], tuple[float, str, bool]] = {}
        self.quota_holds: dict[tuple[str, str], QuotaHold] = {}
        # (team, pool) -> (smallest GPU units whose admission broke lending,
        # the team's units then, the pool's lending deficit then)
        self.lending_blocked: dict[tuple[str, str], tuple[float, float, float]] = {}

    def quota_allows(self, w: Workload, holds_reservation: bool) -> bool:
        """Whether its team's quota (and its team's quota hold) lets ``w``
        start; if not, it waits, with a reservation where its turn has come."""
        policy = self.cycle.policy
        blocked = self.quota_blocked.get((w.team, w.pool))
        if blocked is not None and w.gpu_units >= blocked[0]:
            reserved = None
            if blocked[2] and policy.reserve_past_team_block and \
                    (holds_reservation or self.cycle.aged(w)) and self.ceiling_allows(w):
                # A teammate's refusal for a full pool says this one does
                # not fit now either, not that it may not reserve: a
                # holder keeps its reservation, aged work may take one.
                reserved = self.cycle.try_reserve(w, holds_reservation)
            self.cycle.wait(w, reserved or blocked[1])
            return False
        reason = self.cycle.ledger.check(w.team, w.pool, w.gpu_units, self.cycle.explain)
        if reason is not None:
            # Its own team's lower-priority work may give the quota back.
            if policy.preemption and self.cycle.preempting.outranks_own_work(w) and \
                    self.cycle.try_preemption(w):
                return False
            self.quota_refused(w, reason, holds_reservation)
            return False
        hold = self.quota_holds.get((w.team, w.pool))
        if hold is not None and not hold.allows(w.gpu_units, self.cycle.end_of(w)):
            self.cycle.wait(w, f"waiting behind {hold.workload_id} of team {w.team}, which needs "
                               f"the team's {w.pool} quota first")
            return False
        return True

    def breaks_lending(self, w: Workload) -> bool:
        """``ledger.breaks_lending``, remembered per team and pool: it holds
        for more GPU units too, while the team holds what it held and the
        pool's lending deficit has not shrunk (with a long queue, a lender's
        every queued workload would otherwise ask again)."""
        key = (w.team, w.pool)
        if w.gpu_units >= self.lending_block(key):
            return True
        if not self.cycle.ledger.breaks_lending(w.team, w.pool, w.gpu_units):
            return False
        self.lending_blocked[key] = (w.gpu_units, self.cycle.ledger.used.get(key, 0),
                                     self.cycle.ledger._lending_deficit(w.pool))
        return True

    def lending_block(self, key: tuple[str, str]) -> float:
        """The fewest GPU units the team may not take in the pool (inf: none
        known) because taking them breaks lending."""
        blocked = self.lending_blocked.get(key)
        if blocked is None:
            return float("inf")
        units, used, deficit = blocked
        if self.cycle.ledger.used.get(key, 0) != used or self.cycle.ledger._lending_deficit(key[1]) < deficit:
            return float("inf")
        return units

    def borrows(self, w: Workload) -> bool:
        """Starting ``w`` would take its team past its nominal quota."""
        cycle = self.cycle
        return cycle.quotas and bool(w.pool) and \
            not cycle.ledger.within_nominal(w.team, w.pool, w.gpu_units)

    def passes_borrowers(self, w: Workload) -> bool:
        """``w`` may take GPUs that borrowers' reservations hold
        (``Policy.promised_passes_borrowers``): whole GPUs, and its team's
        nominal quota holds what the team runs and everything it has queued."""
        cycle = self.cycle
        if not (cycle.policy.promised_passes_borrowers and cycle.quotas and w.pool
                and not w.gpu_share):
            return False
        queued = sum(units for (team, pool, _kind), (_n, units)
                     in cycle.state.pending_counts.items() if team == w.team and pool == w.pool)
        return cycle.ledger.within_nominal(w.team, w.pool, queued)

    def resources_allow(self, w: Workload) -> bool:
        """Whether its team's CPU and memory quota in its pool has room for
        what it asks for; if not, it waits saying which (others of the
        team that ask for less may pass it)."""
        reason = self.cycle.ledger.check_resources(w)
        if reason is not None:
            self.cycle.wait(w, f"waiting for its team's quota: {reason}")
            return False
        return True

    def note_quota_refusal(self, w: Workload) -> None:
        """What considering a workload that cannot start keeps when nothing
        else can come of it: its team's quota refusal, if any."""
        blocked = self.quota_blocked.get((w.team, w.pool))
        if blocked is not None and w.gpu_units >= blocked[0]:
            return
        reason = self.cycle.ledger.check(w.team, w.pool, w.gpu_units, self.cycle.explain)
        if reason is not None:
            self.quota_blocked[(w.team, w.pool)] = (w.gpu_units, reason, self.ceiling_allows(w))
            self.cycle.changed()

    def quota_refused(self, w: Workload, reason: str, holds_reservation: bool) -> None:
        """Blocked only because the pool is full (its team's ceiling allows
        it): it waits for GPUs like any other workload, with a reservation
        when its turn comes, so that a gang larger than its team's nominal
        quota is not passed forever. One that holds a reservation keeps it:
        the pool it found with room may have been filled since by work
        backfilled around that reservation, and losing it would let the next
        backfill take the GPUs drained for it (a start later than promised).
        Such a wait for capacity holds no quota: the reservation is its
        protection, and a hold of the team's nominal quota would keep the
        team's small work back for the gang's whole wait."""
        policy = self.cycle.policy
        pool_full = self.ceiling_allows(w)
        self.quota_blocked[(w.team, w.pool)] = (w.gpu_units, reason, pool_full)
        self.cycle.changed()
        if policy.quota_holds and not pool_full and (w.team, w.pool) not in self.quota_holds:
            self.hold_quota(w)
        reserved = None
        after = policy.reserve_for_borrowers_after
        borrower_turn = holds_reservation or (
            after is not None and self.cycle.now - w.submit_time >= after)
        if borrower_turn and pool_full:
            reserved = self.cycle.try_reserve(w, holds_reservation)
        self.cycle.wait(w, reserved or reason)

    def ceiling_allows(self, w: Workload) -> bool:
        """Its team's ceiling (nominal + borrowing limit) has room for it: a
        quota refusal then only says the pool is full."""
        return self.cycle.ledger.used.get((w.team, w.pool), 0) + w.gpu_units <= \
            self.cycle.ledger.quota(w.team, w.pool).ceiling

    def hold_quota(self, w: Workload) -> None:
        hold = quota_hold(w, self.cycle.ledger, self.cycle.state, self.cycle.unavailable)
        if hold is not None:
            self.quota_holds[(w.team, w.pool)] = hold
            self.cycle.changed()
