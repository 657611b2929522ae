"""The placement engine as the secondary scheduler's `place`: Kubernetes node views in, a node name out.

`SecondaryScheduler` (balancer/actuate/k8s_scheduler.py) binds pending pods with `schedulerName: gputide` and asks
an injected `place(pod_request, nodes_view)` where each goes, in plain dicts. `EnginePlacer(policy)` answers with
the same engine, policies and score plugins `gputide place` replays the FGD protocol with and the simulator
schedules with (balancer/plan/placement/):

* the offered nodes (already filtered by taints, node selectors, free GPUs, CPU and memory and reservations)
  become a `ClusterState`: allocatable CPU and memory with what is free of them, and per node its GPUs, the
  usable ones free (1000 milli) and the others in use (Kubernetes hands out whole `nvidia.com/gpu`s);
* GPU models are compared by catalogue key on both sides (`catalog.key_of`: a node's `nvidia.com/gpu.product`
  label such as `NVIDIA-H100-80GB-HBM3`, a pod's `gputide.io/gpu-spec` such as `H100-SXM|A100-SXM4-80GB`);
* FGD's fragmentation measure needs the workload mix: here, the last `mix_window` pods this scheduler was asked
  to place (the observed mix, as the paper prescribes), the current one included.

NVLink domains come from the node label `gputide.io/nvlink-domain-size`, else from the catalogue (an SXM board is
one domain, NVLink-bridged PCIe cards pair up, other GPUs are a domain each), so the topology score keeps
multi-GPU pods inside one domain and single-GPU pods in domains already in use.

The Kubernetes view counts a node's free GPUs but knows neither which ones (the device plugin picks them) nor how
hot they are. With `gpu_facts` (`gputide schedule --prometheus URL`: `PrometheusTelemetrySource.gpu_facts`, the
per-GPU thermal headroom and the GPUs a pod is attributed to, fresh readings only) the placer fills both in for
the nodes Prometheus knows: the free slots are the ones no pod is on (Kubernetes' count still decides how many),
so the topology score sees which NVLink domains really have room, and the thermal score separates a hot node
from a cool one. The facts are read at most once per `facts_ttl_s`; when Prometheus fails the placer says so once
and places as without them, never holding a pod back for it.

`place` runs once per pending pod over every node the pod fits (thousands), each time on fresh dicts, so what
does not change between calls is kept and what does is read as cheaply as it can be:

* `NodeFacts`: a node's GPU count, catalogue model and NVLink domain size, by (gpu_model, domain label,
  gpus_total). A fleet has a handful of such descriptions, so the catalogue lookup and the domain rule run once
  each instead of once per node per pod. Keyed by every input they are computed from, not by node name, they
  cannot go stale: a node relabelled or repartitioned comes back under another key;
* the rest of a node (free GPUs, CPU, memory) changes with every binding and is read afresh into numpy columns,
  a list per field rather than a tuple per node: with a tuple per node the garbage collector's passes took a
  fifth of the time at 5,000 nodes;
* `MixWindow`: the workload mix changes with every pod (its weights do), so it is kept up to date one pod at a
  time instead of regrouping the last `mix_window` pods on every call.

`cluster_state(nodes)` is the plain construction the caches must agree with; `tests/app/test_scheduling_engine.py`
checks over random views and pod sequences that `EnginePlacer` picks the node the plain construction picks.
The engine's own per-call set-up (NodeStats, NodeClasses, FragCache) is built for all nodes at once with sorts
and bincounts. Together, CPU per pod on a mixed fleet: 2.5 ms against 6.8 ms at 1,000 nodes, 10.4 ms against
35.1 ms at 5,000 (`.venv/bin/python -m bench.bench_schedule`, bench/results/schedule.md); what remains is mostly
reading the node dicts (~3.4 ms at 5,000) and the engine's own set-up (~4.6 ms) and placing (~1.2 ms).

The secondary scheduler pays those only once per pass: it asks through `start_pass(view)` (`PlacerPass`), which
reads every node of the pass once into a placement `Snapshot` (balancer/plan/placement/snapshot.py), places each
pod on the nodes it is offered, and after each accepted binding reads that one node again and refreshes its
aggregates, so each pod sees the bindings before it exactly as a view rebuilt for it would show them (the tests
hold a pass to `EnginePlacer` called per pod). With the scheduler's filters over all nodes at once, a pass of 100
pending pods costs 120 ms of CPU against 359 ms at 1,000 nodes and 239 ms against 1,348 ms at 5,000 (same
benchmark, bench/results/schedule.md); what remains is mostly placing itself.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from balancer import catalog
from balancer.errors import TelemetryError
from balancer.model import NodeGpuFacts
from balancer.plan.placement import ClusterState, MixWindow, PodRequest, Scheduler, get_policy
from balancer.plan.placement.snapshot import Snapshot
from balancer.plan.placement.state import MILLI, NO_GPU

log = logging.getLogger(__name__)
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
    return PodRequest(cpu_milli=max(int(req.get("cpu_milli") or 0), 0), memory_mib=max(int(req.get("memory_mib") or 0), 0),
                      num_gpu=gpus, gpu_milli=milli, name=str(req.get("name", "")),
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
    return _assemble(tuple(str(n["name"]) for n in nodes), total, usable, model, models, sizes,
                     (cpu_total, cpu_free, mem_total, mem_free))


def _assemble(names: tuple[str, ...], total: np.ndarray, usable: np.ndarray, model: np.ndarray,
              models: tuple[str, ...], sizes: np.ndarray, cpu_mem: tuple[np.ndarray, ...]) -> ClusterState:
    """The ClusterState of per-node columns: GPU slots (the usable ones free, the others in use), model index
    (-1: no GPUs; GPUs of no known model get a model of their own, "unknown"), NVLink domain per slot."""
    width = max(int(total.max(initial=0)), 1)
    slot = np.arange(width)[None, :]
    gpu_free = _gpu_rows(total, usable, width)
    if np.any((total > 0) & (model < 0)):   # GPUs without a model label: a model of their own, "unknown"
        models = (*models, "unknown")
        model = np.where((total > 0) & (model < 0), len(models) - 1, model)
    domain = slot // np.maximum(sizes, 1)[:, None]
    cpu_total, cpu_free, mem_total, mem_free = cpu_mem
    return ClusterState(cpu_total, mem_total, gpu_free, model, models, cpu_free=cpu_free, mem_free=mem_free,
                        nvlink_domain=domain, names=names)


def _gpu_rows(total: np.ndarray, usable: np.ndarray, width: int) -> np.ndarray:
    """[n, width] free milli per GPU slot: the first `usable` slots free, the rest of `total` in use, then none."""
    slot = np.arange(width)[None, :]
    return np.where(slot < usable[:, None], MILLI, np.where(slot < total[:, None], 0, NO_GPU))


def _cpu_mem(numbers: np.ndarray) -> tuple[np.ndarray, ...]:
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
            ids = [self._learn(d) if i is None else i for i, d in zip(ids, zip(gpu_models, labels, totals), strict=True)]
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


class EnginePlacer:
    """`place(pod_request, nodes_view) -> node name | None` by a placement policy (see the module docstring)."""

    def __init__(self, policy: str = "gputide", mix_window: int = 1000, seed: int = 0,
                 gpu_facts: Callable[[], Mapping[str, NodeGpuFacts]] | None = None, facts_ttl_s: float = 15.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = get_policy(policy)
        self.window = MixWindow(mix_window, include_cpu_only=self.policy.mix_cpu_only,
                                **dict(self.policy.mix_options))
        self.rng = np.random.default_rng(seed)
        self.facts = NodeFacts()
        self.gpu_facts, self.facts_ttl_s, self.clock = gpu_facts, facts_ttl_s, clock
        self._table: GpuFactsTable | None = None
        self._table_at = -float("inf")
        self.facts_failing = False
        self.facts_nodes = 0   # nodes with fresh GPU facts at the last refresh

    def state(self, nodes: Sequence[Json]) -> ClusterState:
        """`cluster_state(nodes)`, from the node dicts read field by field and the remembered `NodeFacts`."""
        if not nodes:
            return cluster_state(nodes)
        return self.assemble(nodes, *self.read(nodes))

    def assemble(self, nodes: Sequence[Json], fact: np.ndarray, numbers: np.ndarray) -> ClusterState:
        """The ClusterState of `nodes` from what `read(nodes)` gave."""
        total = np.array(self.facts.gpus, dtype=np.int64)[fact]
        usable = np.clip(numbers[0], 0, total)
        models = tuple(sorted({self.facts.keys[f] for f in np.unique(fact).tolist()} - {""}))
        index = {m: i for i, m in enumerate(models)}
        model = np.array([index.get(k, -1) for k in self.facts.keys], dtype=np.int32)[fact]
        sizes = np.array(self.facts.sizes, dtype=np.int64)[fact]
        return _assemble(tuple(str(n["name"]) for n in nodes), total, usable, model, models, sizes,
                         _cpu_mem(numbers))

    def read(self, nodes: Sequence[Json]) -> tuple[np.ndarray, np.ndarray]:
        """The nodes' `NodeFacts` ids, and [usable GPUs, cpu_milli_total, cpu_milli_free, memory_mib_total,
        memory_mib_free] as `int(value or 0)` makes them, one row per field."""
        # a list per field, not a tuple per node: quicker, and nothing for the garbage collector to chase
        fact = self.facts.lookup([n.get("gpu_model") or "" for n in nodes],
                                 [(n.get("labels") or NO_LABELS).get(DOMAIN_LABEL, "") for n in nodes],
                                 [n.get("gpus_total") for n in nodes])
        raw = [[n.get("gpus_usable", n.get("gpus_free", 0)) for n in nodes],
               [n.get("cpu_milli_total", 0) for n in nodes], [n.get("cpu_milli_free") for n in nodes],
               [n.get("memory_mib_total", 0) for n in nodes], [n.get("memory_mib_free") for n in nodes]]
        numbers = np.array(raw)
        if numbers.dtype.kind != "i":   # None, floats, strings, bools: what `int(value or 0)` makes of them
            numbers = np.array([[int(v or 0) for v in column] for column in raw], dtype=np.int64)
        return fact, numbers

    def table(self) -> GpuFactsTable | None:
        """The GPU facts, read again once `facts_ttl_s` has passed (a failure too waits that long)."""
        if self.gpu_facts is None:
            return None
        now = self.clock()
        if now - self._table_at >= self.facts_ttl_s:
            self._table_at = now
            try:
                facts = self.gpu_facts()
            except TelemetryError as err:
                if not self.facts_failing:
                    log.warning("GPU facts unavailable, placing without temperatures or free-slot identities: %s",
                                err)
                self.facts_failing, self._table, self.facts_nodes = True, None, 0
                return None
            if self.facts_failing:
                log.info("GPU facts available again (%d nodes)", len(facts))
            self.facts_failing, self._table, self.facts_nodes = False, GpuFactsTable(facts), len(facts)
        return self._table

    def cluster(self, nodes: Sequence[Json]) -> ClusterState:
        """The state a pod is placed on: `state(nodes)` with the GPU facts filled in where there are any."""
        state = self.state(nodes)
        table = self.table()
        if table is not None and len(nodes):
            table.apply(state)
        return state

    def __call__(self, request: Json, nodes: Sequence[Json]) -> str | None:
        pod = pod_request(request)
        self.window.append(pod)
        if not nodes:
            return None
        state = self.cluster(nodes)
        mix = self.window.mix() if self.policy.needs_mix else None
        # ties go to the first offered node, so the same cluster gets the same answer (random: its own draw)
        placement = Scheduler(state, self.policy, mix, rng=self.rng if self.policy.name == "random" else None).place(
            pod, preferred=request.get("preferred"))
        return state.names[placement.node] if placement is not None else None

    def start_pass(self, view: Sequence[Json]) -> PlacerPass:
        """This placer for one pass of the secondary scheduler over `view` (every node of the pass)."""
        return PlacerPass(self, view)


class PlacerPass:
    """`EnginePlacer` over one scheduling pass: `view` is read once into a placement `Snapshot`, `place(request,
    offered)` takes the offered nodes as indices into `view` and answers what `EnginePlacer(request, [view[i] for i
    in offered])` would, and `bound(i)` after a binding reads `view[i]` again (the scheduler has taken the pod's
    GPUs, CPU and memory there), so the next pod sees the node as a fresh view would show it. A binding that
    failed is not reported: nothing was committed, nothing is undone. New GPU facts (`facts_ttl_s` passed) or a
    node that changed hardware build the snapshot again."""

    def __init__(self, placer: EnginePlacer, view: Sequence[Json]) -> None:
        self.placer, self.view = placer, view
        self.snapshot: Snapshot | None = None
        self.table: GpuFactsTable | None = None
        self.fact = np.zeros(0, dtype=np.int64)
        self.known: tuple[list, list, list] = ([], [], [])   # NodeFacts' lists when the snapshot was built

    def place(self, request: Json, offered: Sequence[int]) -> str | None:
        placer = self.placer
        pod = pod_request(request)
        placer.window.append(pod)
        if not len(offered):
            return None
        table = placer.table()
        if self.snapshot is None or table is not self.table:
            self._build(table)
        mix = placer.window.mix() if placer.policy.needs_mix else None
        rng = placer.rng if placer.policy.name == "random" else None
        placement = self.snapshot.place(pod, np.asarray(offered, dtype=np.int64), mix, rng, request.get("preferred"))
        return self.snapshot.state.names[placement.node] if placement is not None else None

    def _build(self, table: GpuFactsTable | None) -> None:
        facts = self.placer.facts
        self.fact, numbers = self.placer.read(self.view)
        self.known = (list(facts.gpus), list(facts.keys), list(facts.sizes))
        state = self.placer.assemble(self.view, self.fact, numbers)
        if table is not None:
            table.apply(state)
        self.table, self.snapshot = table, Snapshot(state, self.placer.policy)

    def bound(self, node: int) -> None:
        """`view[node]` changed (a binding): its row of the snapshot is read again, its aggregates refreshed."""
        if self.snapshot is None:
            return
        facts = self.placer.facts
        fact, numbers = self.placer.read([self.view[node]])
        f, old = int(fact[0]), int(self.fact[node])
        if (facts.gpus[f], facts.keys[f], facts.sizes[f]) != tuple(known[old] for known in self.known):
            self.snapshot = None   # another GPU count, model or NVLink domain: the whole state is read again
            return
        s = self.snapshot.state
        total = np.array([facts.gpus[f]], dtype=np.int64)
        s.gpu_free[node] = _gpu_rows(total, np.clip(numbers[0], 0, total), s.gpu_free.shape[1])[0]
        s.cpu_total[node], s.cpu_free[node], s.mem_total[node], s.mem_free[node] = (c[0] for c in _cpu_mem(numbers))
        if self.table is not None:
            self.table.apply(s, [node])
        self.snapshot.refresh(node)
