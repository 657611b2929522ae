"""SIGTERM in the last pause of a `--once --leader-elect` wait behind a crashed holder's long Lease (audit a2 of
session 39): the wait was judged outwaited by the time elapsed alone, so a SIGTERM that ended it in its last pause
made both commands say the Lease neither taken nor renewed, exit 3, where the docs promise a SIGTERM'd wait a
standby's exit 0. `await_lease` now records that a wait reached its end, and `outwaited()` requires it. The elector,
the clock and the pauses are test_k8s_once_lease_expired.py's (no real waiting)."""

from __future__ import annotations

import os
import signal

import pytest
from test_k8s_once_lease_expired import a_pending_pod, signals_kept, taken_by_me, waits  # noqa: F401 (fixtures)
from test_k8s_once_lease_long import NAMES, STEP, WAIT, long_dead_lease, once


@pytest.mark.parametrize("command", ["schedule", "run"])
def test_sigterm_in_the_waits_last_pause_leaves_a_standby_exit_0(
        kube, kubeconfig, waits, signals_kept, capsys, command):  # noqa: F811 (the fixtures imported above)
    name, last = NAMES[command], WAIT[3600, command] + STEP[command]   # its last pause ends there, its wait with it
    a_pending_pod(kube)
    kube.add(long_dead_lease(name))
    waits.meanwhile = lambda: sum(waits.asked) >= last and os.kill(os.getpid(), signal.SIGTERM)
    code = once(command, kubeconfig)
    out, err = capsys.readouterr()
    assert code == 0, out + err   # was: exit 3, "not renewed meanwhile, so neither taken nor known ..."
    assert ("not the leader: another replica holds the Lease" in out if command == "schedule"
            else out.strip() == "cycle: standby not the leader"), out + err
    assert "--once: the Lease" not in err, err
    assert sum(waits.asked) == last, "SIGTERM in the last pause: no try after it, no further pause"
    assert not signals_kept, "the command's handler got it"
    assert not taken_by_me(kube, name) and not kube.calls("POST", r"/binding$")
    assert kube.get("leases", name, "gputide")["spec"]["holderIdentity"] == "crashed-replica"
