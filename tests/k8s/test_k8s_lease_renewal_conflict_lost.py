"""A renewal's 409 drops the lead only once the Lease is known lost (review r1 of session 40's Lease commits). Since
cf23703f a renewal answered 409 reads the Lease again and, its holder record unchanged, writes again; but it dropped
the lead whenever that re-read failed (a 503) or the writes again ran out (test_k8s_lease_renewal_conflict.py),
though nothing said the record was no longer ours (2ae5a7f7 kept it only for a try cut short): an annotation put on
the leader's Lease, then one failed read, and `is_leader` was False at once, the next renewal counted a new term
(`terms`: the loop took office again, HPA floors given back). Now `_read_again` says the Lease is lost (its holder
record changed, or a 404) and the lead is dropped only then; otherwise a held lead runs to its renew deadline, as
after any failed renewal. The renewer is ticked by hand (`start(thread=False)`), on the test's clock."""

from __future__ import annotations

import pytest

from balancer.actuate.k8s_leader import LeaseLeaderElector

NAME, NS, ME = "gputide-controller", "gputide", "replica-a"
LEASE = rf"/leases/{NAME}$"


def leading(api, clock) -> LeaseLeaderElector:
    elector = LeaseLeaderElector(api, NAME, NS, ME, lease_duration_s=15, renew_deadline_s=10, clock=clock)
    elector.start(thread=False)
    assert elector.is_leader and elector.terms == 1
    return elector


def noted(kube, n: int = 1) -> None:
    """An annotation edited on the Lease, its holder record unchanged: our write in flight gets a 409."""
    kube.mutate("leases", NAME, NS, {"metadata": {"annotations": {"example.com/note": f"edit {n}"}}})


def test_a_renewals_409_then_a_failed_re_read_keeps_the_lead_and_its_term(kube, api, clock) -> None:
    elector = leading(api, clock)

    def edited() -> None:
        noted(kube)
        kube.inject("GET", LEASE, 503)   # the read again after the 409

    kube.before("PUT", LEASE, edited)
    clock.advance(elector.retry_period_s)
    assert elector.renew() is False
    assert elector.is_leader, "nothing said the Lease is no longer ours"   # was: not leader at once
    clock.advance(elector.retry_period_s)
    assert elector.renew() is True
    assert elector.terms == 1, "one term throughout"   # was: 2, the loop took office again


def test_a_lead_kept_so_still_ends_at_its_renew_deadline(kube, api, clock) -> None:
    elector = leading(api, clock)

    def edited() -> None:
        noted(kube)
        kube.inject(None, LEASE, 503, count=1000)   # the re-read, and every call after it

    kube.before("PUT", LEASE, edited)
    clock.advance(elector.retry_period_s)
    assert elector.renew() is False and elector.is_leader
    clock.advance(elector.renew_deadline_s - elector.retry_period_s)
    assert elector.renew() is False and not elector.is_leader, "its renew deadline from the last write that won"


@pytest.mark.parametrize("change", ["deposed", "deleted"])
def test_a_renewals_409_then_a_re_read_that_shows_it_lost_drops_the_lead(kube, api, clock, change) -> None:
    elector = leading(api, clock)

    def changed() -> None:
        if change == "deposed":
            kube.mutate("leases", NAME, NS, {"spec": {"holderIdentity": "replica-b",
                                                      "renewTime": "2030-01-01T00:00:00.000000Z"}})
        else:
            kube.delete("leases", NAME, NS)
            kube.add({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                      "metadata": {"name": NAME, "namespace": NS}, "spec": {}})   # a 409: another resourceVersion
            kube.before("GET", LEASE, lambda: kube.delete("leases", NAME, NS))   # gone by the read again

    kube.before("PUT", LEASE, changed)
    clock.advance(elector.retry_period_s)
    assert elector.renew() is False and not elector.is_leader
    assert len(kube.calls("PUT", LEASE)) == 1, "the renewal (409): no write again"
