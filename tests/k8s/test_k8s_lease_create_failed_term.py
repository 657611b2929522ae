"""A create of the Lease that fails other than 409 is no new term (session 41). `_write` answers `is_leader` for such a
failure (a 503 within the renew deadline: still the leader), and the try that found the leader's Lease deleted
(kubectl, a namespace clean-up) counted that answer as a Lease taken (`terms`): the loop, seeing the term change,
took office again (planner state afresh, `recover()` again) and the scheduler began a new term, though nothing was
written. Every other caller reads it as what it is, the lead (`try_acquire`, `renew`), or reads `last_failure`
(`save_state`, `await_lease`, `release`). The renewer is ticked by hand (`start(thread=False)`)."""

from __future__ import annotations

from balancer.actuate.k8s_leader import LeaseLeaderElector

NAME, NS, ME = "gputide-controller", "gputide", "replica-a"


def test_a_503_on_creating_the_deleted_lease_keeps_the_lead_and_its_term(kube, api, clock) -> None:
    elector = LeaseLeaderElector(api, NAME, NS, ME, lease_duration_s=15, renew_deadline_s=10, clock=clock)
    elector.start(thread=False)
    assert elector.is_leader and elector.terms == 1
    kube.delete("leases", NAME, NS)
    kube.inject("POST", r"/leases$", 503)
    clock.advance(elector.retry_period_s)
    assert elector.renew() is True and elector.is_leader   # within the renew deadline: still the leader
    assert elector.unreachable() is not None and kube.get("leases", NAME, NS) is None, "nothing written"
    assert elector.terms == 1, "no Lease taken"   # was: 2, the loop took office again
    clock.advance(elector.retry_period_s)
    assert elector.renew() is True and elector.terms == 2, "created: a Lease taken, a new term"
    assert kube.get("leases", NAME, NS)["spec"]["holderIdentity"] == ME
