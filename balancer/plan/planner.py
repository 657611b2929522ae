"""The planner: `plan(snapshot, forecasts, policy, state) -> (Plan, new_state)`, a pure function.

One call updates the hysteresis streaks, asks the hotspot and co-location planners for proposals, and runs
them through `simulate_plan` on a projection of the snapshot: an action is kept only if it fits (nothing
over-committed, every workload keeps a place to run) and lowers the objective; its `expected_gain` is the
objective change the simulation measured. The result is a `Plan` with objective before and after and notes
for the dropped proposals. No clock, no I/O: everything the planner remembers between cycles is in the
immutable `PlannerState` it returns, and `acknowledge(state, applied_actions, snapshot)` folds in what the
actuator really did (a power cap, a taint or a shrink the controller must later give back). What must outlive the
process is read back from the snapshot every cycle, not from memory: gputide's hot taint on a node
(`hot_tainted`) and the power caps gputide holds on a node (`hotspots.gputide_caps`), so a restarted controller or a
replica that has just become the leader gives back what an earlier one tainted or throttled. Which nodes are tainted
is what the snapshot says, not what the controller remembers doing: a person may remove the taint, and a node still
hot must then be tainted again, by this controller or any other. A taint acknowledged last cycle counts once more
while the node list may not show it yet (`PlannerState.tainted`); a removal acknowledged counts done while the list
still shows the taint it took away, with the expiry it had (`PlannerState.untainted`), so it is not proposed, carried
out and counted in `gputide_actions_total` again (a kept-open node's removal was, each cycle the list lagged); a
taint with no expiry is judged afresh each cycle: a person may have written it again.

Renewal. The Kubernetes hot taint expires (`gputide.io/hot-until`, `HOT_TAINT_TTL_S` = 15 minutes after it was
written, `Node.hot_until`) and the actuator's housekeeping then removes it: the safety net for a controller that dies
while a node is tainted. A live controller keeps the taint of a node it still counts hot (its active hotspots and
inherited taints, with the hysteresis that decides when a node cooled) by renewing it once its expiry is less than
`RENEW_WITHIN_S` (half the TTL) away: `TaintNode(renew=True)`, which the actuator writes as a fresh expiry. Half the
TTL leaves room for many missed cycles before the taint could lapse, and renews a hot node about twice per TTL. A
node list that lags a write still shows the expiry the write replaced: while it does (`PlannerState.taint_written`,
the expiry each acknowledged write found), the node is not renewed again; once it shows any other, that one is
judged, however many cycles (a fail-static hold, a standby) passed since the write. A
renewal changes nothing the simulation measures, so it bypasses `simulate_plan` (expected gain 0) and the safety
guard's budgets (`SafetyGuard`: it is not counted, cooled down or gain-checked; an emergency stop still holds it). A
taint whose expiry is unknown (no annotation) never expires and is not renewed.

Consolidation. In a calm cycle (no active hotspot, no hotspot or co-location action kept), `plan` asks
`balancer.plan.consolidation` for the bounded defragmentation migrations the policy's `defrag` section allows
(off by default); they are simulated on the same projection and go through the safety guard like any migration.

Refused targets. The actuator refuses some migrations for their target alone, by what the planner does not model:
the pod's hard topology spread constraints there, the target's GPUs held for others (the secondary scheduler's
preemption and anti-starvation holds, another owner's move), the pod's own rules as the node reads now. Proposed
again, the same move was refused every cycle. The loop folds such refusals in with `refuse(..., targets=...)`
(which ones: the actuator's result says so, `ActionResult.refused`), and for `hotspots.refusedTargetRetryS` the
workload's moves skip that node: the hotspot planner's target filter and the consolidation engine's
(`PodRequest.excluded_nodes`) leave it out, so the next-best target is chosen, or, where there is none, the hot GPU is
throttled. The guard's `maxConcurrentMigrationsPerNode` refusal for the target node alone
(`MaxConcurrentMigrations.target_only`: the pod's own node and its owner's limits allow the move, the target holds
a migration still settling, one the same review accepted, or a replacement still landing past `migrationSettleS`)
is folded in the same way, for the target and every node whose landing replacements alone hold it at that limit
(`full_nodes`): the planner does not count migrations in flight, and would propose the next such node. Each of those
nodes, the target too, is kept off only while the guard still counts it full (`full_targets`: the loop asks
`SafetyGuard.full_nodes` before planning, `still_full`), `refusedTargetRetryS` at most: the pod may go there again
from the first cycle the guard no longer counts it full, a target full only with migrations settling (or one the same
review accepted) once they settle, within `migrationSettleS`, a node a landing replacement held once that replacement
runs (or `cooldownS` after its move). A target full only through a move the same review accepted that then did not go
out (the fresh read before acting failed, the actuator refused it ...) is let go at that cycle's end: the loop asks
again then, on the ledger with what went out (`loop.Reconciler._unfilled`). A pair the actuator refused keeps its
whole `refusedTargetRetryS` whatever the guard counts (its cause is one the guard does not count), and a guard refusal
naming that node full meanwhile restarts it. Other failures, and the guard's other refusals, keep the workload from
moving at all for `hotspots.refusedRetryS` (`refused_moves`).

Held-back moves. A move the guard accepted that the hand-over held back (the safety ledger with its eviction could
not be saved for a successor: `balancer.ledger_handover`) is no refusal: it is kept off as one, its hot GPU throttled
instead, only while the ledger stays unsaved (`hold_back`, `held_moves`), and proposed again from the first cycle
whose start saved it (`ledger_saved`), `refusedRetryS` at most. Refused, it waited `refusedRetryS` (minutes) though
the ledger was saved a cycle later; forgotten, it was proposed and held back every cycle while the save kept failing
(a Lease the RBAC does not let it write), its hot GPU never throttled.
A capacity scale held back so (an inference scale-down that stops placed replicas, a loan) is no refusal either: the
capacity planner counts it made when it plans it, and it waits as made (not asked again each cycle) only while the
ledger stays unsaved (`held_scales`); the first cycle whose start saved it puts the service's first sighting back as
before the plan that proposed it, so that cycle plans it again. Counted made for good, as the guard's refusals are
(`loop.Reconciler._unsent`), it waited out the service's hold (`CapacityPolicy.min_hold_s`, 30 minutes) though the
ledger was saved a cycle later. It counts as made for loans alone: held, the service's last change stays the one before
that plan, and the scale's time is its first sighting (`plan_capacity` holds a loan from the later of the two), so the
latency net, which reads the last change (a step waits until it has taken effect, `settled`), steps at once. Counted
as its last change, the scale never sent blocked the net's step for the service's warm-up, no note saying why, its
p99 at the SLO's edge. A service changed since (a step went out: its first sighting no longer the held scale's) is
left as it is.

Refused scales. A service's scaling the actuator failed for good (FAILED: a Deployment another controller keeps, an
HPA KEDA generates, RBAC; `refuse(..., scales=...)`) is remembered for `safety.cooldownS` (`refused_scales`): the
capacity planner leaves that service alone meanwhile (`balancer.plan.capacity_loop`), rather than proposing the same
refused scale every cycle and shrinking training to make room for a growth that cannot happen.

Capped scales. A service's scale the actuator carried out short of what it asked (APPLIED, `ActionResult.capped_to`:
an HPA floor capped at its maxReplicas) is remembered with that cap, when it was met and how many times in a row
(`cap(...)`, `capped_scales`, `CapBelief`): the capacity planner holds the service to it for a while, longer each
time the same cap is met again (`balancer.plan.capacity_loop`), rather than shrinking training every cycle for
replicas that never start. A scale carried out in full above the cap (maxReplicas was raised) ends it.

A capacity planner wrapped around `plan` records its decision in `loaned_gpus` / `capacity_targets`, which the loop
publishes.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

import numpy as np

from balancer.actions import HOT_TAINT_TTL_S
from balancer.config import BalancerPolicy
from balancer.model import (
    Action,
    ClusterSnapshot,
    Forecast,
    Migrate,
    Node,
    Plan,
    ScaleInference,
    ScaleTraining,
    SetPowerLimit,
    TaintNode,
)
from balancer.plan import colocation, consolidation, hotspots
from balancer.plan.capacity import CapacityState
from balancer.plan.simulate import Projection, hot_tainted, simulate_plan

_EMPTY: Mapping = MappingProxyType({})
# a hot node's taint is renewed once its expiry is this close (see the module's docstring)
RENEW_WITHIN_S = HOT_TAINT_TTL_S / 2


@dataclass(frozen=True, slots=True)
class CapBelief:
    """What the actuator's caps of one service's scale say ("Capped scales"): it runs at most `cap` replicas, met
    `repeats` times in a row, the last at `since`. Both rules are said here once: a cap met again at the same bound
    counts once more, another bound starts again (`met`); a cap is believed for `first_s` after it was met, twice as
    long for each repeat, at most `horizon_s` (`believed_s`, `held_at`), and remembered, unbelieved, a `horizon_s`
    more to count it met again (`kept_at`); spec.replicas above it end it, if sampled since it was met (`raised_by`).
    `first_s` and `horizon_s` are the capacity planner's to say (`balancer.plan.capacity_loop`)."""

    cap: int
    since: float
    repeats: int = 1

    def met(self, cap: int, now: float) -> CapBelief:
        """The belief once the actuator capped the service's scale at `cap` again, at `now`."""
        return CapBelief(int(cap), now, self.repeats + 1 if int(cap) == self.cap else 1)

    def believed_s(self, first_s: float, horizon_s: float) -> float:
        """How long it is believed after `since`: `first_s`, doubled for each repeat, at most `horizon_s`."""
        return min(first_s * 2.0 ** min(self.repeats - 1, 32), horizon_s)

    def held_at(self, now: float, first_s: float, horizon_s: float) -> bool:
        """Still believed at `now`."""
        return now - self.since < self.believed_s(first_s, horizon_s)

    def kept_at(self, now: float, first_s: float, horizon_s: float) -> bool:
        """Still remembered at `now`: believed, or lapsed less than `horizon_s` ago."""
        return now - self.since < self.believed_s(first_s, horizon_s) + horizon_s

    def raised_by(self, spec_replicas: int, sampled_from: float) -> bool:
        """Whether the service's spec.replicas, sampled at `sampled_from` or later, say its HPA's maxReplicas was
        raised past the cap (which ends the belief): above the cap (the HPA keeps them at most maxReplicas), and
        sampled no earlier than the cap was met. One sampled before may be what the service ran before maxReplicas
        was lowered to the cap (a reading shows spec.replicas a scrape and a rule evaluation late): read as a raise, it
        ended a belief just learned, asked again in vain and counted the cap met afresh. Where the sample's time is
        unknown (an instant query answers its evaluation time), `sampled_from` is the reading's time less the most it
        may lag."""
        return spec_replicas > self.cap and sampled_from >= self.since


@dataclass(frozen=True)
class PlannerState:
    hotspots: hotspots.HotspotState = field(default_factory=hotspots.HotspotState)
    colocation: colocation.ColocationState = field(default_factory=colocation.ColocationState)
    # GPU uuid -> the power cap gputide holds on it (acknowledged throttles, and each cycle what the snapshot's nodes
    # record: `hotspots.gputide_caps`), until it is given back
    throttled: Mapping[str, float] = field(default_factory=lambda: _EMPTY)
    # nodes whose hot taint the actuator applied since the last plan: that plan's successor counts them tainted even if
    # its snapshot (a node list that may lag the write) does not show it yet; after that only the snapshot counts
    tainted: frozenset[str] = frozenset()
    # node -> the expiry its node showed when this controller's hot-taint write (add or renewal) was acknowledged (None:
    # no expiry, no taint), kept while the node list still shows that one: it lags the write (see the docstring)
    taint_written: Mapping[str, float | None] = field(default_factory=lambda: _EMPTY)
    # node -> the expiry its hot taint showed when this controller's removal of it was acknowledged, kept while the node
    # list still shows that taint: it lags the removal, and the node counts open (not removed again, nor counted again
    # in gputide_actions_total, nor renewed); once the list shows no hot taint, or another expiry (a later write), only
    # the snapshot counts. Only a taint with an expiry is remembered: one without (hand-written, no
    # gputide.io/hot-until) looks the same whether the list lags or a person wrote it again, and trusting it removed
    # would leave it in place for good while the node counted open (a migration target); its removal may repeat
    untainted: Mapping[str, float | None] = field(default_factory=lambda: _EMPTY)
    # the hot node the taint left open last cycle (`hotspot_detect.kept_open`): kept while it still takes work, so a
    # node list lagging its taint's removal does not move the choice to another node (both open, the note logged anew);
    # set only while that node is hot, so `plan`'s state says which node it is: the capacity plan lends none of its
    # idle GPUs (`capacity_loop.claims`)
    kept_open: str | None = None
    # training job -> workers before a hotspot shrink (acknowledged ones, and each cycle what the snapshot's jobs
    # record: `hotspots.shrunk_jobs`), until given back, resized by someone else or gone
    shrunk: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    # what a capacity planner decided, for the metrics (gputide_capacity_gpus{class="loaned"},
    # gputide_capacity_target_gpus{service}); `plan` keeps whatever a wrapping capacity planner put here
    loaned_gpus: int = 0
    capacity_targets: Mapping[str, int] | None = None
    # a wrapping capacity planner's own memory (`balancer.plan.capacity_loop`: its CapacityState)
    capacity: object = None
    capacity_split: Mapping[str, int] | None = None  # its last split: inference, training, loaned, idle GPUs
    # why the capacity planner holds this cycle (empty: it planned): its reasons, one metric label each
    capacity_holding: frozenset[str] = frozenset()
    # the profiled services whose unknown demand it holds for (NaN, or no series while their pods run) -> why, as its
    # snapshot's `demand_unknown` says (`capacity_loop.with_unseen`), which the loop logs: one
    # gputide_inference_demand_unknown series each, which GputideInferenceDemandUnknown reads
    demand_held: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    # workload -> when a migration of it was refused (guard) or failed (actuator): not proposed again for a while
    refused_moves: Mapping[str, float] = field(default_factory=lambda: _EMPTY)
    # (workload, node) -> when the actuator refused moving the workload to that node for a reason about the target
    # the planner does not model (see "Refused targets" in the docstring): its moves go elsewhere for a while
    refused_targets: Mapping[tuple[str, str], float] = field(default_factory=lambda: _EMPTY)
    # those of `refused_targets` the guard kept off as full (`MaxConcurrentMigrations.target_only`: the refused target
    # and its `full_nodes`): kept off only while the guard counts that node full (`still_full`); a pair not among them
    # is the actuator's, kept off for the whole `refusedTargetRetryS`
    full_targets: frozenset[tuple[str, str]] = frozenset()
    # those of `refused_moves` the hand-over held back, the ledger unsaved ("Held-back moves"): kept off only until it
    # is saved (`ledger_saved`); a workload not among them was refused, kept off for the whole `refusedRetryS`
    held_moves: frozenset[str] = frozenset()
    # service -> (the last change the capacity plan counted for its scale the hand-over held back, its first sighting
    # before that plan; None: none known), the ledger unsaved ("Held-back moves"): meanwhile its capacity memory has the
    # change before the plan as its last change and the held scale's as its first sighting (`hold_back`: a loan waits,
    # the latency net does not); its first sighting put back as before once the ledger is saved (`ledger_saved`), so the
    # scale is planned again then, not after the service's hold
    held_scales: Mapping[str, tuple[float, float | None]] = field(default_factory=lambda: _EMPTY)
    # service -> when the actuator failed scaling it for good ("Refused scales"): not scaled for a while
    refused_scales: Mapping[str, float] = field(default_factory=lambda: _EMPTY)
    # service -> what the actuator's caps of its scale say (`CapBelief`, "Capped scales"): no more asked for a while
    capped_scales: Mapping[str, CapBelief] = field(default_factory=lambda: _EMPTY)


def plan(snapshot: ClusterSnapshot, forecasts: Mapping[str, Forecast] | None, policy: BalancerPolicy,
         state: PlannerState | None = None) -> tuple[Plan, PlannerState]:
    state = state or PlannerState()
    hs = hotspots.detect(snapshot, policy, state.hotspots)
    co = colocation.observe(snapshot, policy, state.colocation)
    nodes = _first_nodes(snapshot)
    shown = hot_tainted(snapshot)
    removing = MappingProxyType({name: until for name, until in state.untainted.items()
                                 if name in shown and nodes[name].hot_until == until})   # a list lagging a removal
    tainted = (shown - removing.keys()) | (state.tainted & nodes.keys())
    hot = hotspots.hot_nodes(snapshot, hs)
    # the last node open to GPU work stays so though hot (hotspot_detect's "The last open node"); what the taint closes
    keep = (hotspots.kept_open(snapshot, hot, frozenset(tainted), state.kept_open)
            if policy.hotspots.taint_hot_nodes else None)
    closing = hot - {keep}   # the taint's decision alone (proposals, objective, renewals); co-location waits on `hot`
    shrunk = hotspots.shrunk_jobs(snapshot, state.shrunk)   # the jobs' records too; gone jobs forgotten
    desired = {**{j: n for j, (n, _) in co.shrunk.items()}, **shrunk}
    proj = Projection(snapshot, policy, hot_nodes=closing, tainted=tainted, desired_workers=desired)
    refused = {w: t for w, t in state.refused_moves.items() if snapshot.time - t < policy.hotspots.refused_retry_s}
    refused_targets = _live(state.refused_targets, snapshot.time, policy.hotspots.refused_target_retry_s)
    off = excluded_nodes(snapshot, refused_targets)
    throttled = {**hotspots.gputide_caps(snapshot),
                 **{u: w for u, w in state.throttled.items() if u in snapshot.gpu_by_uuid}}
    # a job co-location holds shrunk gets co-location's give-back first: the hotspot's now would undo a QoS shrink
    held = frozenset(j for j, (n, _) in co.shrunk.items() if proj.workers.get(j, 0) < n)
    proposals = hotspots.propose(snapshot, policy, hs, proj, frozenset(tainted), throttled, shrunk,
                                 frozenset(refused), held, excluded=off, keep_open=keep)
    proposals += colocation.propose(snapshot, policy, co, proj, shrunk, hot=hot)   # resizes keep the hotspot's records
    result = simulate_plan(snapshot, proposals, policy, projection=proj)
    kept, after = result.kept, result.objective_after
    if not kept and not hs.active.any():   # a calm cycle: consolidation may use it (balancer/plan/consolidation.py)
        moves, change = consolidation.propose(snapshot, policy, hs, proj, frozenset(hot | tainted), frozenset(refused),
                                              off)
        kept, after = tuple(moves), after + change
    notes = colocation.notes(snapshot, policy, co) + tuple(f"dropped {a.kind} {a.target}: {why}"
                                                           for a, why in result.dropped)
    if keep is not None:   # once in the log while it lasts (`Reconciler._log_notes`): no temperature in it
        notes += (f"hotspots: {keep} kept open though hot: every other node that takes GPU work is hot or closed",)
    lagging = MappingProxyType({name: until for name, until in state.taint_written.items()
                                if name in nodes and nodes[name].hot_until == until})
    renewals = (_renewals(snapshot, nodes, closing, frozenset(lagging) | removing.keys())
                if policy.hotspots.taint_hot_nodes else ())
    out = Plan(actions=kept + renewals, notes=notes, objective_before=result.objective_before,
               objective_after=after)
    return out, replace(state, hotspots=hs, colocation=co, tainted=frozenset(), taint_written=lagging, kept_open=keep,
                        untainted=removing,
                        shrunk=MappingProxyType(shrunk),
                        throttled=MappingProxyType(throttled), refused_moves=MappingProxyType(refused),
                        refused_targets=MappingProxyType(refused_targets),
                        full_targets=state.full_targets & refused_targets.keys(),
                        held_moves=state.held_moves & refused.keys(),
                        refused_scales=MappingProxyType(scales_held(state, policy, snapshot.time)))


def _renewals(snapshot: ClusterSnapshot, nodes: Mapping[str, Node], hot: frozenset[str],
              lagging: frozenset[str]) -> tuple[TaintNode, ...]:
    """A renewal for each node still hot whose hot taint (as the snapshot's nodes show it) expires within
    `RENEW_WITHIN_S`; not for one whose node list still shows the expiry an acknowledged write replaced (`lagging`:
    the fresh one is not shown yet). `hot`: the hot nodes the taint closes, not the one kept open (`kept_open`)."""
    shown = hot_tainted(snapshot)
    due = {name: n.hot_until - snapshot.time for name, n in nodes.items()
           if name in hot and name in shown and name not in lagging and n.hot_until is not None}
    return tuple(TaintNode(node=name, renew=True, reason=f"node still hot, its taint expires in {left:.0f} s")
                 for name, left in sorted(due.items()) if left <= RENEW_WITHIN_S)


def _first_nodes(snapshot: ClusterSnapshot) -> dict[str, Node]:
    """{name: node}, the first node of a name winning (a node list should hold each name once)."""
    return {n.name: n for n in reversed(snapshot.nodes)}


def refuse(state: PlannerState, actions: Iterable[Action], now: float, targets: Iterable[Action] = (),
           scales: Iterable[Action] = (), guard: bool = False) -> PlannerState:
    """Fold migrations the guard refused or the actuator could not carry out into the state: the planner does not
    propose moving those workloads again for `hotspots.refusedRetryS`, so a hot GPU whose pod cannot move is throttled
    instead of being offered the same refused move every cycle. `targets`: migrations refused for their target alone,
    by the actuator (`ActionResult.refused`) or by the guard (`MaxConcurrentMigrations.target_only`: the loop passes
    one per node at `maxConcurrentMigrationsPerNode`, the target among them): for `hotspots.refusedTargetRetryS`
    their workloads are not moved to those nodes, and may be moved elsewhere at once. `guard`: `targets` are the
    guard's, kept off as full (`loop._guard_refusals`), each marked so (`full_targets`); False: the actuator's, left
    unmarked. A pair marked is kept off only while the guard still counts that node full (`still_full`),
    `refusedTargetRetryS` at most; a pair already kept off for the actuator's cause, which the guard does not count,
    is not marked (its `refusedTargetRetryS` restarts), and one the actuator refuses loses its mark. A flag, not a
    list of the guard's pairs beside `targets` (as before): the loop passed the same pairs as both, and a list let
    a caller mark pairs it did not keep off, or leave some of the guard's unmarked. `scales`:
    `ScaleInference`s the actuator failed for good: their services are not scaled for `safety.cooldownS` ("Refused
    scales"). A workload refused that was held back (`hold_back`) is refused now: kept off its whole `refusedRetryS`."""
    refused = {a.workload: now for a in actions if isinstance(a, Migrate)}
    at = {(a.workload, a.target_node): now for a in targets if isinstance(a, Migrate)}
    services = {a.service: now for a in scales if isinstance(a, ScaleInference)}
    if not refused and not at and not services:
        return state
    other = state.refused_targets.keys() - state.full_targets   # kept off for a cause the guard does not count
    marked = at.keys() - other if guard else set()
    return replace(state, refused_moves=MappingProxyType({**state.refused_moves, **refused}),
                   held_moves=state.held_moves - refused.keys(),
                   refused_targets=MappingProxyType({**state.refused_targets, **at}),
                   full_targets=frozenset((state.full_targets - at.keys()) | marked),
                   refused_scales=MappingProxyType({**state.refused_scales, **services}))


def hold_back(state: PlannerState, actions: Iterable[Action], now: float, before: object = None) -> PlannerState:
    """Fold migrations the hand-over held back into the state ("Held-back moves"): their workloads are not proposed
    moving again while the safety ledger stays unsaved (`held_moves`, until `ledger_saved`; `refusedRetryS` at most),
    so their hot GPUs are throttled meanwhile, as after a refusal. Not `refuse`: the guard accepted them. Its
    `ScaleInference`s, planned on `before` (the state the plan that proposed them started from), wait as made only
    until then too (`held_scales`), as made for a loan alone (`_holding`)."""
    actions = list(actions)
    held = {a.workload: now for a in actions if isinstance(a, Migrate)}
    scales = _held_scales(state, before, actions)
    if not held and not scales:
        return state
    return replace(state, refused_moves=MappingProxyType({**state.refused_moves, **held}),
                   held_moves=state.held_moves | held.keys(), capacity=_holding(state.capacity, scales, before),
                   held_scales=MappingProxyType({**state.held_scales, **scales}))


def _holding(cap: object, scales: Mapping[str, tuple[float, float | None]], before: object) -> object:
    """`cap` with each service of `scales` (`held_scales`'s) held: its last change as in `before`, the state the plan
    started from (what the latency net reads: nothing changed, a step waits for no scale never sent; none known where
    `before` has no capacity memory), the held scale's change its first sighting (what a loan's hold counts from, the
    later of the two: none is planned again until `ledger_saved`). `cap` is a `CapacityState` whenever `scales` is
    non-empty: `_held_scales` finds none without one."""
    if not scales:
        return cap
    last = {s: t for s, t in cap.last_change.items() if s not in scales}
    last.update({s: t for s, t in _capacity(before).last_change.items() if s in scales})
    first = {**cap.first_seen, **{s: t for s, (t, _) in scales.items()}}
    return replace(cap, last_change=MappingProxyType(last), first_seen=MappingProxyType(first))


def _held_scales(state: PlannerState, before: object, actions: list[Action]) -> dict[str, tuple[float, float | None]]:
    """`held_scales` for the `ScaleInference`s among `actions` whose change the capacity plan in `state` counted: the
    change it counted, and the service's first sighting in `before` (a wrapping planner's own state, or none: none
    known)."""
    cap, was = _capacity(state), _capacity(before)   # no capacity memory: an empty one, with no change counted
    return {a.service: (cap.last_change[a.service], was.first_seen.get(a.service))
            for a in actions if isinstance(a, ScaleInference) and a.service in cap.last_change}


def _capacity(state: object) -> CapacityState:
    """`state`'s capacity memory (`before`, the state a plan started from); an empty one where it has none."""
    was = getattr(state, "capacity", None)
    return was if isinstance(was, CapacityState) else CapacityState()


def ledger_saved(state: object) -> object:
    """`state` with the moves and scales held back for an unsaved safety ledger (`held_moves`, `held_scales`) let go:
    the loop calls it at the start of every cycle that finds the ledger saved, so they are proposed again that cycle.
    `state` as it is when it is no `PlannerState` (a wrapping planner's own)."""
    if not isinstance(state, PlannerState) or not (state.held_moves or state.held_scales):
        return state
    return replace(state, held_moves=frozenset(), held_scales=_EMPTY, capacity=_unheld(state), refused_moves=(
        MappingProxyType({w: t for w, t in state.refused_moves.items() if w not in state.held_moves})))


def _unheld(state: PlannerState) -> object:
    """`state.capacity` with each service of `held_scales` still held (its first sighting the held scale's change, as
    `_holding` set it) let go: its first sighting as before the plan that proposed it where no change is known (the
    held scale's time if none was seen then, as `capacity_loop.unsent` keeps it), none where one is (its last change,
    the one before that plan still, or one since, holds it). Its last change is `_holding`'s, or one since."""
    cap = state.capacity
    if not isinstance(cap, CapacityState):
        return cap
    marked = {s: held for s, held in state.held_scales.items() if cap.first_seen.get(s) == held[0]}
    if not marked:
        return cap
    first = {s: t for s, t in cap.first_seen.items() if s not in marked}
    first.update({s: seen if seen is not None else t for s, (t, seen) in marked.items() if s not in cap.last_change})
    return replace(cap, first_seen=MappingProxyType(first))


def still_full(state: object, full: Callable[[], Collection[str]]) -> object:
    """`state` with the pods the guard kept off a full node (`full_targets`) let back where it no longer counts the
    node full (`full`: its nodes at `maxConcurrentMigrationsPerNode` now, `SafetyGuard.full_nodes`, asked only while
    any is kept off; the loop asks before planning, and at the end of a cycle whose review kept a move off a full
    node). Kept off for `refusedTargetRetryS` whatever happened, a pod whose target's landing replacement ran a minute
    later was moved to a worse node, or its hot GPU throttled, for ten. `state` as it is when it is no `PlannerState`
    (a wrapping planner's own)."""
    if not isinstance(state, PlannerState) or not state.full_targets:
        return state
    nodes = frozenset(full())
    free = frozenset(pair for pair in state.full_targets if pair[1] not in nodes)
    if not free:
        return state
    return replace(state, full_targets=state.full_targets - free,
                   refused_targets=MappingProxyType({k: t for k, t in state.refused_targets.items() if k not in free}))


def cap(state: PlannerState, capped: Iterable[tuple[Action, int | None]], now: float) -> PlannerState:
    """Fold the `ScaleInference`s the actuator applied into the state, each with the most replicas its service runs
    when it applied it short of what it asked (`ActionResult.capped_to`), None when in full: a later cap of a service
    is met on its earlier one (`CapBelief.met`: once more at the same bound, the capacity planner keeping a lapsed cap
    in the state for that; afresh at another); a scale in full above the cap ends it (maxReplicas was raised: kept,
    the cap met later would count as met once more, believed twice as long). `now` is when the actuator's result came,
    the time the cap was met (`CapBelief.raised_by` counts spec.replicas only if sampled since). How long it is
    believed is the capacity planner's to say ("Capped scales")."""
    caps = dict(state.capped_scales)
    for a, most in capped:
        if not isinstance(a, ScaleInference):
            continue
        before = state.capped_scales.get(a.service)
        if most is not None:
            caps[a.service] = before.met(most, now) if before else CapBelief(int(most), now)
        elif before is not None and a.replicas > before.cap:
            caps.pop(a.service, None)
    if caps == state.capped_scales:
        return state
    return replace(state, capped_scales=MappingProxyType(caps))


def scales_held(state: PlannerState, policy: BalancerPolicy, now: float) -> dict[str, float]:
    """The services whose scaling the actuator failed for good within `safety.cooldownS` of `now` ({service: when}):
    not scaled meanwhile ("Refused scales")."""
    return _live(state.refused_scales, now, policy.safety.cooldown_s)


def _live(memory: Mapping, now: float, keep_s: float) -> dict:
    """The entries of a refusal memory ({key: when}) younger than `keep_s` at `now`."""
    return {k: t for k, t in memory.items() if now - t < keep_s}


def excluded_nodes(snapshot: ClusterSnapshot, refused_targets: Iterable[tuple[str, str]]) -> dict[str, np.ndarray]:
    """{workload: positions in `snapshot.nodes` of the nodes it may not be moved to}, from (workload, node) pairs; a
    node the snapshot does not list is left out (every position of a name listed twice is in)."""
    names: dict[str, set[str]] = {}
    for workload, node in refused_targets:
        names.setdefault(workload, set()).add(node)
    if not names:
        return {}
    where: dict[str, list[int]] = {}
    wanted = set().union(*names.values())
    for i, n in enumerate(snapshot.nodes):
        if n.name in wanted:
            where.setdefault(n.name, []).append(i)
    out = {w: np.fromiter((i for n in sorted(ns) for i in where.get(n, ())), dtype=np.int64) for w, ns in names.items()}
    return {w: pos for w, pos in out.items() if pos.size}


def exclusions(state: object, policy: BalancerPolicy, now: float) -> dict[str, int]:
    """The moves the planner's memory of refusals holds back at `now` (`gputide_migration_exclusions{scope}`):
    `workload`, workloads not moved at all (`refused_moves`); `target`, (workload, node) pairs (`refused_targets`).
    Empty for a state that is not a `PlannerState` (a wrapping planner's own)."""
    if not isinstance(state, PlannerState):
        return {}
    hs = policy.hotspots
    return {"workload": len(_live(state.refused_moves, now, hs.refused_retry_s)),
            "target": len(_live(state.refused_targets, now, hs.refused_target_retry_s))}


def acknowledge(state: PlannerState, applied: Iterable[Action], snapshot: ClusterSnapshot,
                unchanged: Iterable[Action] = ()) -> PlannerState:
    """Fold actions the actuator applied into the state, so the planner can give them back later. `unchanged`: those
    of them the actuator wrote nothing for (`ActionResult.unchanged`); a shrink among them, the hotspot's or
    co-location's, is not remembered (the Job was already at or below its target: nothing of gputide's to give back,
    no workers owed, and the job may be shrunk again). `shrunk` remembers the hotspot's shrinks only (no `cause`): a
    capacity reclaim is the tide's to size, not a hotspot shrink owed back."""
    applied, unwritten = list(applied), list(unchanged)
    throttled, shrunk, co = dict(state.throttled), dict(state.shrunk), state.colocation
    for a in applied:
        if isinstance(a, SetPowerLimit):
            if a.is_throttle and not a.give_back:
                throttled[a.uuid] = a.watts
            else:
                throttled.pop(a.uuid, None)
        elif isinstance(a, ScaleTraining):
            held = a.job in co.shrunk or (a.cause == "colocation_slo" and a not in unwritten)
            if held:
                co = colocation.acknowledge(co, a, snapshot.time)
            if held and a.cause is not None:
                continue   # co-location's or the tide's resize of a job co-location holds
            if a.workers < a.previous_workers:   # the hotspot's too when co-location holds the job: remembered,
                if a.cause is None and a not in unwritten:   # so a read that lags its record does not shrink again;
                    shrunk.setdefault(a.job, a.previous_workers)   # the tide's reclaim is no hotspot shrink
            elif a.job in shrunk and (a.shrunk_from == 0 or a.workers >= shrunk[a.job]):
                # back at its size, or the hotspot's give-back applied: what it wrote, if anything, the Job's record
                # decided (a Kubernetes Job grows no further than it: nothing without one), so no memory asks again
                del shrunk[a.job]
    return _acknowledge_taints(replace(state, throttled=MappingProxyType(throttled), shrunk=MappingProxyType(shrunk),
                                       colocation=co), [a for a in applied if isinstance(a, TaintNode)], snapshot)


def _acknowledge_taints(state: PlannerState, applied: list[TaintNode], snapshot: ClusterSnapshot) -> PlannerState:
    """The hot taints written count as tainted until the next plan (`tainted`); each write remembers the expiry its
    node showed (`taint_written`: a node list still showing it lags the write), and so does each removal of a taint
    the node showed with an expiry (`untainted`: a node list still showing it lags the removal)."""
    if not applied:
        return state
    tainted, written, nodes = set(state.tainted), dict(state.taint_written), _first_nodes(snapshot)
    removed, shown = dict(state.untainted), hot_tainted(snapshot)
    for a in applied:
        (tainted.discard if a.remove else tainted.add)(a.node)
        if a.remove or a.node not in nodes:
            written.pop(a.node, None)
        else:
            written[a.node] = nodes[a.node].hot_until
        if a.remove and a.node in shown and nodes[a.node].hot_until is not None:
            removed[a.node] = nodes[a.node].hot_until
        else:
            removed.pop(a.node, None)
    return replace(state, tainted=frozenset(tainted), taint_written=MappingProxyType(written),
                   untainted=MappingProxyType(removed))
