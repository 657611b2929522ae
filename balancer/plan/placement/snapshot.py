"""One ClusterState for a whole scheduling pass: each pod is offered some of its nodes, each binding is committed.

kube-scheduler takes one snapshot of the cluster per cycle and *assumes* each binding into it. The secondary
scheduler's placer used to build a ClusterState, with its NodeStats, NodeClasses and FragCache, from scratch for
every pending pod over the nodes that pod fits: at 5,000 nodes about 8 ms of set-up for 1 ms of placing.
`Snapshot` keeps them for the pass, over every node of the pass:

* `place(pod, offered, mix)` places on the `offered` nodes only (the others are excluded, as the filters would
  exclude a node that does not fit). Its answer is the one a ClusterState of just the offered nodes, in the same
  order, gives: every per-node figure the engine reads is the node's own, and what depends on which nodes are
  offered is computed for them on each call: the share of the offered GPUs of each node's model
  (HeterogeneityFit), the expected fragmentation (the same matrix-vector product over the same rows: BLAS may
  sum a row differently in another matrix, and a last-bit change could flip a tie) and the GPU-slot arrays cut
  to the offered nodes' width (the thermal score's mean over a row depends on the row's length in the last bit);
* after a binding the caller rewrites the node's row of `state` as a fresh view would give it and calls
  `refresh(node)`: the node's aggregates follow, one node at a time, as `Scheduler.commit` keeps them;
* the FragCache is kept while the workload mix keeps its types (the mix's weights change with every pod, but only
  the expected fragmentation reads them); a mix with other types or medians builds it again.
"""

from __future__ import annotations

import numpy as np

from balancer.plan.placement.fragmentation import FragCache, WorkloadMix
from balancer.plan.placement.nodestats import NodeStats
from balancer.plan.placement.scheduler import Policy, Scheduler
from balancer.plan.placement.state import ClusterState, Placement, PodRequest

TYPE_FIELDS = ("cpu", "mem", "num_gpu", "milli")   # what FragCache's per-node statistics depend on, with `allowed`


def same_types(a: WorkloadMix, b: WorkloadMix) -> bool:
    """Whether two mixes have the same types with the same medians (their weights may differ)."""
    return a.allowed == b.allowed and all(np.array_equal(getattr(a, f), getattr(b, f)) for f in TYPE_FIELDS)


class Snapshot:
    """A pass's ClusterState with the engine's aggregates, kept in step by `refresh` (see the module docstring)."""

    def __init__(self, state: ClusterState, policy: Policy) -> None:
        self.state, self.policy = state, policy
        self.stats = NodeStats(state)
        self.frag: FragCache | None = None
        self._offered = np.zeros(state.n_nodes, dtype=bool)

    def refresh(self, node: int) -> None:
        """`node`'s row of the state was rewritten (a binding): its aggregates follow."""
        self.stats.refresh(node)
        if self.frag is not None:
            self.frag.refresh(node)

    def place(self, pod: PodRequest, offered: np.ndarray, mix: WorkloadMix | None,
              rng: np.random.Generator | None = None, preferred: np.ndarray | None = None) -> Placement | None:
        """Where `pod` goes among the nodes `offered` (indices, ascending), or None; nothing is changed.
        `preferred`: the pod's preferred affinity on the offered nodes, one (node, pod affinity) row each in
        `offered`'s order, as a ClusterState of just those nodes would take it (`Scheduler.place`)."""
        offered = np.asarray(offered, dtype=np.int64)
        if not len(offered):
            return None
        s = self.state
        frag = self._frag(mix, offered) if self.policy.needs_mix and mix is not None else None
        self.stats.model_share = self._model_share(offered)
        width = max(int(s.gpu_count[offered].max()), 1)
        view = ClusterState(s.cpu_total, s.mem_total, s.gpu_free[:, :width], s.model, s.models, cpu_free=s.cpu_free,
                            mem_free=s.mem_free, nvlink_domain=s.nvlink_domain[:, :width],
                            temp_headroom=s.temp_headroom[:, :width], taints=s.taints)
        self._offered[:] = False
        self._offered[offered] = True
        scheduler = Scheduler(view, self.policy, mix, rng=rng, stats=self.stats, frag=frag)
        if preferred is not None:   # the offered nodes' rows, spread over every node of the pass
            preferred, rows = np.zeros((s.n_nodes, 2)), preferred
            preferred[offered] = rows
        return scheduler.place(pod, exclude=~self._offered, preferred=preferred)

    def _frag(self, mix: WorkloadMix, offered: np.ndarray) -> FragCache:
        """The FragCache of `mix`, with the expected fragmentation of the offered nodes as their own state gives it."""
        if self.frag is None or not same_types(self.frag.mix, mix):
            self.frag = FragCache(self.state, mix)
        self.frag.mix = mix
        self.frag.expected[offered] = self.frag.frag[offered] @ mix.weight
        return self.frag

    def _model_share(self, offered: np.ndarray) -> np.ndarray:
        """NodeStats.model_share over the offered nodes: each model's share of their GPUs (integer sums: exact)."""
        s = self.state
        model, count = s.model[offered], s.gpu_count[offered]
        has = model >= 0
        per_model = np.bincount(model[has], weights=count[has], minlength=len(s.models))
        return np.append(per_model / max(per_model.sum(), 1), 0)[s.model]
