"""A training growth into the GPUs a loan would free goes only with that loan. The tide lends idle GPUs to elastic
training, the GPUs its loans (inference scale-downs) free in the same plan too; when the hand-over holds such a loan
back (the safety ledger with its evictions could not be saved for a successor: tests/loop/test_loop_held_back_scale.py)
or the guard refuses it, the growth evicts nothing and was sent alone: its workers waited pending on GPUs the service
kept, until the ledger was saved (or the service's hold had passed). The plan names a growth's loans
(`ScaleTraining.service`, `capacity_pools.Pools.training_actions`) and the loop does not send it while one of them does
not go, rejecting it (`group_incomplete`, `loop._on_loans`); a growth onto GPUs idle already names none and goes.

The fleet (2x4 GPUs): chat, three replicas on GPUs 0-2, one replica's worth of demand; fast (priority 5, two workers
on GPUs 3-4, at most three) and slow (priority 0, two workers on GPUs 5-6, at most eight); GPU 7 runs a batch job
until T0+HOLD. At T0+HOLD the tide lends two of chat's replicas, and gives GPU 7 (idle) to fast and the loan's two
GPUs to slow."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from loop_helpers import snapshot, workload
from prometheus_client import CollectorRegistry

from balancer.ledger_handover import LedgerHandover
from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics
from balancer.model import ScaleInference, ScaleTraining, WorkloadClass
from balancer.plan.capacity import CapacityPolicy, ServiceCapacity
from balancer.plan.capacity_loop import plan_with_capacity
from balancer.safety import Review, SafetyGuard
from balancer.safety_violations import CooldownActive
from tests.loop.test_loop_held_back_move import Sent, Store
from tests.loop.test_loop_held_back_scale import FL, HOLD, ON, T0, calm, chat, loans


def fleet(now: float):
    services = chat(now).services
    wl = [(workload(f"chat-{i}", owner="chat"), (i,)) for i in range(3)]
    wl += [(workload(f"fast-{i}", WorkloadClass.TRAINING, owner="fast", priority=5, elastic_min=1, elastic_max=3),
            (3 + i,)) for i in range(2)]
    wl += [(workload(f"slow-{i}", WorkloadClass.TRAINING, owner="slow", elastic_min=1, elastic_max=8), (5 + i,))
           for i in range(2)]
    if now < T0 + HOLD:
        wl.append((workload("etl-0", WorkloadClass.BATCH, owner="etl"), (7,)))
    return snapshot(FL, workloads=wl, time=now, services=services)


class Source:
    def __init__(self, clock: list[float]) -> None:
        self.clock = clock

    def snapshot(self):
        return fleet(self.clock[0])


class RefusesLoans(SafetyGuard):
    """The guard, refusing every inference scale-down (as an owner's cooldown would)."""

    def review(self, actions, snapshot, ledger, now) -> Review:
        own = super().review(actions, snapshot, ledger, now)
        down = [a for a in own.accepted if isinstance(a, ScaleInference) and a.replicas < a.previous_replicas]
        why = CooldownActive("chat scaled a moment ago")
        return Review(tuple(a for a in own.accepted if a not in down), own.rejected + tuple((a, why) for a in down))


def grows(actions) -> dict[str, tuple[int, int]]:
    return {a.job: (a.previous_workers, a.workers) for a in actions
            if isinstance(a, ScaleTraining) and a.workers > a.previous_workers}


def tide(store: Store, refuse: bool = False):
    """The reconciler after its cycles at T0 and T0+60 (nothing lent, nothing idle), its clock at T0+HOLD."""
    clock, registry, actuator = [T0], CollectorRegistry(), Sent()
    profiles = {"chat": ServiceCapacity(name="chat", rps_per_replica=10, warmup_s=300)}
    rec = Reconciler(source=Source(clock), actuator=actuator, clock=lambda: clock[0], policy=ON, forecaster=calm,
                     metrics=ControllerMetrics(registry),
                     planner=partial(plan_with_capacity, profiles=profiles, capacity_policy=CapacityPolicy()))
    rec.handover = LedgerHandover(store, registry)
    if refuse:
        rec.guard = RefusesLoans(rec.guard.policy)
    for t in (T0, T0 + 60.0):
        clock[0] = t
        assert not rec.run_once().plan.actions
    assert not actuator.sent
    clock[0] = T0 + HOLD
    return rec, actuator, clock


def test_a_growth_into_a_held_loans_gpus_waits_for_the_ledger_and_goes_with_the_loan() -> None:
    store = Store()
    rec, actuator, clock = tide(store)
    store.down = True
    report = rec.run_once()
    assert loans(report.plan.actions) == [1]
    assert grows(report.plan.actions) == {"fast": (2, 3), "slow": (2, 4)}
    # slow's growth rejected with it, counted and audited (before: no trace but a log line)
    assert [(a.target, why) for a, why in report.rejected] == [
        ("chat", "eviction_budget"), ("slow", "group_incomplete")]
    assert rec.metrics.registry.get_sample_value("gputide_actions_rejected_total",
                                                 {"reason": "group_incomplete"}) == 1
    # before: slow 2 -> 4 was sent too, two workers pending on GPUs chat kept until the ledger was saved
    assert grows(actuator.sent) == {"fast": (2, 3)}   # GPU 7 was idle already: that growth goes
    assert not loans(actuator.sent)
    clock[0] += 10.0
    report = rec.run_once()   # the ledger still unsaved: the loan waits as made, and its GPUs with it
    assert not loans(report.plan.actions) and "slow" not in grows(report.plan.actions), report
    assert "slow" not in grows(actuator.sent)
    store.down = False
    clock[0] += 10.0
    sent = len(actuator.sent)
    report = rec.run_once()
    assert loans(actuator.sent[sent:]) == [1] and grows(actuator.sent[sent:]).get("slow") == (2, 4), actuator.sent
    assert not {"chat", "slow"} & {a.target for a, _ in report.rejected}   # (fast: this fleet never shows it grown)


def test_a_growth_into_a_refused_loans_gpus_is_not_sent() -> None:
    rec, actuator, _ = tide(Store(), refuse=True)
    report = rec.run_once()
    assert [(a.target, why) for a, why in report.rejected] == [("chat", "cooldown"), ("slow", "group_incomplete")]
    assert grows(report.plan.actions) == {"fast": (2, 3), "slow": (2, 4)}
    assert grows(actuator.sent) == {"fast": (2, 3)}   # before: slow's too, pending for chat's whole hold


class Busy:
    """The fleet with GPU 7 still busy at T0+HOLD (the batch job runs on): the tide's growths all go into the loan's
    GPUs. Counts its reads."""

    def __init__(self, clock: list[float]) -> None:
        self.clock, self.reads = clock, 0

    def snapshot(self):
        self.reads += 1
        return replace(fleet(T0 + HOLD - 1.0), time=self.clock[0])


class Audit:
    def __init__(self) -> None:
        self.records: list[dict] = []

    def write(self, record: dict) -> None:
        self.records.append(record)


def test_growths_alone_into_a_refused_loans_gpus_are_rejected_without_a_fresh_read() -> None:
    rec, actuator, clock = tide(Store(), refuse=True)
    rec.source, rec.audit = Busy(clock), Audit()
    report = rec.run_once()
    assert loans(report.plan.actions) == [1]
    assert grows(report.plan.actions) == {"fast": (2, 3), "slow": (2, 3)}
    # both rejected, counted and audited naming the loan (before: no trace but a log line)
    assert [(a.target, why) for a, why in report.rejected] == [
        ("chat", "cooldown"), ("fast", "group_incomplete"), ("slow", "group_incomplete")]
    assert rec.metrics.registry.get_sample_value("gputide_actions_rejected_total",
                                                 {"reason": "group_incomplete"}) == 2
    held = [r for r in rec.audit.records if r["outcome"] == "rejected:group_incomplete"]
    assert len(held) == 2 and all("a loan of chat" in r["detail"] for r in held), rec.audit.records
    assert not actuator.sent and rec.source.reads == 1   # nothing to send: no fresh snapshot read before acting
