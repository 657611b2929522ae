"""The scheduling cycle: filter, build candidates, score, normalise, weigh, pick, bind.

`Policy` is a name plus (score plugin, weight) pairs. `Scheduler` owns a `ClusterState` (and, for policies that need
it, the `FragCache` of a workload mix) and places one pod at a time: filters give the feasible nodes (less the pod's
own `excluded_nodes`: targets the actuator refused it lately), candidates are the (node, slot) pairs that can take
the pod, each score is normalised to 0..100 over the candidates (kube-scheduler style), the weighted sum picks the
winner and ties are broken at random (seeded) or by lowest index. `place` only decides; `commit` applies a Placement
and keeps the caches in step, `remove` undoes one. Named policies: random, bestfit, dotprod, gpupacking,
gpuclustering (FGD's baselines), fgd and gputide (fragmentation first; topology, packing, heterogeneity fit and
thermal headroom only break near-ties: their weights are small enough that they never overrule a real difference in
expected fragmentation; measured on the Alibaba traces, the packing tie-break alone cuts unallocated GPUs by 0.2-0.8
points against plain FGD, whose ties are random; counting CPU-only types in the mix made it worse, so the mix is GPU
pods only). CPU-only pods barely move FGD's measure, so fgd places them at random; gputide's CpuOnlyFit puts them
where they strand the fewest GPUs (seed 42, unallocated GPU % at 100 % arrival, fgd -> gputide: gpushare100 18.8 ->
13.7, cpu235 6.5 -> 5.3, cpu250 7.9 -> 7.1; gpushare100 with its CPU-only pods removed gives fgd 14.3, and the
authors report 13.4 for their FGD). GPU pods have the matching near-tie breaker, CpuForIdleGpus: keep the CPU the
node's empty GPUs will need (with BinPack packing GPUs only, no longer CPU); it is what put gputide ahead of fgd on
the CPU-light lists (cpu0..cpu200, default), where it used to tie or lose by a few hundredths of a point.

A pod's preferred (soft) node and pod affinity, which only the Kubernetes secondary scheduler knows, is added to
the weighted sum with the policy's `preferred` weight (`plugins.preference`, 0..200). Each policy weighs it twice
its main score, as kube-scheduler weighs its NodeAffinity and InterPodAffinity scores twice its resource fit: the
node a pod prefers most beats a node it does not prefer at all whatever the main score and the tie-breakers say
(for gputide: 2000 against fragmentation's 1000), while a lesser preference can be outweighed. Pods without
preferences, and so the trace replays, are placed as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from balancer.plan.placement import plugins as p
from balancer.plan.placement.fragmentation import FragCache, WorkloadMix
from balancer.plan.placement.nodestats import NodeStats
from balancer.plan.placement.state import MILLI, ClusterState, Placement, PodRequest, resolve_models


@dataclass(frozen=True)
class Policy:
    name: str
    scores: tuple[tuple[object, float], ...]
    needs_mix: bool = False
    mix_cpu_only: bool = True
    mix_options: tuple[tuple[str, object], ...] = ()  # extra WorkloadMix.from_pods keywords
    preferred: float = 2.0   # the weight of a pod's preferred affinity (`plugins.preference`), when it has some


POLICIES: dict[str, Policy] = {
    "random": Policy("random", ((p.RandomScore(), 1.0),)),
    "bestfit": Policy("bestfit", ((p.BestFit(), 1.0),)),
    "dotprod": Policy("dotprod", ((p.DotProduct(), 1.0),)),
    "gpupacking": Policy("gpupacking", ((p.GpuPacking(), 1.0),)),
    "gpuclustering": Policy("gpuclustering", ((p.GpuClustering(), 1.0),)),
    "fgd": Policy("fgd", ((p.Fragmentation(), 1.0),), needs_mix=True, mix_cpu_only=False),
    "gputide": Policy(
        "gputide",
        (
            (p.Fragmentation(), 1000.0),
            (p.Topology(), 0.2),
            (p.BinPack(), 0.1),
            (p.HeterogeneityFit(), 0.05),
            (p.ThermalHeadroom(), 0.05),
            (p.CpuOnlyFit(), 1.0),
            (p.CpuForIdleGpus(), 3.0),
        ),
        needs_mix=True,
        mix_cpu_only=False,
        preferred=2000.0,
    ),
}


def get_policy(name: str) -> Policy:
    from balancer.errors import InputError

    if name not in POLICIES:
        raise InputError(None, "policy", name, ", ".join(POLICIES))
    return POLICIES[name]


def normalise(raw: np.ndarray) -> np.ndarray:
    """Min-max to 0..100; a constant score gives 100 to everyone (it cannot separate candidates)."""
    lo, hi = raw.min(), raw.max()
    if hi - lo <= 1e-12 * max(1.0, abs(hi)):
        return np.full(raw.shape, 100.0)
    return (raw - lo) * (100.0 / (hi - lo))


class Scheduler:
    """Places pods on a ClusterState with one policy. Not thread-safe; one per replay/simulation."""

    def __init__(
        self,
        state: ClusterState,
        policy: Policy | str,
        mix: WorkloadMix | None = None,
        rng: np.random.Generator | None = None,
        filters: tuple = p.DEFAULT_FILTERS,
        *,
        stats: NodeStats | None = None,
        frag: FragCache | None = None,
    ) -> None:
        """`stats` and `frag`, when given, are the caller's own, already in step with `state` (a `Snapshot`'s)."""
        self.state = state
        self.policy = get_policy(policy) if isinstance(policy, str) else policy
        self.rng = rng
        self.filters = filters
        if self.policy.needs_mix and mix is None:
            raise ValueError(f"policy {self.policy.name} needs a workload mix")
        if frag is None and mix is not None and self.policy.needs_mix:
            frag = FragCache(state, mix)
        self.frag = frag if self.policy.needs_mix else None
        self.stats = stats if stats is not None else NodeStats(state)
        self.node_tag = np.full(state.n_nodes, -1, dtype=np.int64)
        self._model_masks: dict[tuple[str, ...] | None, np.ndarray] = {}

    def model_mask(self, pod: PodRequest) -> np.ndarray:
        mask = self._model_masks.get(pod.allowed_models)
        if mask is None:
            mask = resolve_models(pod.allowed_models, self.state.models)[0]
            self._model_masks[pod.allowed_models] = mask
        return mask

    def feasible_nodes(self, pod: PodRequest, exclude: np.ndarray | None = None) -> np.ndarray:
        mask = self.model_mask(pod)
        ok = self.filters[0].filter(self.state, pod, mask)
        for f in self.filters[1:]:
            ok &= f.filter(self.state, pod, mask)
        if exclude is not None:
            ok &= ~exclude
        if pod.excluded_nodes:   # the pod's own: nodes a move of it was refused on lately
            ok[np.asarray(pod.excluded_nodes, dtype=np.int64)] = False
        return np.flatnonzero(ok)

    def candidates(self, pod: PodRequest, exclude: np.ndarray | None = None) -> p.Candidates:
        nodes = self.feasible_nodes(pod, exclude)
        s = self.state
        if pod.num_gpu == 1 and len(nodes):
            node, slot, value = self._slot_candidates(nodes, pod.gpu_milli)
        else:
            node, slot = nodes, np.full(len(nodes), -1)
            value = np.full(len(nodes), MILLI, dtype=np.int64)
        return p.Candidates(s, pod, node, slot, value, self.stats, self.frag, self.rng, self.node_tag)

    def _slot_candidates(self, nodes: np.ndarray, milli: int):
        """(node, slot, free milli) of the slots of `nodes` that can give `milli`, one per `_distinct` group.

        Without thermal readings the groups' representatives are kept up to date in NodeStats (the replay's
        case, and ~8 x fewer pairs to sort per pod); with them the coolest slot is picked here.
        """
        s = self.state
        if self.stats.slot_key_ok and not np.isfinite(s.temp_headroom).any():
            return self.stats.slot_candidates(nodes, milli)
        rows, slot = np.nonzero(s.gpu_free[nodes] >= milli)
        node = nodes[rows]
        return self._distinct(node, slot, s.gpu_free[node, slot].astype(np.int64))

    def _distinct(self, node: np.ndarray, slot: np.ndarray, value: np.ndarray):
        """One candidate per (node, free milli, NVLink domain): the other slots of such a group score alike.

        The representative is the coolest slot of its group, so the thermal score loses nothing.
        """
        s = self.state
        key = (node.astype(np.int64) * (2 * MILLI + 1) + value) * (s.gpu_free.shape[1] + 1)
        key += s.nvlink_domain[node, slot]
        head = s.temp_headroom[node, slot]
        if np.isfinite(head).any():
            order = np.lexsort((-np.nan_to_num(head, nan=-np.inf), key))
            first = np.ones(len(order), dtype=bool)
            first[1:] = key[order][1:] != key[order][:-1]
            keep = order[first]
        else:
            keep = np.unique(key, return_index=True)[1]
        return node[keep], slot[keep], value[keep]

    def place(self, pod: PodRequest, exclude: np.ndarray | None = None,
              preferred: np.ndarray | None = None) -> Placement | None:
        """Best placement for `pod` (no state change), or None when no node can take it. `preferred`: the pod's
        preferred affinity, [n_nodes, 2] (`plugins.preference`), weighed by the policy's `preferred` among the
        feasible candidates only."""
        c = self.candidates(pod, exclude)
        if not len(c):
            return None
        total = np.zeros(len(c))
        for plugin, weight in self.policy.scores:
            total += weight * normalise(plugin.score(c))
        if preferred is not None and np.any(preferred):
            total += self.policy.preferred * p.preference(c, preferred)
        best = np.flatnonzero(total >= total.max() - 1e-9)
        pick = best[self.rng.integers(len(best))] if self.rng is not None and len(best) > 1 else best[0]
        node = int(c.node[pick])
        slots = (int(c.slot[pick]),) if pod.num_gpu == 1 else self.whole_gpu_slots(node, pod.num_gpu)
        milli = pod.gpu_milli if pod.num_gpu else 0
        return Placement(node, slots, milli, pod.cpu_milli, pod.memory_mib)

    def whole_gpu_slots(self, node: int, count: int) -> tuple[int, ...]:
        """`count` fully free slots, from the NVLink domain that fits them most tightly when one can."""
        if count == 0:
            return ()
        free = np.flatnonzero(self.state.gpu_free[node] >= MILLI)
        dom = self.state.nvlink_domain[node, free]
        sizes = {d: int((dom == d).sum()) for d in np.unique(dom)}
        fitting = [d for d, k in sizes.items() if k >= count]
        if fitting:
            best = min(fitting, key=lambda d: (sizes[d], d))
            return tuple(int(x) for x in free[dom == best][:count])
        order = sorted(range(len(free)), key=lambda i: (-sizes[dom[i]], dom[i], free[i]))
        return tuple(int(free[i]) for i in order[:count])

    def commit(self, placement: Placement, pod: PodRequest | None = None) -> None:
        placement.apply(self.state)
        if pod is not None and pod.num_gpu == 1 and self.node_tag[placement.node] < 0:
            self.node_tag[placement.node] = pod.gpu_milli
        self._refresh(placement.node)

    def remove(self, placement: Placement) -> None:
        placement.undo(self.state)
        self._refresh(placement.node)
        if not self.stats.busy[placement.node]:  # no GPU in use any more: no shared pod left to cluster with
            self.node_tag[placement.node] = -1

    def _refresh(self, node: int) -> None:
        self.stats.refresh(node)
        if self.frag is not None:
            self.frag.refresh(node)

    def schedule(self, pod: PodRequest) -> Placement | None:
        placement = self.place(pod)
        if placement is not None:
            self.commit(placement, pod)
        return placement
