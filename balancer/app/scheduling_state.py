"""The secondary scheduler's node views as the placement engine's `ClusterState` (split from scheduling.py).

`SecondaryScheduler` (balancer/actuate/k8s_scheduler.py) offers nodes and asks for pods in plain dicts; this is how
they become the engine's types (`EnginePlacer` in balancer/app/scheduling.py places with them):

* `pod_request(req)`: a pod's request as a `PodRequest`, GPU models compared by catalogue key on both sides
  (`catalog.key_of`: a node's `nvidia.com/gpu.product` label such as `NVIDIA-H100-80GB-HBM3`, a pod's
  `gputide.io/gpu-spec` such as `H100-SXM|A100-SXM4-80GB`);
* `cluster_state(nodes)`: the offered nodes (already filtered by taints, node selectors, free GPUs, CPU and memory
  and reservations) as a `ClusterState`: allocatable CPU and memory with what is free of them, and per node its
  GPUs, the usable ones free (1000 milli) and the others in use (Kubernetes hands out whole `nvidia.com/gpu`s). It
  is the plain construction, every fact read afresh from every node, that `EnginePlacer`'s caches must agree with;
* NVLink domains (`nvlink_domain_size`) come from the node label `gputide.io/nvlink-domain-size`, else from the
  catalogue (an SXM board is one domain, NVLink-bridged PCIe cards pair up, other GPUs are a domain each), so the
  topology score keeps multi-GPU pods inside one domain and single-GPU pods in domains already in use;
* `NodeFacts`: a node's GPU count, catalogue model and NVLink domain size, by (gpu_model, domain label,
  gpus_total). A fleet has a handful of such descriptions, so the catalogue lookup and the domain rule run once
  each instead of once per node per pod. Keyed by every input they are computed from, not by node name, they
  cannot go stale: a node relabelled or repartitioned comes back under another key;
* `GpuFactsTable`: what Prometheus says of each node's GPUs (`NodeGpuFacts`: thermal headroom, the slots a pod is
  on, those with bad memory) as padded matrices, applied to a `ClusterState` so the free slots are the ones no pod
  is on and the thermal score sees each GPU's headroom.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from balancer import catalog
from balancer.model import NodeGpuFacts
from balancer.plan.placement import ClusterState, PodRequest
from balancer.plan.placement.state import MILLI, NO_GPU

Json = Mapping[str, Any]
DOMAIN_LABEL = "gputide.io/nvlink-domain-size"
NO_LABELS: Json = MappingProxyType({})
BUSY_RANK = 1 << 20   # added to a busy slot's rank: after every free slot of any node
UNHEALTHY_RANK = 2 * BUSY_RANK   # a GPU with bad memory comes after the busy ones: taken for free last of all


def pod_request(req: Json) -> PodRequest:
    """The engine's PodRequest for `SecondaryScheduler.pod_request(pod)`."""
    gpus = int(req.get("num_gpu") or 0)
    milli = (MILLI if gpus > 1 else min(max(int(req.get("gpu_milli") or MILLI), 1), MILLI)) if gpus else 0
    allowed = req.get("allowed_models")
    return PodRequest(cpu_milli=max(int(req.get("cpu_milli") or 0), 0),
                      memory_mib=max(int(req.get("memory_mib") or 0), 0), num_gpu=gpus, gpu_milli=milli,
                      name=str(req.get("name", "")),
                      allowed_models=tuple(sorted({catalog.key_of(m) for m in allowed})) if allowed else None)


def nvlink_domain_size(node: Json, model_key: str, gpus: int) -> int:
    """GPUs per NVLink domain on a node: its label `gputide.io/nvlink-domain-size` when set, else by catalogue
    model: an SXM board's GPUs are one domain (NVSwitch), a PCIe model with NVLink bridges pairs them, a model
    without NVLink (or unknown) has a domain per GPU."""
    return _domain_size(str((node.get("labels") or {}).get(DOMAIN_LABEL, "")), model_key, gpus)


def _domain_size(label: str, model_key: str, gpus: int) -> int:
    label = label.strip()
    if label.isdigit() and int(label) > 0:
        return min(int(label), max(gpus, 1))
    spec = catalog.CATALOGUE.get(model_key)
    if spec is None or not spec.nvlink:
        return 1
    return max(gpus, 1) if "SXM" in model_key else 2


def cluster_state(nodes: Sequence[Json]) -> ClusterState:
    """A ClusterState of the offered nodes, in their order (`names`): the plain construction, every fact read
    afresh from every node (`EnginePlacer.state` builds the same state with its caches; the tests hold it to this)."""
    total = np.array([max(int(n.get("gpus_total") or 0), 0) for n in nodes], dtype=np.int64)
    usable = np.clip([int(n.get("gpus_usable", n.get("gpus_free", 0)) or 0) for n in nodes], 0, total)
    keys = [catalog.key_of(n.get("gpu_model") or "") if t > 0 else "" for n, t in zip(nodes, total, strict=True)]
    models = tuple(sorted({k for k in keys if k}))
    index = {m: i for i, m in enumerate(models)}
    model = np.array([index.get(k, -1) if k else -1 for k in keys], dtype=np.int32)

    def column(key: str, free_key: str) -> tuple[np.ndarray, np.ndarray]:
        free = np.array([max(int(n.get(free_key) or 0), 0) for n in nodes], dtype=np.int64)
        return np.maximum(np.array([int(n.get(key, 0) or 0) for n in nodes], dtype=np.int64), free), free

    cpu_total, cpu_free = column("cpu_milli_total", "cpu_milli_free")
    mem_total, mem_free = column("memory_mib_total", "memory_mib_free")
    sizes = np.array([nvlink_domain_size(n, k, int(t)) for n, k, t in zip(nodes, keys, total, strict=True)])
    return assemble_state(tuple(str(n["name"]) for n in nodes), total, usable, model, models, sizes,
                     (cpu_total, cpu_free, mem_total, mem_free))


def assemble_state(names: tuple[str, ...], total: np.ndarray, usable: np.ndarray, model: np.ndarray,
              models: tuple[str, ...], sizes: np.ndarray, cpu_mem: tuple[np.ndarray, ...]) -> ClusterState:
    """The ClusterState of per-node columns: GPU slots (the usable ones free, the others in use), model index
    (-1: no GPUs; GPUs of no known model get a model of their own, "unknown"), NVLink domain per slot."""
    width = max(int(total.max(initial=0)), 1)
    slot = np.arange(width)[None, :]
    gpu_free = gpu_rows(total, usable, width)
    if np.any((total > 0) & (model < 0)):   # GPUs without a model label: a model of their own, "unknown"
        models = (*models, "unknown")
        model = np.where((total > 0) & (model < 0), len(models) - 1, model)
    domain = slot // np.maximum(sizes, 1)[:, None]
    cpu_total, cpu_free, mem_total, mem_free = cpu_mem
    return ClusterState(cpu_total, mem_total, gpu_free, model, models, cpu_free=cpu_free, mem_free=mem_free,
                        nvlink_domain=domain, names=names)


def gpu_rows(total: np.ndarray, usable: np.ndarray, width: int) -> np.ndarray:
    """[n, width] free milli per GPU slot: the first `usable` slots free, the rest of `total` in use, then none."""
    slot = np.arange(width)[None, :]
    return np.where(slot < usable[:, None], MILLI, np.where(slot < total[:, None], 0, NO_GPU))


def cpu_mem(numbers: np.ndarray) -> tuple[np.ndarray, ...]:
    """(cpu_total, cpu_free, mem_total, mem_free) of `EnginePlacer.read`'s numbers, as `cluster_state` reads them."""
    cpu_free, mem_free = np.maximum(numbers[2], 0), np.maximum(numbers[4], 0)
    return np.maximum(numbers[1], cpu_free), cpu_free, np.maximum(numbers[3], mem_free), mem_free


class NodeFacts:
    """A node's GPU count, catalogue model and NVLink domain size by (gpu_model, domain label, gpus_total) as
    the view gives them: the catalogue lookup and the domain rule run once per distinct hardware description,
    not once per node and pod.

    The key is every input `cluster_state` reads for these facts, so a node that comes back under the same name
    with another model, label or GPU count finds (or makes) another entry: nothing can go stale. Only string
    models and labels are remembered, so a key never matches another value that compares equal to it but means
    something else (the label 4.0 is not "4"); a GPU count matches equal numbers, which all count the same."""

    LIMIT = 4096   # facts remembered; a fleet has a handful of descriptions, so this only bounds odd input

    def __init__(self) -> None:
        self.ids: dict[tuple, int] = {}
        self.gpus: list[int] = []     # per fact id: GPUs (gpus_total as `cluster_state` reads it)
        self.keys: list[str] = []     # per fact id: catalogue key ("" without GPUs)
        self.sizes: list[int] = []    # per fact id: GPUs per NVLink domain

    def lookup(self, gpu_models: list, labels: list, totals: list) -> np.ndarray:
        """Fact ids of the nodes' gpu_model (or ""), domain label (or "") and gpus_total, column by column."""
        if len(self.keys) >= self.LIMIT:   # forget between calls only: the ids handed out below stay valid
            for memory in (self.ids, self.gpus, self.keys, self.sizes):
                memory.clear()
        try:   # zip hands `get` one reused tuple: no allocation per node
            ids = list(map(self.ids.get, zip(gpu_models, labels, totals, strict=True)))
        except TypeError:   # an unhashable value: learn each node, remember none
            ids = [None] * len(totals)
        if None in ids:
            ids = [self._learn(d) if i is None else i
                   for i, d in zip(ids, zip(gpu_models, labels, totals), strict=True)]
        return np.array(ids, dtype=np.int64)

    def _learn(self, described: tuple) -> int:
        gpu_model, label, total = described
        remember = type(gpu_model) is str and type(label) is str and isinstance(total, int | float | None)
        if remember and (known := self.ids.get(described, -1)) >= 0:   # learnt earlier in this lookup
            return known
        gpus = max(int(total or 0), 0)
        key = catalog.key_of(gpu_model) if gpus > 0 else ""
        self.gpus.append(gpus)
        self.keys.append(key)
        self.sizes.append(_domain_size(str(label), key, gpus))
        if remember:
            self.ids[described] = len(self.keys) - 1
        return len(self.keys) - 1


class GpuFactsTable:
    """`NodeGpuFacts` per node as two padded matrices, built once per refresh so a pod's placement reads them with
    one lookup per node: `head[k, slot]` (°C of headroom, NaN unknown) and `rank[k, slot]` (free slots are the
    lowest ranks: slots no pod is on first, then by index; slots with bad memory last, after the busy ones, so
    the topology and thermal scores never count on them while Kubernetes' count allows it)."""

    def __init__(self, facts: Mapping[str, NodeGpuFacts]) -> None:
        self.row = {name: k for k, name in enumerate(facts)}
        width = max((max(f.headroom_c, default=-1) + 1 for f in facts.values()), default=0)
        width = max(width, max((max(f.busy | f.unhealthy, default=-1) + 1 for f in facts.values()), default=0), 1)
        self.head = np.full((len(facts), width), np.nan)
        self.rank = np.tile(np.arange(width), (len(facts), 1))
        for k, f in enumerate(facts.values()):
            for slot, value in f.headroom_c.items():
                self.head[k, slot] = value
            for slot in f.busy:
                self.rank[k, slot] += BUSY_RANK
            for slot in f.unhealthy:
                self.rank[k, slot] += UNHEALTHY_RANK

    def apply(self, state: ClusterState, nodes: Sequence[int] | None = None) -> None:
        """Headroom and free slots of the nodes in `state` (of `nodes`, indices, when given) that the table knows
        (in place; the others as they are). Row by row: a node's slots come out the same whatever the others."""
        index = np.arange(state.n_nodes) if nodes is None else np.asarray(nodes, dtype=np.int64)
        rows = np.array([self.row.get(state.names[i], -1) for i in index.tolist()], dtype=np.int64)
        known, rows = index[rows >= 0], rows[rows >= 0]
        if not len(known):
            return
        n, width = len(known), state.gpu_free.shape[1]
        head = np.full((n, width), np.nan)
        rank = np.tile(np.arange(width), (n, 1))
        w = min(width, self.head.shape[1])
        head[:, :w] = self.head[rows, :w]
        rank[:, :w] = self.rank[rows, :w]
        gpu_free = state.gpu_free[known]
        exists = gpu_free != NO_GPU
        usable = (gpu_free == MILLI).sum(axis=1)
        rank = np.where(exists, rank, np.iinfo(np.int64).max)        # slots the node does not have come last
        position = np.argsort(np.argsort(rank, axis=1, kind="stable"), axis=1, kind="stable")
        state.gpu_free[known] = np.where(exists, np.where(position < usable[:, None], MILLI, 0), NO_GPU)
        state.temp_headroom[known] = np.where(exists, head, np.nan)
