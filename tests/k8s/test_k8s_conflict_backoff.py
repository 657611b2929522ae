"""A read-modify-write that loses to another writer (409 Conflict) waits a little before it reads again. `_Api.update`
read again at once, up to `max_retries` times: two controllers patching one object in a tight loop (a shard's
housekeeping and an action on the same ClusterQueue, an operator's controller and gputide on one HPA) could lose
every try in a few milliseconds and the action came back RETRY for a write that a short wait would have let through.
Each conflict now waits a short, jittered time that doubles per try, bounded (`CONFLICT_BACKOFF_S`,
`CONFLICT_BACKOFF_MAX_S`), never past the deadline of the work; the sleep and the jitter are injected."""

from __future__ import annotations

import pytest
from conftest import FakeClock
from fakeapi import FakeKube, node

from balancer.actuate.kubernetes import (
    CONFLICT_BACKOFF_MAX_S,
    CONFLICT_BACKOFF_S,
    MIN_TRY_S,
    ConflictError,
    _Api,
)


def _gateway(api, sleep, jitter, clock=None, max_retries: int = 3) -> _Api:
    return _Api(api, max_retries, 0.5, sleep, 10.0, clock or FakeClock(), jitter=jitter)


def _label(value: str):
    return lambda n: {"metadata": {"labels": {"tide": value}}}


@pytest.mark.parametrize(
    ("jitter", "expected"),
    [
        pytest.param(1.0, [CONFLICT_BACKOFF_S, 2 * CONFLICT_BACKOFF_S, 4 * CONFLICT_BACKOFF_S],
                     id="each conflict waits twice as long as the one before"),
        pytest.param(0.0, [CONFLICT_BACKOFF_S / 2, CONFLICT_BACKOFF_S, 2 * CONFLICT_BACKOFF_S],
                     id="the jitter takes off at most half of each wait, never all of it"),
    ],
)
def test_each_conflict_waits_a_jittered_doubling_time_before_reading_again(kube: FakeKube, api, jitter,
                                                                          expected) -> None:
    kube.add(node("n1"))
    kube.inject("PATCH", r"/nodes/n1$", 409, count=3)
    sleeps: list[float] = []
    _gateway(api, sleeps.append, lambda: jitter).update_node("n1", _label("x"))
    assert sleeps == pytest.approx(expected)
    assert kube.get("nodes", "n1")["metadata"]["labels"]["tide"] == "x"


def test_the_waits_are_bounded_and_the_last_conflict_is_raised_without_one(kube: FakeKube, api) -> None:
    kube.add(node("n1"))
    kube.inject("PATCH", r"/nodes/n1$", 409, count=20)
    sleeps: list[float] = []
    with pytest.raises(ConflictError):
        _gateway(api, sleeps.append, lambda: 1.0, max_retries=10).update_node("n1", _label("x"))
    assert len(sleeps) == 10 and max(sleeps) == CONFLICT_BACKOFF_MAX_S
    assert sum(sleeps) < 10 * CONFLICT_BACKOFF_MAX_S


def test_no_wait_runs_past_the_deadline_of_the_work(kube: FakeKube, api) -> None:
    """With 1.1 s left a wait of up to 0.4 s would leave too little for the next read: the wait is cut so that read
    still has `MIN_TRY_S`."""
    kube.add(node("n1"))
    kube.inject("PATCH", r"/nodes/n1$", 409, count=3)
    clock = FakeClock()
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock.advance(seconds)

    gateway = _gateway(api, sleep, lambda: 1.0, clock)
    with gateway.deadline(MIN_TRY_S + 0.1, reserve_s=0.0):
        gateway.update_node("n1", _label("x"))
    assert sum(sleeps) <= 0.1 + 1e-9
