"""Why a workload that its quota lets start found no GPUs, in one cycle: its
datasets' residency first, where that is what kept it off free GPUs, then
its reservation or the pool's state (``_Cycle.wait`` shows it)."""
from __future__ import annotations

from typing import Optional

from ..model import Workload, combined_selector, dataset_rules_text, without_datasets


class CapacityReasons:
    def __init__(self, cycle):
        self.cycle = cycle
        # Whether a shape would fit but for its datasets' node rule, until
        # GPUs or decisions change (long queues ask often).
        self.fits_elsewhere: dict[tuple, bool] = {}

    def reason(self, w: Workload, reserved: Optional[str] = None) -> str:
        cycle = self.cycle
        end, reservations = cycle.end_of(w), cycle.reservations.of_pool(w.pool)
        residency = self.residency(w, end, reservations)
        if residency is not None:
            return f"{residency}; {reserved}" if reserved else residency
        return reserved or cycle.space.strategy(w).waiting_reason(w, end, reservations,
                                                                  cycle.selector(w))

    def residency(self, w: Workload, end: float, reservations) -> Optional[str]:
        """Why GPUs that would take it without its datasets' residency rule
        are not used (None when the rule is not what holds it back)."""
        if not any(w.dataset_nodes.values()):
            return None
        cycle, space = self.cycle, self.cycle.space
        selector = combined_selector(cycle.state.teams.get(w.team), w, datasets=False)
        key = (space.version, cycle.version, w.pool, w.gpus_per_node, w.num_nodes,
               w.gpu_share, w.cpus, w.memory, w.topology, w.topology_key, end,
               tuple(sorted(selector.items())))
        if key not in self.fits_elsewhere:
            anywhere = without_datasets(w)
            self.fits_elsewhere[key] = space.strategy(w).place(
                anywhere, None, cycle.caps_of(anywhere), end, reservations, selector) is not None
        if not self.fits_elsewhere[key]:
            return None
        if w.gpu_share:
            need = f"room for a {w.gpu_share:g} share of a GPU"
        else:
            need = f"{w.gpus_per_node} GPU{'s' if w.gpus_per_node > 1 else ''} free"
        where = "no such node has" if w.num_nodes == 1 else \
            f"fewer than {w.num_nodes} such nodes have"
        free = space.index.pool_free.get(w.pool, 0)
        return f"{dataset_rules_text(w)}; {where} {need} ({free} {w.pool} GPU(s) free in the pool)"
