"""Safety: the one chokepoint every action passes before it reaches an actuator.

`SafetyGuard.review(actions, snapshot, ledger, now)` splits a plan into accepted actions and rejected ones, each
rejection a `SafetyViolation` subclass whose `reason` labels `gputide_actions_rejected_total{reason}`:

    SafetyViolation
    ├── EmergencyStop            flag, flag file, or the `gputide.io/emergency-stop` node label (on a node the
    │                            action touches, or one where a resize may stop a pod) / stopped namespace
    ├── ProtectedWorkload        protected or non-movable workloads (and GPUs hosting them) are never touched
    │                            (a GPU's power given back is no touch: it takes nothing from them)
    ├── PlacementRefused         a migration to a node the workload's own rules keep it off (a taint it does not
    │                            tolerate, its node selector, its required node affinity, required pod affinity
    │                            or anti-affinity, its own or that of the pods there): its replacement could not
    │                            run there
    ├── MinGainNotMet            expected gain below `minExpectedGain`
    ├── CooldownActive           the same target acted on within its cooldown (inference scale-ups and the
    │                            training shrinks that reclaim GPUs for them are exempt), or by an action accepted
    │                            earlier in the same review (one action per target a cycle, none exempt); and an
    │                            owner disrupted by one kind of action within `cooldownS` (a migration of one of its
    │                            pods, a resize that stops pods, a reclaim too) is in cooldown for the other kinds:
    │                            a scale-down or shrink of a Deployment or job a migration of its pod just disrupted,
    │                            or the reverse, waits (reclaims are exempt; more migrations of its other pods are
    │                            `maxUnavailablePerWorkload`'s to count). A pod of an owner migrated within
    │                            `cooldownS` is held too when it started since the first of them (`started_at`): a
    │                            Deployment's or Job's replacement has a new name the per-pod cooldown never saw
    ├── MaxActionsPerCycle       more than `maxActionsPerCycle` actions this cycle (an inference scale-up and the
    │                            training shrinks that reclaim GPUs for it count, but are never refused by it)
    ├── MaxConcurrentMigrations  more than `maxConcurrentMigrationsPerNode` migrations in flight on a node: those
    │                            started within `migrationSettleS` on their source and target nodes, and, on its
    │                            target node, one older (within `cooldownS`) among the latest as many of its owner's
    │                            as it has replicas not running (`_short`): its replacement may still be pulling or
    │                            warming up there (the refusal names its owner). Refused for its target node alone
    │                            (`target_only`: its source has room and its owner's limits allow the move), the pod
    │                            may go elsewhere at once, but not to any node the older ones alone hold at the
    │                            limit (`full_nodes`)
    ├── MaxUnavailable           more than `maxUnavailablePerWorkload` replicas of one owner disrupted at once
    │                            (migrations, with those still settling, and, as a PodDisruptionBudget counts them,
    │                            its replicas not running: `_short`); and, within one review, a resize that
    │                            stops pods (an inference scale-down, a training shrink or stop) together with any
    │                            other disruption of the same owner (a migration of one of its pods): the second
    │                            one is refused, whichever kind it is. A reclaim shrink disrupts its job too: never
    │                            refused by it, it refuses every other disruption of that job in the review, before
    │                            or after it in the plan (the capacity planner appends its reclaims last), but
    │                            another resize of the job itself (one action per target: the first goes)
    ├── PdbViolation             an eviction a PodDisruptionBudget does not allow: the budgets given as data
    │                            (by owner), and for migrations the cluster's own (`disruption_budgets` of the
    │                            snapshot, by the pods' labels, as the Eviction API checks them)
    └── EvictionBudgetExhausted  no evictions left in the current window (a reclaim of loaned GPUs spends the
                                 budget but is never refused by it; an inference scale-down spends only the
                                 running replicas it stops, not the pending ones it drops; a resize of a job that
                                 restarts whole on any change of size, grow or shrink, spends every running
                                 worker)

A hot-taint renewal (`TaintNode(renew=True)`: a fresh expiry on a node already tainted and still hot) changes
nothing for any workload, so none of the limits that bound disruption apply to it: it is not counted against
`maxActionsPerCycle` (a fleet with many hot nodes must not let their taints lapse to make room, nor starve real
relief), needs no expected gain, neither waits for nor re-arms its node's taint cooldown (a renewal is not a flap;
re-arming it would hold back the taint's removal once the node cools). An emergency stop (flag, file or the
node's label) still refuses it: the taint then lapses at its expiry, as a stopped controller's would.

`check_telemetry` is the fail-static gate: stale, missing or NaN telemetry raises a `TelemetryError` and the loop
takes no action at all. The guard itself keeps no state: what it needs to remember (when each target was last
acted on, recent evictions and migrations) is the immutable `SafetyLedger` (balancer/safety_ledger.py),
returned updated by `record`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import numpy as np

from balancer.actions import Action, Migrate, ScaleInference, ScaleTraining, SetPowerLimit, TaintNode
from balancer.admission import eviction_room, spend
from balancer.config import SafetyPolicy
from balancer.errors import InvalidTelemetry, MissingTelemetry, SafetyViolation, StaleTelemetry
from balancer.model import MAY_BE_UNKNOWN, ClusterSnapshot, DisruptionBudget, Workload, WorkloadClass
from balancer.noderules import Taint
from balancer.safety_context import ReviewContext, touched_nodes
from balancer.safety_groups import whole_groups
from balancer.safety_ledger import SafetyLedger  # re-exported: the guard's memory between cycles
from balancer.safety_violations import (  # noqa: F401  (re-exported: callers import them from here)
    CooldownActive,
    EmergencyStop,
    EvictionBudgetExhausted,
    MaxActionsPerCycle,
    MaxConcurrentMigrations,
    MaxUnavailable,
    MinGainNotMet,
    PdbViolation,
    PlacementRefused,
    ProtectedWorkload,
)
from balancer.unavailable import short as _short  # an owner's replicas not running: the hotspot planner's too

EMERGENCY_LABEL = "gputide.io/emergency-stop"


@dataclass(frozen=True, slots=True)
class PodDisruptionBudget:
    """A PDB as data: for the pods of `owner`, keep `min_available` up, or disrupt at most `max_unavailable`."""

    owner: str
    min_available: int | None = None
    max_unavailable: int | None = None


def check_telemetry(snapshot: ClusterSnapshot, policy: SafetyPolicy) -> float:
    """Raise a TelemetryError when the controller must hold still; return the oldest sample's age."""
    if snapshot.n_gpus == 0:
        raise MissingTelemetry("the snapshot has no GPUs")
    for name in ("temperature_c", "power_w", "power_limit_w", "sm_active", "mem_used_mib", "slowdown_temp_c"):
        values = getattr(snapshot, name)   # NaN in a field a board may lack for good is unknown, not invalid
        bad = np.isinf(values) if name in MAY_BE_UNKNOWN else ~np.isfinite(values)
        if bad.any():
            subjects = tuple(snapshot.gpus[i].uuid for i in np.flatnonzero(bad)[:5])
            raise InvalidTelemetry(f"{int(bad.sum())} GPU(s) report {name} = NaN/inf", subjects=subjects)
    age = snapshot.sample_age_s
    if not np.isfinite(age).all():
        raise MissingTelemetry("sample ages unknown")
    oldest = float(age.max())
    if oldest > policy.max_telemetry_age_s:
        subjects = tuple(snapshot.gpus[i].uuid for i in np.flatnonzero(age > policy.max_telemetry_age_s)[:5])
        raise StaleTelemetry(f"oldest sample is {oldest:.0f} s old (> {policy.max_telemetry_age_s:.0f} s)",
                             subjects=subjects)
    return oldest


@dataclass(frozen=True)
class Review:
    accepted: tuple[Action, ...]
    rejected: tuple[tuple[Action, SafetyViolation], ...]


def _evictions(a: Action, snapshot: ClusterSnapshot) -> int:
    """Running pods that `a` stops. An inference scale-down removes pending replicas first (a ReplicaSet
    deletes unscheduled pods before running ones), so only the replicas it takes below the placed count evict.
    A training resize likewise stops only the workers it takes below the placed count (a Job's controller deletes
    pending pods first too); a job that restarts whole on any change of size (`Workload.restarts_on_resize`: queued
    in Kueue without elastic slices, or torchrun elastic) stops every running worker, whether it shrinks or grows."""
    if isinstance(a, Migrate):
        return 1
    if isinstance(a, ScaleTraining):
        if a.workers == a.previous_workers:
            return 0
        members = snapshot.workloads_by_owner.get(a.job, ())
        placed = sum(1 for w in members if snapshot.placements.get(w.name))
        if any(w.restarts_on_resize for w in members):
            return max(a.previous_workers - a.workers, placed)
        return _below_placed(a.previous_workers, a.workers, placed)
    if isinstance(a, ScaleInference):
        if a.replicas >= a.previous_replicas:
            return 0
        placed = sum(1 for w in snapshot.workloads_by_owner.get(a.service, ())
                     if w.workload_class is WorkloadClass.INFERENCE and snapshot.placements.get(w.name))
        return _below_placed(a.previous_replicas, a.replicas, placed)
    return 0


def _below_placed(previous: int, new: int, placed: int) -> int:
    """Running pods a size change from `previous` to `new` stops when pending pods go first: those below `placed`."""
    return max(min(previous, placed) - new, 0)


count_evictions = _evictions   # public: the soak's budget check (balancer/app/soak_checks.py) counts as the guard does


def _spend_budgets(w: Workload, budgets: Iterable[DisruptionBudget] | None, spent: dict[str, int]) -> None:
    """Count one eviction of `w` against every PodDisruptionBudget that covers it (`spent`: this review's so far),
    or raise PdbViolation, spending nothing, when one of them allows no more disruption now. The Eviction API
    would refuse it (429); refused here, nothing is reserved or tainted for a move that cannot happen."""
    keys, blocked = eviction_room(budgets, w, spent)
    if blocked is not None:
        taken = f", {spent[blocked.key]} of them taken by this cycle's actions" if spent.get(blocked.key) else ""
        raise PdbViolation(f"{w.name}: PodDisruptionBudget {blocked.key} allows {blocked.disruptions_allowed} "
                           f"disruption(s) now{taken}")
    spend(spent, keys)


@dataclass
class _Tally:
    """What one review counts as it accepts actions: evictions left in the window, migrations in flight per node
    and per owner, replicas per owner not running (`_short`), placed replicas per owner (for the PodDisruptionBudgets
    given as data) and this review's evictions per cluster PodDisruptionBudget. `per_owner`: the migrations still
    settling from the ledger; `moved`: those this review accepted; `landing`: per node, the owners of those of
    `per_node` past the settle window whose replacement may not run yet (`_in_flight`), for the refusal to say so and
    to tell the nodes that stay full (`_full`); `pending`: per node, the owners of those still settling there that
    `_in_flight` takes for their owner's replica not running: once settled they count as landing, so the node stays
    full too (`_full`)."""

    budget: int
    per_node: dict[str, int] = field(default_factory=dict)
    landing: dict[str, list[str]] = field(default_factory=dict)
    pending: dict[str, list[str]] = field(default_factory=dict)
    per_owner: dict[str, int] = field(default_factory=dict)
    moved: dict[str, int] = field(default_factory=dict)
    short: dict[str, int] = field(default_factory=dict)
    healthy: dict[str, int] = field(default_factory=dict)
    spent: dict[str, int] = field(default_factory=dict)


class SafetyGuard:
    def __init__(self, policy: SafetyPolicy, *, pdbs: Iterable[PodDisruptionBudget] = (),
                 emergency_stop_file: str | Path | None = None, stopped_namespaces: Iterable[str] = ()) -> None:
        self.policy = policy
        self.pdbs = {p.owner: p for p in pdbs}
        self.stop_file = Path(emergency_stop_file) if emergency_stop_file else None
        self.stopped_namespaces = frozenset(stopped_namespaces)

    def emergency_stopped(self) -> bool:
        return self.policy.emergency_stop or bool(self.stop_file and self.stop_file.exists())

    def remaining_evictions(self, ledger: SafetyLedger, now: float) -> int:
        """Evictions the budget still allows in the window (gputide_eviction_budget_remaining): never below 0, though
        reclaims, which it never refuses, may spend past it (a gauge at -1 would not read as exhausted)."""
        window = [t for t in ledger.evictions if now - t < self.policy.eviction_window_s]
        return max(self.policy.eviction_budget - len(window), 0)

    def review(self, actions: Iterable[Action], snapshot: ClusterSnapshot, ledger: SafetyLedger,
               now: float) -> Review:
        """Each action checked and counted in order; a group's moves all or none (`balancer.safety_groups`)."""
        return whole_groups(list(actions), lambda acts: self._review_each(acts, snapshot, ledger, now), Review,
                            leaves=lambda a: _sources(a, snapshot))

    def _review_each(self, actions: Iterable[Action], snapshot: ClusterSnapshot, ledger: SafetyLedger,
                     now: float) -> Review:
        accepted: list[Action] = []
        rejected: list[tuple[Action, SafetyViolation]] = []
        stopped = self.emergency_stopped()
        tally = self._tally(snapshot, ledger, now)
        actions = list(actions)
        ctx = ReviewContext(snapshot, actions)
        ctx.disrupted.update(_reclaimed(actions, snapshot))
        counted = 0   # accepted actions the per-cycle limit counts (renewals are not)
        for a in actions:
            owner = _disrupted_owner(a, ctx.snapshot)
            try:
                self._check_one(a, ctx, ledger, now, stopped, owner)
                _check_disruption(a, owner, ctx)
                if not _renewal(a) and not _reclaim(a) and counted >= self.policy.max_actions_per_cycle:
                    raise MaxActionsPerCycle(f"{self.policy.max_actions_per_cycle} actions already accepted this cycle")
                self._count(a, ctx, tally)
                accepted.append(a)
                counted += not _renewal(a)
                if not _renewal(a):
                    ctx.acted.add(_cooldown_key(a))
                if owner is not None and not _reclaim(a):   # a reclaim is there from the start (`_reclaimed`)
                    ctx.disrupted.setdefault(owner, []).append(a)
            except SafetyViolation as exc:
                rejected.append((a, exc))
                if _reclaim(a) and owner is not None:   # refused, it disrupts nothing: the actions after it may
                    ctx.disrupted[owner].remove(a)
        return Review(tuple(accepted), tuple(rejected))

    def _tally(self, snapshot: ClusterSnapshot, ledger: SafetyLedger, now: float) -> _Tally:
        """What the limits count before this review: evictions left, the migrations in flight per node and
        owner, the replicas per owner not running (`_short`), and (only when PodDisruptionBudgets are given as data)
        the placed replicas per owner."""
        t = self._moving(snapshot, ledger, now, self.remaining_evictions(ledger, now))
        if self.pdbs:
            for w in snapshot.workloads:
                if w.name in snapshot.placements:
                    t.healthy[w.owner or w.name] = t.healthy.get(w.owner or w.name, 0) + 1
        return t

    def _moving(self, snapshot: ClusterSnapshot, ledger: SafetyLedger, now: float, budget: int,
                owners: Collection[str] | None = None) -> _Tally:
        """A tally of `budget` evictions left with the replicas per owner not running (`_short`) and the migrations in
        flight per node and owner (`_in_flight`) counted. `owners`: the replicas not running of those only (None:
        of every owner, as a review's limits read them)."""
        moving = _migrated(ledger, snapshot.services if owners is None else owners, now, self.policy.cooldown_s)
        t = _Tally(budget=budget, short=_short(snapshot, moving, owners))
        _in_flight(t, ledger, now, self.policy)
        return t

    def full_nodes(self, snapshot: ClusterSnapshot, ledger: SafetyLedger, now: float) -> frozenset[str]:
        """The nodes at `maxConcurrentMigrationsPerNode` as a review at `now` counts them before accepting anything
        (`_in_flight`: migrations still settling, replacements still landing): a migration to any of them is refused
        (`MaxConcurrentMigrations`). The loop asks before planning while the planner keeps a pod off a node the guard
        found full (`planner.still_full`, the refused target and its `full_nodes`), and again at the end of a cycle
        whose review kept a move off a full node (`loop.Reconciler._unfilled`): that keep-off ends once the node
        has room (the migrations settling there settle, the replacement that held it runs), not `refusedTargetRetryS`
        after the refusal. The replicas not running counted only of the owners the ledger holds migrations of, the
        only ones `_in_flight` reads (the cost: `unavailable.short`)."""
        t = self._moving(snapshot, ledger, now, 0, {owner for _, _, _, owner in ledger.migrations})
        limit = self.policy.max_concurrent_migrations_per_node
        return frozenset(node for node, count in t.per_node.items() if count >= limit)

    def _count(self, a: Action, ctx: ReviewContext, t: _Tally) -> None:
        """Count `a` against the review's limits, or raise the one it would break (counting nothing)."""
        ev = _evictions(a, ctx.snapshot)
        # loaned GPUs always come back: a reclaim spends the budget but is never refused by it (what the budget
        # let the controller lend, within its window, it may take back when inference needs it)
        if ev and ev > t.budget and not (isinstance(a, ScaleTraining) and a.reclaim):
            raise EvictionBudgetExhausted(f"{t.budget} evictions left in the {self.policy.eviction_window_s:.0f} s "
                                          "window")
        if isinstance(a, Migrate):
            self._count_migration(a, ctx, t)
        elif ev:
            self._check_pdb(a.target, t.healthy.get(a.target, 0), ev)
        t.budget -= ev

    def _count_migration(self, a: Migrate, ctx: ReviewContext, t: _Tally) -> None:
        p, s = self.policy, ctx.snapshot
        w = s.workload_by_name[a.workload]
        owner = w.owner or w.name
        nodes = dict.fromkeys((s.gpus[a.source_gpus[0]].node, a.target_node))   # the source first: see below
        # asked first, raised after the per-node limit (whose refusal it is when both hold): a pod its owner keeps from
        # moving anywhere is no target's refusal, and kept off the full nodes only it was throttled a cycle late
        owner_refusal = self._owner_refusal(w, owner, t, s)
        for node in nodes:
            if t.per_node.get(node, 0) >= p.max_concurrent_migrations_per_node:
                # the target alone full, the pod may go elsewhere; its own node full, or its owner at its limit,
                # nowhere (`target_only`)
                target_only = node not in _sources(a, s) and owner_refusal is None
                raise MaxConcurrentMigrations(_in_flight_on(node, t, p), target_only=target_only,
                                              full_nodes=_full(t, p))
        if owner_refusal is not None:
            raise owner_refusal
        _spend_budgets(w, s.disruption_budgets, t.spent)
        for node in nodes:
            t.per_node[node] = t.per_node.get(node, 0) + 1
        t.moved[owner] = t.moved.get(owner, 0) + 1
        ctx.moved[w.name] = s.node_position[a.target_node]

    def _owner_refusal(self, w: Workload, owner: str, t: _Tally, s: ClusterSnapshot) -> SafetyViolation | None:
        """What refuses a migration of `w` (of `owner`) to any node, counting nothing: `maxUnavailablePerWorkload`,
        the PodDisruptionBudgets given as data and the cluster's own (`_spend_budgets`); None when none does."""
        p = self.policy
        # summed: a settling migration whose replacement runs already (loading) and a replica Pending for reasons of
        # its own are two down (the larger of the two counted one); a replacement still Pending within the settle
        # window is counted twice until `migrationSettleS` passes, the safe side
        settling, short, moved = t.per_owner.get(owner, 0), t.short.get(owner, 0), t.moved.get(owner, 0)
        unavailable = settling + short + moved
        if unavailable + 1 > p.max_unavailable_per_workload:
            why = f", {short} not running (Pending: it gets no migration until it is whole)" if short else ""
            return MaxUnavailable(f"{owner} already has {unavailable} replica(s) unavailable ({settling + moved} "
                                  f"disrupted{why})")
        try:
            self._check_pdb(owner, t.healthy.get(owner, 0), settling + moved + 1, unavailable + 1)
            _spend_budgets(w, s.disruption_budgets, dict(t.spent))   # a copy: nothing spent
        except PdbViolation as exc:
            return exc
        return None

    def stops_now(self, actions: list[Action], snapshot: ClusterSnapshot) -> list[EmergencyStop | None]:
        """Per action, an emergency stop that holds it on `snapshot` (the loop asks again on the snapshot it acts on),
        or None: the flag or file, a stopped namespace of a workload it touches, a node it touches labelled
        `EMERGENCY_LABEL`. One context for all (its index of the GPUs' workloads is one pass over the placements)."""
        ctx, stopped, out = ReviewContext(snapshot, actions), self.emergency_stopped(), []
        for a in actions:
            try:
                self._check_stop(a, ctx, stopped)
                out.append(None)
            except EmergencyStop as exc:
                out.append(exc)
        return out

    def _check_stop(self, a: Action, ctx: ReviewContext, stopped: bool) -> None:
        if stopped:
            raise EmergencyStop("emergency stop is set")
        if stopped_ns := {w.namespace for w in ctx.touched(a)} & self.stopped_namespaces:
            raise EmergencyStop(f"namespace {min(stopped_ns)} is stopped")
        for node in touched_nodes(a, ctx.snapshot) | _stopping_on(a, ctx):
            n = ctx.node(node)
            if n is not None and n.labels.get(EMERGENCY_LABEL, "").lower() == "true":
                raise EmergencyStop(f"node {node} carries {EMERGENCY_LABEL}=true")

    def _check_one(self, a: Action, ctx: ReviewContext, ledger: SafetyLedger, now: float, stopped: bool,
                   owner: str | None) -> None:
        """Every limit on `a` alone (`owner`: the owner it disrupts, `_disrupted_owner`), or raise the first it
        breaks."""
        p = self.policy
        self._check_stop(a, ctx, stopped)
        # a power limit raised (a give-back) takes nothing from a workload: a protected one that came to a GPU gputide
        # had capped, or became protected since, gets its power back like any other
        for w in () if isinstance(a, SetPowerLimit) and (a.give_back or not a.is_throttle) else ctx.touched(a):
            if w.protected or w.namespace in p.protected_namespaces:
                raise ProtectedWorkload(f"{w.name} is protected")
            if isinstance(a, Migrate) and not w.movable:
                raise ProtectedWorkload(f"{w.name} is not movable")
        self._check_nodes(a, ctx)
        if _renewal(a):
            return  # a fresh expiry on a taint already there: no gain to meet, no cooldown (module docstring)
        if _cooldown_key(a) in ctx.acted:   # planned against the state the earlier one changes: never both
            raise CooldownActive(f"{a.target} is already acted on by another action this cycle")
        if a.expected_gain < p.min_expected_gain:
            raise MinGainNotMet(f"expected gain {a.expected_gain:.3g} < {p.min_expected_gain:.3g}")
        if _reclaim(a):
            # adding serving capacity disrupts nothing: like an HPA, scale-ups are never held back; loaned GPUs go
            # back to inference when its SLO needs them (the eviction budget still counts them)
            return
        cooldown = p.power_cooldown_s if isinstance(a, SetPowerLimit | TaintNode) else p.cooldown_s
        last = ledger.last_action.get(_cooldown_key(a))
        if last is not None and now - last < cooldown:
            raise CooldownActive(f"{a.target} was acted on {now - last:.0f} s ago (cooldown {cooldown:.0f} s)")
        if owner is not None:
            self._check_owner_cooldown(a, owner, ledger, now)
        if isinstance(a, Migrate):
            self._check_replacement(a, ctx.snapshot, ledger, now)

    def _check_owner_cooldown(self, a: Action, owner: str, ledger: SafetyLedger, now: float) -> None:
        """Raise CooldownActive when `owner`, which `a` disrupts, was disrupted by another kind of action within
        `cooldownS`: a migration keeps its cooldown under the pod and a resize under the owner, so the per-target
        cooldown never sees them meet (the same kind again is that cooldown's, or `maxUnavailablePerWorkload`'s)."""
        for kind in _DISRUPTIVE_KINDS:
            last = ledger.last_action.get(_disruption_key(kind, owner)) if kind != a.kind else None
            if last is not None and now - last < self.policy.cooldown_s:
                raise CooldownActive(f"{owner} was disrupted by a {kind} {now - last:.0f} s ago (cooldown "
                                     f"{self.policy.cooldown_s:.0f} s): a {a.kind} would disrupt it again")

    def _check_replacement(self, a: Migrate, snapshot: ClusterSnapshot, ledger: SafetyLedger, now: float) -> None:
        """Raise CooldownActive when `a` moves a pod of an owner migrated within `cooldownS` that is not known to
        have started before the earliest of those migrations: a Deployment's or Job's replacement pod has a new name,
        so the per-pod cooldown never sees it, and a one-replica service would go down twice in one cooldown. The
        earliest, not the latest: svc-0's replacement started after svc-0 moved is still in its cooldown when svc-1
        moved since. A sibling running since before (`Workload.started_at`) is not a replacement: more of those are
        `maxUnavailablePerWorkload`'s to count. One whose start is unknown (NaN: a source without the Kubernetes
        API's pods) is taken as a sibling: holding every pod of the owner for `cooldownS` would stop a hot node's
        drain after its first move, and the simulator keeps a moved pod's name (the per-pod cooldown holds it)."""
        w = snapshot.workload_by_name.get(a.workload)
        if w is None or not w.owner:
            return
        first = _first_migration(ledger, w.owner, now, self.policy.cooldown_s)
        if first is None or not w.started_at >= first:
            return
        raise CooldownActive(f"{w.owner} had a pod migrated {now - first:.0f} s ago (cooldown "
                             f"{self.policy.cooldown_s:.0f} s) and {a.workload} did not run before it: it may be that "
                             "pod's replacement")

    @staticmethod
    def _check_nodes(a: Action, ctx: ReviewContext) -> None:
        """A migration's target must admit the workload by its own rules (taints tolerated, labels selected)."""
        if not isinstance(a, Migrate):
            return
        w, n = ctx.snapshot.workload_by_name.get(a.workload), ctx.node(a.target_node)
        if n is None:
            raise PlacementRefused(f"{a.workload} may not move to {a.target_node}: no such node in the snapshot")
        why = None if w is None else w.node_rules.refusal(n.name, n.labels, map(Taint.parse, n.taints))
        if why is not None:
            raise PlacementRefused(f"{a.workload} may not run on {a.target_node}: the node has {why}")
        if w is not None and not ctx.snapshot.affinity_admits(w, ctx.moved)[ctx.snapshot.node_position[n.name]]:
            raise PlacementRefused(f"{a.workload} may not run on {a.target_node}: pod affinity or anti-affinity "
                                   "(its own, or that of pods running there or moving there this cycle) keeps it off")

    def _check_pdb(self, owner: str, healthy: int, disrupted: int, unavailable: int | None = None) -> None:
        """`healthy`: the owner's placed replicas, which leave out those not running (`_short`): they count against
        maxUnavailable only, in `unavailable` (default `disrupted`)."""
        pdb = self.pdbs.get(owner)
        if pdb is None:
            return
        if pdb.min_available is not None and healthy - disrupted < pdb.min_available:
            raise PdbViolation(f"{owner}: {healthy} healthy, PDB minAvailable {pdb.min_available}")
        unavailable = disrupted if unavailable is None else unavailable
        if pdb.max_unavailable is not None and unavailable > pdb.max_unavailable:
            raise PdbViolation(f"{owner}: PDB maxUnavailable {pdb.max_unavailable}")

    def record(self, ledger: SafetyLedger, applied: Iterable[Action], snapshot: ClusterSnapshot,
               now: float) -> SafetyLedger:
        """The ledger after `applied` actions (each entry forgotten once its own window or cooldown has passed)."""
        p = self.policy
        # a cooldown is kept as long as it holds, not as long as the longest window: a successor inherits the ledger
        # from the Lease, whose annotation has a size limit, and an hour of power caps on a large fleet passed it
        # a time ahead of `now` (a predecessor whose clock ran ahead) is taken as now: it holds a full window from
        # here, not for as long as that clock was off
        last = {k: min(t, now) for k, t in ledger.last_action.items()
                if now - t < (p.power_cooldown_s if k.startswith(_POWER_KEYS) else p.cooldown_s)}
        evictions = [min(t, now) for t in ledger.evictions if now - t < p.eviction_window_s]
        # migrations are kept for their cooldown too, not only while settling: `_first_migration`
        kept = max(p.migration_settle_s, p.cooldown_s)
        migrations = [(min(m[0], now), *m[1:]) for m in ledger.migrations if now - m[0] < kept]
        for a in applied:
            if not _renewal(a):   # a renewal does not re-arm the taint's cooldown
                last[_cooldown_key(a)] = now
            if (owner := _disrupted_owner(a, snapshot)) is not None:   # its other kinds' cooldown (a reclaim too)
                last[_disruption_key(a.kind, owner)] = now
            evictions += [now] * _evictions(a, snapshot)
            if isinstance(a, Migrate):   # `owner`: its pod's owner (`_disrupted_owner` names one for every migration)
                migrations.append((now, snapshot.gpus[a.source_gpus[0]].node, a.target_node, owner))
        return SafetyLedger(MappingProxyType(last), tuple(evictions), tuple(migrations))


def _in_flight(t: _Tally, ledger: SafetyLedger, now: float, p: SafetyPolicy) -> None:
    """Count the ledger's migrations in flight into `t.per_node` and `t.per_owner` (`t.short` already counted).

    One started within `migrationSettleS` counts on its source and its target node, and for its owner. Past that, a
    migration whose replacement is not running yet is still in flight where it lands: the image pull and the model's
    warm-up `maxConcurrentMigrationsPerNode` bounds are still ahead on its target node (its source was freed when the
    pod stopped). The snapshot does not tell which pod is the replacement (the Kubernetes source lists running pods
    only: a Pending one shows as its owner's spec replicas beyond those placed), so an owner with replicas not running
    (`_short`) is taken to be waiting on as many of its migrations as it is short, the latest first (the earlier ones
    had longer to land), chosen among all of them, those still settling too: one of those is the likelier one
    Pending, and it counts on its nodes already. Those chosen past the settle window count on their target node, for
    no longer than `cooldownS`, the ledger's lifetime for them (`record`). Chosen among the older ones only, an owner
    short one replica whose move 20 s ago was Pending held the target of a move 5 minutes ago whose replacement
    had landed. An owner short for reasons of its own (a replica Pending for want of room) holds its targets' room
    that long at most: the safe side. The rule sees only what `_short` counts: the replicas beyond those placed of a
    service counted from its spec (`replicas_from_spec`) and the pods the snapshot lists Pending (the simulator's).
    A training or batch pod's Pending replacement the Kubernetes source does not list (running pods only), and no
    spec counts its job's replicas: such a move stops counting on its target node once it has settled. One pass over
    the ledger (its migrations within `cooldownS`), none over the workloads."""
    kept = max(p.migration_settle_s, p.cooldown_s)
    recent: dict[str, list[tuple[float, str, bool]]] = {}   # owner short -> (when, target, still settling)
    for when, src, dst, owner in ledger.migrations:
        settling = now - when < p.migration_settle_s
        if settling:
            t.per_node[src] = t.per_node.get(src, 0) + 1
            if dst != src:
                t.per_node[dst] = t.per_node.get(dst, 0) + 1
            t.per_owner[owner] = t.per_owner.get(owner, 0) + 1
        if now - when < kept and t.short.get(owner):
            recent.setdefault(owner, []).append((when, dst, settling))
    for owner, moves in recent.items():
        for _, dst, settling in sorted(moves, reverse=True)[:t.short[owner]]:
            if settling:   # counts on its nodes already; past the window it counts as landing (`_full`)
                t.pending.setdefault(dst, []).append(owner)
            else:
                t.per_node[dst] = t.per_node.get(dst, 0) + 1
                t.landing.setdefault(dst, []).append(owner)


def _full(t: _Tally, p: SafetyPolicy) -> frozenset[str]:
    """The nodes that stay full for a while (`MaxConcurrentMigrations.full_nodes`): those whose migrations past
    `migrationSettleS` still landing (`t.landing`) alone reach the limit, held until their owner's replicas run or
    `cooldownS` passes, counting with them those still settling that are taken for their owner's replica not running
    (`t.pending`): once settled they count as landing, so they free no room either. Left out, a node whose move 10 s
    ago is its owner's Pending one was proposed the next cycle and refused again, one node a cycle, the hot GPU
    throttled late. Not those full only with other migrations still settling (their sources too) or accepted in this
    review: they free within `migrationSettleS`, and kept off them for `refusedTargetRetryS` the pod was throttled
    though one had room by then (the loop keeps it off the refused target itself, whatever holds it, while
    `SafetyGuard.full_nodes` counts it). One pass over the nodes with any landing or pending."""
    held = {n: len(t.landing.get(n, ())) + len(t.pending.get(n, ())) for n in t.landing.keys() | t.pending.keys()}
    return frozenset(node for node, count in held.items() if count >= p.max_concurrent_migrations_per_node)


def _in_flight_on(node: str, t: _Tally, p: SafetyPolicy) -> str:
    """Why `node` takes no more migrations: those in flight there, naming the owners of those past the settle window
    still landing (`_in_flight`): whose replacement the next move waits on, and whether its owner's pods are Pending
    for another reason."""
    owners = t.landing.get(node, [])
    why = (f", {len(owners)} of them older than migrationSettleS ({p.migration_settle_s:.0f} s) with its owner's "
           f"replica not running yet: {', '.join(sorted(set(owners)))}" if owners else "")
    limit = p.max_concurrent_migrations_per_node
    return f"node {node} already has {t.per_node.get(node, 0)} in flight (limit {limit}{why})"


def _stopping_on(a: Action, ctx: ReviewContext) -> set[str]:
    """The nodes where a resize may stop pods: those of its job's or service's running pods when it evicts any
    (which ones go is the job's or the ReplicaSet's choice); none for one that stops nothing."""
    s = ctx.snapshot
    if not isinstance(a, ScaleTraining | ScaleInference) or not _evictions(a, s):
        return set()
    return {s.gpus[g[0]].node for w in ctx.touched(a) if (g := s.placements.get(w.name))}


def _disrupted_owner(a: Action, snapshot: ClusterSnapshot) -> str | None:
    """The owner (Deployment, job) whose running or pending pods `a` disrupts: a migration's pod's owner, a
    scale-down's service, a shrink's or stop's job (a reclaim's too: it stops the job's workers, though no limit of
    this kind refuses it), or a resize's that stops workers; None for anything else (a scale-up)."""
    if isinstance(a, Migrate):
        w = snapshot.workload_by_name.get(a.workload)
        return (w.owner or w.name) if w else a.workload
    if isinstance(a, ScaleInference) and a.replicas < a.previous_replicas:
        return a.service
    if isinstance(a, ScaleTraining) and (a.workers < a.previous_workers or _evictions(a, snapshot)):
        return a.job
    return None


def _check_disruption(a: Action, owner: str | None, ctx: ReviewContext) -> None:
    """Raise MaxUnavailable when `a`, disrupting `owner` (`_disrupted_owner`), and a disruption of the same owner
    accepted earlier in this review, or a reclaim of it anywhere in the plan (`_reclaimed`), would disrupt it twice
    at once, one of them a resize: a migration's cooldown is kept under the pod, a resize's under the owner, so "one
    action per target a cycle" never sees them meet, and `maxUnavailablePerWorkload` counts migrations only (a
    scale-down's several evictions are a resize, not replicas unavailable; two migrations of one owner are that
    limit's to count). A reclaim is never refused by it."""
    if owner is None or _reclaim(a):
        return
    for other in ctx.disrupted.get(owner, ()):   # the same target twice is the per-target rule's (`ctx.acted`)
        if other.target != a.target and not (isinstance(a, Migrate) and isinstance(other, Migrate)):
            how = "reclaimed" if _reclaim(other) else "already disrupted"
            raise MaxUnavailable(f"{owner} is {how} this cycle by {other.kind} {other.target}: a resize and another "
                                 "disruption of one owner never go together")


def _reclaimed(actions: list[Action], snapshot: ClusterSnapshot) -> dict[str, list[Action]]:
    """The reclaims in `actions` by the job they shrink: disruptions of it from the review's start, since no limit
    of this kind refuses a reclaim, so the other disruption of its job is the one refused wherever it comes."""
    out: dict[str, list[Action]] = {}
    for a in actions:
        if _reclaim(a) and (owner := _disrupted_owner(a, snapshot)) is not None:   # a scale-up disrupts no owner
            out.setdefault(owner, []).append(a)
    return out


def _renewal(a: Action) -> bool:
    return isinstance(a, TaintNode) and a.renew


def action_limit(a: Action) -> tuple[bool, bool]:
    """Whether `a` counts against `maxActionsPerCycle`, and whether that limit may refuse it (the guard's rule,
    for checks that replay a run's actions)."""
    return not _renewal(a), not _renewal(a) and not _reclaim(a)


def _reclaim(a: Action) -> bool:
    """Serving capacity added, or loaned GPUs taken back for it: counted against `maxActionsPerCycle` but never
    refused by it, as the eviction budget spends on a reclaim without refusing it. Refused, the shrinks a plan made
    for a scale-up could pass while the scale-up, later in the plan, did not: GPUs freed for nothing for a cycle, and
    the replicas a rise needs a warm-up later."""
    return (isinstance(a, ScaleInference) and a.replicas > a.previous_replicas) or (
        isinstance(a, ScaleTraining) and a.reclaim)


_POWER_KEYS = tuple(f"{c.kind}:" for c in (SetPowerLimit, TaintNode))   # the keys `powerCooldownS` holds


_DISRUPTIVE_KINDS = (Migrate.kind, ScaleInference.kind, ScaleTraining.kind)   # the kinds `_disrupted_owner` names


def _disruption_key(kind: str, owner: str) -> str:
    """Where the ledger keeps when `owner` was last disrupted by an action of `kind` (`_check_owner_cooldown`)."""
    return f"disrupted:{kind}:{owner}"


def _first_migration(ledger: SafetyLedger, owner: str, now: float, cooldown: float) -> float | None:
    """The earliest migration of a pod of `owner` within `cooldown` of `now`, or None: the ledger keeps its
    migrations that long (`record`), and the latest under `_disruption_key` (a ledger kept for the settle window
    only, from before, has that one). The rule is `_earliest_within`'s."""
    latest = ledger.last_action.get(_disruption_key(Migrate.kind, owner))
    times = [m[0] for m in ledger.migrations if m[3] == owner] + ([] if latest is None else [latest])
    return _earliest_within(times, now, cooldown)


def _earliest_within(times: Iterable[float], now: float, cooldown: float) -> float | None:
    """The earliest of an owner's migration `times` within `cooldown` of `now`, or None: the one rule
    `_first_migration` (one owner) and `_migrated` (every owner at once) apply."""
    return min((t for t in times if now - t < cooldown), default=None)


_MIGRATED = _disruption_key(Migrate.kind, "")   # the prefix of the ledger's keys for an owner's latest migration


def _migrated(ledger: SafetyLedger, owners: Iterable[str], now: float, cooldown: float) -> set[str]:
    """Those of `owners` with a migration within `cooldown` of `now`: `_first_migration`'s times (its migrations,
    its latest under `_disruption_key`) grouped by owner in one pass over the ledger, and its rule
    (`_earliest_within`) applied to each owner the ledger names that is among `owners`. Asked owner by owner, each
    asking scanned all the ledger's migrations: with a thousand of them, 18 ms a review (20k services), 1 ms so."""
    times: dict[str, list[float]] = {}
    for when, _, _, owner in ledger.migrations:
        times.setdefault(owner, []).append(when)
    for key, when in ledger.last_action.items():
        if key.startswith(_MIGRATED):
            times.setdefault(key[len(_MIGRATED):], []).append(when)
    return {o for o in times.keys() & owners if _earliest_within(times[o], now, cooldown) is not None}


def _cooldown_key(a: Action) -> str:
    """What `a`'s cooldown is kept under in the ledger: a power limit's GPU and a taint's node by kind, since they
    have a cooldown of their own (`powerCooldownS`); a workload, job or service by name."""
    return f"{a.kind}:{a.target}" if isinstance(a, SetPowerLimit | TaintNode) else a.target


def _sources(a: Action, snapshot: ClusterSnapshot) -> frozenset[str]:
    """The nodes a move leaves (none for any other action)."""
    if not isinstance(a, Migrate):
        return frozenset()
    return frozenset(snapshot.gpus[i].node for i in a.source_gpus if 0 <= i < snapshot.n_gpus)
