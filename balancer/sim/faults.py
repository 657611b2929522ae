"""Faults of `SimCluster`: what goes wrong with hardware, and the operator's repair.

* `degrade_cooling` / `restore_cooling`: a node's inlet warms and/or its thermal resistance grows, for a while
  (`duration_s`, expired at the start of a step) or until restored; `inlet_rise_for` sizes the warming that takes
  the node's hottest GPU past its slowdown temperature at the power it draws now.
* `fail_gpu`: the board falls off the bus (thermal shutdown does this too): offline, 0 W, its pods requeued.
  Its pods crash, no SIGTERM: a training job rolls back to its last checkpoint even if it checkpoints on SIGTERM.
* `ecc_error` (XID 48) and `row_remap_failure` (XID 64): the pods on the GPU crash and are requeued, and the GPU
  is unhealthy (never scheduled) until `repair_gpu` resets or replaces it (`MemoryHealth`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from balancer.sim.cluster import SimCluster


class Faults:
    def degrade_cooling(self: SimCluster, node: str, *, inlet_rise_c: float = 0.0, resistance_factor: float = 1.0,
                        duration_s: float | None = None) -> None:
        """A node's cooling degrades: its inlet warms by `inlet_rise_c` and/or thermal resistance grows."""
        i = self._node(node)
        if resistance_factor <= 0:
            raise ValueError("resistance_factor must be positive")
        self.node_inlet_rise_c[i] = inlet_rise_c
        self.node_resistance_factor[i] = resistance_factor
        if duration_s is None:
            self._cooling_until.pop(i, None)
        else:
            self._cooling_until[i] = self.time + duration_s

    def inlet_rise_for(self: SimCluster, node: str, *, resistance_factor: float = 1.0,
                       over_slowdown_c: float = 0.0) -> float:
        """The inlet rise (°C, >= 0) that, with the node's thermal resistance x `resistance_factor`, puts the
        equilibrium temperature of its hottest GPU at the power it draws now `over_slowdown_c` above that GPU's
        slowdown temperature (where the board throttles itself): a cooling fault sized by what it does."""
        i = self._node(node)
        gpus = self.node_index == i
        p = self._p
        need = p.slowdown_c[gpus] + over_slowdown_c - p.node_inlet_c[i] - p.resistance[gpus] * resistance_factor * \
            self.power_w[gpus]
        return max(float(need.min()), 0.0) if need.size else 0.0

    def restore_cooling(self: SimCluster, node: str) -> None:
        i = self._node(node)
        self.node_inlet_rise_c[i] = 0.0
        self.node_resistance_factor[i] = 1.0
        self._cooling_until.pop(i, None)

    def _expire_cooling_faults(self: SimCluster) -> None:
        for i, until in list(self._cooling_until.items()):
            if self.time >= until:
                self.restore_cooling(self.fleet.nodes[i].name)

    def fail_gpu(self: SimCluster, gpu: int, xid: int = 79) -> None:
        """The GPU falls off the bus: offline, 0 W, its pods evicted back to pending."""
        self.online[gpu] = False
        self.xid[gpu] = xid
        self._evict_from(gpu)

    def ecc_error(self: SimCluster, gpu: int) -> None:
        """Double-bit ECC (XID 48): the running pods crash and are requeued; the device is unhealthy until repaired.
        The volatile DBE counter counts it and, on boards with a row remapper, a remap is pending until the reset."""
        self.xid[gpu] = 48
        self.healthy[gpu] = False
        self.memory.uncorrectable(gpu)
        self._evict_from(gpu)

    def row_remap_failure(self: SimCluster, gpu: int) -> None:
        """The row remapper ran out of spare rows (XID 64): pods requeued, unhealthy until the board is replaced."""
        self.memory.remap_failed(gpu)
        self.xid[gpu] = 64
        self.healthy[gpu] = False
        self._evict_from(gpu)

    def repair_gpu(self: SimCluster, gpu: int) -> None:
        """Operator reset / replacement: the GPU is back, healthy, with no XID; a reset clears the volatile ECC
        counters and applies pending row remaps, a failed remap gets a new board (`MemoryHealth.repair`)."""
        self.online[gpu] = True
        self.healthy[gpu] = True
        self.xid[gpu] = 0
        self.memory.repair(gpu)
        self._sched_dirty = True

    def _evict_from(self: SimCluster, gpu: int) -> None:
        for name in [k for k, p in self._pods.items() if p.gpus is not None and gpu in p.gpus]:
            self._requeue(name, sigterm=False)   # the pods crash: no SIGTERM, no checkpoint
