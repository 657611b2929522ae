"""The placement engine as the secondary scheduler's `place`: Kubernetes node views in, a node name out.

`SecondaryScheduler` (balancer/actuate/k8s_scheduler.py) binds pending pods with `schedulerName: gputide` and asks
an injected `place(pod_request, nodes_view)` where each goes, in plain dicts. `EnginePlacer(policy)` answers with
the same engine, policies and score plugins `gputide place` replays the FGD protocol with and the simulator
schedules with (balancer/plan/placement/):

* the offered nodes become a `ClusterState` and the pod a `PodRequest`, GPU models compared by catalogue key and
  NVLink domains from the node label or the catalogue (balancer/app/scheduling_state.py, re-exported here);
* FGD's fragmentation measure needs the workload mix: here, the last `mix_window` pods this scheduler was asked
  to place (the observed mix, as the paper prescribes), the current one included.

The Kubernetes view counts a node's free GPUs but knows neither which ones (the device plugin picks them) nor how
hot they are. With `gpu_facts` (`gputide schedule --prometheus URL`: `PrometheusTelemetrySource.gpu_facts`, the
per-GPU thermal headroom and the GPUs a pod is attributed to, fresh readings only) the placer fills both in for
the nodes Prometheus knows: the free slots are the ones no pod is on (Kubernetes' count still decides how many),
so the topology score sees which NVLink domains really have room, and the thermal score separates a hot node
from a cool one. The facts are read at most once per `facts_ttl_s`; when Prometheus fails the placer says so once
and places as without them, never holding a pod back for it.

`place` runs once per pending pod over every node the pod fits (thousands), each time on fresh dicts, so what
does not change between calls is kept and what does is read as cheaply as it can be:

* `NodeFacts`: a node's GPU count, catalogue model and NVLink domain size, once per distinct hardware
  description (keyed by every input they are computed from, so they cannot go stale);
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

import numpy as np

from balancer.app.scheduling_state import (  # noqa: F401  (re-exported: the scheduler's view of nodes and pods)
    BUSY_RANK,
    DOMAIN_LABEL,
    NO_LABELS,
    UNHEALTHY_RANK,
    GpuFactsTable,
    Json,
    NodeFacts,
    assemble_state,
    cluster_state,
    cpu_mem,
    gpu_rows,
    nvlink_domain_size,
    pod_request,
)
from balancer.errors import TelemetryError
from balancer.model import NodeGpuFacts
from balancer.plan.placement import ClusterState, MixWindow, Scheduler, get_policy
from balancer.plan.placement.snapshot import Snapshot

log = logging.getLogger(__name__)


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
        return assemble_state(tuple(str(n["name"]) for n in nodes), total, usable, model, models, sizes,
                         cpu_mem(numbers))

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
        s.gpu_free[node] = gpu_rows(total, np.clip(numbers[0], 0, total), s.gpu_free.shape[1])[0]
        s.cpu_total[node], s.cpu_free[node], s.mem_total[node], s.mem_free[node] = (c[0] for c in cpu_mem(numbers))
        if self.table is not None:
            self.table.apply(s, [node])
        self.snapshot.refresh(node)
