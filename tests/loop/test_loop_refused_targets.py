"""A migration the actuator refuses for its target alone (the pod's topology spread there, the node's GPUs held for
others: its result's `refused` is `Refused.TARGET`) keeps the workload off that node for `refusedTargetRetryS`, and
the planner moves it to its next-best target next cycle, or, with none left, throttles the hot GPU. Before, the
refusal kept the workload from moving at all (`refusedRetryS`) and, without that, the same refused move was proposed
every cycle. The result's field decides, not its words (`REWORDED`, `WORDED_ONLY`).

The fleet: n0, n1, n2 of four GPUs; web-0 runs hot on n0's GPU 0, so n0 is no target; n1 is the best target (the
first of equals), n2 the next best."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pytest
from loop_helpers import make_fleet, snapshot, workload
from prometheus_client import CollectorRegistry

from balancer.actuate.base import ActionResult, Outcome, Refused
from balancer.config import BalancerPolicy
from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics
from balancer.model import Action, ClusterSnapshot, Migrate
from balancer.plan.placement import Scheduler
from balancer.plan.placement.state import ClusterState, PodRequest
from balancer.plan.planner import PlannerState, excluded_nodes, exclusions, plan, refuse

FL = make_fleet(3, 4)
WEB = workload("web-0", owner="web")
SPREAD = ("failed", "refused", "migrate inference/web-0: {node} has topology.kubernetes.io/zone=b, where its "
          "topology spread constraint (maxSkew 1) would be skewed 2", Refused.TARGET)
HELD = ("retry", "refused", "migrate inference/web-0: 2 GPU(s) of {node} are held for default/urgent and it has 0 "
        "other free: its GPUs are promised to others", Refused.TARGET)
PINNED = ("failed", "refused", "migrate inference/web-0: its own object keeps it in place now (gputide.io/movable: "
          "\"false\"): it is not moved", Refused.WORKLOAD)
PDB = ("retry", "429", "eviction blocked by a PodDisruptionBudget: evict pod inference/web-0: HTTP 429 Cannot evict",
       None)
UNAVAILABLE = ("retry", "503", "evict pod inference/web-0: HTTP 503 Service Unavailable", None)
# the field decides, not the words: a target refusal worded otherwise, and a target's wording without the field
REWORDED = ("retry", "refused", "migrate inference/web-0: {node} cannot take it now", Refused.TARGET)
WORDED_ONLY = ("failed", "refused", SPREAD[2], None)


@dataclass
class RefusingActuator:
    """Refuses every migration to a node of `refused` with that node's (outcome, code, detail); applies the rest
    (the fleet it reads stays as it is: web-0 stays hot)."""

    refused: dict[str, tuple[str, str, str, Refused | None]] = field(default_factory=dict)
    name: str = "refusing"

    def apply(self, action: Action, snapshot: ClusterSnapshot) -> ActionResult:
        if isinstance(action, Migrate) and action.target_node in self.refused:
            outcome, code, detail, what = self.refused[action.target_node]
            return ActionResult(action, Outcome(outcome), detail.format(node=action.target_node), code, refused=what)
        return ActionResult(action, Outcome.APPLIED)


class Source:
    def __init__(self, clock: list[float]) -> None:
        self.clock = clock

    def snapshot(self) -> ClusterSnapshot:
        return snapshot(FL, workloads=[(WEB, (0,))], temps={0: 86}, time=self.clock[0])


def run(refused: dict[str, tuple[str, str, str, Refused | None]], cycles: int, policy: BalancerPolicy | None = None,
        step_s: float = 30.0):
    """The reconciler after `cycles` cycles `step_s` apart, the targets each cycle proposed for web-0 (None: none),
    and its metrics registry."""
    clock, registry = [1000.0], CollectorRegistry()
    rec = Reconciler(source=Source(clock), actuator=RefusingActuator(refused), policy=policy or BalancerPolicy(),
                     clock=lambda: clock[0], metrics=ControllerMetrics(registry))
    targets = []
    for _ in range(cycles):
        report = rec.run_once()
        targets.append(next((a.target_node for a in report.plan.actions if isinstance(a, Migrate)), None))
        clock[0] += step_s
    return rec, targets, registry


def gauge(registry: CollectorRegistry, scope: str) -> float | None:
    return registry.get_sample_value("gputide_migration_exclusions", {"scope": scope})


@pytest.mark.parametrize("why", [SPREAD, HELD, REWORDED], ids=["topology spread", "held for others", "reworded"])
def test_a_refused_target_is_skipped_next_cycle_and_the_next_best_one_taken(why) -> None:
    """Cycle 1 counts the first hot reading; cycle 2 proposes n1 (refused), cycle 3 n2 (refused too), cycle 4 has no
    target left: the hot GPU is throttled."""
    rec, targets, registry = run({"n1": why, "n2": why}, 4)
    assert targets == [None, "n1", "n2", None]
    assert isinstance(rec.state, PlannerState)
    assert set(rec.state.refused_targets) == {("inference/web-0", "n1"), ("inference/web-0", "n2")}
    assert "inference/web-0" not in rec.state.refused_moves   # not kept from moving at all
    assert gauge(registry, "target") == 2 and gauge(registry, "workload") == 0


def test_with_no_target_left_the_hot_gpu_is_throttled_instead() -> None:
    rec, _, _ = run({"n1": SPREAD, "n2": SPREAD}, 3)
    report = rec.run_once()
    assert "power_limit" in {a.kind for a in report.plan.actions}
    assert not [a for a in report.plan.actions if isinstance(a, Migrate)]


def test_without_the_memory_the_same_refused_move_is_proposed_every_cycle() -> None:
    """Both memories off (0 s): the RETRY loop this memory ends."""
    off = BalancerPolicy().with_section("hotspots", refused_retry_s=0.0, refused_target_retry_s=0.0)
    _, targets, _ = run({"n1": SPREAD}, 4, off)
    assert targets == [None, "n1", "n1", "n1"]


def test_the_memory_expires_after_refused_target_retry_s() -> None:
    """Kept 80 s: refused at t=1030 (n1) and 1060 (n2), nothing at 1090; at 1120 n1's refusal has expired (n2's has
    not) and n1, the best target, is proposed again."""
    policy = BalancerPolicy().with_section("hotspots", refused_target_retry_s=80.0)
    rec, targets, registry = run({"n1": SPREAD, "n2": SPREAD}, 5, policy)
    assert targets == [None, "n1", "n2", None, "n1"]
    rec.actuator.refused.clear()   # the spread allows it now: n1 is taken, and both refusals are forgotten
    rec.clock = lambda: 1300.0
    rec.source.clock[0] = 1300.0
    report = rec.run_once()
    assert [a.target_node for a in report.plan.actions if isinstance(a, Migrate)] == ["n1"]
    assert gauge(registry, "target") == 0


@pytest.mark.parametrize("why", [PINNED, PDB, UNAVAILABLE, WORDED_ONLY],
                         ids=["pinned", "budget", "api 503", "a target's words without the field"])
def test_a_refusal_about_the_pod_or_the_moment_keeps_it_from_moving_anywhere(why) -> None:
    """Not the target's fault: another node would be refused alike, so the hot GPU is throttled for refusedRetryS
    (as before), and no target is remembered."""
    rec, targets, registry = run({"n1": why, "n2": why}, 3)
    assert targets == [None, "n1", None]
    assert rec.state.refused_targets == {} and "inference/web-0" in rec.state.refused_moves
    assert gauge(registry, "workload") == 1 and gauge(registry, "target") == 0


def test_a_standby_replica_reports_no_exclusions() -> None:
    metrics = ControllerMetrics(CollectorRegistry())
    metrics.set_exclusions({"target": 3, "workload": 1})
    metrics.standby()
    assert gauge(metrics.registry, "target") == 0 and gauge(metrics.registry, "workload") == 0


# ---- the planner's side, pure ------------------------------------------------------------------------------------


def test_refuse_keeps_targets_apart_from_workloads_and_exclusions_count_the_live_ones() -> None:
    moved = Migrate(workload="inference/web-0", source_gpus=(0,), target_gpus=(4,), target_node="n1", reason="x")
    state = refuse(PlannerState(), [], 1000.0, targets=[moved])
    state = refuse(state, [replace(moved, workload="inference/api-0")], 1100.0)
    assert dict(state.refused_targets) == {("inference/web-0", "n1"): 1000.0}
    assert dict(state.refused_moves) == {"inference/api-0": 1100.0}
    policy = BalancerPolicy()   # refusedTargetRetryS 600, refusedRetryS 300
    assert exclusions(state, policy, 1200.0) == {"target": 1, "workload": 1}
    assert exclusions(state, policy, 1450.0) == {"target": 1, "workload": 0}
    assert exclusions(state, policy, 1600.0) == {"target": 0, "workload": 0}
    assert exclusions(object(), policy, 1200.0) == {}


def test_excluded_nodes_are_node_positions_and_unknown_nodes_are_left_out() -> None:
    snap = snapshot(FL)
    got = excluded_nodes(snap, [("a", "n2"), ("a", "n0"), ("b", "gone")])
    assert list(got) == ["a"] and got["a"].tolist() == [0, 2]


def test_the_planner_prunes_expired_targets() -> None:
    snap = snapshot(FL, workloads=[(WEB, (0,))], temps={0: 86}, time=2000.0)
    state = PlannerState(refused_targets={("inference/web-0", "n1"): 1000.0, ("inference/web-0", "n2"): 1900.0})
    _, after = plan(snap, None, BalancerPolicy(), state)
    assert dict(after.refused_targets) == {("inference/web-0", "n2"): 1900.0}


# ---- the placement engine's filter --------------------------------------------------------------------------------


def test_the_placement_engine_filters_a_pods_excluded_nodes_out_and_places_on_the_next_best() -> None:
    state = ClusterState.from_nodes(np.full(3, 64000), np.full(3, 512000), np.full(3, 4), ["A100"] * 3)
    sched = Scheduler(state, "bestfit")
    pod = PodRequest(cpu_milli=1000, memory_mib=1024, num_gpu=1, gpu_milli=500, name="web-0")
    best = sched.place(pod)
    assert best is not None
    kept_off = replace(pod, excluded_nodes=(best.node,))
    assert best.node not in sched.feasible_nodes(kept_off).tolist()
    assert sched.feasible_nodes(kept_off).tolist() == [n for n in range(3) if n != best.node]
    other = sched.place(kept_off)
    assert other is not None and other.node != best.node
    assert sched.place(replace(pod, excluded_nodes=(0, 1, 2))) is None


def test_consolidation_moves_a_pod_to_its_next_best_target_or_moves_another() -> None:
    """Three half-GPU pods alone on a GPU of n0, n1 and n2 (every other GPU busy): consolidation puts half-0 onto
    n1's half-used GPU. With n1 refused for it, onto n2's; with both refused, half-1 moves onto n0's instead."""
    fl = make_fleet(nodes=3)
    halves = (0, 4, 8)
    half = [(workload(f"half-{i}", owner=f"half{i}", milli=500, mem=8192), (g,)) for i, g in enumerate(halves)]
    whole = [(workload(f"whole-{g}", owner=f"whole{g}"), (g,)) for g in range(12) if g not in halves]
    snap = snapshot(fl, workloads=half + whole)
    on = BalancerPolicy().with_section("defrag", enabled=True)

    def moves(*refused: str) -> list[tuple[str, str]]:
        state = PlannerState(refused_targets={("inference/half-0", n): snap.time for n in refused})
        return [(a.workload, a.target_node) for a in plan(snap, None, on, state)[0].actions if isinstance(a, Migrate)]

    assert moves() == [("inference/half-0", "n1")]
    assert moves("n1") == [("inference/half-0", "n2")]
    assert moves("n1", "n2") == [("inference/half-1", "n0")]
