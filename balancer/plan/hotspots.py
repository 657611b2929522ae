"""Hotspot flattening: find hot GPUs with hysteresis, then move work off them, or throttle, or shrink training.

Detection (`detect`, `HotspotState`, `hot_nodes`: a GPU is an active hotspot after `hotReadings` hot readings in a
row and released after `coolReadings` cool ones, power capping at the default limit counting as hot) is
`balancer.plan.hotspot_detect`, re-exported here. A hotspot held by power capping alone while thermally cool
(`power_only`) may still have its work moved where the simulation finds a gain, but its node is not tainted.

For each active hotspot, hottest first, the proposals are, in order of preference:

1. migrate a movable workload to the coolest GPU that fits (model allowed, milli-GPUs and memory free, not on a
   hot or tainted node, `targetHeadroomC` below slowdown, no fatal XID and memory healthy: no uncorrectable ECC
   error since its reset, no row remap pending or failed, not a node the actuator lately refused it as a target:
   `Room.excluded`, `balancer.plan.planner`'s "Refused targets"), reserving it in the working arrays so two proposals
   never pick the same room; at most `maxConcurrentMigrationsPerNode` per source node per cycle;
2. otherwise lower the power limit just enough to bring the projected temperature under the hot line
   (never below max(GPU minimum, `minPowerFraction` x TDP));
3. if even the floor is too hot, shrink one low-priority elastic training job by a worker.

Nodes with a thermal hotspot are tainted so replacements land elsewhere, but never the last that take GPU work: when
every such node is hot, the coolest stays open (`kept_open`, `balancer.plan.hotspot_detect`'s "The last open node"),
its taint taken away if it had one, though no migration targets it; when they cool the taint, power limits and
shrunk jobs are given back. A hot taint read from a node before this controller could have set one (its first
`hotReadings` readings: it was restarted, or has just become the leader) is its predecessor's and is kept with the
same hysteresis (`HotspotState.inherited`): every GPU of the node holds it, as an active hotspot would, until it has
had `coolReadings` cool readings, so a GPU left in the warm band between the cool and hot lines does not get its
node reopened by a restart. A power limit is given back to the GPU's own default (`SetPowerLimit.give_back`), for
every GPU gputide capped: those the planner state remembers and those the snapshot's nodes record
(`gputide_caps`), so what a previous controller or leader throttled is not left capped with nobody owning it. So are a
shrunk job's workers (`shrunk_jobs`, `balancer.plan.shrink_records`): the shrink is recorded on the job
(`ScaleTraining.shrunk_from`, `Workload.shrunk_from`) and given back from either record; a job resized since by
someone else is theirs (the record is void and dropped), a job back at its size before the shrink is done, and a job
gone from the snapshot is forgotten. Gains are not guessed here: `simulate_plan`
measures each proposal's change of the objective with the same projection and drops those that do not help.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

import numpy as np

from balancer.admission import eviction_room, spend
from balancer.config import BalancerPolicy
from balancer.model import (
    Action,
    ClusterSnapshot,
    Migrate,
    ScaleTraining,
    SetPowerLimit,
    TaintNode,
    Workload,
    WorkloadClass,
)
from balancer.plan.hotspot_detect import (  # noqa: F401  (re-exported: the planner's hotspots.detect, ...)
    DEFAULT_LIMIT_TOLERANCE_W,
    HW_POWER_BRAKE,
    POWER_CAP_BITS,
    HotspotState,
    detect,
    hot_nodes,
    kept_open,
    node_margins,
    on_nodes,
    power_capped_at_default,
)
from balancer.plan.shrink_records import shrunk_jobs  # noqa: F401  (the planner's hotspots.shrunk_jobs)
from balancer.plan.simulate import Projection
from balancer.unavailable import short_now

_MOVABLE_CLASSES = frozenset((WorkloadClass.INFERENCE, WorkloadClass.TRAINING, WorkloadClass.BATCH))


def _movable(w, policy: BalancerPolicy) -> bool:
    return (w.movable and not w.protected and w.namespace not in policy.safety.protected_namespaces
            and w.workload_class in _MOVABLE_CLASSES)


def propose(snapshot: ClusterSnapshot, policy: BalancerPolicy, state: HotspotState, proj: Projection,
            tainted: frozenset[str], throttled: Mapping[str, float], shrunk: Mapping[str, int],
            refused: frozenset[str] = frozenset(), held: frozenset[str] = frozenset(), *,
            excluded: Mapping[str, np.ndarray] | None = None, keep_open: str | None = None) -> list[Action]:
    """Proposals for active hotspots and give-backs for cooled ones (gains are filled in by simulation). `refused`:
    workloads whose migration was recently refused or failed; their GPUs are throttled instead. `held`: shrunk jobs
    another planner holds smaller still (co-location): their workers are given back only after its own give-back.
    `excluded`: {workload: positions of nodes it may not be moved to} (targets the actuator refused lately).
    `keep_open`: the hot node the taint leaves open, the last that takes GPU work (`hotspot_detect.kept_open`):
    not tainted, its taint taken away; still no migration's target."""
    s = snapshot
    actions: list[Action] = []
    hot_node_set = hot_nodes(s, state)
    if policy.hotspots.taint_hot_nodes:
        actions += _taints(s, hot_node_set, tainted, keep_open)
    on_gpu = _placed_on(s, state.active)
    if state.active.any():
        room = Room.start(s, policy, state, proj, hot_node_set | tainted, excluded)
        actions += _relieve(s, policy, state, proj, room, on_gpu, shrunk, refused)
    actions += _give_back_power(s, proj, state, policy, throttled)
    # a node no longer hot (its inherited taint included: `HotspotState.inherited`) is opened again
    actions += [TaintNode(node=n, remove=True, reason="node cooled") for n in sorted(tainted - hot_node_set)]
    # not yet cool: a hotspot, an inherited taint, or a hot reading a restarted controller has not counted out yet
    if not shrunk:
        return actions
    warm = np.flatnonzero(state.active | state.inherited | (state.hot_streak > 0))
    busy_jobs = {w.owner for g in warm.tolist() for w in s.workloads_on(g)}
    return actions + _give_back_workers(proj, shrunk, busy_jobs | held)


def _taints(s: ClusterSnapshot, hot: frozenset[str], tainted: frozenset[str], keep_open: str | None) -> list[Action]:
    """A hot taint for each hot node not tainted yet but `keep_open`, whose own taint, if any, is taken away."""
    out: list[Action] = [TaintNode(node=n, reason="node has a GPU near its slowdown temperature")
                         for n in sorted(hot - tainted - {keep_open})]
    if keep_open in tainted:
        margin = node_margins(s)[keep_open]
        out.append(TaintNode(node=keep_open, remove=True, kept_open=True,
                             reason=f"kept open: every other node that takes GPU work is hot or closed, this is the "
                                    f"coolest (its hottest GPU {margin:.1f} C below slowdown)"))
    return out


def _placed_on(s: ClusterSnapshot, gpus: np.ndarray) -> dict[int, list[str]]:
    """{GPU: the workloads placed on it} for the GPUs `gpus` marks."""
    out: dict[int, list[str]] = {}
    for name, placed in s.placements.items() if gpus.any() else ():
        for g in placed:
            if gpus[g]:
                out.setdefault(g, []).append(name)
    return out


@dataclass
class Room:
    """This cycle's working copy of where work may still go, used up as migrations are proposed, so two proposals
    never pick the same room and the per-node, per-owner and PodDisruptionBudget limits count them all."""

    ok_target: np.ndarray
    free_milli: np.ndarray
    free_mem: np.ndarray
    per_node: np.ndarray
    per_owner: dict[str, int] = field(default_factory=dict)
    spent: dict[str, int] = field(default_factory=dict)   # migrations proposed this cycle per PodDisruptionBudget
    moved: dict[str, int] = field(default_factory=dict)   # workloads proposed to move -> their target node's position
    # workload -> positions of the nodes it may not be moved to (targets the actuator refused it lately)
    excluded: Mapping[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def start(cls, s: ClusterSnapshot, policy: BalancerPolicy, state: HotspotState, proj: Projection,
              blocked: frozenset[str], excluded: Mapping[str, np.ndarray] | None = None) -> Room:
        node_blocked = on_nodes(s, blocked)
        ok_target = (~state.active & ~node_blocked & s.healthy
                     & (proj.temp <= s.slowdown_temp_c - policy.hotspots.target_headroom_c))
        return cls(ok_target, 1000 - proj.milli, proj.mem_total - proj.mem, np.zeros(len(s.nodes), np.int64),
                   excluded=excluded or {})

    def take(self, s: ClusterSnapshot, w: Workload, source_node: int, target: tuple[int, ...]) -> None:
        t = np.asarray(target)
        self.moved[w.name] = int(s.node_index[t[0]])
        self.free_milli[t] -= w.gpu_milli
        self.free_mem[t] -= w.gpu_memory_mib
        self.per_node[source_node] += 1
        self.per_owner[w.owner or w.name] = self.per_owner.get(w.owner or w.name, 0) + 1
        self.per_node[s.node_index[t[0]]] += 1
        spend(self.spent, eviction_room(s.disruption_budgets, w, self.spent)[0])


def _relieve(s: ClusterSnapshot, policy: BalancerPolicy, state: HotspotState, proj: Projection, room: Room,
             on_gpu: Mapping[int, list[str]], shrunk: Mapping[str, int], refused: frozenset[str]) -> list[Action]:
    """For each active hotspot, hottest first: one migration off it, else throttling (and maybe a shrink)."""
    out: list[Action] = []
    active = state.active
    for g in np.flatnonzero(active)[np.argsort(-proj.temp[active])]:
        names = on_gpu.get(int(g), ())
        move = _migrate_from(s, policy, state, proj, room, int(g), names, refused) if policy.hotspots.migrate else None
        if move is not None:
            out.append(move)   # one migration per GPU per cycle; the next cycle sees the effect
        elif policy.throttling.enabled:
            out += _throttle(s, policy, proj, int(g), names, shrunk)
    return out


def _migrate_from(s: ClusterSnapshot, policy: BalancerPolicy, state: HotspotState, proj: Projection, room: Room,
                  g: int, names: Sequence[str], refused: frozenset[str]) -> Migrate | None:
    """A migration of the largest workload on hot GPU `g` that may move and has a target, its room taken."""
    node = s.node_index[g]
    limit = policy.safety.max_concurrent_migrations_per_node
    for name in sorted(names, key=lambda n: -s.workload_by_name[n].gpu_milli):
        w = s.workload_by_name.get(name)
        if (w is None or room.per_node[node] >= limit or name in refused
                or not may_move(s, w, policy, room.per_owner, room.spent)):
            continue
        target = _pick_target(s, policy, w, room.ok_target, room.free_milli, room.free_mem, proj.temp,
                              room.per_node < limit, room.moved, room.excluded.get(name))
        if target is not None:
            room.take(s, w, node, target)
            return Migrate(workload=name, source_gpus=tuple(s.placements[name]), target_gpus=target,
                           target_node=s.gpus[target[0]].node, reason=_why(s, state, g))
    return None


def _give_back_workers(proj: Projection, shrunk: Mapping[str, int], busy_jobs: set[str]) -> list[Action]:
    """Workers given back to the jobs a hotspot shrank, once none of theirs sits on an active hotspot."""
    out: list[Action] = []
    for job, workers in sorted(shrunk.items()):
        now = proj.workers.get(job, 0)
        if job not in busy_jobs and now < workers:
            out.append(ScaleTraining(job=job, workers=workers, previous_workers=now, shrunk_from=0,
                                     reason="hotspot cleared: give the workers back"))
    return out


def gputide_caps(snapshot: ClusterSnapshot) -> dict[str, float]:
    """{uuid: watts} of the power caps gputide holds on the snapshot's GPUs, as their nodes record them
    (`Node.power_caps`, the durable `gputide.io/power-caps` annotation): what a restarted controller, or a replica
    that has just become the leader, must give back, as the planner state of the one that throttled them is gone. An
    entry naming a GPU on another node than its own is a stale one that node's next write drops."""
    caps: dict[str, float] = {}
    for n in snapshot.nodes:
        for uuid, watts in n.power_caps.items():
            g = snapshot.gpu_by_uuid.get(uuid)
            if g is not None and snapshot.gpus[g].node == n.name:
                caps[uuid] = watts
    return caps


def _give_back_power(s: ClusterSnapshot, proj: Projection, state: HotspotState, policy: BalancerPolicy,
                     throttled: Mapping[str, float]) -> list[Action]:
    """Give-backs for the GPUs gputide throttled (`throttled`) that have cooled: no hotspot, and `coolReadings` cool
    readings in a row (not merely "not active yet": the streaks of a restarted controller start from nothing, and a
    GPU still hot must not get its power back before they have counted). The GPU goes back to its own default limit
    (`give_back`; `watts`, the catalogue TDP, is what the simulation projects)."""
    cooled = ~state.active & (state.cool_streak >= policy.hotspots.cool_readings)
    out: list[Action] = []
    for uuid in sorted(throttled):
        g = s.gpu_by_uuid.get(uuid)
        if g is not None and cooled[g] and s.power_limit_w[g] < proj.tdp[g] - 1:
            out.append(SetPowerLimit(gpu=g, uuid=uuid, node=s.gpus[g].node, watts=float(proj.tdp[g]),
                                     previous_watts=float(s.power_limit_w[g]), give_back=True,
                                     reason="GPU cooled: unthrottle"))
    return out


def _why(s: ClusterSnapshot, state: HotspotState, g: int) -> str:
    where = f"GPU {s.gpus[g].node}/{s.gpus[g].slot}"
    if state.power_only[g]:
        return f"{where} power-capped at its default limit ({s.power_w[g]:.0f} of {s.power_limit_w[g]:.0f} W)"
    return f"{where} at {s.temperature_c[g]:.0f} C, slowdown {s.slowdown_temp_c[g]:.0f} C"


def may_move(s: ClusterSnapshot, w, policy: BalancerPolicy, per_owner: Mapping[str, int],
              spent: Mapping[str, int]) -> bool:
    """Whether `w` may be migrated this cycle: movable, its owner within `maxUnavailablePerWorkload` with this
    cycle's proposals (`per_owner`) and its replicas not running (`balancer.unavailable.short_now`, the guard's
    count), and every PodDisruptionBudget covering it with a disruption left after this cycle's proposals (a move the
    guard and the Eviction API would refuse is not proposed, so the hot GPU is throttled instead).

    What the guard counts from its ledger the planner does not see: the migrations still settling, and the owners
    migrated within `cooldownS`, whose missing replicas a forgotten node does not excuse there. The planner takes
    none as moving (a forgotten node's GPUs excuse every service's), so the guard may still refuse such a move, once:
    refused, it is throttled the next cycle (`planner.refuse`). Taking every owner as moving would throttle, for as
    long as a node stays dark, every hot GPU of a service with a replica there whose move the guard would accept.
    The migrations in flight per node (`maxConcurrentMigrationsPerNode`) are the guard's alone too: the planner
    learns them only from a refusal for the target node alone (`MaxConcurrentMigrations.target_only`), which keeps the
    pod off that node and off every node whose landing replacements alone hold it at the limit (`full_nodes`) for
    `refusedTargetRetryS` at most, each only while the guard still counts it full, the refused target included
    (`planner.still_full`): the next cycle proposes another target or, with none, throttles. Refused for its own node
    (or by its owner's limits), it is not moved for `refusedRetryS`."""
    owner = w.owner or w.name
    return (_movable(w, policy)
            and per_owner.get(owner, 0) + short_now(s).get(owner, 0) < policy.safety.max_unavailable_per_workload
            and eviction_room(s.disruption_budgets, w, spent)[1] is None)


def may_move_now(s: ClusterSnapshot, ws: Sequence[Workload], policy: BalancerPolicy) -> np.ndarray:
    """`may_move(s, w, policy, {}, {})` of each of `ws` (nothing proposed yet): `_movable`'s tests one C-level pass
    per attribute; with nothing spent, only a PodDisruptionBudget with no disruption left at all can refuse, and only
    an owner with replicas not running (`short_now`) can be past `maxUnavailablePerWorkload`."""
    def test(attr: str, holds) -> np.ndarray:
        return np.fromiter(map(holds, map(attrgetter(attr), ws)), dtype=bool, count=len(ws))

    ok = (test("movable", bool) & ~test("protected", bool) & test("workload_class", _MOVABLE_CLASSES.__contains__)
          & ~test("namespace", frozenset(policy.safety.protected_namespaces).__contains__))
    exhausted = [b for b in s.disruption_budgets or () if b.disruptions_allowed < 1]   # eviction_room's, spent {}
    if exhausted:
        ok &= np.fromiter((eviction_room(exhausted, w, {})[1] is None for w in ws), dtype=bool, count=len(ws))
    limit = policy.safety.max_unavailable_per_workload
    if short := short_now(s):
        ok &= np.fromiter((short.get(w.owner or w.name, 0) < limit for w in ws), dtype=bool, count=len(ws))
    return ok & (limit >= 1)


def _pick_target(s, policy, w, ok_target, free_milli, free_mem, temp, node_room, moved,
                 off: np.ndarray | None = None) -> tuple[int, ...] | None:
    """GPUs for `w`'s replacement: cool, with room, on a node with migrations to spare (`node_room`) that admits it,
    its pod affinity judged with this cycle's earlier proposals (`moved`) where they are going, and not one of the
    nodes at positions `off` (targets the actuator refused it lately)."""
    fit = ok_target & (free_milli >= w.gpu_milli) & (free_mem >= w.gpu_memory_mib)
    nodes_ok = node_room & s.admits(w.node_rules) & s.affinity_admits(w, moved)
    if off is not None:
        nodes_ok[off] = False
    fit &= nodes_ok[s.node_index]
    if w.allowed_models is not None:
        fit &= np.isin(s.gpu_models, list(w.allowed_models))
    cand = np.flatnonzero(fit)
    if cand.size < max(w.gpus, 1):
        return None
    pw = policy.placement
    span = max(float(np.ptp(temp[cand])), 1.0)
    score = pw.thermal * (temp[cand] - temp[cand].min()) / span - pw.binpack * (1000 - free_milli[cand]) / 1000
    if w.gpus <= 1:
        return (int(cand[np.argmin(score)]),)
    best, best_score = None, np.inf
    nodes = s.node_index[cand]
    for node in np.unique(nodes):  # a multi-GPU worker needs all its GPUs on one node
        mine = np.flatnonzero(nodes == node)
        if mine.size >= w.gpus:
            pick = mine[np.argsort(score[mine])[: w.gpus]]
            if score[pick].mean() < best_score:
                best, best_score = tuple(int(c) for c in cand[pick]), float(score[pick].mean())
    return best


def _throttle(s, policy, proj: Projection, g: int, names, shrunk: Mapping[str, int]) -> list[Action]:
    tp = policy.throttling
    floor = max(proj.pmin[g], tp.min_power_fraction * proj.tdp[g])
    target_temp = proj.hot_line[g] - 1.0
    need = (proj.temp[g] - target_temp) / proj.r[g]
    watts = float(np.clip(proj.power[g] - need, floor, proj.tdp[g]))
    out: list[Action] = []
    if watts < s.power_limit_w[g] - 5:
        out.append(SetPowerLimit(gpu=g, uuid=s.gpus[g].uuid, node=s.gpus[g].node, watts=round(watts, 1),
                                 previous_watts=float(s.power_limit_w[g]),
                                 reason=f"no migration target: cap power to keep {s.temperature_c[g]:.0f} C GPU "
                                        f"under {target_temp:.0f} C"))
    if (watts <= floor + 1e-6 and tp.shrink_training
            and proj.power[g] - (proj.temp[g] - target_temp) / proj.r[g] < floor):
        for name in names:
            w = s.workload_by_name.get(name)
            if (w and w.workload_class == WorkloadClass.TRAINING and not w.protected and w.elastic_max > 0
                    and w.priority <= tp.max_priority_to_shrink and w.owner not in shrunk):
                now = proj.workers.get(w.owner, 0)
                if now - 1 >= max(w.elastic_min, 1):
                    out.append(ScaleTraining(job=w.owner, workers=now - 1, previous_workers=now, shrunk_from=now,
                                             reason="throttling cannot cool the GPU: shrink low-priority training"))
                    break
    return out
