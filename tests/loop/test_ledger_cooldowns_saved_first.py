"""The safety ledger goes to the Lease with the cooldowns of the actions the guard accepted before any is carried
out, not only with their evictions (`balancer.ledger_handover`). Saved only after acting, a power cap's or a hot
taint's cooldown was lost to a process killed in between (SIGKILL, the OOM killer): the next leader, inheriting a
ledger without it, capped the same GPU and tainted the same node again inside `powerCooldownS`. A cycle that accepts
only renewals of hot taints (they set no cooldown) writes nothing before acting."""

from __future__ import annotations

import pytest
from loop_helpers import make_fleet, snapshot
from prometheus_client import CollectorRegistry

from balancer.actions import Plan, SetPowerLimit, TaintNode
from balancer.actuate.base import ActionResult, Outcome
from balancer.actuate.leader import InMemoryLeaderElector, InMemoryLease
from balancer.config import BalancerPolicy, SafetyPolicy
from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics

FL = make_fleet(3, 4)
SNAP = snapshot(FL, time=1000.0)
POLICY = BalancerPolicy(safety=SafetyPolicy(max_actions_per_cycle=10))
CAP = SetPowerLimit(gpu=0, uuid=FL.gpus[0].uuid, node=FL.gpus[0].node, watts=250, previous_watts=400, reason="hot",
                    expected_gain=1.0)
TAINT = TaintNode(node="n1", reason="hot", expected_gain=1.0)
RENEW = TaintNode(node="n2", reason="hot", renew=True, expected_gain=1.0)


class _Src:
    def snapshot(self):
        return SNAP


class _Act:
    def __init__(self, killed: bool = False) -> None:
        self.killed, self.applied = killed, []

    def apply(self, a, s):
        if self.killed:   # the process dies as it acts: nothing after this line runs
            raise KeyboardInterrupt
        self.applied.append(a)
        return ActionResult(a, Outcome.APPLIED, "ok")


class _Counted(InMemoryLeaderElector):
    """The Lease's elector, its ledger writes counted."""

    def __init__(self, lease: InMemoryLease, identity: str) -> None:
        super().__init__(lease, identity)
        self.saves = 0

    def save_state(self, text: str) -> int:
        self.saves += 1
        return super().save_state(text)


def _replica(lease, identity, clock, actions, *, killed=False) -> tuple[Reconciler, _Act, _Counted]:
    act, elector = _Act(killed), _Counted(lease, identity)
    rec = Reconciler(source=_Src(), actuator=act, policy=POLICY, clock=lambda: clock[0], elector=elector,
                     planner=lambda s, f, p, st: (Plan(actions=actions), st),
                     metrics=ControllerMetrics(CollectorRegistry()))
    return rec, act, elector


def test_a_leader_killed_as_it_caps_and_taints_hands_on_their_cooldowns():
    lease, clock = InMemoryLease(duration_s=15.0), [1000.0]
    a, _, _ = _replica(lease, "a", clock, (CAP, TAINT), killed=True)
    with pytest.raises(KeyboardInterrupt):
        a.run_once()
    clock[0] += 30.0   # a's Lease has expired: b takes over, inside powerCooldownS of a's cap and taint
    assert clock[0] - 1000.0 < POLICY.safety.power_cooldown_s
    b, act, _ = _replica(lease, "b", clock, (CAP, TAINT), killed=False)
    report = b.run_once()
    assert act.applied == [], "b capped or tainted again inside the cooldown a started"
    assert {x for x, _ in report.rejected} == {CAP, TAINT}


def test_a_cycle_that_acts_saves_before_and_after_and_one_of_renewals_only_after():
    lease, clock = InMemoryLease(duration_s=15.0), [1000.0]
    rec, act, elector = _replica(lease, "a", clock, (CAP,))
    rec.run_once()
    assert act.applied == [CAP] and elector.saves == 2   # the reservation, then the ledger as acted
    rec.planner = lambda s, f, p, st: (Plan(actions=(RENEW,)), st)
    clock[0] += 30.0
    rec.run_once()
    assert act.applied == [CAP, RENEW] and elector.saves == 3   # the renewal sets no cooldown: saved after only
