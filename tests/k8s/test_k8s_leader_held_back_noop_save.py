"""A move held back by the hand-over is not released by a save the Lease never took. The loop gives a held-back
move back to the planner once a cycle's start saves the ledger (`LedgerHandover.hand_on`, then
`planner.ledger_saved`). After the reservation (the ledger with the move's eviction) failed to write, the ledger
alone was still on the Lease, and `LeaseLeaderElector.save_state` reported a text already there saved with no I/O:
while every Lease write failed the move was released, proposed and held back again every cycle, and the hot GPU was
never throttled until the renew deadline. Now a save after a failed try writes again, and the failure is raised."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from fakeapi import FakeKube
from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).parents[1] / "loop"))

from reads_down import ReadsDown  # noqa: E402
from test_loop_held_back_move import Sent, hot  # noqa: E402   web-0 hot on n0's GPU 0; an actuator that applies all

from balancer.actions import SetPowerLimit  # noqa: E402
from balancer.actuate.k8s_leader import LeaseLeaderElector  # noqa: E402
from balancer.actuate.leader import LedgerNotSaved  # noqa: E402
from balancer.config import BalancerPolicy  # noqa: E402
from balancer.ledger_handover import LedgerHandover  # noqa: E402
from balancer.loop import Reconciler  # noqa: E402
from balancer.metrics import ControllerMetrics  # noqa: E402
from balancer.model import Migrate  # noqa: E402
from balancer.safety_ledger import SafetyLedger  # noqa: E402

_POLICY = BalancerPolicy()
POLICY = replace(_POLICY, hotspots=replace(_POLICY.hotspots, taint_hot_nodes=False))   # the move's eviction alone
T0 = 1000.0
LEASE_PUT = r"/leases/gputide-controller$"


def elector(api, clock) -> LeaseLeaderElector:
    return LeaseLeaderElector(api, "gputide-controller", "gputide", "replica-a", lease_duration_s=900,
                              renew_deadline_s=600, clock=clock)   # the renew deadline out of reach


def test_a_move_held_back_while_the_lease_takes_no_write_stays_held_and_the_hot_gpu_is_throttled(
        kube: FakeKube, api, clock) -> None:
    lease = elector(api, clock)
    assert lease.try_acquire_or_renew()
    t, registry, actuator = [T0], CollectorRegistry(), Sent()
    rec = Reconciler(source=ReadsDown(t, hot), actuator=actuator, clock=lambda: t[0],
                     metrics=ControllerMetrics(registry), policy=POLICY)
    rec.handover = LedgerHandover(lease, registry)
    rec.run_once()   # a term's first cycle
    rec.handover.changed(rec.ledger)   # steady state: the ledger is on the Lease
    assert not rec.handover.unsaved
    down = kube.inject("PUT", LEASE_PUT, 503, count=1000)   # the API server fails every Lease write
    reports = []
    for i in range(1, 6):
        t[0] = T0 + 10 * i
        clock.advance(10)
        reports.append(rec.run_once())
        assert lease.is_leader   # within the renew deadline throughout
    first, *later = reports
    assert [type(a) for a, _ in first.rejected] == [Migrate]   # held back: its reservation not saved
    for report in later:   # was: released by a save that wrote nothing, proposed and held back again
        assert not any(isinstance(a, Migrate) for a in report.plan.actions)
        assert rec.handover.unsaved
    capped = [a for a in actuator.sent if isinstance(a, SetPowerLimit)]
    assert [(a.node, a.gpu) for a in capped] == [("n0", 0)], "the hot GPU was never throttled"   # in cycle 2
    assert any(isinstance(a, SetPowerLimit) for a in later[0].plan.actions)

    down.remaining = 0   # the Lease takes writes again: the ledger saved, the move goes
    t[0] += 10
    clock.advance(10)
    rec.run_once()
    assert not rec.handover.unsaved
    assert [a.workload for a in actuator.sent if isinstance(a, Migrate)] == ["inference/web-0"]


def test_a_save_after_a_failed_write_writes_again_whatever_the_lease_holds(kube: FakeKube, api, clock) -> None:
    lease = elector(api, clock)
    assert lease.try_acquire_or_renew()
    ledger, reservation = SafetyLedger().to_json(), SafetyLedger(evictions=(T0,)).to_json()
    lease.save_state(ledger)
    down = kube.inject("PUT", LEASE_PUT, 503, count=1000)
    puts = len(kube.calls("PUT", LEASE_PUT))
    for text in (reservation, ledger, ledger):   # the ledger alone is on the Lease from before: written again
        try:
            lease.save_state(text)
        except LedgerNotSaved as exc:
            assert exc.reason == "unavailable"
        else:
            raise AssertionError("a save reported while every Lease write fails")
        assert len(kube.calls("PUT", LEASE_PUT)) > puts   # tried: a write, not a look at what we last wrote
        puts = len(kube.calls("PUT", LEASE_PUT))
    down.remaining = 0
    lease.save_state(ledger)
    assert len(kube.calls("PUT", LEASE_PUT)) > puts
    puts = len(kube.calls("PUT", LEASE_PUT))
    lease.save_state(ledger)   # known on the Lease since a write that succeeded: no I/O
    assert len(kube.calls("PUT", LEASE_PUT)) == puts
