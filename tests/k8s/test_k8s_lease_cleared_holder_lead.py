"""A leader that reads its Lease no longer its own (the holder cleared by an outside edit, or another's) is no longer
leading, whatever its takeover write then meets. Since 84e4a25d a 409 whose re-read fails keeps a held lead to its
renew deadline; a takeover is no held lead: before, replica-a kept is_leader True for up to its renew deadline while
replica-b held the Lease (a 409, the re-read a 503), or counted a new term on a 503 to its write."""
from __future__ import annotations

from balancer.actuate.k8s_leader import LeaseLeaderElector

NAME, NS = "gputide-controller", "gputide"
LEASE = rf"/leases/{NAME}$"


def elector(api, clock, who):
    return LeaseLeaderElector(api, NAME, NS, who, lease_duration_s=15, renew_deadline_s=10, clock=clock)


def test_a_cleared_holder_taken_by_another_ends_the_lead_though_the_reread_failed(kube, api, clock):
    a = elector(api, clock, "replica-a")
    a.start(thread=False)
    clock.advance(1)
    kube.mutate("leases", NAME, NS, {"spec": {"holderIdentity": ""}})   # an outside edit clears the holder

    def b_takes():   # replica-b takes the released Lease at once, between replica-a's read and write
        lease = kube.get("leases", NAME, NS)
        kube.mutate("leases", NAME, NS, {"spec": {"holderIdentity": "replica-b",
                                                  "renewTime": "2030-01-01T00:00:00.000000Z",
                                                  "leaseTransitions": lease["spec"]["leaseTransitions"] + 1}})
        kube.inject("GET", LEASE, 503)
    kube.before("PUT", LEASE, b_takes)
    clock.advance(1.5)
    assert a.renew() is False
    assert kube.get("leases", NAME, NS)["spec"]["holderIdentity"] == "replica-b"
    assert not a.is_leader   # was True: replica-a acting while replica-b holds the Lease


def test_a_cleared_holder_whose_takeover_write_fails_ends_the_lead(kube, api, clock):
    a = elector(api, clock, "replica-a")
    a.start(thread=False)
    terms = a.terms
    clock.advance(1)
    kube.mutate("leases", NAME, NS, {"spec": {"holderIdentity": ""}})
    kube.inject("PUT", LEASE, 503)
    clock.advance(1.5)
    assert a.renew() is False
    assert not a.is_leader and a.terms == terms   # was: won True, a new term, the Lease's holder still ""
    assert kube.get("leases", NAME, NS)["spec"]["holderIdentity"] == ""
