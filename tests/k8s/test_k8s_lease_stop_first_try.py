"""SIGTERM during the first try of a `--once` run (audit a9 of session 40). The elector heard of SIGTERM only through
`await_lease`'s `stopping`: the first try (`run --once`'s cycle asking `try_acquire`, `schedule --once`'s `leading()`)
and every renewer-thread try wrote the Lease again after a 409 for a metadata edit whatever SIGTERM said. Behind a
released Lease (holder ""), a label edited just before the first write (a 409) and SIGTERM during that write: a read,
a write that took the Lease, the cycle run (a pass bound pods), then the release's read and write, more Lease calls
than SIGTERM's budget to exit counts (`LEASE_CALLS_TO_RELEASE`). The commands now hand the elector their stop flag
(`stop_when`): every try ends at that 409. The elector, clock and pauses are test_k8s_once_lease_expired.py's."""

from __future__ import annotations

import os
import signal
from datetime import UTC, datetime

import pytest
from test_k8s_once_lease_conflict_retry import NAMES, once, standby, writes
from test_k8s_once_lease_expired import ME, a_pending_pod, signals_kept, waits  # noqa: F401 (fixtures)

from balancer.actuate.k8s_leader import LeaseLeaderElector
from balancer.app.health import LEASE_CALLS_TO_RELEASE


def released_lease(name: str) -> dict:
    """A Lease its last holder let go on its way out (`release()`): holder "", anyone takes it at once."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": "gputide"},
            "spec": {"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": stamp, "acquireTime": stamp,
                     "leaseTransitions": 2}}


def lease_calls(kube, name: str) -> int:
    return sum(len(kube.calls(method, rf"/leases/{name}$")) for method in ("GET", "PUT", "POST"))


@pytest.mark.parametrize("command", ["schedule", "run"])
def test_sigterm_during_the_first_write_ends_the_try_there(kube, kubeconfig, waits, signals_kept,  # noqa: F811
                                                           capsys, command):
    name, sent_before = NAMES[command], []
    a_pending_pod(kube)
    kube.add(released_lease(name))

    def labelled_and_sigterm() -> None:   # during our first write (already counted): a 409, and SIGTERM
        sent_before.append(lease_calls(kube, name) - 1)
        kube.mutate("leases", name, "gputide", {"metadata": {"labels": {"example.com/team": "ml"}}})
        os.kill(os.getpid(), signal.SIGTERM)

    kube.before("PUT", rf"/leases/{name}$", labelled_and_sigterm)
    code = once(command, kubeconfig)
    out, err = capsys.readouterr()
    after = lease_calls(kube, name) - sent_before[0]   # the write in flight, and every call after it
    assert after <= LEASE_CALLS_TO_RELEASE, f"{after} Lease calls after SIGTERM"   # was: 5 (taken, then released)
    assert after == 1, "the write in flight alone: no read again, no release of a Lease never ours"
    standby(command, code, out, err)   # was: the cycle run (run), a pod bound (schedule)
    assert writes(kube, name) == [ME] and not kube.calls("POST", r"/binding$")
    assert kube.get("leases", name, "gputide")["spec"]["holderIdentity"] == ""
    assert not signals_kept, "the command's handler got it"


def test_the_renewers_try_ends_at_its_409_once_stopping(kube, api, clock) -> None:
    """The renewer thread's try (a renewal here) hears the stop flag too: SIGTERM during its write, a 409 for an
    annotation edited, no read and write again (the loop then finishes its action and releases the Lease). The lead
    is kept (nothing said it was lost; the exit's save and release read the Lease afresh):
    test_k8s_lease_exit_save.py."""
    name, stop = NAMES["run"], []
    elector = LeaseLeaderElector(api, name, "gputide", ME, clock=clock)
    elector.stop_when(lambda: bool(stop))
    elector.start(thread=False)
    assert elector.is_leader

    def noted_and_sigterm() -> None:
        kube.mutate("leases", name, "gputide", {"metadata": {"annotations": {"example.com/note": "x"}}})
        stop.append("SIGTERM")

    kube.before("PUT", rf"/leases/{name}$", noted_and_sigterm)
    clock.advance(elector.retry_period_s)
    assert elector.renew() is False and elector.is_leader   # was: the lead dropped at the 409
    assert len(kube.calls("PUT", rf"/leases/{name}$")) == 1, "the renewal's one write (the Lease was created)"
    assert len(kube.calls("GET", rf"/leases/{name}$")) == 2, "one read per try, none again after the 409"
