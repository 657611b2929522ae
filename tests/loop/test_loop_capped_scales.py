"""A scale the actuator carried out short of what it asked (an HPA floor capped at its maxReplicas) holds the
capacity planner to that cap: confirmed before the change that the planner, its profile's maxReplicas unset, shrank
training for replicas the HPA never starts, then kept the GPUs they left idle and asked for the whole floor again
every cycle (tests/k8s/test_k8s_hpa_floor_capped.py).

The fleet: 8 GPUs, chat's replicas first, then the workers of "cheap" and of "other", one GPU each, the rest idle;
chat starts with one replica and 4 workers of cheap, 3 of other. Its demand (30 req/s, 10 per replica) wants 4
replicas; its HPA runs at most 2. The fleet is the loop's telemetry and its actuator: what it applies, the next
snapshot shows. The cap is believed for half the safety cooldown, then twice as long each time it is met again, up to
the loan horizon (before, the loan horizon from the first: an operator's raise of maxReplicas was ignored for up to
2 h)."""

from __future__ import annotations

import logging
from dataclasses import replace
from functools import partial

import pytest

from balancer.actuate.base import ActionResult, Outcome
from balancer.loop import Reconciler
from balancer.model import Action, ClusterSnapshot, ScaleInference, ScaleTraining, ServiceStatus
from balancer.model import WorkloadClass as C
from balancer.plan import planner as planner_mod
from balancer.plan.capacity import CapacityPolicy
from balancer.plan.capacity_loop import plan_with_capacity
from balancer.plan.planner import CapBelief
from tests.capacity.test_capacity_clash import ON, PROFILES
from tests.loop.loop_helpers import make_fleet, snapshot, workload

FLEET = make_fleet(nodes=2, gpus_per_node=4)
LOAN_HORIZON_S = CapacityPolicy().loan_horizon_s
NOTE = "replicas, where the actuator capped its scale"   # "capacity holds chat at N replicas, where ..."
UP = ScaleInference(service="chat", replicas=4, previous_replicas=1, reason="reclaim ahead of the rise")


class HpaCappedFleet:
    """chat behind an HPA whose maxReplicas is `most`: a scale above it runs `most` replicas and says so
    (`ActionResult.capped_to`), as the Kubernetes actuator does; job resizes are carried out as asked. Its replicas
    are counted from its pods (no `gputide_inference_replicas`), or are its spec.replicas where `from_spec`."""

    name = "hpa-capped"
    from_spec = False

    def __init__(self, clock: list[float], most: int = 2) -> None:
        self.clock, self.most = clock, most
        self.replicas = {"chat": 1, "cheap": 4, "other": 3}
        self.applied: list[tuple[float, Action]] = []

    def snapshot(self) -> ClusterSnapshot:
        wl, gpu = [], 0
        for name, n in self.replicas.items():
            cls = C.INFERENCE if name == "chat" else C.TRAINING
            extra = {} if cls is C.INFERENCE else {"elastic_min": 1, "elastic_max": 8}
            for i in range(n):
                wl.append((workload(f"{name}-{i}", cls, owner=name, **extra), (gpu,)))
                gpu += 1
        chat = ServiceStatus(name="chat", demand_rps=30.0, p99_latency_s=0.1, slo_latency_s=0.5,
                             replicas=self.replicas["chat"], replicas_from_spec=self.from_spec)
        return snapshot(FLEET, workloads=wl, time=self.clock[0], services={"chat": chat})

    def apply(self, action: Action, snap: ClusterSnapshot) -> ActionResult:
        self.applied.append((self.clock[0], action))
        if isinstance(action, ScaleInference):
            self.replicas["chat"] = min(action.replicas, self.most)
            capped = self.most if action.replicas > self.most else None
            return ActionResult(action, Outcome.APPLIED, f"minReplicas = {self.replicas['chat']}", capped_to=capped)
        if isinstance(action, ScaleTraining):
            self.replicas[action.job] = action.workers
        return ActionResult(action, Outcome.APPLIED)

    @property
    def idle(self) -> int:
        return FLEET.n_gpus - sum(self.replicas.values())


def run(times: list[float], most: int = 2) -> tuple[Reconciler, HpaCappedFleet]:
    clock = [times[0]]
    fleet = HpaCappedFleet(clock, most)
    planner = partial(plan_with_capacity, profiles={"chat": PROFILES["chat"]}, capacity_policy=CapacityPolicy())
    rec = Reconciler(source=fleet, actuator=fleet, policy=ON, clock=lambda: clock[0], planner=planner)
    for t in times:
        clock[0] = t
        rec.run_once()
    return rec, fleet


def chat_ups(fleet: HpaCappedFleet, after: float = 0.0) -> list[Action]:
    return [a for t, a in fleet.applied
            if t > after and isinstance(a, ScaleInference) and a.replicas > a.previous_replicas]


def shrinks(fleet: HpaCappedFleet, after: float = 0.0) -> list[Action]:
    return [a for t, a in fleet.applied
            if t > after and isinstance(a, ScaleTraining) and a.workers < a.previous_workers]


def test_once_capped_the_service_is_held_and_training_gets_the_gpus_back(caplog) -> None:
    """t=1000: chat 1 -> 4, cheap shrunk 4 -> 1 for it; the HPA runs 2. From then on chat is held at 2: asked again
    once after half the safety cooldown (1300), while the two GPUs it left idle are idle still (cheap is grown back
    no sooner than the cooldown after its shrink), so nothing is shrunk for it; then held twice as long, and the two
    GPUs go back to training. The note saying so is logged once per belief."""
    with caplog.at_level(logging.INFO, logger="balancer.loop"):
        rec, fleet = run([1000.0 + 60.0 * k for k in range(15)])
    assert [t for t, a in fleet.applied if a in chat_ups(fleet)] == [1000.0, 1300.0]
    assert [a.job for a in shrinks(fleet)] == ["cheap"] and shrinks(fleet, after=1000.0) == []
    assert fleet.replicas["chat"] == 2 and fleet.idle == 0, fleet.replicas   # training holds the other 6 GPUs
    assert isinstance(rec.state, planner_mod.PlannerState) and dict(rec.state.capped_scales) == {
        "chat": CapBelief(2, 1300.0, 2)}
    said = [r.getMessage() for r in caplog.records if NOTE in r.getMessage()]
    assert [("for 5 min" in m, "for 10 min" in m) for m in said] == [(True, False), (False, True)], said
    assert all("set the profile's maxReplicas to 2" in m for m in said), said


def test_a_raised_max_replicas_is_asked_for_within_minutes() -> None:
    """The operator raises the HPA's maxReplicas at once, as the warning says: chat is asked again after half the
    safety cooldown and runs the 4 replicas its demand wants, on the GPUs the cap left idle (nothing more shrunk).
    Before, the cap was believed for the loan horizon (2 h) and the raise ignored meanwhile (the HPA does not grow
    past the floor on its own when its own metrics ask for no more)."""
    clock = [1000.0]
    fleet = HpaCappedFleet(clock, 2)
    planner = partial(plan_with_capacity, profiles={"chat": PROFILES["chat"]}, capacity_policy=CapacityPolicy())
    rec = Reconciler(source=fleet, actuator=fleet, policy=ON, clock=lambda: clock[0], planner=planner)
    rec.run_once()
    fleet.most = 10
    for k in range(1, 7):
        clock[0] = 1000.0 + 60.0 * k
        rec.run_once()
    assert [t for t, a in fleet.applied if a in chat_ups(fleet)] == [1000.0, 1300.0]
    assert fleet.replicas["chat"] == 4 and shrinks(fleet, after=1000.0) == []
    assert rec.state.capped_scales == {}   # the scale went through above the cap: it ended the belief


def test_a_cap_met_again_is_believed_twice_as_long_up_to_the_loan_horizon() -> None:
    """Never raised, over 2 h of 60 s cycles: asked again 5, 10, 20 and 40 min after each cap (a cycle's asks in
    vain, each but the first shrinking training once), where believing it for the loan horizon asked once and a
    fixed 10 min 12 times; believed for the loan horizon at most from then on."""
    rec, fleet = run([1000.0 + 60.0 * k for k in range(120)])
    asked = [t - 1000.0 for t, a in fleet.applied if a in chat_ups(fleet)]
    assert asked == [0.0, 300.0, 900.0, 2100.0, 4500.0]
    assert [t - 1000.0 for t, a in fleet.applied if a in shrinks(fleet)] == [0.0, 900.0, 2100.0, 4500.0]
    assert dict(rec.state.capped_scales) == {"chat": CapBelief(2, 5500.0, 5)}
    assert [CapBelief(2, 0.0, n).believed_s(300.0, LOAN_HORIZON_S) for n in (1, 2, 5, 6, 40)] == [
        300.0, 600.0, 4800.0, 7200.0, 7200.0]


def test_a_scale_that_goes_through_is_not_a_cap() -> None:
    rec, fleet = run([1000.0, 1060.0], most=10)
    assert fleet.replicas["chat"] == 4 and rec.state.capped_scales == {}


def plan_capped(replicas: int, capped_at: float, *, times: int = 1, max_replicas: int | None = None,
                t: float = 1060.0, from_spec: bool = False):
    """plan_with_capacity at `t` on the fleet with chat at `replicas` (cheap and other on the next GPUs, 2 idle at
    most; its spec.replicas where `from_spec`), its scale capped at 2 `times` in a row, the last at `capped_at`."""
    fleet = HpaCappedFleet([t])
    fleet.from_spec = from_spec
    fleet.replicas = {"chat": replicas, "cheap": 1, "other": 3}
    profile = PROFILES["chat"] if max_replicas is None else replace(PROFILES["chat"], max_replicas=max_replicas)
    state = planner_mod.PlannerState()
    for _ in range(times):
        state = planner_mod.cap(state, [(UP, 2)], capped_at)
    return plan_with_capacity(fleet.snapshot(), None, ON, state, profiles={"chat": profile},
                              capacity_policy=CapacityPolicy())


FIRST_S = ON.safety.cooldown_s / 2


@pytest.mark.parametrize(("replicas", "capped_at", "times", "max_replicas", "asked", "held", "kept"), [
    pytest.param(2, 1000.0, 1, None, False, True, True, id="within half the cooldown the service is held at the cap"),
    pytest.param(2, 1060.0 - FIRST_S, 1, None, True, False, True,
                 id="past it, it is asked again, the cap remembered to count it met again"),
    pytest.param(2, 1070.0 - 16 * FIRST_S, 5, None, False, True, True, id="met 5 times: believed 16 times as long"),
    pytest.param(2, 1070.0 - LOAN_HORIZON_S, 9, None, False, True, True, id="never past the loan horizon"),
    pytest.param(2, 1060.0 - LOAN_HORIZON_S, 9, None, True, False, True, id="asked again after the loan horizon"),
    pytest.param(2, 1060.0 - FIRST_S - LOAN_HORIZON_S, 1, None, True, False, False,
                 id="forgotten a loan horizon after it lapsed"),
    pytest.param(3, 1000.0, 1, None, False, True, True,
                 id="running more replicas than the cap (a rollout's surge, or a raise) ends no belief"),
    pytest.param(2, 1000.0, 1, 2, False, False, True,
                 id="a profile's maxReplicas at the cap already says nothing more"),
])
def test_how_long_a_cap_is_believed(replicas, capped_at, times, max_replicas, asked, held, kept) -> None:
    plan, state = plan_capped(replicas, capped_at, times=times, max_replicas=max_replicas)
    ups = [a for a in plan.actions if isinstance(a, ScaleInference) and a.replicas > a.previous_replicas]
    assert bool(ups) is asked, plan.actions
    assert any(NOTE in n for n in plan.notes) is held, plan.notes
    assert dict(state.capped_scales) == ({"chat": CapBelief(2, capped_at, times)} if kept else {}), state.capped_scales


def test_cap_records_only_scales_and_the_latest_cap_of_a_service() -> None:
    """The same bound met again counts once more; another bound (maxReplicas raised, still too few) starts again."""
    grow = ScaleTraining(job="cheap", workers=4, previous_workers=1, reason="loan")
    state = planner_mod.cap(planner_mod.PlannerState(), [(UP, 2), (grow, 3)], 1000.0)
    state = planner_mod.cap(state, [(replace(UP, replicas=6), 2)], 1100.0)
    assert dict(state.capped_scales) == {"chat": CapBelief(2, 1100.0, 2)}
    state = planner_mod.cap(state, [(replace(UP, replicas=6), 3)], 1200.0)
    assert dict(state.capped_scales) == {"chat": CapBelief(3, 1200.0, 1)}


def test_a_cap_belief_says_both_rules_once() -> None:
    """`CapBelief` is the one place the rules are said: the same bound met again counts once more from the new time,
    another bound starts again; believed `first_s` doubled per repeat up to the horizon, remembered a horizon more.
    The planner's fold and the capacity planner's hold read only it (the tuples of before had no rules of their own).
    """
    b = CapBelief(2, 1000.0)
    assert b.met(2, 1300.0) == CapBelief(2, 1300.0, 2) and b.met(3, 1300.0) == CapBelief(3, 1300.0, 1)
    again = b.met(2, 1300.0).met(2, 1900.0)
    assert again.believed_s(300.0, 1000.0) == 1000.0 and b.believed_s(300.0, 1000.0) == 300.0
    assert [again.held_at(t, 300.0, 1000.0) for t in (2899.0, 2900.0)] == [True, False]
    assert [again.kept_at(t, 300.0, 1000.0) for t in (3899.0, 3900.0)] == [True, False]
    state = planner_mod.cap(planner_mod.PlannerState(), [(UP, 2)], 1000.0)
    assert planner_mod.cap(state, [(UP, 2)], 1300.0).capped_scales["chat"] == state.capped_scales["chat"].met(2, 1300.0)


class SurgingFleet(HpaCappedFleet):
    """`HpaCappedFleet` whose chat goes through a rolling update at the times in `surging`: one pod more than its
    replicas (maxSurge 1), on an idle GPU, counted by the serving telemetry as the pods it owns do."""

    def __init__(self, clock: list[float], surging: set[float]) -> None:
        super().__init__(clock)
        self.surging = surging

    def snapshot(self) -> ClusterSnapshot:
        if self.clock[0] not in self.surging:
            return super().snapshot()
        self.replicas["chat"] += 1
        try:
            return super().snapshot()
        finally:
            self.replicas["chat"] -= 1


@pytest.mark.parametrize("surging", [{1060.0}, {1060.0 + 60.0 * k for k in range(4)}],
                         ids=["one cycle", "a rollout of four cycles"])
def test_a_rolling_updates_surge_above_the_cap_is_no_raise(surging) -> None:
    """chat capped at 2 at 1000; from 1060 a rolling update runs a third pod (maxSurge 1), then 2 again. The surge
    says nothing of the HPA's maxReplicas: the cap is still believed, asked again at 1300 as without the rollout,
    its doubling kept (met twice, believed 10 min from 1300), nothing shrunk for it. Before, the surge made the
    planner forget the cap: it asked 3 -> 4 at 1060, capped again, and counted the cap met once from then (asked
    again at 1360, not 1300)."""
    clock = [1000.0]
    fleet = SurgingFleet(clock, surging)
    planner = partial(plan_with_capacity, profiles={"chat": PROFILES["chat"]}, capacity_policy=CapacityPolicy())
    rec = Reconciler(source=fleet, actuator=fleet, policy=ON, clock=lambda: clock[0], planner=planner)
    for k in range(15):
        clock[0] = 1000.0 + 60.0 * k
        rec.run_once()
    assert [t for t, a in fleet.applied if a in chat_ups(fleet)] == [1000.0, 1300.0]
    assert [a.job for a in shrinks(fleet)] == ["cheap"] and shrinks(fleet, after=1000.0) == []
    assert dict(rec.state.capped_scales) == {"chat": CapBelief(2, 1300.0, 2)}


def test_a_service_running_above_its_cap_is_held_at_what_it_runs() -> None:
    """Held at its cap of 2 while it runs 4 (a surge, or the HPA past a raised maxReplicas on its own metrics), chat's
    ceiling is the 4 it runs: lower, the planner could lend the GPUs of pods that stay. Below the cap, the cap."""
    from balancer.plan.capacity import CapacityView, ServiceView
    from balancer.plan.capacity_loop import _capped

    def ceiling(replicas: int) -> tuple[int, list[str]]:
        chat = ServiceView(profile=PROFILES["chat"], demand_rps=30.0, replicas=replicas)
        view = CapacityView(time=1060.0, free={}, services=(chat,), jobs=(), inference_gpus=replicas,
                            training_gpus=0, total_gpus=8)
        held, kept, notes = _capped(view, {"chat": CapBelief(2, 1000.0)}, FIRST_S, LOAN_HORIZON_S)
        assert kept == {"chat": CapBelief(2, 1000.0)}
        return held.services[0].profile.max_replicas, [n for n in notes if NOTE in n]

    assert ceiling(4)[0] == 4 and ceiling(3)[0] == 3 and ceiling(1)[0] == 2
    # the note says the ceiling it holds, not the cap alone (it said "at 2" while holding 4)
    assert ceiling(4)[1] == [n for n in ceiling(4)[1] if n.startswith("capacity holds chat at 4 replicas")] != []
    assert ceiling(1)[1] and ceiling(1)[1][0].startswith("capacity holds chat at 2 replicas")


@pytest.mark.parametrize("from_spec", [True, False], ids=["spec.replicas", "counted from pods"])
def test_spec_replicas_above_the_cap_end_its_belief(from_spec) -> None:
    """chat runs 3 while held at its cap of 2 (met twice, believed 10 min from 1300). Read from its spec.replicas
    (`gputide_inference_replicas`), 3 is a raise of the HPA's maxReplicas, never a rollout's surge pods: the cap is
    forgotten at once and chat asked up to the 4 its demand wants. Counted from its pods, 3 may be a surge: still held
    (the surge tests above)."""
    plan, state = plan_capped(3, 1300.0, times=2, from_spec=from_spec, t=1420.0)
    ups = [(a.previous_replicas, a.replicas) for a in plan.actions if isinstance(a, ScaleInference)]
    assert ups == ([(3, 4)] if from_spec else []), plan.actions
    assert dict(state.capped_scales) == ({} if from_spec else {"chat": CapBelief(2, 1300.0, 2)})


def drive(fleet: HpaCappedFleet, cycles: int, changes: dict[float, tuple[int, dict[str, int]]],
          beliefs: dict[float, dict]) -> None:
    """The loop on `fleet`, `cycles` 60 s cycles from 1000: before the cycle at t, `changes[t]` = (the HPA's
    maxReplicas, replicas that changed on their own); after it, the beliefs are `beliefs[t]`."""
    planner = partial(plan_with_capacity, profiles={"chat": PROFILES["chat"]}, capacity_policy=CapacityPolicy())
    rec = Reconciler(source=fleet, actuator=fleet, policy=ON, clock=lambda: fleet.clock[0], planner=planner)
    for k in range(cycles):
        t = fleet.clock[0] = 1000.0 + 60.0 * k
        if t in changes:
            fleet.most = changes[t][0]
            fleet.replicas.update(changes[t][1])
        rec.run_once()
        assert t not in beliefs or dict(rec.state.capped_scales) == beliefs[t], (t, rec.state.capped_scales)


class SpecFleet(HpaCappedFleet):
    """`HpaCappedFleet` read from spec.replicas, as `gputide_inference_replicas` gives them."""

    from_spec = True


def test_a_raise_the_hpa_scaled_past_is_planned_at_once() -> None:
    """chat capped at 2 at 1000 and 1300 (believed till 1900). At 1420 the operator has raised maxReplicas to 10, a
    worker of other finished (a GPU free) and the HPA, on its own metrics, runs chat at 3 (spec.replicas). chat is
    asked up to 4 at 1420 and nothing is shrunk; cheap grows into what is left. Before, the cap was believed till
    1900: chat held at 3, cheap grown 1 -> 3 at 1600 into the GPU chat's demand needed, and shrunk 3 -> 2 at 1900
    when chat was asked at last (two restarts of its workers)."""
    fleet = SpecFleet([1000.0], 2)
    drive(fleet, 16, changes={1420.0: (10, {"other": 2, "chat": 3})}, beliefs={1420.0: {}})
    assert [(t, a.previous_replicas) for t, a in fleet.applied if a in chat_ups(fleet)] == [
        (1000.0, 1), (1300.0, 2), (1420.0, 3)]
    assert fleet.replicas == {"chat": 4, "cheap": 2, "other": 2} and shrinks(fleet, after=1000.0) == []


def test_a_scale_in_full_above_the_cap_ends_its_belief() -> None:
    """The actuator carried out a scale above the cap in full (no `capped_to`): maxReplicas was raised, the belief
    ends (`planner.cap` told with None, as the loop tells every applied scale). One at or below the cap says nothing
    of it. Before, only capped scales were told, and the belief stayed."""
    state = planner_mod.cap(planner_mod.PlannerState(), [(UP, 2)], 1000.0)
    assert planner_mod.cap(state, [(UP, None)], 1300.0).capped_scales == {}
    for within in (replace(UP, replicas=2), replace(UP, replicas=1, previous_replicas=2)):
        assert planner_mod.cap(state, [(within, None)], 1300.0) is state


def test_a_cap_met_after_a_raise_went_through_is_met_afresh() -> None:
    """maxReplicas raised to 10 at 1060: the ask at 1300 goes through (4 replicas), ending the belief; the operator
    lowers it back to 2 at 1600, and that ask is capped again: a first cap (believed 5 min: asked again at 1900), not
    the same cap met twice. Before, the belief outlived the scale that went through, the cap of 1600 counted as met
    again and believed 10 min (asked again at 2200)."""
    fleet = HpaCappedFleet([1000.0], 2)
    drive(fleet, 16, changes={1060.0: (10, {}), 1600.0: (2, {"chat": 2})},
          beliefs={1360.0: {}, 1660.0: {"chat": CapBelief(2, 1600.0, 1)}})
    assert [t for t, a in fleet.applied if a in chat_ups(fleet)] == [1000.0, 1300.0, 1600.0, 1900.0]
