"""What each team space and dataset holds, kept in the database
(``storage_measurements``): the quota check, the views and the usage report
read it there, so a restart forgets nothing and charges the time it was down
at what was last measured (service/teams/accounting.py). A measurement that
finds the same numbers as the last one only moves that row's ``checked_at``;
a new row starts when the numbers change. The storage price's history is
here too (``storage_prices``).
"""
from __future__ import annotations

from typing import Optional

from sqlalchemy import func, select

from gpuspawner.isolation.space_usage import Usage
from gpuspawner.store import StoragePriceRow, StorageRow

SPACE, DATASET = "space", "dataset"


def _usage(row: StorageRow) -> Usage:
    return Usage(row.bytes, row.files, row.seconds, row.checked_at)


class StorageLedger:
    """One per service: every submit's quota check reads what the team
    holds, so the last measurements are kept in memory too, forgotten at
    each write of this ledger (the only writer: a measurement, a dataset's
    end), and read again from the database after it."""

    def __init__(self, store):
        self.store = store
        self._memo: dict[tuple, object] = {}
        self._writes = 0  # a read that began before a write does not keep its answer

    def _remembered(self, key: tuple, read):
        if key in self._memo:
            return self._memo[key]
        writes = self._writes
        value = read()
        if writes == self._writes:
            self._memo[key] = value
        return value

    def _written(self) -> None:
        self._writes += 1
        self._memo.clear()

    def record(self, kind: str, name: str, team: str, usage: Usage, charged: bool = True) -> None:
        """One measurement of ``name`` (a team's space, a dataset), charged to ``team``."""
        try:
            self._record(kind, name, team, usage, charged)
        finally:
            self._written()

    def _record(self, kind: str, name: str, team: str, usage: Usage, charged: bool) -> None:
        with self.store.transaction() as s:
            last = s.scalars(select(StorageRow).where(StorageRow.kind == kind,
                                                      StorageRow.name == name)
                             .order_by(StorageRow.id.desc()).limit(1)).first()
            if last is not None and (last.team, last.bytes, last.files, last.charged) == \
                    (team, usage.bytes, usage.files, charged):
                last.checked_at, last.seconds = usage.measured_at, usage.seconds
                return
            s.add(StorageRow(kind=kind, name=name, team=team, bytes=usage.bytes,
                             files=usage.files, seconds=usage.seconds, since=usage.measured_at,
                             checked_at=usage.measured_at, charged=charged))

    def ended(self, kind: str, name: str, team: str, now: float) -> None:
        """``name`` is no longer charged from ``now`` (a dataset deleted; its
        folder is not: it is charged again if registered again)."""
        self.record(kind, name, team, Usage(0, 0, 0.0, now))

    def _latest(self, s, kind: str, team: Optional[str] = None) -> list[StorageRow]:
        newest = select(func.max(StorageRow.id)).where(StorageRow.kind == kind)
        if team is not None:
            newest = newest.where(StorageRow.team == team)
        return list(s.scalars(select(StorageRow).where(
            StorageRow.id.in_(newest.group_by(StorageRow.name)))))

    def latest(self, kind: str) -> dict[str, Usage]:
        """Each item's last measurement, by name."""
        with self.store.session() as s:
            return {r.name: _usage(r) for r in self._latest(s, kind)}

    def latest_of(self, kind: str, name: str) -> Optional[Usage]:
        def read():
            with self.store.session() as s:
                row = s.scalars(select(StorageRow).where(StorageRow.kind == kind,
                                                         StorageRow.name == name)
                                .order_by(StorageRow.id.desc()).limit(1)).first()
                return _usage(row) if row is not None else None
        return self._remembered(("latest", kind, name), read)

    def datasets_bytes(self, team: str) -> int:
        """What ``team``'s datasets outside its space hold, as last measured."""
        def read():
            with self.store.session() as s:
                return sum(r.bytes for r in self._latest(s, DATASET, team) if r.charged)
        return self._remembered(("datasets", team), read)

    def set_price(self, price: float, now: float) -> bool:
        """Record ``price`` per GB-month from ``now`` if it is not the price
        already; True if it was recorded."""
        with self.store.transaction() as s:
            last = s.scalars(select(StoragePriceRow).order_by(StoragePriceRow.since.desc(),
                                                               StoragePriceRow.id.desc())
                             .limit(1)).first()
            if last is not None and last.price_per_gb_month == price:
                return False
            s.add(StoragePriceRow(since=now, price_per_gb_month=price))
            return True
