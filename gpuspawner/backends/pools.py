"""Several backends behind one: each pool's work goes to the backend whose
nodes make up that pool (notebooks and serving on this host or Kubernetes,
large training on Slurm), and the engine sees a single ``Backend``."""
from __future__ import annotations

import asyncio
from typing import Optional

from ..scheduler.model import Node
from .base import AttemptExit, Backend, BackendError, LaunchSpec, Started


class PoolBackends(Backend):
    def __init__(self, by_pool: dict[str, Backend]):
        self.by_pool = dict(by_pool)
        self.backends = list(dict.fromkeys(by_pool.values()))
        # What its backends can do, one of them is enough.
        self.names_attempt_pids = any(b.names_attempt_pids for b in self.backends)
        # (workload, attempt) -> the backend running it
        self._where: dict[tuple[str, int], Backend] = {}

    def _for(self, spec: LaunchSpec) -> Backend:
        try:
            return self.by_pool[spec.pool]
        except KeyError:
            raise BackendError(f"no backend has pool {spec.pool!r} (pools: "
                               f"{', '.join(sorted(self.by_pool))})") from None

    def blocking_start(self, spec: LaunchSpec) -> bool:
        return self._for(spec).blocking_start(spec)

    def start(self, spec: LaunchSpec) -> Started:
        backend = self._for(spec)
        self._where[(spec.workload_id, spec.attempt)] = backend
        try:
            return backend.start(spec)
        except BaseException:
            self._where.pop((spec.workload_id, spec.attempt), None)
            raise

    def _of(self, wid: str, attempt: int) -> list[Backend]:
        backend = self._where.get((wid, attempt))
        return [backend] if backend is not None else self.backends

    def attempt_pids(self, workload_id: str, attempt: int) -> Optional[frozenset]:
        for backend in self._of(workload_id, attempt):
            pids = backend.attempt_pids(workload_id, attempt) if backend.names_attempt_pids \
                else None
            if pids is not None:
                return pids
        return None

    def stop(self, workload_id: str, attempt: int, grace: float) -> None:
        for backend in self._of(workload_id, attempt):  # each ignores attempts not its own
            backend.stop(workload_id, attempt, grace)

    def kill(self, workload_id: str, attempt: int) -> None:
        for backend in self._of(workload_id, attempt):
            backend.kill(workload_id, attempt)

    def poll(self) -> list[AttemptExit]:
        exits = []
        for backend in self.backends:
            for x in backend.poll():
                self._where.pop((x.workload_id, x.attempt), None)
                exits.append(x)
        return exits

    def recover(self, specs: list[LaunchSpec]) -> list[AttemptExit]:
        by_backend: dict[int, list[LaunchSpec]] = {}
        for spec in specs:
            backend = self._for(spec)
            self._where[(spec.workload_id, spec.attempt)] = backend
            by_backend.setdefault(id(backend), []).append(spec)
        exits = []
        for backend in self.backends:
            for x in backend.recover(by_backend.get(id(backend), [])):
                self._where.pop((x.workload_id, x.attempt), None)
                exits.append(x)
        return exits

    def take_node_changes(self) -> list[Node]:
        return [node for backend in self.backends for node in backend.take_node_changes()]

    def node_reason(self, node: str) -> str:
        return next((why for why in (b.node_reason(node) for b in self.backends) if why), "")

    def replica_address(self, workload_id: str, attempt: int, port: int) -> Optional[str]:
        backend = self._where.get((workload_id, attempt))
        return None if backend is None else backend.replica_address(workload_id, attempt, port)

    def log_path(self, attempt_dir: str) -> str:
        return self.backends[0].log_path(attempt_dir)

    async def run(self) -> None:
        await asyncio.gather(*(backend.run() for backend in self.backends))

    def log_followed(self, workload_id: str, attempt: int, following: bool) -> None:
        for backend in self._of(workload_id, attempt):
            backend.log_followed(workload_id, attempt, following)

    def set_wake(self, wake) -> None:
        for backend in self.backends:
            backend.set_wake(wake)
