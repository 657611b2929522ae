"""`gputide schedule --once --leader-elect` waiting for another replica's Lease (review of session 38's a14): it
started the elector's renewer thread before the wait, so the thread and `await_lease` both read the Lease (twice per
pause), and the renewer's next try reset the failure that ended the wait (`last_failure`) before the command read
it, a Lease the API refused then said as a standby's, exit 0. As `gputide run --once` does, the first try and the
wait renew on demand, the wait's tries the Lease's one reader; the renewer starts only once the Lease is held, for
the pass. A 409 on the takeover write because another contender took the Lease first ends the wait for both
commands: the Lease is that replica's now, a standby, exit 0, not one more try that wrote over it (a 409 for its
metadata alone is test_k8s_once_lease_conflict_retry.py's). The elector, the clock and the pauses are
test_k8s_once_lease_expired.py's (no real waiting, no renewer thread)."""

from __future__ import annotations

import pytest
from test_k8s_once_lease_expired import (  # noqa: F401 (waits: the fixture)
    a_pending_pod,
    dead_holders_lease,
    run_once,
    schedule_once,
    waits,
)

from balancer.actuate.k8s_leader import LeaseLeaderElector
from balancer.cmd import schedule as schedule_cmd


@pytest.fixture
def starts(monkeypatch, waits) -> list[tuple[bool, int]]:  # noqa: F811 (the fixture imported above)
    """Each start of the renewer: whether the elector held the Lease then, and how many pauses the wait had made."""
    got, build = [], schedule_cmd.lease_elector

    def make(*args):
        elector = build(*args)
        start = elector.start

        def recorded(*a, **kw):
            got.append((elector.is_leader, len(waits.asked)))
            return start(*a, **kw)

        elector.start = recorded
        return elector

    monkeypatch.setattr(schedule_cmd, "lease_elector", make)
    return got


def test_a_standby_behind_a_live_holder_never_starts_the_renewer(kube, api, kubeconfig, clock, waits,  # noqa: F811
                                                                  starts, capsys):
    holder = LeaseLeaderElector(api, "gputide-scheduler", "gputide", "replica-b", clock=clock)
    assert holder.try_acquire_or_renew()
    waits.meanwhile = holder.try_acquire_or_renew   # the live holder renews during the first pause
    a_pending_pod(kube)
    assert schedule_once(kubeconfig) == 0
    out, err = capsys.readouterr()
    assert "not the leader: another replica holds the Lease" in out, out + err
    assert starts == [], "no renewer reads the Lease beside the wait's tries"


def test_the_renewer_starts_once_a_dead_holders_lease_is_taken(kube, kubeconfig, waits, starts,  # noqa: F811
                                                                capsys):
    a_pending_pod(kube)
    kube.add(dead_holders_lease("gputide-scheduler"))
    assert schedule_once(kubeconfig) == 0
    out, err = capsys.readouterr()
    assert "ml/p -> n1" in out, out + err
    assert starts == [(True, len(waits.asked))] and sum(waits.asked) >= 15, (starts, waits.asked)


def test_a_lease_held_at_the_first_try_starts_the_renewer_for_the_pass(kube, kubeconfig, waits, starts,  # noqa: F811
                                                                       capsys):
    a_pending_pod(kube)
    assert schedule_once(kubeconfig) == 0
    out, err = capsys.readouterr()
    assert "ml/p -> n1" in out, out + err
    assert starts == [(True, 0)]


@pytest.mark.parametrize("command", ["schedule", "run"])
def test_a_conflict_on_the_takeover_write_ends_the_wait_a_standby(kube, kubeconfig, waits, capsys,  # noqa: F811
                                                                  command):
    name = "gputide-scheduler" if command == "schedule" else "gputide-controller"
    a_pending_pod(kube)
    kube.add(dead_holders_lease(name))
    kube.before("PUT", rf"/leases/{name}$", lambda: kube.mutate(   # another contender took it first
        "leases", name, "gputide", {"spec": {"holderIdentity": "replica-c", "leaseTransitions": 3}}))
    code = schedule_once(kubeconfig) if command == "schedule" else run_once(kubeconfig)
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert ("not the leader: another replica holds the Lease" in out if command == "schedule"
            else out.strip() == "cycle: standby not the leader"), out + err
    assert "could not be reached" not in err and "refused" not in err, err
    assert len(kube.calls("PUT", rf"/leases/{name}$")) == 1, "no second takeover write after the 409"
    assert kube.get("leases", name, "gputide")["spec"]["holderIdentity"] == "replica-c"
    assert not kube.calls("POST", r"/binding$")
