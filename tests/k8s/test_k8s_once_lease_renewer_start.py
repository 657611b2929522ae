"""The renewer started on a Lease already held (review r4 of session 39): `gputide schedule --once --leader-elect`
takes the Lease with its first try (or its wait's last), then starts the renewer for the pass, whose `start()`
read and wrote the Lease again at once: two more calls to the API server for nothing. `start()` on a Lease held
now leaves it as written, logs the lead as a renewal would, and its thread renews a retry period after that write,
as if the write had been the renewer's. The command's elector is test_k8s_once_lease_expired.py's (its clock, no
renewer thread); the elector's own test runs the renewer's loop inline, on the test's clock."""

from __future__ import annotations

import logging
import threading
from types import SimpleNamespace

from test_k8s_once_lease_expired import a_pending_pod, schedule_once, waits  # noqa: F401 (waits: the fixture)

from balancer.actuate import k8s_leader
from balancer.actuate.k8s_leader import LeaseLeaderElector


def test_schedule_once_holding_the_lease_writes_it_once_before_its_pass(kube, kubeconfig, waits,  # noqa: F811
                                                                        capsys):
    a_pending_pod(kube)
    assert schedule_once(kubeconfig) == 0
    out, err = capsys.readouterr()
    assert "ml/p -> n1" in out, out + err
    assert len(kube.calls("POST", r"/leases$")) == 1   # taken: created
    puts = [r.body["spec"]["holderIdentity"] for r in kube.calls("PUT", r"/leases/gputide-scheduler$")]
    assert puts == [""], "only the release at exit: the renewer's start wrote it again at once"
    assert len(kube.calls("GET", r"/leases/gputide-scheduler$")) == 2   # the first try's and the release's


class Halt(threading.Event):
    """The renewer's stop flag: records each wait it is asked for and ends the loop at the first."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.asked.append(timeout)
        return True


class Inline:
    """`threading.Thread` run in the caller: the renewer's loop runs inside `start()`."""

    def __init__(self, target, args=(), **_kw) -> None:
        self.target, self.args = target, args

    def start(self) -> None:
        self.target(*self.args)


def test_start_on_a_held_lease_renews_a_retry_period_after_the_last_write(kube, api, clock, monkeypatch, caplog):
    a = LeaseLeaderElector(api, "gputide-scheduler", "gputide", "replica-a", lease_duration_s=15,
                           renew_deadline_s=10, clock=clock)
    assert a.try_acquire_or_renew()   # the --once run's try: held
    clock.advance(1)
    before, a._halt = len(kube.requests), Halt()
    monkeypatch.setattr(k8s_leader, "threading", SimpleNamespace(Thread=Inline))
    with caplog.at_level(logging.INFO, logger="balancer.actuate.k8s_leader"):
        a.start()
    assert len(kube.requests) == before, "no call to the API server: it was just written"
    assert a._halt.asked == [a.retry_period_s - 1], "the first renewal a retry period after the last write"
    assert a.is_leader and a.try_acquire(clock.now)   # the renewer's flag, no call
    assert len(kube.requests) == before
    assert caplog.text.count("replica-a leads") == 1, caplog.text
