"""`run --once`'s exit: a ledger the save could not put on the Lease but the release did counts as saved (review r1
of session 40's Lease commits). Since 2ae5a7f7 the exit's save after SIGTERM writes again once after a 409; a second
409 fails it, and the release that follows reads the Lease afresh and writes our ledger with the holder cleared
(test_k8s_lease_exit_save.py). `one_cycle` judged `saved` before that release: the run exited 4
(`EXIT_LEDGER_NOT_SAVED`) logging that the next run inherits an older ledger, though the Lease held ours. The
hand-over now asks again after a release that wrote; the elector answers from that release, with no call (after
`release()` a save makes none: it could not take the Lease back). The reconciler is a stand-in for the cycle: it
leads, spends `M`, and SIGTERM comes; every save's write gets a 409."""

from __future__ import annotations

import logging
import threading
from types import SimpleNamespace

import pytest
from fakeapi import FakeKube
from prometheus_client import CollectorRegistry

from balancer.actuate.k8s_leader import LEDGER_ANNOTATION, STOPPED_SAVE_RETRIES, LeaseLeaderElector
from balancer.actuate.leader import LedgerNotSaved
from balancer.cmd import run as run_cmd
from balancer.ledger_handover import LedgerHandover
from balancer.safety_ledger import SafetyLedger

T0 = 1_700_000_000.0
NAME, NS, ME = "gputide-controller", "gputide", "replica-a"
LEASE = rf"/leases/{NAME}$"
M = SafetyLedger(evictions=(T0, T0 + 60))


class Cycle:
    """`one_cycle`'s reconciler: the cycle takes the Lease, spends `M` and hands it on; SIGTERM during it."""

    def __init__(self, kube: FakeKube, elector: LeaseLeaderElector, conflicts: int) -> None:
        self.kube, self.elector, self.conflicts = kube, elector, conflicts
        self.handover, self.ledger = LedgerHandover(elector, CollectorRegistry()), M

    def run_once(self, stop: threading.Event) -> SimpleNamespace:
        assert self.elector.try_acquire(T0)
        stop.set()   # SIGTERM
        edits = iter(range(self.conflicts))
        self.kube.before("PUT", LEASE, lambda: self.kube.mutate(   # a label edited before each save's write: 409
            "leases", NAME, NS, {"metadata": {"labels": {"example.com/edit": str(next(edits))}}}),
            count=self.conflicts)
        self.handover.changed(self.ledger)
        return SimpleNamespace(status="idle", reason="", plan=None, results=(), rejected=())


def on_lease(kube: FakeKube) -> tuple[str, str | None]:
    lease = kube.get("leases", NAME, NS)
    return lease["spec"]["holderIdentity"], (lease["metadata"].get("annotations") or {}).get(LEDGER_ANNOTATION)


def lease_calls(kube: FakeKube) -> int:
    return len(kube.calls("GET", LEASE)) + len(kube.calls("PUT", LEASE))


def once(kube: FakeKube, api, clock, conflicts: int, caplog) -> tuple[int, Cycle]:
    elector = LeaseLeaderElector(api, NAME, NS, ME, lease_duration_s=15, renew_deadline_s=10, clock=clock)
    stop = threading.Event()
    elector.stop_when(stop.is_set)
    cycle = Cycle(kube, elector, conflicts)
    with caplog.at_level(logging.ERROR, logger="balancer.cmd.run"):
        return run_cmd.one_cycle(cycle, stop), cycle


def test_the_release_carried_the_ledger_the_exit_save_could_not_write(kube, api, clock, caplog) -> None:
    per_save = 2 * (1 + STOPPED_SAVE_RETRIES)   # a read and a write, then once more: each write answered 409
    code, cycle = once(kube, api, clock, 2 * (1 + STOPPED_SAVE_RETRIES), caplog)
    assert on_lease(kube) == ("", M.to_json()), "released, our ledger on the Lease"
    assert code == 0, caplog.text   # was: 4, "that run inherits an older ledger"
    assert "inherits an older ledger" not in caplog.text and not cycle.handover.unsaved
    assert lease_calls(kube) == 1 + 2 * per_save + 2, "its first read, two saves, the release: none to ask again"


def test_a_save_after_a_release_makes_no_call_and_is_saved_only_if_that_release_wrote_it(kube, api, clock) -> None:
    elector = LeaseLeaderElector(api, NAME, NS, ME, lease_duration_s=15, renew_deadline_s=10, clock=clock)
    assert elector.try_acquire_or_renew()
    elector.save_state(M.to_json())
    assert elector.release() is True and on_lease(kube) == ("", M.to_json())
    calls = lease_calls(kube)
    assert elector.save_state(M.to_json()) == 0   # was: LedgerNotSaved('not_leader')
    with pytest.raises(LedgerNotSaved) as raised:
        elector.save_state(SafetyLedger(evictions=(T0,)).to_json())
    assert raised.value.reason == "not_leader"
    assert lease_calls(kube) == calls, "no call: a save takes no Lease back"   # was: a read (and a takeover)
    assert on_lease(kube) == ("", M.to_json())
