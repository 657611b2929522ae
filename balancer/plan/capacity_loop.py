"""Capacity shifting inside the reconcile loop: the hotspot and co-location plan first, then the tidal plan.

`plan_with_capacity` is the planner `gputide run` uses when the policy file's ``capacity.enabled`` is true. It
runs `balancer.plan.planner.plan` (hotspots, co-location), then `balancer.plan.capacity_plan.plan_capacity` on the
same snapshot with the cycle's forecasts (its idle GPUs less those the hotspot plan's migrations target and those on
nodes it taints hot; those of the hot node its taint keeps open in a heat wave are the services' but no job's:
`claims`), and appends the capacity actions (ScaleTraining shrinks before the ScaleInference that needs their GPUs,
as `plan_capacity` orders them) to the plan. Every action of both then goes through the one safety chokepoint
(`SafetyGuard.review`): cooldowns, the eviction budget and the per-cycle cap bound the tide exactly as they bound
hotspot moves (a reclaim for inference, its scale-up and the shrinks that free its GPUs, spends the budget and the cap
but is never refused by them).

Elastic training jobs are then sized by the tide: the hotspot planner's give-back of workers it shrank (after a
hotspot cooled) is dropped for them, since it would grow a job into GPUs just reclaimed for inference; idle GPUs
reach training through the capacity plan's own growth. A job's shrink record (`gputide.io/shrunk`) stays valid until
the tide resizes the job, so the give-back is proposed again every cycle: each plan that drops it says so in a note
naming the job, the same text while it lasts (the loop logs a note once while it lasts), and its gain is taken out of
the plan's `objective_after` (before, it was dropped silently and its gain still counted). The two planners never
touch one workload in the same cycle: when the hotspot plan already acts on a service
or a training job (a migration of one of its pods, a shrink) that the capacity plan would also resize, the capacity
plan is made again without it (`_without`): that service keeps its replicas and its hysteresis state is not advanced
(the change it would have made did not happen), that job is neither shrunk nor grown, and what depended on them goes
with them (a scale-up that needed the GPUs the job's shrink would free, a growth onto GPUs the service's loan would
free). Nothing new comes in: jobs the first plan left alone stay alone. The rest of the capacity plan goes out, with a
note; before, one clash held back every capacity action, every cycle the hotspot plan proposed it again (even when
the guard refused it each time).

A service whose scaling the actuator failed for good (FAILED: a Deployment another controller keeps, such as
KServe's or an operator's, or an HPA KEDA generates, both code `refused`; RBAC, a Deployment that is not there) is
left out of the capacity plan for `safety.cooldownS` after (`planner.refuse(..., scales=...)`,
`PlannerState.refused_scales`), with a note naming it, the same text while it lasts (the loop logs it once): before,
the same refused ScaleInference was proposed every cycle, and training could be shrunk first to make room for a
growth that could not happen. Its GPUs stay its own; training shrunk for the refused growth is grown back into what
stays idle, as any idle GPUs.

A service whose scale the actuator carried out short of what it asked (`ActionResult.capped_to`: an HPA floor capped
at its maxReplicas, the profile leaving maxReplicas unset or above it; `planner.cap`, `PlannerState.capped_scales`)
is held to that cap (`_capped`: its profile's maxReplicas lowered to it), with a note naming it and the cap, the
same text while it lasts (the loop logs it once): no more replicas asked, so no training shrunk for replicas that
never start, and training shrunk for them is grown back into the GPUs they leave idle, as any idle GPUs. Before, the
planner asked for the whole floor every cycle and kept those GPUs idle. The cap is believed for half
`safety.cooldownS` (a minute at least) after it was first met, then twice as long each time the same cap is met
again, up to the capacity policy's loan horizon (`planner.CapBelief` says both rules); a new leader learns it
afresh. Asked again after that, the scale goes through if maxReplicas was raised (the HPA does not scale past the
floor on its own when its own metrics ask for no more), which ends the belief (`planner.cap`; before, the cap was
still counted, and a cap met later counted as met once more), or is capped and believed again at the same bound
(counted once more) or at a higher one (counted afresh). A service's spec.replicas above its cap
(`gputide_inference_replicas`, `ServiceStatus.replicas_from_spec`) end the belief at once: the HPA keeps them at
most its maxReplicas, so the operator raised it and the HPA scaled past the cap on its own metrics; the service is
planned as any from that cycle on. Before, such a raise was ignored while the belief lasted (up to the loan
horizon): the service was held at what it ran, training grown into the GPUs its demand needed and shrunk again when
it was asked at last, two restarts. Only spec.replicas read `safety.maxTelemetryAgeS` or more after the cap was met
count, though (`CapBelief.raised_by`): a reading shows them a kube-state-metrics scrape and a rule evaluation late,
and says not when they were sampled (an instant query answers its evaluation time), so one read sooner may be what
the service ran before maxReplicas was lowered to the cap. Before, that ended the belief just learned: the service
was asked again in vain and the cap counted met afresh. A raise read sooner is planned that much later. Replicas
counted from its pods (a service without that series) say nothing of its HPA's maxReplicas: a rolling update runs up
to maxSurge pods above it while the rollout lasts, and a raise the HPA scaled past looks the same; there only the
actuator's word, on the next ask, ends a belief early. Before, a count above the cap forgot it: each rollout asked
again at once, shrinking training for replicas that never start, and started the doubling afresh. Held at the cap
meanwhile, a service that runs more is held at what it runs (`_ceiling`): nothing of it lent for the cap.
The two errors: a cap believed too long ignores an operator's raise of maxReplicas, leaving the service short of
what its demand needs; one believed too briefly asks again in vain, shrinking training for replicas that never start
(a restart of its workers, and another when they are grown back). The first ask again costs no shrink (the training
shrunk for the capped scale is grown back no sooner than `safety.cooldownS` after, so the GPUs the cap left idle are
idle still) and sees a raise made on the operator's warning within minutes; the doubling bounds the asks made in
vain to a few, then one per loan horizon (the GPUs the cap frees are lent for that long). A lapsed cap is
remembered, unbelieved, for a loan horizon more, to count the same cap met again.

Capacity holds (no capacity action, a note) while inference pods on GPUs have no owner and a profiled service
that reports replicas has none of its own: its pods are there but cannot be told apart, and a service that looks
empty would be "reclaimed" for from every training job at once (a controller started before the Kubernetes API
answered, a dry run without the API, a join table without owners). A stray bare pod does not stop the tide.
So does it (`capacity_holding` "inference_demand_unknown", a note naming each service and why) while a profiled
service's demand is unknown (`ClusterSnapshot.demand_unknown`: a stalled vLLM pod, fewer pods reporting than ready; or
no serving series at all while its pods run, `unseen_services`, put in the snapshot's `demand_unknown` for the whole
plan by `with_unseen`, on a shard too: a scrape lost for over 5 minutes, or never set up): read
as 0 it looks idle and its GPUs would be lent to training, and every other plan's arithmetic would miss it. The hotspot
and co-location plan goes on (thermal relief, consolidation of other pods); before, the reading was refused and the
whole loop held still, fleet-wide, until the pod was mended. No timer: it holds as long as the demand is unknown, and
GputideInferenceDemandUnknown names the service after 10 minutes (its pods are not consolidated meanwhile;
`PlannerState.demand_held`, gputide_inference_demand_unknown{service}, names each service held for, and why, which
the loop logs). Both holds at once: both notes, both reasons (`capacity_holding` {"inference_demand_unknown",
"unattributed_pods"}, a gauge series each; before, the demand's hid the other). Either hold leaves training's growth
to the tide: the give-backs `_tide_sizes_training` drops are dropped then too (before, the hold returned before that
filter, and a hotspot or co-location give-back grew training into free GPUs the held service may need), for the jobs
on GPU models a held service may use (unattributed pods: every job); their shrinks stay remembered, still owed,
until the tide plans and sizes the jobs. A hold decides no target: the services' targets go (`capacity_targets`
empty: gputide_capacity_target_gpus absent; before, the last planned cycle's stayed, as if current, for as long as
it held); the loans made stand, so `loaned_gpus` stays.

Pure: the capacity planner's memory (`CapacityState`) rides in `PlannerState.capacity`; what it decided for the
metrics goes to `loaned_gpus` and `capacity_targets`. It counts a service's scale as made when it plans it (the
hysteresis' last change, the latency net's step); the loop tells it which did not go out for a passing cause
(`unsent`: an emergency stop, held on the fresh snapshot, skipped once the cycle was stopped, failed having changed
nothing; not the guard's lasting refusals), and the memory of those that scaled up is put back as before the plan,
and of those whose latency-net step only reclaim shrinks that did not go out served (such a shrink names the steps
it frees GPUs for where no idle GPU served them; a step that partly went out is kept); a scale down waits its hold as
if made, save one the hand-over held back (the ledger unsaved): `planner.ledger_saved` puts its memory back as before
the plan once a cycle's start saves the ledger, and it is planned again then.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

import numpy as np

from balancer.config import BalancerPolicy
from balancer.model import (
    Action,
    ClusterSnapshot,
    Forecast,
    Migrate,
    Plan,
    ScaleInference,
    ScaleTraining,
    TaintNode,
    WorkloadClass,
    placed,
)
from balancer.plan import colocation
from balancer.plan import planner as planner_mod
from balancer.plan.capacity import (
    CapacityPolicy,
    CapacityState,
    CapacityView,
    ServiceCapacity,
    ServiceView,
    view_from_snapshot,
)
from balancer.plan.capacity_plan import plan_capacity

Planner = Callable[..., tuple[Plan, planner_mod.PlannerState]]
_NONE: Mapping[str, str] = MappingProxyType({})   # no service held for (`PlannerState.demand_held`)
FIRST_BELIEF_MIN_S = 60.0   # a cap is believed at least this long at first, whatever safety.cooldownS (`_capped`)
# `PlannerState.capacity_holding`'s reasons: gputide_capacity_holding's label values, which alerts and
# runbooks name, so spelt once here (the loop tests them too)
HOLD_DEMAND_UNKNOWN = "inference_demand_unknown"
HOLD_UNATTRIBUTED = "unattributed_pods"
# why a profiled service with pods on GPUs and no serving series at all is held (`unseen_services`)
NO_SERIES = ("no serving series at all while its pods run: gputide_inference_demand_rps absent, not NaN (its vLLM "
             "metrics unscraped for over 5 minutes, or their scrape or the rules/serving/ rule not set up for it)")
# ... where its name's series are there, all namespace-qualified (`no_series_why`): NO_SERIES would send the operator
# to a scrape that works. {names} are those the snapshot shows, so a shard's note names them as the fleet's does: a
# shard keeps a qualified NaN key where the bare name's pods are (`shard.restrict`, the Prometheus source's `_running`)
QUALIFIED = ("no serving series under its name while its pods run: its name's series are found in more than one "
             "namespace, so each is read as namespace/service ({names} among them), none of them the profile's name "
             "(a namespace move whose old series linger, or a namesake in another namespace)")


@dataclass(frozen=True)
class Hold:
    """Why capacity holds this cycle (`_holding`), worked out once: `notes`, {reason: note}, empty when it plans; the
    profiled services whose demand is unknown, with why (`held_services`, {service: why}: `PlannerState.demand_held`)
    and whether profiled services' pods are unattributed (`blind`), which `_held_jobs` reads. Before, it filtered the
    demand unknown again and tested a note's key."""
    notes: Mapping[str, str]
    held_services: Mapping[str, str] = field(default_factory=lambda: _NONE)
    blind: bool = False


def touched(actions: tuple[Action, ...], snapshot: ClusterSnapshot) -> set[str]:
    """Services and jobs the actions act on: targets, and the owner of every migrated workload."""
    owners = {w.name: w.owner for w in snapshot.workloads if w.owner}
    out = {a.target for a in actions}
    out |= {owners[a.workload] for a in actions if isinstance(a, Migrate) and a.workload in owners}
    return out


def claims(actions: tuple[Action, ...], snapshot: ClusterSnapshot | None = None,
           kept_open: str | None = None) -> dict[str, set]:
    """What the hotspot plan takes from the idle pool this cycle, `view_from_snapshot`'s arguments: the GPUs its
    migrations target (`claimed`: used, a GPU lent there would have two users) and the nodes it taints hot
    (`tainting`: none that can schedule), and every GPU of the hot node its taint keeps open (`unlent`; `kept_open`,
    `PlannerState.kept_open`, named only while that node is hot, its GPUs found in `snapshot`): the taint spares it
    only so that a pod with nowhere else to go has a place, so no job grows onto it, but its idle GPUs stay free for
    the services (a scale-up, a pending replica, which the scheduler puts there anyway). Before, they were `claimed`:
    used, hidden from inference too, so a service's pending replicas looked placeless and the tide shrank training
    elsewhere every cycle of the heat wave to make room for replicas that landed on those idle GPUs anyway; and
    before that, the kept node looked as open as a cool one, and the tide lent its idle GPUs to training."""
    unlent = _gpus_on(snapshot, kept_open) if kept_open is not None and snapshot is not None else set()
    return {"claimed": {g for a in actions if isinstance(a, Migrate) for g in a.target_gpus},
            "tainting": {a.node for a in actions if isinstance(a, TaintNode) and not a.remove}, "unlent": unlent}


def _gpus_on(snapshot: ClusterSnapshot, node: str) -> set[int]:
    """The GPUs of every node named `node`: their `node_index` among all its positions in `nodes`, a loop over the
    nodes, not the GPUs. Every position, not `node_position`'s first: a name may repeat (clusters merged), and
    `node_index` maps a repeated name's GPUs to one of its positions only."""
    at = [i for i, n in enumerate(snapshot.nodes) if n.name == node]
    return set(np.flatnonzero(np.isin(snapshot.node_index, at)).tolist()) if at else set()


def unattributed_services(snapshot: ClusterSnapshot, profiles: Mapping[str, ServiceCapacity]) -> list[str]:
    """Profiled services that report replicas but own no pod, while some inference pods have no owner."""
    if not placed(snapshot, "", WorkloadClass.INFERENCE):
        return []
    return sorted(n for n, st in snapshot.services.items()
                  if n in profiles and st.replicas > 0 and not placed(snapshot, n, WorkloadClass.INFERENCE))


def unseen_services(snapshot: ClusterSnapshot, profiles: Mapping[str, ServiceCapacity]) -> list[str]:
    """Profiled services with a pod placed on a GPU and no serving series at all: no status, and not in
    `demand_unknown` (`NO_SERIES`). Their demand is as unknown as a NaN one: rules/serving/vllm.yaml records it NaN
    while pods report fewer than ready, and absent once no pod has reported for the 5 min its rate reads (every
    scrape lost), and a profile's minReplicas is 1 at least so that a profiled service always has a pod to report
    it. Before, such a service was simply left out of the plan: no hold, no note, and the idle GPUs its demand needs
    lent to training, 3 minutes after the same lost scrape had held. A profiled service with no pod placed (not deployed
    yet, deleted, all on a forgotten node) has nothing running to misjudge: left out, as co-location counts it gone;
    so is one a shard left out because it spans two shards (`spread_services`: its demand is known elsewhere)."""
    return sorted(n for n in profiles if n not in snapshot.services and n not in snapshot.demand_unknown
                  and n not in snapshot.spread_services and placed(snapshot, n, WorkloadClass.INFERENCE))


def no_series_why(snapshot: ClusterSnapshot, service: str) -> str:
    """Why `service` has no series (`unseen_services`): `NO_SERIES`, or `QUALIFIED` naming the namespace-qualified
    names its series are read under that `snapshot` shows (`serving.read_services`: a `service` label found with two
    namespaces)."""
    names = sorted(k for k in (*snapshot.services, *snapshot.demand_unknown) if k.partition("/")[2] == service)
    return QUALIFIED.format(names=", ".join(names)) if names else NO_SERIES


def with_unseen(snapshot: ClusterSnapshot, profiles: Mapping[str, ServiceCapacity]) -> ClusterSnapshot:
    """`snapshot` with each of `unseen_services` in `demand_unknown` (`no_series_why`): one mechanism for everything
    that leaves a NaN demand alone, the capacity hold, consolidation (its pods not restarted for housekeeping) and
    co-location (no give-back for it). Before, the capacity hold alone read them, and consolidation moved a held
    service's pods. Here, not in the telemetry source: only a profile says a service must report a demand (its
    minReplicas >= 1); an unprofiled inference service without vLLM metrics is no unknown demand."""
    unseen = unseen_services(snapshot, profiles)
    if not unseen:
        return snapshot
    return snapshot.replace(demand_unknown={**snapshot.demand_unknown,
                                            **{n: no_series_why(snapshot, n) for n in unseen}})


def _tide_sizes_training(plan: Plan, state: planner_mod.PlannerState, managed: set[str],
                         holding: bool = False) -> tuple[Plan, planner_mod.PlannerState]:
    """`plan` without the growths of the jobs the tide sizes (`managed`), and `state` without the hotspot planner's
    memory of their shrinks. Elastic training is sized by the tide: the hotspot planner's "give the workers back"
    after a cooled hotspot would grow a job into GPUs the capacity plan reclaimed for inference; idle GPUs reach
    training through the capacity plan's own growth instead. Each growth dropped gets a note (no number in it that
    changes while the job does not, so the loop logs it once) and its gain leaves `objective_after`. `holding`: the
    tide sizes nothing this cycle, so the memory stays: the workers held back are still owed (gputide_shrunk_workers;
    forgotten, a job stayed short for the whole hold owed nowhere), given back by the tide once it plans."""
    grows = [a for a in plan.actions if isinstance(a, ScaleTraining) and a.job in managed
             and a.workers > a.previous_workers]
    if grows:
        notes = tuple(f"dropped {a.kind} {a.job}: {_whose(a)} {a.previous_workers} -> {a.workers} workers is left to "
                      "the tide, which sizes elastic training in capacity mode (it would grow the job into GPUs the "
                      "capacity plan may reclaim for inference; idle GPUs reach it through the capacity plan's growth)"
                      for a in grows)
        plan = replace(plan, actions=tuple(a for a in plan.actions if a not in grows), notes=plan.notes + notes,
                       objective_after=plan.objective_after + sum(a.expected_gain for a in grows))
    if holding:
        return plan, state
    if managed & set(state.shrunk):
        state = replace(state, shrunk={k: v for k, v in state.shrunk.items() if k not in managed})
    # co-location's memory (and record) of a shrink whose give-back the tide took over: kept, it held the job
    # "shrunk" for ever (no later co-location shrink of it, the hotspot's give-back waiting behind it)
    handed = {a.job for a in grows if a.cause == "colocation_slack"}
    return plan, replace(state, colocation=colocation.hand_over(state.colocation, handed))


def _holding(snapshot: ClusterSnapshot, profiles: Mapping[str, ServiceCapacity]) -> Hold:
    """Why capacity holds this cycle (`Hold`): a profiled service's demand unknown (NaN, or no series while its pods
    run: put in `demand_unknown` by `with_unseen`), profiled services' pods unattributed, or both (each named: before,
    the demand's hid the other)."""
    why: dict[str, str] = {}
    unknown = {n: because for n, because in snapshot.demand_unknown.items() if n in profiles}
    if unknown:
        why[HOLD_DEMAND_UNKNOWN] = (
            f"capacity holds: the demand of {'; '.join(f'{n} ({b})' for n, b in sorted(unknown.items()))} "
            "is unknown: read as 0 it would look idle, so no service is scaled, "
            "no GPU lent nor reclaimed, no room made, no training grown onto the GPU models it may use, until "
            "it is known again; thermal relief goes on")
    blind = unattributed_services(snapshot, profiles)
    if blind:
        why[HOLD_UNATTRIBUTED] = (f"capacity holds: inference pods on GPUs have no owner and {', '.join(blind)} "
                                  "report replicas but own none of them (pod metadata not read yet?)")
    return Hold(MappingProxyType(why), MappingProxyType(dict(sorted(unknown.items()))), bool(blind))


def _held_jobs(view: CapacityView, snapshot: ClusterSnapshot, profiles: Mapping[str, ServiceCapacity],
               hold: Hold) -> set[str]:
    """The jobs whose give-backs a hold drops: those that may grow onto a GPU model (theirs, None: any in the fleet)
    that a service whose demand is unknown (`Hold.held_services`) may use (its profile's `models`; None: any). Pods
    unattributed (`Hold.blind`) name no service: every job the tide sizes. Before, every job's were dropped, and one
    on models no held service can use stayed short for the whole hold."""
    jobs = {j.name: j.models for j in view.jobs}
    if hold.blind:
        return set(jobs)
    models = [profiles[n].models for n in hold.held_services]
    if any(m is None for m in models):
        return set(jobs)
    wanted, fleet = frozenset().union(*models), frozenset(g.model for g in snapshot.gpus)
    return {name for name, m in jobs.items() if (fleet if m is None else m) & wanted}


def _whose(a: ScaleTraining) -> str:
    if a.shrunk_from == 0:
        return "the hotspot give-back"
    return "co-location's give-back" if a.cause == "colocation_slack" else "the growth"


def _without(view: CapacityView, clash: list[str], first: tuple[Action, ...]) -> CapacityView:
    """`view` for planning again without the services and jobs in `clash`: those services out of it (their GPUs stay
    theirs, their hysteresis memory untouched), those jobs and every job `first` did not resize protected (neither
    shrunk nor grown), so a scale-up that needed a clashing job's GPUs gets only what else `first` freed."""
    resized = {a.target for a in first if isinstance(a, ScaleTraining)} - set(clash)
    return replace(view, services=tuple(s for s in view.services if s.profile.name not in clash),
                   jobs=tuple(j if j.name in resized else replace(j, protected=True) for j in view.jobs))


def _without_refused(view: CapacityView, refused: Mapping[str, float]) -> tuple[CapacityView, list[str]]:
    """`view` without the services whose scaling the actuator refused lately (`refused`: {service: when}), and their
    names: they are neither grown (no training shrunk for them) nor shrunk meanwhile (module docstring)."""
    held = sorted(s.profile.name for s in view.services if s.profile.name in refused)
    if not held:
        return view, held
    return replace(view, services=tuple(s for s in view.services if s.profile.name not in refused)), held


def _capped(view: CapacityView, caps: Mapping[str, planner_mod.CapBelief], first_s: float, horizon_s: float,
            *, specs: Mapping[str, int] | None = None, spec_lag_s: float | None = None,
            ) -> tuple[CapacityView, dict[str, planner_mod.CapBelief], list[str]]:
    """`view` with each service whose scale the actuator capped (`caps`) held to that cap while it is believed
    (`CapBelief.held_at`: its profile's maxReplicas, and minReplicas, at most `_ceiling`), the caps still remembered
    (`CapBelief.kept_at`, and no service's spec.replicas above its cap since it was met: `specs`, {service:
    spec.replicas} where the snapshot has them, each sampled up to `spec_lag_s` before it, `CapBelief.raised_by`),
    and the notes for the services held. The replicas counted from a service's pods never end a cap (module
    docstring): a rolling update runs up to maxSurge pods above the HPA's maxReplicas, which a pod count cannot tell
    from a raise; its spec.replicas can (the HPA keeps them at most its maxReplicas). `specs` come with their lag or
    not at all: a lag of 0 by default read spec.replicas sampled before the cap was met as a raise, ending a belief
    just learned (`CapBelief.raised_by`), for any caller that forgot it."""
    if specs is not None and spec_lag_s is None:
        raise TypeError("_capped: specs without spec_lag_s (how long before the snapshot they may have been sampled)")
    specs, spec_lag_s = specs or {}, spec_lag_s or 0.0
    kept = {name: b for name, b in caps.items() if b.kept_at(view.time, first_s, horizon_s)
            and not b.raised_by(specs.get(name, 0), view.time - spec_lag_s)}
    ceilings = {s.profile.name: c for s in view.services   # each held service's `_ceiling`, computed once
                if (b := kept.get(s.profile.name)) is not None and b.held_at(view.time, first_s, horizon_s)
                and (c := _ceiling(s, b)) < s.profile.max_replicas}
    held = {name: kept[name] for name in ceilings}
    if not held:
        return view, kept, []
    services = tuple(s if s.profile.name not in held else replace(s, profile=replace(
        s.profile, max_replicas=ceilings[s.profile.name],
        min_replicas=min(s.profile.min_replicas, ceilings[s.profile.name]))) for s in view.services)
    notes = [f"capacity holds {name} at {ceilings[name]} replicas, where the actuator capped its scale (the HPA's "
             f"maxReplicas {b.cap}, or what it runs above it; its scale_inference's detail says so): no more asked, "
             f"nor room made for more, for "
             f"{b.believed_s(first_s, horizon_s) / 60:.0f} min after, then asked again (raise the HPA's maxReplicas, "
             f"or set the profile's maxReplicas to {b.cap})" for name, b in sorted(held.items())]
    return replace(view, services=services), kept, notes


def _ceiling(s: ServiceView, belief: planner_mod.CapBelief) -> int:
    """The most replicas a service held at a cap may have: the cap, or the replicas it runs above it (a rolling
    update's surge, or the HPA past a raised maxReplicas on its own metrics): lower, the hold would lend the GPUs of
    pods that stay, growing training onto GPUs that are not free."""
    return max(belief.cap, s.replicas)


def plan_with_capacity(snapshot: ClusterSnapshot, forecasts: Mapping[str, Forecast] | None, policy: BalancerPolicy,
                       state: planner_mod.PlannerState | None = None, *, profiles: Mapping[str, ServiceCapacity],
                       capacity_policy: CapacityPolicy, bursts: Mapping[str, float] | None = None,
                       base: Planner = planner_mod.plan, sharded: bool = False,
                       ) -> tuple[Plan, planner_mod.PlannerState]:
    """`base`'s plan, plus the capacity plan for the services in `profiles` (see the module docstring); `sharded`:
    the snapshot is one shard's (`view_from_snapshot`)."""
    if policy.capacity.enabled and profiles:
        snapshot = with_unseen(snapshot, profiles)   # `base`'s consolidation and co-location leave them alone too
    plan, state = base(snapshot, forecasts, policy, state)
    if not policy.capacity.enabled or not profiles:   # a hold kept from before a reload would read on for ever
        return plan, replace(state, capacity_holding=frozenset(), demand_held=_NONE)
    cap_state = state.capacity if isinstance(state.capacity, CapacityState) else CapacityState()
    view = view_from_snapshot(snapshot, profiles, bursts=bursts, sharded=sharded, forgotten=snapshot.forgotten_nodes,
                              protected_namespaces=policy.safety.protected_namespaces,
                              **claims(plan.actions, snapshot, state.kept_open))
    hold = _holding(snapshot, profiles)
    if hold.notes:
        # training is the tide's to size even while it holds: the give-backs it drops would grow jobs into GPUs
        # that may be the held service's (its pending replicas) or be reclaimed for it once its demand is known;
        # only those of jobs on GPU models a held service may use (`_held_jobs`)
        plan, state = _tide_sizes_training(plan, state, _held_jobs(view, snapshot, profiles, hold), holding=True)
        # no target decided: the last planned cycle's would read as current for as long as it holds (the loans
        # made stand, nothing lends nor reclaims, so `loaned_gpus` stays)
        return (replace(plan, notes=plan.notes + tuple(hold.notes.values())),
                replace(state, capacity=cap_state, capacity_holding=frozenset(hold.notes), capacity_targets={},
                        demand_held=hold.held_services))
    state = replace(state, capacity_holding=frozenset(), demand_held=_NONE)
    counts = ", ".join(f"{n} of {name}" for name, n in sorted(view.unseen.items()))
    dark = ", ".join(sorted(snapshot.forgotten_nodes))
    forgotten_notes = ((f"capacity counts {counts} replicas as running unseen on {dark}, whose GPUs telemetry has "
                        "forgotten (gputide_gpus_forgotten): at most what those GPUs hold; no room is made for them, "
                        "idle GPUs are kept for them, and replicas asked beyond are pending as ever",)
                       if view.unseen else ())
    forgotten_notes += ((f"capacity leaves {', '.join(view.uncounted)} alone while telemetry has forgotten {dark} "
                         "(gputide_gpus_forgotten): counted from its pods (no gputide_inference_replicas series), it "
                         "may run replicas there unseen, and a scale to a count read without them could add or remove "
                         "live ones: not scaled, nor lent, nor room made for it, nor the idle GPUs of its models lent "
                         "to training",) if view.uncounted else ())
    view, held = _without_refused(view, planner_mod.scales_held(state, policy, snapshot.time))
    view, caps, capped = _capped(view, state.capped_scales, max(policy.safety.cooldown_s / 2, FIRST_BELIEF_MIN_S),
                                 capacity_policy.loan_horizon_s,
                                 specs={n: st.replicas for n, st in snapshot.services.items() if st.replicas_from_spec},
                                 spec_lag_s=policy.safety.max_telemetry_age_s)
    state = replace(state, capped_scales=MappingProxyType(caps))
    plan, state = _tide_sizes_training(plan, state, {j.name for j in view.jobs})
    if capacity_policy.allow_suspend and snapshot.suspended_jobs is None:
        # a Job at parallelism 0 has no pods: a source that cannot list suspended jobs would lose it for good
        capacity_policy = replace(capacity_policy, allow_suspend=False)
    decision = plan_capacity(view, forecasts or {}, capacity_policy, cap_state)
    state = replace(state, loaned_gpus=decision.split.loaned, capacity_targets=dict(decision.targets),
                    capacity_split=decision.split.as_dict())
    clash = sorted({a.target for a in decision.actions} & touched(plan.actions, snapshot))
    notes = plan.notes + tuple(f"capacity leaves {name} alone: the actuator failed scaling it for good (its failed "
                               "scale_inference's detail says why): not scaled, nor room made for it, for "
                               "safety.cooldownS after" for name in held) + tuple(capped) + forgotten_notes
    if clash:
        decision = plan_capacity(_without(view, clash, decision.actions), forecasts or {}, capacity_policy, cap_state)
        notes += (f"capacity leaves {', '.join(clash)} to the hotspot plan this cycle, with what needed them",)
    notes += tuple(f"capacity: {n}" for n in decision.notes)
    return (replace(plan, actions=plan.actions + decision.actions, notes=notes),
            replace(state, capacity=decision.state))


def remembered(action: Action) -> bool:
    """Whether `unsent` reads `action`: a capacity scale, or a reclaim shrink that names the latency-net steps it
    serves (`ScaleTraining.service`)."""
    return isinstance(action, ScaleInference) or (
        isinstance(action, ScaleTraining) and action.cause == "reclaim" and bool(action.service))


def named(actions: Iterable[Action], counted: Callable[[str], bool] = bool) -> set[str]:
    """The latency-net steps the reclaim shrinks among `actions` name (`ScaleTraining.service`), those `counted`."""
    return {n for a in actions if remembered(a) and isinstance(a, ScaleTraining) for n in a.service.split(",")
            if n and counted(n)}


def unsent(state: planner_mod.PlannerState, before: planner_mod.PlannerState,
           actions: Iterable[Action], sent: Iterable[Action] = ()) -> planner_mod.PlannerState:
    """`state`, the one a cycle's plan returned, once the `actions` of that plan did not go out (an emergency stop held
    them, the fresh snapshot did, the cycle stopped before them, or the actuator failed them having changed nothing:
    `Reconciler._unsent`): the hysteresis memory of each service scaled up among them, or whose latency-net step a
    reclaim shrink among them freed GPUs for (`ScaleTraining.service` names it: a step served by replicas already asked
    sends no scale, only those shrinks) and no shrink among the `sent` ones of that plan did, as `before` the plan, as
    if never proposed: its last change and first sighting, and its emergency step. A step that partly went out (another
    job's shrink sent, or an idle GPU: `apply_targets` names no step one serves) is kept as made: its replicas changed,
    and forgotten it grew again at once from its new size, no warm-up waited (with replicas of several GPUs, or GPUs
    another named service's replicas took, they may not have: then `emergency_retry_s` asks it again). `plan_capacity`
    counts a scale as made when it proposes it: kept, a latency-net step that never went out was 'not honoured' and not
    repeated while the service held the same replicas (an emergency stop set mid-cycle and lifted: the service stayed
    under pressure for good, no GPU freed for it), and a reclaim waited a warm-up after a change that never happened. A
    scale down (a loan, a give-back) that did not go out still waits its hold (one the hand-over held back only until
    the ledger is saved: `planner.ledger_saved`): asked again each cycle, one a guard
    refuses for a while (an owner's cooldown) was refused, logged and audited every cycle, and waiting to lend never
    leaves a service short."""
    cap = state.capacity
    if not isinstance(cap, CapacityState):
        return state
    was = before.capacity if isinstance(before.capacity, CapacityState) else CapacityState()
    services = {a.service for a in actions if isinstance(a, ScaleInference) and a.replicas > a.previous_replicas}
    # only a change the plan counted is forgotten (a service unchanged keeps its first sighting)
    services |= named(actions, lambda n: cap.last_change.get(n) != was.last_change.get(n)) - named(sent)
    if not services:
        return state

    def back(now: Mapping, then: Mapping) -> Mapping:
        return MappingProxyType({**{k: v for k, v in now.items() if k not in services},
                                 **{k: v for k, v in then.items() if k in services}})

    # a service the plan counted changed without a change known before: held from its first sighting, this cycle at
    # the latest (the time the plan counted its change at)
    first = {s: was.first_seen.get(s, cap.last_change[s]) for s in services
             if s in cap.last_change and s not in was.last_change}
    return replace(state, capacity=replace(cap, last_change=back(cap.last_change, was.last_change),
                                           first_seen=MappingProxyType({**back(cap.first_seen, was.first_seen),
                                                                        **first}),
                                           emergency=back(cap.emergency, was.emergency)))
