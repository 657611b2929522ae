"""`--once --leader-elect` beside a live gputide holder at a longer --interval, renewing on its own schedule (audit
a2 of session 39): a holder's renewer writes the Lease every retry period, a quarter of its renew deadline of two
thirds, so a sixth of its lease duration (three of its --interval): every 10 min at a 20 min --interval. Cut to its
own lease duration (90 s at the default 30 s --interval), a --once run's wait ended before that holder's next renewal
most times, and it said a healthy holder's Lease was neither renewed nor takeable, exit 3, instead of a standby's
exit 0. It now waits at least a third of the Lease's duration, two of the holder's renewal periods, so it sees the
next renewal whenever in the holder's period it first read the Lease (`phase`), and leaves a standby at it.
The elector, the clock and the pauses are test_k8s_once_lease_expired.py's (no real waiting)."""

from __future__ import annotations

import pytest
from test_k8s_once_lease_expired import a_pending_pod, taken_by_me, waits  # noqa: F401 (waits: the fixture)
from test_k8s_once_lease_long import NAMES, STEP, once

from balancer.actuate.k8s_leader import LeaseLeaderElector


@pytest.mark.parametrize("holder_interval", [30, 300, 1200])   # its Lease 90 s, 900 s, 3600 s: renewed each sixth
@pytest.mark.parametrize("phase", [0.1, 0.5, 0.9])   # how far into its renewal period the holder is at our first read
@pytest.mark.parametrize("command", ["schedule", "run"])
def test_a_live_holder_renewing_every_sixth_of_its_lease_leaves_a_default_once_run_a_standby_exit_0(
        kube, api, kubeconfig, clock, waits, capsys, command, holder_interval, phase):  # noqa: F811 (the fixture)
    name = NAMES[command]
    duration = max(15, holder_interval * 3)   # as `lease_elector` builds the holder's (balancer/cmd/run.py)
    holder = LeaseLeaderElector(api, name, "gputide", "replica-b", clock=clock, lease_duration_s=duration,
                                renew_deadline_s=duration * 2 / 3)
    assert holder.try_acquire_or_renew()
    period = holder.retry_period_s
    assert period == duration / 6
    due = [clock() + period * (1 - phase)]   # its last renewal `phase` of a period before our first read

    def renewer() -> None:   # the holder's renewer thread, on its own schedule
        while clock() >= due[0]:
            assert holder.try_acquire_or_renew()
            due[0] += period

    waits.meanwhile = renewer
    a_pending_pod(kube)
    code = once(command, kubeconfig)
    out, err = capsys.readouterr()
    assert code == 0, out + err   # was: exit 3, "neither taken nor known to be a live holder's" (4 of 5 at 1200)
    assert ("not the leader: another replica holds the Lease" in out if command == "schedule"
            else out.strip() == "cycle: standby not the leader"), out + err
    assert "--once: the Lease" not in err, err
    assert sum(waits.asked) <= period * (1 - phase) + STEP[command], "left at the holder's first renewal"
    assert not taken_by_me(kube, name) and not kube.calls("POST", r"/binding$")
    assert kube.get("leases", name, "gputide")["spec"]["holderIdentity"] == "replica-b"
