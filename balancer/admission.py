"""Where a workload may run, by Kubernetes' rules, over one `ClusterSnapshot` (its `admission`).

* `admits(rules)`: per node, whether a pod with these `NodeRules` may run there (the node's `NoSchedule` /
  `NoExecute` taints tolerated, its labels selected by the node selector and required node affinity). Computed
  once per distinct rule set and snapshot; a node whose labels the snapshot lacks matches no selector, so a pod
  that needs one is admitted nowhere.
* `affinity_admits(workload, moved)`: per node, whether the workload's replacement may run there by required pod
  affinity and anti-affinity, as kube-scheduler decides (see the method), with the moves already proposed in this
  cycle (`moved`) counted where they go, not where they were.
* `eviction_room(budgets, workload, spent)` / `spend`: the PodDisruptionBudgets an eviction of the workload counts
  against, and the one that has no disruption left after this cycle's evictions; the planner (not proposing such
  a move) and the safety guard (refusing it) share it.

The planner's migration targets and the safety guard's chokepoint both ask these; the caches live as long as the
snapshot. The snapshot is taken as it is (duck-typed): this module sits below `balancer.model`. It is held by a weak
reference where it takes one: the snapshot caches its `Admission`, so a strong one back made a cycle, and each
cycle's snapshot (20,000 workloads at scale) waited for a full garbage collection instead of going with its cycle.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping
from functools import cached_property
from typing import Any

import numpy as np

from balancer.noderules import NodeRules, Taint, occupied


class Admission:
    def __init__(self, snapshot: Any) -> None:
        try:   # the snapshot holds this one (its cached `admission`): a strong reference back would be a cycle
            self.s = weakref.proxy(snapshot)
        except TypeError:   # a duck-typed snapshot without weak references (no cache of its own to cycle through)
            self.s = snapshot
        self._admitted: dict[NodeRules, np.ndarray] = {}
        self._domains: dict[str, np.ndarray] = {}

    @cached_property
    def _node_taints(self) -> tuple[tuple[Taint, ...], ...]:
        return tuple(tuple(map(Taint.parse, n.taints)) for n in self.s.nodes)

    def admits(self, rules: NodeRules) -> np.ndarray:
        """Per node (in the order of `nodes`): whether a pod with `rules` may run there by Kubernetes' rules (the
        node's taints tolerated, its labels selected). Computed once per distinct rule set and snapshot; a node
        whose labels the snapshot lacks matches no selector, so a pod that needs one is admitted nowhere."""
        mask = self._admitted.get(rules)
        if mask is None:
            mask = np.fromiter((rules.refusal(n.name, n.labels, t) is None
                                for n, t in zip(self.s.nodes, self._node_taints, strict=True)),
                               dtype=bool, count=len(self.s.nodes))
            mask.setflags(write=False)
            self._admitted[rules] = mask
        return mask

    @cached_property
    def _groups(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], np.ndarray]:
        """The placed workloads by (namespace, labels): their nodes' positions. A Deployment's replicas share theirs,
        so a term is matched once per group, not once per pod."""
        by: dict[tuple[str, tuple[tuple[str, str], ...]], list[int]] = {}
        for w in self.s.workloads:
            if gpus := self.s.placements.get(w.name):
                by.setdefault((w.namespace, tuple(sorted(w.labels.items()))), []).append(gpus[0])
        return {k: self.s.node_index[np.asarray(v, dtype=np.int64)] for k, v in by.items()}

    @cached_property
    def _anti_holders(self) -> tuple[tuple[Any, int], ...]:
        """(workload, its node's position) of the placed workloads with required pod anti-affinity (one pass over
        the workloads' terms; their placements only for the few that have some)."""
        out = []
        for w in self.s.workloads:
            if w.pod_affinity.anti and (gpus := self.s.placements.get(w.name)):
                out.append((w, int(self.s.node_index[gpus[0]])))
        return tuple(out)

    def _domain(self, key: str) -> np.ndarray:
        """Per node: its domain id for topology key `key` (the label's value), -1 when it lacks the label."""
        column = self._domains.get(key)
        if column is None:
            ids: dict[str, int] = {}
            column = self._domains[key] = np.array(
                [ids.setdefault(n.labels[key], len(ids)) if key in n.labels else -1 for n in self.s.nodes],
                dtype=np.int64)
        return column

    def _node_of(self, name: str) -> int | None:
        gpus = self.s.placements.get(name)
        return int(self.s.node_index[gpus[0]]) if gpus else None

    def _pods_matching(self, w: Any, terms: tuple, moved: Mapping[str, int]) -> np.ndarray:
        """Per node: the placed workloads other than `w` that every one of `terms` selects, each moved one (name ->
        its target node's position) counted on its target."""
        counts = np.zeros(len(self.s.nodes), dtype=np.int64)
        for (namespace, labels), nodes in self._groups.items():
            if all(t.matches(namespace, dict(labels)) for t in terms):
                np.add.at(counts, nodes, 1)
        own = self._node_of(w.name)
        if own is not None and all(t.matches(w.namespace, w.labels) for t in terms):
            counts[own] -= 1   # `w` is what moves: it is no neighbour of its replacement
        for name, target in moved.items():
            v = self.s.workload_by_name.get(name)
            src = self._node_of(name)
            if name != w.name and v is not None and src is not None and all(
                    t.matches(v.namespace, v.labels) for t in terms):
                counts[src] -= 1
                counts[target] += 1
        return counts

    def affinity_admits(self, w: Any, moved: Mapping[str, int] | None = None) -> np.ndarray:
        """Per node: whether `w`'s replacement may run there by required pod affinity, as kube-scheduler decides:
        its own affinity (a pod matching all its terms in the node's domain of each; if there is none anywhere and
        `w` matches its own terms, any node with every key), its own anti-affinity (no pod it selects in the
        domain), and the placed pods' anti-affinity (none there selecting `w`). `w` itself does not count, as it is
        what moves; a node without a term's topology key is in no domain. Needs the nodes' labels.

        `moved` (workload name -> its target node's position): the migrations already proposed or accepted this
        cycle. Each counts on its target, not its source, so two replicas spread one per host are not both sent to
        the one free host in the same cycle."""
        moved = moved or {}
        ok = np.ones(len(self.s.nodes), dtype=bool)
        aff = w.pod_affinity
        if aff.unsupported:
            return ok & False
        if aff.affinity:
            hits = self._pods_matching(w, aff.affinity, moved)
            for t in aff.affinity:
                ok &= occupied(self._domain(t.topology_key), hits) if hits.any() else self._domain(t.topology_key) >= 0
            if not hits.any() and not all(t.matches(w.namespace, w.labels) for t in aff.affinity):
                ok[:] = False
        for t in aff.anti:
            ok &= ~occupied(self._domain(t.topology_key), self._pods_matching(w, (t,), moved))
        for v, node in ((v, moved.get(v.name, node)) for v, node in self._anti_holders):
            for t in v.pod_affinity.anti if v.name != w.name else ():
                domain = self._domain(t.topology_key)
                if t.matches(w.namespace, w.labels) and domain[node] >= 0:
                    ok &= domain != domain[node]
        return ok


def eviction_room(budgets: Iterable[Any] | None, w: Any, spent: Mapping[str, int]) -> tuple[list[str], Any | None]:
    """(the keys of the PodDisruptionBudgets covering `w`, the first of them with no disruption left after `spent`,
    this cycle's evictions per budget; None when each has one)."""
    hit = [b for b in budgets or () if b.covers(w)]
    return [b.key for b in hit], next((b for b in hit if b.disruptions_allowed - spent.get(b.key, 0) < 1), None)


def spend(spent: dict[str, int], keys: Iterable[str]) -> None:
    """Count one eviction against each budget of `keys`."""
    for k in keys:
        spent[k] = spent.get(k, 0) + 1
