"""Power caps for the simulated fleet: the same `apply_power_caps` contract as the NVML backend."""

from __future__ import annotations

from collections.abc import Mapping

from balancer.sim import SimCluster


class SimCapTarget:
    def __init__(self, sim: SimCluster) -> None:
        self.sim = sim
        self._by_uuid = {g.uuid: g.index for g in sim.fleet.gpus}

    def apply_power_caps(self, caps: Mapping[str, float]) -> dict[str, float]:
        return {u: self.sim.set_power_limit(self._by_uuid[u], w) for u, w in caps.items() if u in self._by_uuid}
