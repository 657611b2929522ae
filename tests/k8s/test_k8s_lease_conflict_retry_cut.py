"""The takeover written again after a 409 that changed the Lease's metadata alone (`LeaseLeaderElector._take`, audit
a4 of session 40). A write again counted from the try's start: after slow calls (past the renew deadline) it won the
Lease, yet the run was no leader, so a `--once` wait ended a standby with the Lease held and never released. A
SIGTERM during the takeover's write did not stop the writes again (only `release()` did), and neither did a
`release()` begun while the Lease was read again. The elector, the clock and the pauses are
test_k8s_once_lease_expired.py's (no real waiting); the edits are made just before a takeover write lands."""

from __future__ import annotations

import os
import signal

import pytest
from test_k8s_once_lease_conflict_retry import NAMES, annotated, once_behind_a_dead_holder, standby, writes
from test_k8s_once_lease_expired import ME, dead_holders_lease, signals_kept, waits  # noqa: F401 (fixtures)

from balancer.actuate.k8s_leader import LeaseLeaderElector


def before_the_first_write(kube, name: str, meanwhile) -> None:
    """The Lease's annotation edited just before our first write of it lands (a 409), and `meanwhile()`."""
    def edited() -> None:
        kube.mutate("leases", name, "gputide", annotated(1))
        meanwhile()

    kube.before("PUT", rf"/leases/{name}$", edited)


def holder(kube, name: str) -> str:
    return kube.get("leases", name, "gputide")["spec"]["holderIdentity"]


def test_a_slow_409_then_the_takeover_written_again_leads_and_releases_at_exit(kube, kubeconfig, clock, waits,  # noqa: F811
                                                                               capsys):
    """`schedule --once` acts on `await_lease`'s answer (`run --once`'s cycle asks the elector again, a renewal)."""
    name, code, out, err = once_behind_a_dead_holder(kube, kubeconfig, capsys, "schedule", lambda name: (
        before_the_first_write(kube, name, lambda: clock.advance(11))))   # its call: 11 s, past the renew deadline
    # was: a standby, exit 0 (the write again counted from the try's start, 11 s before), the Lease left held
    assert code == 0 and "ml/p -> n1" in out, out + err
    assert writes(kube, name)[:2] == [ME, ME], writes(kube, name)
    assert holder(kube, name) == "", "taken, released at exit"


def test_the_write_again_counts_from_when_it_is_sent(kube, api, clock) -> None:
    name = NAMES["run"]
    kube.add(dead_holders_lease(name))
    elector = LeaseLeaderElector(api, name, "gputide", ME, clock=clock)
    assert elector.try_acquire_or_renew() is False
    clock.advance(15)   # unchanged for its lease duration: the next try takes it over
    before_the_first_write(kube, name, lambda: clock.advance(11))
    assert elector.try_acquire_or_renew() is True and elector.is_leader   # was: written, is_leader False
    clock.advance(9)
    assert elector.is_leader, "a renew deadline from the write that won, not from the try's start"
    assert elector.release() is True and holder(kube, name) == ""   # was: False, the Lease left ours


@pytest.mark.parametrize("command", ["schedule", "run"])
def test_sigterm_during_the_takeover_write_writes_no_more(kube, kubeconfig, waits, signals_kept,  # noqa: F811
                                                          capsys, command):
    name, code, out, err = once_behind_a_dead_holder(kube, kubeconfig, capsys, command, lambda name: (
        before_the_first_write(kube, name, lambda: os.kill(os.getpid(), signal.SIGTERM))))
    standby(command, code, out, err)
    assert writes(kube, name) == [ME], "no read and write again once SIGTERM came"   # was: [ME, ME], taken
    assert not signals_kept, "the command's handler got it"
    assert holder(kube, name) == "crashed-replica"
    assert not kube.calls("POST", r"/binding$")


def test_a_wait_cut_short_during_the_takeover_write_writes_no_more(kube, api, clock) -> None:
    name, stop = NAMES["schedule"], []
    kube.add(dead_holders_lease(name))
    elector = LeaseLeaderElector(api, name, "gputide", ME, clock=clock)
    assert elector.try_acquire_or_renew() is False
    before_the_first_write(kube, name, lambda: stop.append("SIGTERM"))
    elector.stop_when(lambda: bool(stop))
    assert elector.await_lease(pause=clock.advance) is False
    assert writes(kube, name) == [ME] and holder(kube, name) == "crashed-replica"
    assert len(kube.calls("GET", rf"/leases/{name}$")) == 1 + 6, "its first try, the wait's six tries, no read again"


def test_release_begun_while_the_lease_is_read_again_writes_no_more(kube, api, clock) -> None:
    """`release()` first stops the renewer, then waits for the try in flight (its lock): begun during the read
    after the 409, the try ends there, not with a write again (SIGTERM's budget to exit counts one read and one
    write in flight)."""
    name = NAMES["run"]
    kube.add(dead_holders_lease(name))
    elector = LeaseLeaderElector(api, name, "gputide", ME, clock=clock)
    assert elector.try_acquire_or_renew() is False
    clock.advance(15)
    before_the_first_write(kube, name, lambda: kube.before("GET", rf"/leases/{name}$", elector._halt.set))
    assert elector.try_acquire_or_renew() is False and not elector.is_leader   # was: True, written again
    assert writes(kube, name) == [ME] and holder(kube, name) == "crashed-replica"
