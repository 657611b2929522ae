"""Hand-built snapshots for the loop's tests: a few nodes, explicit temperatures and workloads."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from balancer import catalog, fleet
from balancer.model import ClusterSnapshot, Node, ServiceStatus, Workload, WorkloadClass


def make_fleet(nodes: int = 3, gpus_per_node: int = 4, model: str = "A100-SXM4-80GB",
               models: Sequence[str] | None = None) -> fleet.Fleet:
    models = models or [model] * nodes
    return fleet.build("t", [Node(name=f"n{i}", gpu_model=models[i], gpu_count=gpus_per_node, inlet_c=25.0)
                             for i in range(nodes)])


def workload(name: str, cls: WorkloadClass = WorkloadClass.INFERENCE, *, owner: str | None = None,
             milli: int = 1000, mem: int = 10240, **kw) -> Workload:
    ns = {"inference": "inference", "training": "training", "batch": "batch"}[str(cls)]
    return Workload(name=f"{ns}/{name}", workload_class=cls, namespace=kw.pop("namespace", ns),
                    owner=owner or name.rsplit("-", 1)[0], gpu_milli=milli, gpu_memory_mib=mem, **kw)


def snapshot(fl: fleet.Fleet, *, temps: Mapping[int, float] | None = None, base_temp: float = 55.0,
             workloads: Sequence[tuple[Workload, tuple[int, ...]]] = (), power: Mapping[int, float] | None = None,
             limits: Mapping[int, float] | None = None, services: Mapping[str, ServiceStatus] | None = None,
             reasons: Mapping[int, int] | None = None, age: float = 5.0, time: float = 1000.0,
             nodes: Sequence[Node] | None = None) -> ClusterSnapshot:
    n = fl.n_gpus
    spec = [catalog.get(g.model) for g in fl.gpus]
    tdp = np.array([s.tdp_w for s in spec])
    idle = np.array([s.idle_w for s in spec])
    placed = np.zeros(n)
    for _, gpus in workloads:
        placed[list(gpus)] += 1
    p = np.where(placed > 0, 0.75 * tdp, idle)
    for g, w in (power or {}).items():
        p[g] = w
    r = np.array([s.thermal_resistance_c_per_w for s in spec])
    t = np.where(placed > 0, 25.0 + r * p, base_temp)
    for g, v in (temps or {}).items():
        t[g] = v
    mem = np.zeros(n)
    for w, gpus in workloads:
        mem[list(gpus)] += w.gpu_memory_mib
    cer = np.zeros(n, dtype=np.int64)
    for g, v in (reasons or {}).items():
        cer[g] = v
    lim = tdp.copy()
    for g, v in (limits or {}).items():
        lim[g] = v
    return ClusterSnapshot(
        time=time, nodes=tuple(nodes or fl.nodes), gpus=fl.gpus, temperature_c=t, memory_temperature_c=t + 5,
        slowdown_temp_c=np.array([s.slowdown_temp_c for s in spec]), power_w=p, power_limit_w=lim,
        sm_active=np.where(placed > 0, 0.8, 0.0), mem_used_mib=mem,
        mem_total_mib=np.array([s.memory_mib for s in spec], dtype=float), sm_clock_mhz=np.full(n, 1400.0),
        clock_event_reasons=cer, xid=np.zeros(n, dtype=np.int64), sample_age_s=np.full(n, age),
        workloads=tuple(w for w, _ in workloads), placements={w.name: g for w, g in workloads},
        services=dict(services or {}),
    )
