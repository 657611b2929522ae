"""A list the API server answers 504 "Too large resource version" (its watch cache has not reached the version a
relist asks not to go back behind, `k8s_watch.list_not_older`) is not retried: the caller lists consistently at
once. It was retried as any 5xx, and a real API server waits ~3 s before each such answer: the scheduler's caches
stood still ~15 s per relist (4 tries and 3.5 s of backoff), each try holding a request (audit a1 of 925226c).
Against the fake API server (`hold_cache`)."""

from __future__ import annotations

import pytest
from fakeapi import FakeKube, pod
from kubernetes.client.exceptions import ApiException

from balancer.actuate.k8s_watch import list_not_older
from balancer.actuate.kubernetes import KubeTemporaryError, TooLargeVersionError, _Api


def test_a_too_large_version_is_listed_consistently_without_retries(kube: FakeKube) -> None:
    sleeps: list[float] = []
    api = _Api(kube.client(), 3, 0.5, sleeps.append, 10.0)   # the scheduler's retries
    kube.add(pod("a", gpus=1))
    kube.hold_cache()   # the watch cache stays before b
    kube.add(pod("b", gpus=1))
    seen = kube.get("pods", "b", "default")["metadata"]["resourceVersion"]
    served = len(kube.requests)
    listed = list_not_older("pods", lambda **kw: api("list pods", api.core.list_pod_for_all_namespaces, **kw),
                            seen, {})
    assert sorted(p["metadata"]["name"] for p in listed["items"]) == ["a", "b"]   # consistent: etcd's state
    queries = [r.query for r in kube.requests[served:]]
    assert len(queries) == 2 and "resourceVersionMatch=NotOlderThan" in queries[0]
    assert "resourceVersion=" not in queries[1] and sleeps == []


@pytest.mark.parametrize(("status", "body", "kind"), [
    (504, '{"message": "Too large resource version: 9, current: 7"}', TooLargeVersionError),
    (504, '{"message": "the server was unable to return a response in time"}', KubeTemporaryError),
])
def test_only_a_too_large_version_504_is_told_apart(status: int, body: str, kind: type) -> None:
    calls: list[int] = []
    exc = ApiException(status=status, reason="Gateway Timeout")
    exc.body = body

    def call(**kwargs):
        calls.append(1)
        raise exc

    with pytest.raises(kind) as err:
        _Api(None, 2, 0.0, lambda _s: None, 1.0)("list pods", call)
    assert type(err.value) is kind
    assert len(calls) == (1 if kind is TooLargeVersionError else 3)   # any other 504 is tried again
