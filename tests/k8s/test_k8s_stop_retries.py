"""Once its owner is told to stop, the gateway retries no failed call: a SIGTERM during an API outage made the
secondary scheduler wait out every retry and backoff of the call in flight (4 tries of 10 s and 3.5 s of backoff
for a read) before it released the Lease. `_Api(stopping=...)` is asked before each retry and after each backoff;
once it says so, the call fails with the error it would raise out of retries. What runs under `reserve()` (it
completes or undoes a change already made) keeps its retries, within its deadline. A call may bring its own
`halt`: the scheduler's bindings and claims' nodes are not retried once the Lease is lost."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from fakeapi import FakeKube, node, pod
from kubernetes.client.exceptions import ApiException
from test_k8s_scheduler_stop import a_pod_with_claims

from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import KubeTemporaryError, ThrottledError, _Api
from balancer.app.scheduling import EnginePlacer


class Outage:
    """A generated-client function whose every try fails with `status`; `on_try(n)` runs at the n-th try."""

    def __init__(self, status: int, on_try=lambda n: None) -> None:
        self.status, self.on_try, self.tries = status, on_try, 0

    def __call__(self, *args, _preload_content: bool, _request_timeout: float, **kwargs):
        self.tries += 1
        self.on_try(self.tries)
        raise ApiException(status=self.status, reason="down")


class Owner:
    """What owns the gateway: told to stop at some point (`stop`), asked through `stopping`."""

    def __init__(self) -> None:
        self.stopped = False

    def stop(self, *_: object) -> None:
        self.stopped = True

    def stopping(self) -> bool:
        return self.stopped


def gateway(owner: Owner, sleeps: list[float]) -> _Api:
    return _Api(None, 3, 100.0, sleeps.append, 10.0, stopping=owner.stopping)


@pytest.mark.parametrize(("status", "error"),
                         [(503, KubeTemporaryError), (429, ThrottledError), (0, KubeTemporaryError)],
                         ids=["an API server error", "throttled", "no answer"])
def test_a_call_failing_after_the_stop_is_not_retried_and_fails_as_out_of_retries(status, error):
    owner, sleeps = Owner(), []
    call = Outage(status, on_try=owner.stop)
    with pytest.raises(error) as caught:
        gateway(owner, sleeps)("list pods", call)
    assert type(caught.value) is error and caught.value.status == status
    assert call.tries == 1 and sleeps == [], "no retry begun, no backoff slept"


def test_a_stop_during_the_backoff_begins_no_retry():
    owner, sleeps = Owner(), []
    call = Outage(503)
    api = gateway(owner, sleeps)
    api.sleep = lambda s: (sleeps.append(s), owner.stop())
    with pytest.raises(KubeTemporaryError, match="HTTP 503"):
        api("list pods", call)
    assert call.tries == 1 and sleeps == [100.0]


def test_what_completes_or_undoes_a_change_keeps_its_retries_after_the_stop():
    """A reservation given back after a failed preemption, under `reserve()`: left in place, it would keep the node
    from other pods until it expires. Its retries stay within the deadline, which the grace period covers."""
    owner, sleeps = Owner(), []
    owner.stop()
    api, tries = gateway(owner, sleeps), []

    def flaky(*args, _preload_content: bool, _request_timeout: float, **kwargs):
        tries.append(_request_timeout)
        if len(tries) < 3:
            raise ApiException(status=503, reason="down")
        return SimpleNamespace(data=b'{"ok": true}')

    with api.reserve():
        assert api("undo reservation", flaky) == {"ok": True}
    assert len(tries) == 3 and sleeps == [100.0, 200.0]


def test_the_scheduler_stopped_during_an_outage_ends_its_read_with_the_try_in_flight(kube: FakeKube, api, clock):
    """SIGTERM while the pending pods' list fails with 503: the pass fails at once (the next pass, by the next
    leader, lists again) instead of trying 3 more times after backoffs of 0.5, 1 and 2 s."""
    kube.add(node("n1", 8))
    kube.add(pod("p", "ml", gpus=1, scheduler="gputide", phase="Pending"))
    sleeps: list[float] = []
    scheduler = SecondaryScheduler(api, place=EnginePlacer("bestfit"), clock=clock, sleep=sleeps.append)
    kube.inject("GET", r"^/api/v1/pods\?", 503, count=4)
    kube.before("GET", r"^/api/v1/pods\?", scheduler.stop)

    with pytest.raises(KubeTemporaryError, match="HTTP 503"):
        scheduler.schedule_once()

    assert len(kube.calls("GET", r"^/api/v1/pods$")) == 1 and sleeps == []
    assert not [r for r in kube.requests if r.method != "GET"]


def test_a_call_told_to_halt_is_not_retried_once_it_says_so():
    """A binding's own `halt` (the scheduler's: the Lease lost), asked as `stopping()` is; a call without one, or
    whose halt stays False, keeps its retries."""
    owner, sleeps, lost = Owner(), [], []
    call = Outage(503, on_try=lambda n: lost.append(n))
    with pytest.raises(KubeTemporaryError):
        gateway(owner, sleeps)("bind p", call, halt=lambda: bool(lost))
    assert call.tries == 1 and sleeps == []
    kept = Outage(503)
    with pytest.raises(KubeTemporaryError):
        gateway(owner, sleeps)("bind p", kept, halt=lambda: False)
    assert kept.tries == 4 and sleeps == [100.0, 200.0, 400.0]


def lease_lost_in_an_outage(kube: FakeKube, api, clock, method: str, path: str) -> tuple[SecondaryScheduler, list]:
    """A scheduler holding the Lease until the first `method` `path` request, which (and 3 more) answer 503."""
    sleeps: list[float] = []
    leading = [True]
    scheduler = SecondaryScheduler(api, place=EnginePlacer("bestfit"), clock=clock, sleep=sleeps.append,
                                   leading=lambda: leading[0])
    kube.inject(method, path, 503, count=4)
    kube.before(method, path, lambda: leading.__setitem__(0, False))
    return scheduler, sleeps


def test_a_binding_failing_when_the_lease_is_lost_is_not_retried(kube: FakeKube, api, clock):
    """Lease lost while the API answers 503 to the binding: retried, it could bind after the next leader began
    placing on the same node. One try; the pod stays pending for the next leader's pass."""
    kube.add(node("n1", 8))
    kube.add(pod("p", "ml", gpus=1, scheduler="gputide", phase="Pending"))
    scheduler, sleeps = lease_lost_in_an_outage(kube, api, clock, "POST", r"/pods/p/binding$")

    results = scheduler.schedule_once()

    assert results == {"ml/p": None} and len(kube.calls("POST", r"/pods/p/binding$")) == 1 and sleeps == []
    assert not kube.get("pods", "p", "ml")["spec"].get("nodeName")


def test_a_claims_node_failing_when_the_lease_is_lost_is_not_retried(kube: FakeKube, api, clock):
    """The same for the node written on a pod's WaitForFirstConsumer claim before its binding: a replica that lost
    the Lease must not choose nodes, so the failed write is not tried again and the pod is not bound."""
    a_pod_with_claims(kube, "c1")
    scheduler, sleeps = lease_lost_in_an_outage(kube, api, clock, "PATCH", r"/persistentvolumeclaims/c1$")

    assert scheduler.schedule_once() == {}   # cut by the Lease's loss: told it waits for the next leader

    assert len(kube.calls("PATCH", r"/persistentvolumeclaims/c1$")) == 1 and sleeps == []
    assert not kube.calls("POST", r"/binding$")
