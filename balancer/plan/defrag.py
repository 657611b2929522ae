"""Defragmentation: bounded consolidation moves, and the fragmentation metric per GPU model.

Fragmentation (FGD's measure, see `placement.fragmentation`) is idle GPU capacity the observed workload mix
cannot use. `fragmentation_by_model` turns it into the two exported series of docs/metrics.md:
`gputide_fragmentation_ratio{modelName}` (fragmented share of idle GPUs) and
`gputide_unallocatable_gpus{modelName}` (fragmented idle capacity, in GPUs).

Consolidation is planned, never performed here. `make_room` answers "this pod fits nowhere: which at most K
placed pods could move so that it fits?": it ranks nodes by how little is missing, evicts the smallest pods
that close the gap on the best node, re-places each of them elsewhere with the scheduler's own policy, and
asks `budget(pod, from, to)` (the safety chokepoint's callback) before each move. Anything refused or
unplaceable rolls the state back untouched. `plan_consolidation` is the loop's entry point: it works on a copy
and returns frozen `Move`s with the GPUs they are expected to free.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from balancer.plan.placement.fragmentation import WorkloadMix, node_fragmentation
from balancer.plan.placement.scheduler import Scheduler
from balancer.plan.placement.state import MILLI, ClusterState, Placement, PodRequest

Budget = Callable[[PodRequest, Placement, Placement], bool]


@dataclass(frozen=True)
class Move:
    pod: PodRequest
    source: Placement
    target: Placement
    reason: str
    expected_gpus_freed: float = 0.0


@dataclass(frozen=True)
class PodsByNode:
    """Placed pods handed over node by node, on demand: `total` pods in all, `on(node)` the (position among all,
    pod, placement) of those on `node`, positions ascending. A caller with tens of thousands of placed pods builds
    the `PodRequest`s of the few nodes consolidation looks at, not of all of them."""

    total: int
    on: Callable[[int], Iterable[tuple[int, PodRequest, Placement]]]


@dataclass
class Ledger:
    """Which pods sit where; kept in step with a Scheduler's state by the caller. With `source`, a node's pods are
    read from it the first time the node is looked at (`on`); keys are then the pods' positions in `source`, as
    adding them all in order would have numbered them, and a node's key set is built by the same additions."""

    pods: dict[int, tuple[PodRequest, Placement]] = field(default_factory=dict)
    by_node: dict[int, set[int]] = field(default_factory=dict)
    moves: int = 0
    _next: int = 0
    source: PodsByNode | None = None

    @classmethod
    def of(cls, placed: Iterable[tuple[PodRequest, Placement]] | PodsByNode) -> Ledger:
        if isinstance(placed, PodsByNode):
            return cls(_next=placed.total, source=placed)
        ledger = cls()
        for pod, where in placed:
            ledger.add(pod, where)
        return ledger

    def on(self, node: int) -> set[int]:
        """The keys of the pods on `node`."""
        keys = self.by_node.get(node)
        if keys is None:
            keys = self.by_node[node] = set()
            for key, pod, where in self.source.on(node) if self.source is not None else ():
                self.pods[key] = (pod, where)
                keys.add(key)
        return keys

    def add(self, pod: PodRequest, placement: Placement) -> int:
        keys = self.on(placement.node)
        key = self._next
        self._next += 1
        self.pods[key] = (pod, placement)
        keys.add(key)
        return key

    def remove(self, key: int) -> tuple[PodRequest, Placement]:
        pod, placement = self.pods.pop(key)
        self.by_node[placement.node].discard(key)
        return pod, placement


def fragmentation_by_model(state: ClusterState, mix: WorkloadMix) -> dict[str, dict[str, float]]:
    """{model: {fragmentation_ratio, unallocatable_gpus, idle_gpus}} against the workload mix."""
    frag = node_fragmentation(state.gpu_free, state.cpu_free, state.mem_free, mix.model_ok(state), mix)
    expected = frag @ mix.weight if len(mix) else np.zeros(state.n_nodes)
    idle = np.where(state.gpu_free > 0, state.gpu_free, 0).sum(axis=1)
    out = {}
    for i, name in enumerate(state.models):
        on = state.model == i
        idle_m, frag_m = float(idle[on].sum()), float(expected[on].sum())
        out[name] = {
            "fragmentation_ratio": frag_m / idle_m if idle_m else 0.0,
            "unallocatable_gpus": frag_m / MILLI,
            "idle_gpus": idle_m / MILLI,
        }
    return out


def _missing(s: ClusterState, pod: PodRequest, nodes: np.ndarray) -> np.ndarray:
    """How far each node is from taking `pod` (0 = fits now), in shares of the node's capacity."""
    free = np.sort(np.where(s.gpu_exists[nodes], s.gpu_free[nodes], -(10**6)), axis=1)[:, ::-1]
    gpu = np.zeros(len(nodes))
    if pod.num_gpu:
        top = np.clip(free[:, : pod.num_gpu], 0, None)
        gpu = np.clip(pod.gpu_milli - top, 0, None).sum(axis=1) / MILLI
    cpu = np.clip(pod.cpu_milli - s.cpu_free[nodes], 0, None) / np.maximum(s.cpu_total[nodes], 1)
    mem = np.clip(pod.memory_mib - s.mem_free[nodes], 0, None) / np.maximum(s.mem_total[nodes], 1)
    return gpu + cpu + mem


def _victims(s: ClusterState, ledger: Ledger, node: int, pod: PodRequest, max_moves: int):
    """Target slots and the fewest small pods to evict from `node` so that `pod` fits there, or None."""
    free = s.gpu_free[node].astype(np.int64)
    keys = sorted(ledger.on(node), key=lambda k: (ledger.pods[k][0].total_gpu_milli, k))
    slots: tuple[int, ...] = ()
    if pod.num_gpu:
        order = np.argsort(-np.where(s.gpu_exists[node], free, -(10**6)), kind="stable")
        slots = tuple(int(x) for x in order[: pod.num_gpu])
        if len(slots) < pod.num_gpu or not s.gpu_exists[node, list(slots)].all():
            return None
    chosen: list[int] = []
    cpu, mem = int(s.cpu_free[node]), int(s.mem_free[node])
    for k in keys:
        if all(free[j] >= pod.gpu_milli for j in slots) and cpu >= pod.cpu_milli and mem >= pod.memory_mib:
            break
        other, where = ledger.pods[k]
        helps_gpu = any(j in where.slots and free[j] < pod.gpu_milli for j in slots)
        helps_host = (cpu < pod.cpu_milli and other.cpu_milli) or (mem < pod.memory_mib and other.memory_mib)
        if not (helps_gpu or helps_host):
            continue
        chosen.append(k)
        cpu, mem = cpu + other.cpu_milli, mem + other.memory_mib
        for j in where.slots:
            free[j] += where.milli
        if len(chosen) > max_moves:
            return None
    if not (all(free[j] >= pod.gpu_milli for j in slots) and cpu >= pod.cpu_milli and mem >= pod.memory_mib):
        return None
    return slots, chosen


def make_room(
    sched: Scheduler,
    ledger: Ledger,
    pod: PodRequest,
    max_moves: int = 2,
    budget: Budget | None = None,
    tries: int = 3,
) -> tuple[Placement, list[Move]] | None:
    """Fit `pod` by moving at most `max_moves` placed pods; mutates sched/ledger only on success."""
    s = sched.state
    static = s.cpu_total >= pod.cpu_milli
    static &= s.mem_total >= pod.memory_mib
    static &= (s.taints & ~np.int64(pod.tolerations)) == 0
    if pod.num_gpu:
        static &= np.append(sched.model_mask(pod), False)[s.model] & (s.gpu_count >= pod.num_gpu)
        if (
            np.where(s.gpu_exists & static[:, None], np.clip(s.gpu_free, 0, None), 0).sum()
            < pod.total_gpu_milli
        ):
            return None
    nodes = np.flatnonzero(static)
    if not len(nodes):
        return None
    missing = _missing(s, pod, nodes)
    for node in nodes[np.argsort(missing, kind="stable")[:tries]]:
        plan = _victims(s, ledger, int(node), pod, max_moves)
        if plan is None:
            continue
        done = _try_moves(sched, ledger, pod, int(node), *plan, budget)
        if done is not None:
            return done
    return None


def _try_moves(sched, ledger, pod, node, slots, victims, budget):
    exclude = np.zeros(sched.state.n_nodes, dtype=bool)
    exclude[node] = True
    evicted = [ledger.remove(k) for k in victims]
    for _, where in evicted:
        sched.remove(where)
    if pod.num_gpu > 1:  # whole GPUs from one NVLink domain when one fits, as the scheduler picks them
        slots = sched.whole_gpu_slots(node, pod.num_gpu)
    target = Placement(node, slots, pod.gpu_milli if pod.num_gpu else 0, pod.cpu_milli, pod.memory_mib)
    # the scheduler's own filters (taints, GPU model, ...) must admit the pod on the freed node
    admitted = bool(np.isin(node, sched.feasible_nodes(pod)))
    if admitted:
        sched.commit(target, pod)
    moves: list[Move] = []
    for other, where in evicted if admitted else ():
        dest = sched.place(other, exclude=exclude)
        if dest is None or (budget is not None and not budget(other, where, dest)):
            break
        sched.commit(dest, other)
        moves.append(Move(other, where, dest, f"make room for {pod.name or 'a pending pod'}"))
    if admitted and len(moves) == len(evicted):
        for move in moves:
            ledger.add(move.pod, move.target)
        ledger.moves += len(moves)
        return target, moves
    for move in moves:  # roll back: the pod could not be placed after all
        sched.remove(move.target)
    if admitted:
        sched.remove(target)
    for other, where in evicted:
        sched.commit(where, other)
        ledger.add(other, where)
    return None


@dataclass
class Defragmenter:
    """The replay's `--defrag` hook: on a failed pod, try `make_room` with at most `max_moves` moves."""

    max_moves: int = 2
    budget: Budget | None = None

    def new_ledger(self, state: ClusterState) -> Ledger:
        return Ledger()

    def try_fit(self, sched: Scheduler, ledger: Ledger, pod: PodRequest) -> Placement | None:
        done = make_room(sched, ledger, pod, self.max_moves, self.budget)
        return None if done is None else done[0]


def plan_consolidation(
    state: ClusterState,
    placed: list[tuple[PodRequest, Placement]] | PodsByNode,
    mix: WorkloadMix,
    max_moves: int = 4,
    policy: str = "gputide",
    budget: Budget | None = None,
) -> list[Move]:
    """Moves (on a copy of `state`) that empty the least-used shared GPUs, at most `max_moves` of them. `placed`:
    the pods that may move and where they are, as a list or node by node on demand (`PodsByNode`). A GPU an earlier
    move of the plan went to is not emptied: its pods would include one moved already, planned a second time from
    the state the first move left (the guard refuses a second action on one workload, leaving the GPU half
    emptied and its other pods moved for nothing)."""
    sched = Scheduler(state.copy(), policy, mix)
    ledger = Ledger.of(placed)
    s = sched.state
    frag = _Fragmentation(mix, mix.model_ok(s))
    used = np.where(s.gpu_exists, MILLI - s.gpu_free, 0)
    partial = np.argwhere(s.gpu_exists & (used > 0) & (used < MILLI))
    partial = partial[np.argsort(used[partial[:, 0], partial[:, 1]], kind="stable")]
    moves: list[Move] = []
    filled: set[tuple[int, int]] = set()   # GPUs this plan's moves go to: not emptied again (a pod moves once)
    for i in range(len(partial)):
        if len(moves) >= max_moves:   # a GPU with a pod to move would overshoot: none of the rest can be emptied
            break
        node, slot = int(partial[i, 0]), int(partial[i, 1])
        if (node, slot) in filled:
            continue
        keys = [k for k in ledger.on(node) if slot in ledger.pods[k][1].slots]
        if not keys or len(moves) + len(keys) > max_moves:
            continue
        group = _empty_gpu(sched, ledger, keys, node, slot, budget, frag)
        filled.update((m.target.node, j) for m in group for j in m.target.slots)
        moves.extend(group)
    return moves


@dataclass(frozen=True)
class _Fragmentation:
    """`fragmentation_by_model`'s measure (expected fragmented idle milli against `mix`) of a few nodes, summed per
    GPU model (position 0: nodes without GPUs, then `ClusterState.models`); `model_ok`: `mix.model_ok` of the state,
    which moves do not change."""

    mix: WorkloadMix
    model_ok: np.ndarray

    @staticmethod
    def rows(s: ClusterState, nodes: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """What the measure reads of `nodes` (a copy: the state changes under it)."""
        idx = np.asarray(nodes, dtype=np.int64)
        return idx, s.gpu_free[idx].copy(), s.cpu_free[idx].copy(), s.mem_free[idx].copy()

    def per_model(self, s: ClusterState, rows: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
        idx, free, cpu, mem = rows
        frag = node_fragmentation(free, cpu, mem, self.model_ok[idx], self.mix)
        expected = frag @ self.mix.weight if len(self.mix) else np.zeros(len(idx))
        return np.bincount(s.model[idx] + 1, weights=expected, minlength=len(s.models) + 1)


def _empty_gpu(sched: Scheduler, ledger: Ledger, keys: list[int], node: int, slot: int,
               budget: Budget | None, frag: _Fragmentation) -> list[Move]:
    """Move every pod of `keys` off GPU `slot` of `node`, or none of them. A GPU left partly used frees nothing,
    nor does one emptied by filling a GPU that was idle, nor one whose moves leave a GPU model more fragmented than
    before (a pod's CPU or memory taken on a node strands that node's idle GPUs): such moves (a pod that fits
    nowhere else, a move the budget refuses, a destination GPU that had nothing on it) are rolled back."""
    s = sched.state
    exclude = np.zeros(s.n_nodes, dtype=bool)
    exclude[node] = True
    done: list[tuple[int, PodRequest, Placement, Placement]] = []
    newly_used: set[tuple[int, int]] = set()
    touched = [node]
    before = frag.rows(s, touched)   # the destinations' rows are added as they are picked, before the move
    for k in keys:
        pod, where = ledger.remove(k)
        sched.remove(where)
        dest = sched.place(pod, exclude=exclude)
        if dest is None or (budget is not None and not budget(pod, where, dest)):
            sched.commit(where, pod)
            ledger.add(pod, where)
            return _undo(sched, ledger, done)
        newly_used |= {(dest.node, j) for j in dest.slots if s.gpu_free[dest.node, j] == MILLI}
        if dest.node not in touched:
            touched.append(dest.node)
            before = tuple(np.concatenate(pair) for pair in zip(before, frag.rows(s, [dest.node]), strict=True))
        sched.commit(dest, pod)
        done.append((ledger.add(pod, dest), pod, where, dest))
    freed = (1 if s.gpu_free[node, slot] == MILLI else 0) - len(newly_used)
    if freed <= 0 or (frag.per_model(s, frag.rows(s, touched)) > frag.per_model(s, before) + 1e-6).any():
        return _undo(sched, ledger, done)
    reason = f"consolidate GPU {slot} of node {node}"
    return [Move(pod, where, dest, reason, freed / len(done)) for _, pod, where, dest in done]


def _undo(sched: Scheduler, ledger: Ledger, done: list[tuple[int, PodRequest, Placement, Placement]]) -> list[Move]:
    """Put the pods of `done` (ledger key, pod, source, target) back where they were; no moves."""
    for key, pod, source, target in reversed(done):
        ledger.remove(key)
        sched.remove(target)
        sched.commit(source, pod)
        ledger.add(pod, source)
    return []
