"""Per-node GPU aggregates that the filters and scores read for every pod, kept in step one node at a time.

The FGD replay schedules ~8,000 pods on ~1,200 nodes; recomputing a node's idle milli, its busy GPUs per
NVLink domain or its sorted free slots from the [n, g] GPU arrays for every candidate of every pod made those
reductions the bulk of the scoring time. A bind changes one node, so `NodeStats` derives them once and the
`Scheduler` refreshes the node it just changed (`commit` / `remove`), exactly as it refreshes the `FragCache`.

Every aggregate is an integer count or sum (exact in any order; the model share is the same formula run
once), so the scores built from them are the very same floats as when they were summed per candidate. The
arrays follow the GPU, CPU and memory state the Scheduler was built on: change it through the Scheduler (or build
a new one), never behind its back. Thermal headroom is read live (the slot choice falls back when there is any).
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from balancer.plan.placement.state import MILLI, ClusterState


class NodeStats:
    """Idle milli, busy GPUs per NVLink domain and one slot per (free milli, domain) of every node."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        s = state
        n, g = s.gpu_free.shape
        exists = s.gpu_exists
        # domain ids 0..g-1 (the usual case: cluster_state and from_nodes make them): per-domain counts are one
        # bincount over (node, domain); other ids fall back to comparing every slot's domain with every other's
        dom = s.nvlink_domain
        in_range = (dom >= 0) & (dom < g)
        self._cell = np.arange(n)[:, None] * g + dom  # [n, g] the (node, domain) cell of each slot
        self._in_range = in_range
        self._dense = bool(in_range.all())
        self.domain_size = self._in_domain(exists)  # [n, g] GPUs in the domain of each slot (static)
        models = s.model >= 0
        per_model = np.bincount(s.model[models], weights=s.gpu_count[models], minlength=len(s.models))
        share = per_model / max(per_model.sum(), 1)
        self.model_share = np.append(share, 0)[s.model]  # [n] share of the cluster's GPUs of the node's model
        self.idle = np.zeros(n, dtype=np.int64)  # free milli over the node's GPUs
        self.busy = np.zeros(n, dtype=np.int64)  # GPUs with something on them
        self.domain_busy = np.zeros((n, g), dtype=np.int64)  # busy GPUs in the domain of each slot
        self.full_in_domain = np.zeros(n, dtype=np.int64)  # most fully free GPUs in one domain (ids 0..g-1)
        # slot representatives: the node's slots sorted by (free milli, domain), the first (lowest) slot of each
        # such group kept and the others' free milli set to -1 so that no request fits them
        self.slot_key_ok = bool(np.all((s.nvlink_domain >= 0) & (s.nvlink_domain <= g)))
        self.rep_slot = np.zeros((n, g), dtype=np.int64)
        self.rep_free = np.zeros((n, g), dtype=np.int64)
        self.rebuild()

    @cached_property
    def _dom(self) -> list[list[int]]:
        """The NVLink domain ids as lists, for `refresh` (built on its first call: a Scheduler that only places,
        as the secondary scheduler's does once per pod, never pays for them)."""
        return self.state.nvlink_domain.tolist()

    @cached_property
    def _exists(self) -> list[list[bool]]:
        return self.state.gpu_exists.tolist()

    def rebuild(self) -> None:
        """Every node at once (vectorised); `refresh` is the same for one node, in plain Python because a node
        has a handful of slots and per-call numpy overhead would dominate (the defrag replay refreshes ~40,000
        times)."""
        s = self.state
        free, exists = s.gpu_free, s.gpu_exists
        busy = exists & (free < MILLI)
        self.idle[:] = np.where(exists, np.clip(free, 0, None), 0).sum(axis=1)
        self.busy[:] = busy.sum(axis=1)
        self.domain_busy[:] = self._in_domain(busy)
        full = free >= MILLI
        self.full_in_domain[:] = self._per_domain(full & self._in_range).max(axis=1)
        key = free.astype(np.int64) * (free.shape[1] + 1) + s.nvlink_domain
        order = np.argsort(key, axis=1, kind="stable")
        key = np.take_along_axis(key, order, axis=1)
        rep_free = np.take_along_axis(free, order, axis=1).astype(np.int64)
        rep_free[:, 1:][key[:, 1:] == key[:, :-1]] = -1
        self.rep_slot[:] = order
        self.rep_free[:] = rep_free

    def _per_domain(self, mask: np.ndarray) -> np.ndarray:
        """[n, g]: how many slots with `mask` (ids 0..g-1 only) each node has in domain d (column d)."""
        n, g = mask.shape
        return np.bincount(self._cell[mask], minlength=n * g).reshape(n, g)

    def _in_domain(self, mask: np.ndarray) -> np.ndarray:
        """[n, g]: slots with `mask` (slots that hold a GPU) in the NVLink domain of each slot."""
        if self._dense:
            return np.take_along_axis(self._per_domain(mask), self.state.nvlink_domain, axis=1)
        dom = self.state.nvlink_domain
        return ((dom[:, :, None] == dom[:, None, :]) & mask[:, None, :]).sum(axis=2)

    def refresh(self, node: int) -> None:
        free, dom, exists = self.state.gpu_free[node].tolist(), self._dom[node], self._exists[node]
        width = len(free)
        idle = busy = 0
        busy_in: dict[int, int] = {}
        full_in: dict[int, int] = {}
        for f, d, e in zip(free, dom, exists, strict=True):
            if e and f > 0:
                idle += f
            if e and f < MILLI:
                busy += 1
                busy_in[d] = busy_in.get(d, 0) + 1
            if f >= MILLI and 0 <= d < width:
                full_in[d] = full_in.get(d, 0) + 1
        self.idle[node], self.busy[node] = idle, busy
        self.domain_busy[node] = [busy_in.get(d, 0) for d in dom]
        self.full_in_domain[node] = max(full_in.values(), default=0)
        key = [f * (width + 1) + d for f, d in zip(free, dom, strict=True)]
        order = sorted(range(width), key=key.__getitem__)  # stable: the lowest slot first within a group
        self.rep_slot[node] = order
        first = [i == 0 or key[j] != key[order[i - 1]] for i, j in enumerate(order)]
        self.rep_free[node] = [free[j] if keep else -1 for j, keep in zip(order, first, strict=True)]

    def slot_candidates(self, nodes: np.ndarray, milli: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(node, slot, free milli) with one slot per (node, free milli, domain) group that can give `milli`.

        Sorted by node, free milli and domain, the lowest slot of each group: the Scheduler's `_distinct` order
        and choice when no slot reports thermal headroom. Valid only when `slot_key_ok` (domain ids 0..g),
        as `_distinct`'s key orders slots by (free milli, domain) only then.
        """
        free = self.rep_free[nodes]
        rows, cols = np.nonzero(free >= milli)
        node = nodes[rows]
        return node, self.rep_slot[node, cols], free[rows, cols]


class NodeClasses:
    """Ids that are equal for nodes in the same state: GPU model, free CPU and memory, multiset of free milli.

    Most of a replay's candidates are untouched nodes of a few hardware types, so per-node work that depends
    only on that state (FGD's per-type statistics after a placement) needs doing once per class. Ids of
    classes no node is in any more are reused, so they stay below the node count.
    """

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        n = state.n_nodes
        self.id = np.zeros(n, dtype=np.int64)
        self._ids: dict[tuple, int] = {}
        self._refs = np.zeros(n, dtype=np.int64)
        self._keys: list[tuple | None] = [None] * n
        self._spare = list(range(n - 1, -1, -1))
        self._scratch = np.zeros(n * (MILLI + 1), dtype=np.int64)
        self._build()

    def _build(self) -> None:
        """Every node at once: what `refresh` of nodes 0, 1, ... in turn gives (same keys, same ids: the first
        node of each class in node order takes the next id), from one sort of the nodes' rows (a stable lexsort
        of the columns, several times faster than `np.unique(axis=0)` here)."""
        s = self.state
        n = s.n_nodes
        if not n:
            return
        free = np.sort(s.gpu_free, axis=1)
        rows = np.column_stack([s.model, s.cpu_free, s.mem_free, free]).astype(np.int64)
        order = np.lexsort(rows.T)
        ordered = rows[order]
        start = np.ones(n, dtype=bool)
        start[1:] = np.any(ordered[1:] != ordered[:-1], axis=1)
        first = order[start]  # stable sort: the lowest node of each class
        rank = np.empty(len(first), dtype=np.int64)
        rank[np.argsort(first)] = np.arange(len(first))
        self.id[order] = rank[np.cumsum(start) - 1]
        first = np.sort(first)
        keys = [(int(s.model[i]), int(s.cpu_free[i]), int(s.mem_free[i]), free[i].tobytes()) for i in first]
        self._ids = {key: i for i, key in enumerate(keys)}
        self._keys = [keys[i] for i in self.id.tolist()]
        self._refs[:] = np.bincount(self.id, minlength=n)
        self._spare = list(range(n - 1, len(keys) - 1, -1))

    def refresh(self, node: int) -> None:
        s = self.state
        old = self._keys[node]
        if old is not None:
            i = self._ids[old]
            self._refs[i] -= 1
            if not self._refs[i]:
                del self._ids[old]
                self._spare.append(i)
        free = np.sort(s.gpu_free[node]).tobytes()
        key = (int(s.model[node]), int(s.cpu_free[node]), int(s.mem_free[node]), free)
        i = self._ids.get(key)
        if i is None:
            i = self._ids[key] = self._spare.pop()
        self._refs[i] += 1
        self._keys[node] = key
        self.id[node] = i

    def groups(self, nodes: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One index per distinct (class, value) among the pairs, and each pair's group: `first[inverse]` pairs
        are interchangeable. `values` are free milli 0..MILLI."""
        key = self.id[nodes] * (MILLI + 1) + values
        index = np.arange(len(key))
        self._scratch[key] = index  # the last pair of each group wins; only these entries are read back
        rep = self._scratch[key]
        first = np.flatnonzero(rep == index)
        group = np.empty(len(key), dtype=np.int64)
        group[first] = np.arange(len(first))
        return first, group[rep]
