"""`--once --leader-elect` behind a Lease written with a long leaseDurationSeconds (review of session 38's a14): the
wait for another replica's Lease lasted that Lease's duration, so behind a holder with a 20 min --interval (a 3600 s
Lease) a --once run (a CronJob's, its deadline shorter) waited an hour, and behind one with 24 h, three days. The wait
now lasts at most the longer of the run's own lease duration (three --interval, at least 15 s: the most it would make a
successor wait) and a third of the Lease's (two renewals of a live gputide holder: cut to its own alone, audit a2, a
run beside a holder at a 20 min --interval saw no renewal and exited 3 for a healthy holder, see
test_k8s_once_lease_live_holder.py): shorter, not short, as a third follows the Lease's duration: 20 min behind the
3600 s Lease, still a day behind a 24 h holder's (259200 s), longer than many a CronJob's deadline. A Lease neither
renewed nor takeable within it is said so, with the --interval that waits for it, exit 3 (nothing done: it cannot
tell a live holder from a crashed one), and the cut is logged as the wait begins. A holder renewing within the wait
still leaves a standby, exit 0, and the --interval the message names still takes a crashed holder's Lease. The
elector, the clock and the pauses are test_k8s_once_lease_expired.py's (no real waiting)."""

from __future__ import annotations

import logging

import pytest
from test_k8s_once_lease_expired import (  # noqa: F401 (waits: the fixture)
    a_pending_pod,
    dead_holders_lease,
    run_once,
    taken_by_me,
    waits,
)

from balancer.actuate.k8s_leader import LeaseLeaderElector
from balancer.cli import main

NAMES = {"schedule": "gputide-scheduler", "run": "gputide-controller"}
OWN = {"schedule": 15, "run": 90}   # three of each command's default --interval (2s, 30s), at least 15 s
STEP = {"schedule": 2.5, "run": 15}  # the pause: each one's retry period (a quarter of two thirds of OWN)
# (Lease's leaseDurationSeconds, command) -> how long it is watched: the longer of OWN and a third of the Lease's
WAIT = {(3600, "schedule"): 1200, (3600, "run"): 1200, (120, "schedule"): 40, (120, "run"): 90}


def once(command: str, kubeconfig: str, *flags: str) -> int:
    if command == "run":
        return run_once(kubeconfig, *flags)
    return main(["schedule", "--kubeconfig", kubeconfig, "--once", "--metrics-port", "0", "--leader-elect",
                 "--lease-namespace", "gputide", *flags])


def long_dead_lease(name: str, duration: int = 3600) -> dict:
    lease = dead_holders_lease(name)
    lease["spec"]["leaseDurationSeconds"] = duration
    return lease


@pytest.mark.parametrize("duration", [3600, 120])   # a third of it longer than both commands' own lease; than one's
@pytest.mark.parametrize("command", ["schedule", "run"])
def test_a_crashed_holders_long_lease_is_waited_for_its_third_or_this_runs_own_lease_then_said_exit_3(
        kube, kubeconfig, waits, caplog, capsys, command, duration):  # noqa: F811 (the fixture imported above)
    name, wait, interval = NAMES[command], WAIT[duration, command], duration // 3
    a_pending_pod(kube)
    kube.add(long_dead_lease(name, duration))
    with caplog.at_level(logging.WARNING, logger="balancer.actuate.k8s_leader"):
        code = once(command, kubeconfig)
    out, err = capsys.readouterr()
    assert code == 3, out + err
    assert wait <= sum(waits.asked) <= wait + STEP[command], waits.asked   # was: 3600 s, taken; then OWN only
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"gputide {command} --once: the Lease gputide/{name} is crashed-replica's, its "
                           f"leaseDurationSeconds {duration} longer than this run waits ({wait} s"), line
    assert line.endswith(f"(an --interval of {interval}s or more waits for it)"), line
    assert ("nothing bound" if command == "schedule" else "nothing done") in line, line
    assert "another replica" not in out and "cycle:" not in out, out
    assert (f"lease gputide/{name}: its leaseDurationSeconds {duration} is longer than a --once run waits for it "
            f"({wait} s: the longer of our own, {OWN[command]} s, and a third of it") in caplog.text
    assert not taken_by_me(kube, name) and not kube.calls("POST", r"/binding$")
    assert kube.get("leases", name, "gputide")["spec"]["holderIdentity"] == "crashed-replica"
    waits.asked.clear()   # the --interval said: its own Lease as long, it waits the Lease out and takes it
    code = once(command, kubeconfig, "--interval", f"{interval}s")
    out, err = capsys.readouterr()
    assert code == (0 if command == "schedule" else 3), out + err   # run's cycle holds still (no Prometheus)
    assert taken_by_me(kube, name) and duration <= sum(waits.asked) <= duration * 7 / 6, waits.asked
    assert "ml/p -> n1" in out if command == "schedule" else out.startswith("cycle: fail_static"), out + err


@pytest.mark.parametrize("command", ["schedule", "run"])
def test_a_live_holders_hour_long_lease_renewed_within_the_wait_leaves_a_standby_exit_0(
        kube, api, kubeconfig, clock, waits, caplog, capsys, command):  # noqa: F811
    name = NAMES[command]
    holder = LeaseLeaderElector(api, name, "gputide", "replica-b", clock=clock, lease_duration_s=3600,
                                renew_deadline_s=2400)
    assert holder.try_acquire_or_renew()
    waits.meanwhile = holder.try_acquire_or_renew
    a_pending_pod(kube)
    with caplog.at_level(logging.WARNING, logger="balancer.actuate.k8s_leader"):
        code = once(command, kubeconfig)
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert ("not the leader: another replica holds the Lease" in out if command == "schedule"
            else out.strip() == "cycle: standby not the leader"), out + err
    assert len(waits.asked) == 1
    assert "leaseDurationSeconds 3600 is longer than a --once run waits for it (1200 s" in caplog.text, \
        "the cut wait is logged as it begins"
