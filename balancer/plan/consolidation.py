"""Consolidation in the reconcile loop: bounded defragmentation migrations when fragmentation crosses a threshold.

Fragmentation (FGD's expected fragmentation of the idle capacity against the observed workload mix, exported as
`gputide_fragmentation_ratio{modelName}` and `gputide_unallocatable_gpus{modelName}`) grows as shared GPUs empty
unevenly: two GPUs each half used by 500-milli pods hold a whole GPU that no whole-GPU pod can take. With
`defrag.enabled`, when a GPU model's fragmentation ratio reaches `fragmentationThreshold` and at least
`minUnallocatableGpus` of its idle GPUs are fragmented, the planner asks `balancer.plan.defrag.plan_consolidation`
(the same engine `gputide place --defrag` replays) for at most `maxMovesPerCycle` moves that empty the least-used
shared GPUs of those models onto partly used ones, and proposes them as `Migrate` actions through the same safety
chokepoint as every other action. What a move must pass, before the guard's budgets:

* only in a calm cycle: no hotspot to relieve and no other action kept this cycle (consolidation is housekeeping;
  it never competes with cooling or SLO work for the migration budget);
* the workload may move as a hotspot migration may (`hotspots.may_move`: movable, not protected, its owner within
  `maxUnavailablePerWorkload`, a disruption left in every PodDisruptionBudget covering it), was not refused or failed
  recently, and is not training: a training worker's move restarts its synchronous job from its last checkpoint, a
  price fragmentation does not pay; nor a pod of a service whose demand is unknown (`ClusterSnapshot.demand_unknown`:
  a stalled vLLM pod, pods not reporting; under capacity shifting, a profiled one with no serving series at all while
  its pods run too, `capacity_loop.with_unseen`): a degraded service whose load nobody sees is not restarted for
  housekeeping (before, its pods were moved as any; a hotspot migration, for thermal safety, still moves them);
* the target GPU is a migration target a hotspot migration could use (not hot, no fatal XID, not on a tainted
  or hot node, nor on one the actuator lately refused the workload as a target, the target headroom below slowdown),
  with the GPU memory and the node's per-node migration limit free, on a node whose taints, node selector, node affinity
  and the pod's required pod (anti-)affinity admit it;
* a GPU is emptied whole or not at all, and only when that frees more GPUs than the moves start using
  (`plan_consolidation`); the moves of one GPU are then simulated together on the cycle's projection and kept only
  if they fit and leave the objective no worse than their migration cost (no thermal or SLO price), and not when they
  go to a node that a dropped GPU's moves were to leave (the engine may have fitted them in the CPU or memory those
  would have freed, which the projection does not count).

A consolidation migration's `expected_gain` is the GPUs it frees, shared over the moves that free them.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from balancer.config import BalancerPolicy
from balancer.model import ClusterSnapshot, Migrate
from balancer.plan import hotspots
from balancer.plan.defrag import Move, PodsByNode, plan_consolidation
from balancer.plan.fleet_state import SnapshotState, gpu_model_codes, gpu_slots, snapshot_state
from balancer.plan.placement.state import MILLI, Placement, PodRequest
from balancer.plan.simulate import MIGRATION_COST, Projection


def fragmented_models(frag: Mapping[str, Mapping[str, float]], policy: BalancerPolicy) -> list[str]:
    """GPU models whose fragmentation crosses the policy's threshold (ratio and unallocatable GPUs both)."""
    d = policy.defrag
    return sorted(m for m, f in frag.items() if f["fragmentation_ratio"] >= d.fragmentation_threshold
                  and f["unallocatable_gpus"] >= d.min_unallocatable_gpus)


def propose(s: ClusterSnapshot, policy: BalancerPolicy, state: hotspots.HotspotState, proj: Projection,
            blocked: frozenset[str], refused: frozenset[str], excluded: Mapping[str, np.ndarray] | None = None
            ) -> tuple[list[Migrate], float]:
    """Consolidation migrations for this cycle, simulated on `proj` (left as it came), and the objective change
    they bring. `blocked`: hot and tainted nodes (no target there); `excluded`: {workload: positions of nodes it may
    not be moved to} (targets the actuator refused lately: the engine's filters leave them out)."""
    if not policy.defrag.enabled or not policy.hotspots.migrate:
        return [], 0.0
    view = snapshot_state(s)
    models = fragmented_models(view.fragmentation, policy)
    if not models:
        return [], 0.0
    slot_gpu = np.full(view.state.gpu_free.shape, -1, dtype=np.int64)
    slot_gpu[s.node_index, gpu_slots(s)] = np.arange(s.n_gpus)
    placed = _candidates(s, policy, view, set(models), refused, blocked, excluded or {})
    room = hotspots.Room.start(s, policy, state, proj, blocked)
    moves = plan_consolidation(view.state, placed, view.mix, policy.defrag.max_moves_per_cycle, "gputide",
                               _budget(s, policy, room, slot_gpu))
    return _simulate(s, proj, moves, slot_gpu, models)


def _candidates(s: ClusterSnapshot, policy: BalancerPolicy, view: SnapshotState, models: set[str],
                refused: frozenset[str], blocked: frozenset[str], excluded: Mapping[str, np.ndarray]) -> PodsByNode:
    """(request, where it runs) of every workload consolidation may move: a share of one partly used GPU (the only
    GPUs it empties; a pod on a full or whole GPU stays in the state as used capacity) of a fragmented model, not
    on a hot or tainted node, movable, not training, not refused lately, not of a service whose demand is unknown.
    The cheap tests are vectorised first: a large fleet has tens of thousands of workloads and few on partly used
    GPUs; the requests are built node by node, for the nodes `plan_consolidation` looks at (a few, as it stops at its
    move budget)."""
    c = view.cols
    if not len(c.idx):
        return PodsByNode(0, lambda node: ())
    slots, model = gpu_slots(s), gpu_model_codes(s)
    used = MILLI - view.state.gpu_free[s.node_index, slots]
    gpu_ok = (used > 0) & (used < MILLI) & np.isin(model, [i for i, m in enumerate(view.state.models) if m in models])
    if blocked:
        gpu_ok &= ~hotspots.on_nodes(s, blocked)
    first = c.idx[np.minimum(np.cumsum(c.counts) - c.counts, len(c.idx) - 1)]   # a placed workload's first GPU
    rows = np.flatnonzero((c.counts == 1) & (c.milli > 0) & (c.cls != 1) & gpu_ok[first])   # cls 1: training
    ws = list(map(s.workloads.__getitem__, rows.tolist()))
    ok = hotspots.may_move_now(s, ws, policy)
    if refused:
        ok &= np.fromiter((w.name not in refused for w in ws), dtype=bool, count=len(ws))
    if s.demand_unknown:   # a service whose demand is unknown: its pods are not restarted for housekeeping
        ok &= np.fromiter((w.owner not in s.demand_unknown for w in ws), dtype=bool, count=len(ws))
    rows = rows[ok]
    gpu = first[rows]
    node = s.node_index[gpu]
    order = np.argsort(node, kind="stable")   # each node's candidates in snapshot order: positions ascending
    bounds = np.searchsorted(node[order], np.arange(len(s.nodes) + 1))

    def on(n: int) -> list[tuple[int, PodRequest, Placement]]:
        out = []
        for k in order[bounds[n]:bounds[n + 1]].tolist():
            w = s.workloads[int(rows[k])]
            req = PodRequest(cpu_milli=w.cpu_milli, memory_mib=w.memory_mib, num_gpu=1, gpu_milli=w.gpu_milli,
                             allowed_models=None if w.allowed_models is None else tuple(sorted(w.allowed_models)),
                             name=w.name, excluded_nodes=tuple(excluded[w.name].tolist()) if w.name in excluded else ())
            out.append((k, req, Placement(n, (int(slots[gpu[k]]),), w.gpu_milli, w.cpu_milli, w.memory_mib)))
        return out

    return PodsByNode(len(rows), on)


def _budget(s: ClusterSnapshot, policy: BalancerPolicy, room: hotspots.Room, slot_gpu: np.ndarray):
    """The consolidation engine's per-move callback: the checks of a hotspot migration's target (module docstring),
    the room each accepted move takes kept (a move rolled back later keeps it taken: stricter, never looser)."""
    limit = policy.safety.max_concurrent_migrations_per_node

    def allow(pod: PodRequest, source: Placement, target: Placement) -> bool:
        w = s.workload_by_name[pod.name]
        t = slot_gpu[target.node, list(target.slots)]
        if (t < 0).any() or room.per_node[source.node] >= limit or room.per_node[target.node] >= limit:
            return False
        if not hotspots.may_move(s, w, policy, room.per_owner, room.spent):
            return False
        if not (room.ok_target[t].all() and (room.free_mem[t] >= w.gpu_memory_mib).all()):
            return False
        if not (s.admits(w.node_rules)[target.node] and s.affinity_admits(w, room.moved)[target.node]):
            return False
        room.take(s, w, source.node, tuple(int(g) for g in t))
        return True

    return allow


def _simulate(s: ClusterSnapshot, proj: Projection, moves: list[Move], slot_gpu: np.ndarray,
              models: list[str]) -> tuple[list[Migrate], float]:
    """The moves as `Migrate`s, one emptied GPU's moves at a time, kept only together and only if they fit and cost
    no more than their migrations on the projection's objective. The engine planned each GPU's moves on the state the
    earlier ones left, and the projection does not count a node's CPU and memory: once a GPU's moves are dropped, so
    are those of a later GPU that go to a node they were to leave (they may fit only in the CPU or memory the
    dropped moves would have freed there), and then those that go to the nodes these were to leave."""
    groups: dict[str, list[Move]] = {}
    for m in moves:
        groups.setdefault(m.reason, []).append(m)   # one reason per GPU emptied
    start = proj.checkpoint()
    kept: list[Migrate] = []
    before = running = proj.running_objective()
    left: set[int] = set()   # nodes dropped moves were to leave: their CPU and memory stay taken
    for group in groups.values():
        if left & {m.target.node for m in group}:
            left |= {m.source.node for m in group}
            continue
        mark = proj.checkpoint()
        actions = [_migrate(s, m, slot_gpu, models) for m in group]
        if any(proj.apply(a) is not None for a in actions) or \
                proj.running_objective() - running > MIGRATION_COST * len(actions) + 1e-9:
            proj.rollback(mark)
            left |= {m.source.node for m in group}
            continue
        running = proj.running_objective()
        kept += actions
    proj.rollback(start)
    return kept, running - before


def _migrate(s: ClusterSnapshot, m: Move, slot_gpu: np.ndarray, models: list[str]) -> Migrate:
    target = tuple(int(g) for g in slot_gpu[m.target.node, list(m.target.slots)])
    src = s.gpus[int(slot_gpu[m.source.node, m.source.slots[0]])]
    return Migrate(workload=m.pod.name, source_gpus=tuple(s.placements[m.pod.name]), target_gpus=target,
                   target_node=s.gpus[target[0]].node, expected_gain=round(m.expected_gpus_freed, 6),
                   group=f"consolidate {src.node}/{src.slot}",   # a GPU half emptied frees nothing
                   taint_source=False,   # a cool node: its freed GPU is for the next pod that needs it whole
                   reason=f"consolidate: {', '.join(models)} fragmented; empties GPU {src.node}/{src.slot} "
                          f"onto {s.gpus[target[0]].node}/{s.gpus[target[0]].slot}")
