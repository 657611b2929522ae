"""A training growth into the GPUs a loan frees goes only once that loan went (audit a12 of c2c15f07). The plan names
a growth's loans (`ScaleTraining.service`) and orders them before it (`capacity_pools.apply_targets`); the loop kept a
growth back only when the review rejected its loan: one the review accepted that then did not go
still had its growth sent, two workers pending on GPUs the service kept. Its scale-down came back FAILED (an HPA that
KEDA keeps, RBAC: nothing changed), or the fresh snapshot before acting dropped it (its node labelled emergency-stop
since the plan). The loop now sends such a growth only after its loans came back applied (or a dry run's), and
rejects it otherwise (`group_incomplete`: counted, audited, in `CycleReport.rejected`). The plan named a service
that frees none of the GPUs a growth takes too (`Pools._draw`: a scale-down credited 0 GPUs of that model): its
failure held back a growth it had no part in.

The fleet is tests/loop/test_loop_held_back_loan_growth.py's: at T0+HOLD the tide lends two of chat's replicas
(GPUs 0-2, node n0), gives GPU 7 (idle) to fast (2 -> 3) and the loan's two GPUs to slow (2 -> 4)."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from balancer.actuate.base import ActionResult, Outcome
from balancer.model import ScaleInference, ScaleTraining
from balancer.plan.capacity import CapacityPolicy, CapacityView, JobView, ServiceCapacity, ServiceView
from balancer.plan.capacity_pools import apply_targets
from balancer.safety import EMERGENCY_LABEL
from tests.loop.test_loop_held_back_loan_growth import fleet, grows, tide
from tests.loop.test_loop_held_back_move import Store
from tests.loop.test_loop_held_back_scale import loans


def scales(outcome: Outcome):
    """The reconciler at T0+HOLD whose actuator answers `outcome` for chat's scale-down, APPLIED for the rest; the
    actions it was sent."""
    rec, actuator, _ = tide(Store())

    def apply(action, snap):
        actuator.sent.append(action)
        return ActionResult(action, outcome if isinstance(action, ScaleInference) else Outcome.APPLIED)

    actuator.apply = apply
    return rec, actuator.sent


def test_a_growth_into_a_failed_loans_gpus_is_not_sent() -> None:
    rec, sent = scales(Outcome.FAILED)   # chat's HPA is KEDA's: the scale-down fails, having changed nothing
    report = rec.run_once()
    assert loans(report.plan.actions) == [1]
    assert grows(report.plan.actions) == {"fast": (2, 3), "slow": (2, 4)}
    assert [(r.action.target, r.outcome) for r in report.results if isinstance(r.action, ScaleInference)] == [
        ("chat", Outcome.FAILED)]
    # before: slow 2 -> 4 was applied right after, two workers pending on GPUs chat kept
    assert grows(sent) == {"fast": (2, 3)}   # GPU 7 was idle already: that growth goes
    # rejected, counted and audited, naming the loan (before: no trace but a log line)
    assert [(a.target, why) for a, why in report.rejected] == [("slow", "group_incomplete")]
    assert rec.metrics.registry.get_sample_value("gputide_actions_rejected_total",
                                                 {"reason": "group_incomplete"}) == 1
    # a loan applied, or a dry run's, goes with its growth, sent after it
    for outcome in (Outcome.APPLIED, Outcome.DRY_RUN):
        rec, sent = scales(outcome)
        rec.run_once()
        assert loans(sent) == [1] and grows(sent) == {"fast": (2, 3), "slow": (2, 4)}, outcome
        kinds = [(type(a).__name__, a.target) for a in sent]
        assert kinds.index(("ScaleTraining", "slow")) > kinds.index(("ScaleInference", "chat")), kinds


class Labelled:
    """The fleet, its node n0 (chat's replicas) labelled emergency-stop from the second read on: the fresh snapshot
    before acting, the plan's snapshot clean."""

    def __init__(self, clock: list[float]) -> None:
        self.clock, self.reads = clock, 0

    def snapshot(self):
        self.reads += 1
        snap = fleet(self.clock[0])
        if self.reads < 2:
            return snap
        return replace(snap, nodes=tuple(replace(n, labels={EMERGENCY_LABEL: "true"}) if n.name == "n0" else n
                                         for n in snap.nodes))


def test_a_growth_into_the_gpus_of_a_loan_the_fresh_snapshot_drops_is_not_sent() -> None:
    rec, actuator, clock = tide(Store())
    rec.source = Labelled(clock)
    report = rec.run_once()
    assert loans(report.plan.actions) == [1]
    assert grows(report.plan.actions) == {"fast": (2, 3), "slow": (2, 4)}
    assert [(a.target, why) for a, why in report.rejected] == [("chat", "emergency_stop"), ("slow", "group_incomplete")]
    assert not loans(actuator.sent)
    # before: slow 2 -> 4 was sent, into GPUs chat keeps while its node is stopped
    assert grows(actuator.sent) == {"fast": (2, 3)}


def test_a_growth_names_only_the_loans_whose_gpus_it_takes() -> None:
    # chat sheds one replica of 4 (3 on H100, 1 on A100): one H100 freed, none of the A100 (credited 0 of it); search
    # sheds both of its A100 replicas. A job on A100 only grows into search's two GPUs: chat's loan is no part of it
    # (before: named, so chat's loan failing or held back held back a growth it frees nothing for)
    chat = ServiceView(profile=ServiceCapacity(name="chat", rps_per_replica=10.0), demand_rps=0.0, replicas=4,
                       gpus_by_model=MappingProxyType({"H100": 3, "A100": 1}))
    search = ServiceView(profile=ServiceCapacity(name="search", rps_per_replica=10.0), demand_rps=0.0, replicas=2,
                         gpus_by_model=MappingProxyType({"A100": 2}))
    job = JobView(name="train", workers=2, elastic_max=8, models=frozenset({"A100"}),
                  gpus_by_model=MappingProxyType({"A100": 2}))
    view = CapacityView(time=0.0, free=MappingProxyType({"A100": 0, "H100": 0}), services=(chat, search),
                        jobs=(job,), inference_gpus=6, training_gpus=2, total_gpus=8)
    actions, _ = apply_targets(view, {"chat": 3, "search": 0}, CapacityPolicy(), {"chat": "loan", "search": "loan"},
                               {})
    assert [(a.previous_replicas, a.replicas) for a in actions if isinstance(a, ScaleInference)] == [(4, 3), (2, 0)]
    assert [(a.previous_workers, a.workers, a.service) for a in actions if isinstance(a, ScaleTraining)] == [
        (2, 4, "search")]
