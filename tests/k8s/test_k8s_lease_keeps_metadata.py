"""Our writes of the Lease keep the metadata someone else set on it (audit a4 of session 40). Each write replaces
the whole Lease and sent only its annotations in the metadata, so every renewal, takeover or release dropped the
labels a user or a tool had put on it (client-go's Update sends back the object it read, keeping them). Written
over the Lease as read, its labels and the annotations we do not own stay; our ledger annotation is ours to set."""

from __future__ import annotations

import json

from test_k8s_once_lease_expired import ME, dead_holders_lease

from balancer.actuate.k8s_leader import LEDGER_ANNOTATION, LeaseLeaderElector

NAME = "gputide-controller"
LABELS = {"app.kubernetes.io/part-of": "gputide", "team": "ml-infra"}
NOTE = {"example.com/owner": "ml-infra"}


def metadata(kube) -> dict:
    return kube.get("leases", NAME, "gputide")["metadata"]


def kept(kube) -> None:
    meta = metadata(kube)
    assert meta.get("labels") == LABELS, meta
    assert {k: meta["annotations"].get(k) for k in NOTE} == NOTE, meta


def ledger(n: int) -> str:
    return json.dumps({"evictions": [n]})


def test_a_takeover_renewals_a_ledger_and_the_release_keep_the_leases_labels_and_annotations(kube, api, clock):
    lease = dead_holders_lease(NAME)
    lease["metadata"] |= {"labels": dict(LABELS), "annotations": dict(NOTE)}
    kube.add(lease)
    elector = LeaseLeaderElector(api, NAME, "gputide", ME, clock=clock)
    assert elector.try_acquire_or_renew() is False
    clock.advance(15)
    assert elector.try_acquire_or_renew() is True   # the takeover
    kept(kube)                                       # was: labels gone
    clock.advance(2.5)
    assert elector.try_acquire_or_renew() is True   # a renewal
    kept(kube)
    elector.save_state(ledger(1))
    kept(kube)
    assert metadata(kube)["annotations"][LEDGER_ANNOTATION] == ledger(1)
    assert elector.release() is True and kube.get("leases", NAME, "gputide")["spec"]["holderIdentity"] == ""
    kept(kube)


def test_labels_set_on_our_own_lease_outlast_our_renewals(kube, api, clock):
    elector = LeaseLeaderElector(api, NAME, "gputide", ME, clock=clock)
    assert elector.try_acquire_or_renew() is True   # created: nothing to keep
    kube.mutate("leases", NAME, "gputide", {"metadata": {"labels": dict(LABELS), "annotations": dict(NOTE)}})
    for _ in range(3):
        clock.advance(2.5)
        assert elector.try_acquire_or_renew() is True
        kept(kube)


def test_a_takeover_written_again_after_a_label_was_added_keeps_it(kube, api, clock):
    kube.add(dead_holders_lease(NAME))
    elector = LeaseLeaderElector(api, NAME, "gputide", ME, clock=clock)
    assert elector.try_acquire_or_renew() is False
    clock.advance(15)
    kube.before("PUT", rf"/leases/{NAME}$", lambda: kube.mutate(
        "leases", NAME, "gputide", {"metadata": {"labels": dict(LABELS), "annotations": dict(NOTE)}}))
    assert elector.try_acquire_or_renew() is True   # 409, read again (metadata alone changed), written again
    kept(kube)
