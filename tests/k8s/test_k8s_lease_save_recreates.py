"""A save of the ledger over a deleted Lease creates it again, carrying the ledger (audit a9 of session 41).

b8505893 made a save's try find the Lease deleted (kubectl, a namespace clean-up) and create nothing: the save
`not_leader`, the lead dropped, the ledger kept for the loop's next ask. A `run --once` has no next ask: its Lease
deleted after the cycle acted and before the save of what it spent, that save was refused, the exit's save
(`saved_before_exit`) refused again, `release()` made no call (not leading), and the run exited 4
(`EXIT_LEDGER_NOT_SAVED`) with its ledger on no Lease, the next run inheriting a full eviction budget. 9d26e402
reverted it: a create is atomic and takes the Lease from no one (one written meanwhile by another replica answers
409), so the save creates it with us as holder and the ledger on it, and the release that follows hands it on."""

from __future__ import annotations

import logging
import threading
from types import SimpleNamespace

import pytest
from fakeapi import FakeKube
from prometheus_client import CollectorRegistry
from test_k8s_lease_save_lapsed import ME, NAME, NS, L, M, elector, on_lease

from balancer.actuate.k8s_leader import LeaseLeaderElector
from balancer.cmd import run as run_cmd
from balancer.ledger_handover import LedgerHandover
from balancer.safety_ledger import SafetyLedger

LEASES = r"/leases$"
# from the last ask, seconds before the save: within the renew deadline (10 s), or past it (a long action)
ADVANCE = pytest.mark.parametrize("advance", [1, 11], ids=["leading", "its lead lapsed"])


@ADVANCE
def test_a_save_over_a_deleted_lease_creates_it_carrying_the_ledger(kube, api, clock, advance) -> None:
    lease = elector(api, clock)
    assert lease.try_acquire_or_renew()
    lease.save_state(L)
    clock.advance(advance)
    kube.delete("leases", NAME, NS)
    creates = len(kube.calls("POST", LEASES))   # the first ask's
    lease.save_state(M)   # on b8505893: LedgerNotSaved('not_leader'), nothing created
    assert len(kube.calls("POST", LEASES)) == creates + 1, "the save's try created it"
    assert on_lease(kube) == (ME, M), "ours, the ledger on it"
    assert lease.is_leader and lease.terms == 2, "a new term: the Lease created is one taken"
    assert lease.load_state() is None, "nothing inherited from a Lease we created"


class Cycle:
    """`one_cycle`'s reconciler: the cycle takes the Lease and saves its reservation (`L`), acts for `advance` s,
    and someone deletes the Lease before the save of what it spent (`M`)."""

    def __init__(self, kube: FakeKube, lease: LeaseLeaderElector, clock, advance: float) -> None:
        self.kube, self.elector, self.clock, self.advance = kube, lease, clock, advance
        self.handover, self.ledger = LedgerHandover(lease, CollectorRegistry()), SafetyLedger.from_json(M)

    def run_once(self, stop: threading.Event) -> SimpleNamespace:
        assert self.elector.try_acquire(self.clock())
        self.handover.changed(SafetyLedger.from_json(L))   # the reservation, before acting
        assert not self.handover.unsaved
        self.clock.advance(self.advance)   # the action
        self.kube.delete("leases", NAME, NS)
        self.handover.changed(self.ledger)   # what it spent
        return SimpleNamespace(status="idle", reason="", plan=None, results=(), rejected=())


@ADVANCE
def test_run_once_whose_lease_was_deleted_before_its_save_hands_the_ledger_on(kube, api, clock, caplog,
                                                                               advance) -> None:
    cycle = Cycle(kube, elector(api, clock), clock, advance)
    with caplog.at_level(logging.ERROR, logger="balancer.cmd.run"):
        code = run_cmd.one_cycle(cycle, threading.Event())
    assert code == 0, caplog.text   # on b8505893: 4, "that run inherits an older ledger"
    assert "inherits an older ledger" not in caplog.text and not cycle.handover.unsaved, "counted as saved"
    assert kube.get("leases", NAME, NS) is not None, "the save created it again"   # on b8505893: left deleted
    assert on_lease(kube) == ("", M), "released, what the cycle spent handed on with it"
