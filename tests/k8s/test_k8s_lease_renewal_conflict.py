"""A 409 on the leader's renewal for an edit of its Lease's metadata alone (audit a4 of session 40). The takeover is
written again after such a 409 (its holder record unchanged: `_take`), but a renewal was not: an annotation or label
put on the leader's own Lease (kubectl, a tool) ended its lead at once, and its next renewal counted a new term
(`terms`), so the loop took office again, its planner state afresh. A renewal now reads the Lease again and, our own
record unchanged, writes again within the try, a few times at most (`TAKEOVER_CONFLICT_RETRIES`), the lead kept
throughout (the loop looks at `is_leader` while the renewer reads again); our record changed, the lead ends at once,
as before (test_k8s_leader_renewer.py); not known changed, it runs to its renew deadline. The renewer is ticked by
hand (`start(thread=False)`), on the test's clock."""

from __future__ import annotations

from balancer.actuate.k8s_leader import LEDGER_ANNOTATION, TAKEOVER_CONFLICT_RETRIES, LeaseLeaderElector
from balancer.safety_ledger import SafetyLedger

NAME, ME = "gputide-controller", "replica-a"
PUT = rf"/leases/{NAME}$"


def leading(api, clock) -> LeaseLeaderElector:
    elector = LeaseLeaderElector(api, NAME, "gputide", ME, lease_duration_s=15, renew_deadline_s=10, clock=clock)
    elector.start(thread=False)
    assert elector.is_leader and elector.terms == 1
    return elector


def edit(kube, patch: dict):
    return lambda: kube.mutate("leases", NAME, "gputide", patch)


def note(n: int) -> dict:
    return {"metadata": {"annotations": {"example.com/note": f"edit {n}"}}}


def renewals(kube) -> int:
    return len(kube.calls("PUT", PUT))


def test_an_annotation_put_on_the_leaders_lease_keeps_its_lead_and_its_term(kube, api, clock) -> None:
    elector, looks = leading(api, clock), []

    def edited() -> None:   # just before the renewal lands: a 409; the loop looks while the Lease is read again
        edit(kube, note(1))()
        kube.before("GET", PUT, lambda: looks.append(elector.try_acquire(clock.now)))

    kube.before("PUT", PUT, edited)
    clock.advance(2.5)
    assert elector.renew() is True and elector.is_leader   # was: False, not leader
    assert renewals(kube) == 2, "the 409's renewal, written again over the Lease read again"
    assert looks == [True], "the lead kept while the Lease is read again"
    clock.advance(2.5)
    assert elector.renew() is True
    assert elector.terms == 1, "one term throughout"   # was: 2, the loop took office again
    lease = kube.get("leases", NAME, "gputide")
    assert lease["metadata"]["annotations"]["example.com/note"] == "edit 1" and lease["spec"]["holderIdentity"] == ME


def test_metadata_edited_before_every_renewal_write_stops_writing_after_a_few_and_keeps_the_lead(kube, api,
                                                                                                  clock) -> None:
    """Bounded; the lead, its record still ours as last read, runs to its renew deadline as after any failed
    renewal (was: dropped, the next renewal a new term: test_k8s_lease_renewal_conflict_lost.py)."""
    elector = leading(api, clock)
    edits = [note(n) for n in range(TAKEOVER_CONFLICT_RETRIES + 1)]
    kube.before("PUT", PUT, lambda: edit(kube, edits.pop(0))(), count=len(edits))
    clock.advance(2.5)
    assert elector.renew() is False and elector.is_leader
    assert renewals(kube) == 1 + TAKEOVER_CONFLICT_RETRIES, "bounded"
    clock.advance(2.5)
    assert elector.renew() is True and elector.terms == 1


def test_our_ledger_edited_on_the_lease_is_written_over_by_the_renewal_again(kube, api, clock) -> None:
    """The ledger annotation is the holder's: what it spent, what a successor inherits. An edit of it alone (a
    tool's, by hand) is put back by the write again, as the next renewal would, and the lead goes on."""
    elector = leading(api, clock)
    ours = SafetyLedger(evictions=(1000.0,)).to_json()
    elector.save_state(ours)
    kube.before("PUT", PUT, edit(kube, {"metadata": {"annotations": {LEDGER_ANNOTATION: "{}"}}}))
    clock.advance(2.5)
    assert elector.renew() is True and elector.is_leader and elector.terms == 1
    assert kube.get("leases", NAME, "gputide")["metadata"]["annotations"][LEDGER_ANNOTATION] == ours
    assert elector.load_state() is None   # no new term: nothing inherited, the edit least of all
