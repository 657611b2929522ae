"""SIGTERM during the last try of a `--once --leader-elect` wait behind a crashed holder's long Lease, the wait ended
by its count of tries rather than its deadline (review r4 of session 39): `await_lease` checked `stopping()` before
each pause and after it, not after the try, so a SIGTERM that came while the last try's Lease call was in flight
left the wait recorded as run to its end, and both commands said the Lease neither taken nor renewed, exit 3, where
the docs promise a SIGTERM'd wait a standby's exit 0. The count of tries ends the wait where the clock moves less
than the pauses asked: here each pause wakes a hundredth of a second early, so the deadline (judged by when a try
began) is never reached while the time watched still passes the wait's length. The elector, the clock and the
pauses are test_k8s_once_lease_expired.py's (no real waiting)."""

from __future__ import annotations

import os
import signal

import pytest
from test_k8s_once_lease_expired import a_pending_pod, signals_kept, taken_by_me, waits  # noqa: F401 (fixtures)
from test_k8s_once_lease_long import NAMES, STEP, WAIT, long_dead_lease, once

EARLY = 0.01   # how much sooner than asked each pause wakes


@pytest.mark.parametrize("command", ["schedule", "run"])
def test_sigterm_in_the_last_tries_lease_call_leaves_a_standby_exit_0(
        kube, kubeconfig, clock, waits, signals_kept, capsys, command):  # noqa: F811 (the fixtures imported above)
    name, step = NAMES[command], STEP[command]
    tries = int((WAIT[3600, command] + step) / step) + 1   # the wait's count: one pause before each try

    def meanwhile() -> None:
        clock.advance(-EARLY)
        if len(waits.asked) == tries:   # the last pause: SIGTERM comes while its try reads the Lease
            kube.before("GET", rf"/leases/{name}$", lambda: os.kill(os.getpid(), signal.SIGTERM))

    a_pending_pod(kube)
    kube.add(long_dead_lease(name))
    waits.meanwhile = meanwhile
    code = once(command, kubeconfig)
    out, err = capsys.readouterr()
    assert len(waits.asked) == tries, "the wait ended by its count of tries"
    assert sum(waits.asked) - tries * EARLY >= WAIT[3600, command], "the time watched was the wait's length"
    assert code == 0, out + err   # was: exit 3, "not renewed meanwhile, so neither taken nor known ..."
    assert ("not the leader: another replica holds the Lease" in out if command == "schedule"
            else out.strip() == "cycle: standby not the leader"), out + err
    assert "--once: the Lease" not in err, err
    assert not signals_kept, "the command's handler got it"
    assert not taken_by_me(kube, name) and not kube.calls("POST", r"/binding$")
    assert kube.get("leases", name, "gputide")["spec"]["holderIdentity"] == "crashed-replica"
