"""Two `gputide run --leader-elect --interval 30s` replicas (the real `lease_elector`: Lease 90 s, renew deadline
60 s) on the fake API server, while replica a's Prometheus reads take 150 s. Before the fix a renewed only when a
cycle started, b took the Lease over mid-cycle, and both migrated the same pod. Now, whether the Lease is renewed
on demand (the loop asks before every action) or by the renewer thread (`start()`, ticked here by hand on the fake
clock): a replica never applies an action without holding the Lease, and one Lease holding has one actor."""

from __future__ import annotations

import pytest
from fakeapi import FakeKube
from prometheus_client import CollectorRegistry

from balancer.actuate.dryrun import DryRunActuator
from balancer.actuate.k8s_leader import LeaseLeaderElector
from balancer.cmd.run import lease_elector
from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics
from tests.loop.loop_helpers import make_fleet, snapshot, workload

FLEET = make_fleet()


class Unreachable:
    """The API server as a replica sees it through a broken network path: every Lease call times out."""

    def __getattr__(self, name):
        def call(*args, **kwargs):
            raise OSError(f"{name}: timed out")
        return call


def controller_elector(api, clock, monkeypatch, who: str) -> LeaseLeaderElector:
    """The elector `gputide run --leader-elect --interval 30s` builds for pod `who`, on the fake clock."""
    monkeypatch.setenv("POD_NAME", who)
    elector = lease_elector(api, "gputide-controller", "gputide", 30.0)
    elector.clock = clock
    return elector


class Replicas:
    """Replica a (slow Prometheus) and b, each a Reconciler with its own Lease elector, on one fake clock."""

    def __init__(self, kube: FakeKube, api, clock, monkeypatch, background: bool) -> None:
        self.kube, self.clock, self.background = kube, clock, background
        self.applied: list[tuple[str, str, int]] = []   # (replica, Lease holder, leaseTransitions) at each apply
        self.elector: dict[str, LeaseLeaderElector] = {}
        self.loop: dict[str, Reconciler] = {}
        self.slow_read: tuple[int, float, int] | None = None   # (a's read number, step s, steps)
        self.reads = 0
        for who in "ab":
            self.elector[who] = elector = controller_elector(api, clock, monkeypatch, who)
            self.loop[who] = Reconciler(source=self._source(who), actuator=self._actuator(who), clock=clock,
                                        elector=elector, metrics=ControllerMetrics(CollectorRegistry()))
            if background:
                elector.start(thread=False)
        self.loop["a"].run_once()   # t=0: a leads (nothing to do yet: one hot reading), b stands by
        assert self.loop["b"].run_once().status == "standby"
        clock.advance(30)

    def lease(self) -> dict:
        return self.kube.get("leases", "gputide-controller", "gputide")["spec"]

    def _actuator(self, who: str):
        replicas = self

        class Recording(DryRunActuator):
            def apply(self, action, snap):
                spec = replicas.lease()
                assert replicas.elector[who].is_leader, f"{who} applies {action.describe()} without the Lease"
                replicas.applied.append((who, spec["holderIdentity"], spec["leaseTransitions"]))
                return super().apply(action, snap)

        return Recording()

    def _source(self, who: str):
        replicas = self

        class Source:
            def snapshot(self):
                if who == "a":
                    replicas.reads += 1
                    if replicas.slow_read and replicas.slow_read[0] == replicas.reads:
                        replicas.wait(*replicas.slow_read[1:])
                return snapshot(FLEET, workloads=[(workload("web-0"), (0,))], temps={0: 88}, time=replicas.clock.now)

        return Source()

    def wait(self, step_s: float, steps: int) -> None:
        """Time passes during a's read: renewer ticks (with `start()`) and b's cycles go on."""
        for _ in range(steps):
            self.clock.advance(step_s)
            if self.background:
                self.elector["a"].renew()
                self.elector["b"].renew()
            assert not (self.elector["a"].is_leader and self.elector["b"].is_leader), "two leaders at once"
            self.loop["b"].run_once()

    def acted(self, who: str) -> bool:
        return any(w == who for w, _, _ in self.applied)


def one_actor_per_holding(applied: list[tuple[str, str, int]]) -> bool:
    return all(who == holder for who, holder, _ in applied) and len({t for _, _, t in applied}) == len(
        {(who, t) for who, _, t in applied})


@pytest.mark.parametrize("background", [False, True], ids=["renewed on demand", "renewer thread"])
@pytest.mark.parametrize(("slow", "status"), [(2, "standby"), (3, "ok")],
                         ids=["the first read is slow", "the fresh read before acting is slow"])
def test_a_leader_whose_prometheus_reads_outlast_the_lease_never_acts_after_losing_it(kube, api, clock, monkeypatch,
                                                                                      background, slow, status):
    r = Replicas(kube, api, clock, monkeypatch, background)
    r.slow_read = (slow, 25.0, 6)   # one of a's reads in its second cycle takes 150 s; b's cycles go on
    if background:   # ... and a's Lease renewals cannot reach the API server meanwhile
        r.elector["a"].api.coordination = Unreachable()
    report = r.loop["a"].run_once()
    assert r.lease()["holderIdentity"] == "b" and r.acted("b")
    assert not r.acted("a") and report.status == status
    assert len(report.rejected) == (len(report.plan.actions) if report.plan else 0)
    # with its Lease unreachable, a's evictions wait for a safety ledger it cannot save (balancer.ledger_handover)
    assert {why for _, why in report.rejected} <= ({"not_leader", "eviction_budget"} if background else {"not_leader"})
    assert one_actor_per_holding(r.applied), r.applied


def test_the_renewer_keeps_a_long_cycles_lease_so_the_standby_never_takes_over(kube, api, clock, monkeypatch):
    r = Replicas(kube, api, clock, monkeypatch, background=True)
    r.slow_read = (3, 15.0, 10)   # a's fresh read before acting takes 150 s, one renewal period a step
    report = r.loop["a"].run_once()
    assert r.acted("a") and not r.acted("b") and report.rejected == []
    assert r.lease()["holderIdentity"] == "a" and r.lease()["leaseTransitions"] == 0
    assert one_actor_per_holding(r.applied), r.applied


def test_without_renewals_leadership_ends_at_the_renew_deadline_before_anyone_may_take_over(kube, api, clock,
                                                                                          monkeypatch):
    a, b = (controller_elector(api, clock, monkeypatch, who) for who in "ab")
    a.start(thread=False)
    b.start(thread=False)
    a.api.coordination = Unreachable()
    seen = []
    for _ in range(8):   # renewer ticks every 15 s
        clock.advance(15)
        a.renew()
        b.renew()
        seen.append((a.is_leader, b.is_leader))
    # a: leader until 60 s without a renewal (no call from its loop needed); b: only once a's 90 s have passed
    assert seen == [(True, False)] * 3 + [(False, False)] * 2 + [(False, True)] * 3
