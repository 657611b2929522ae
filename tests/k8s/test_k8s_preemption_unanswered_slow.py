"""An eviction that gets no answer slowly (each try waits out its timeout: 200 s for a try and 3 retries) renews the
hold by `reserve_s` from when it gave up, in the pass that preempts as in those that carry the preemption on
(`Evictions.holding`), so the next pass, 2 min later, finds the node still held and counts on: the node is given
back after `UNANSWERED_ASKS` unanswered evictions. Renewed from the pass's start (the reservation's `expires`) the
first hold ran out 100 s after the ask gave up, before the next pass, its count forgotten with it: the pod preempted
afresh at each pass, asking again unanswered, the node never given back. Against the fake API server."""

from __future__ import annotations

import functools

from fakeapi import FakeKube
from test_k8s_preemption import reservations
from test_k8s_preemption_unanswered import unanswered
from test_k8s_preemption_unanswered_again import fits_beside, placed

from balancer.actuate.k8s_preempt import UNANSWERED_ASKS
from balancer.actuate.kubernetes import rfc3339


def test_a_slow_unanswered_eviction_renews_the_hold_from_when_it_gave_up(kube: FakeKube, api, clock):
    sched = fits_beside(kube, api, clock)
    tries = unanswered(sched, "p", lambda: None)                       # p runs on: no eviction lands
    timing_out = sched.api.core.create_namespaced_pod_eviction

    @functools.wraps(timing_out)   # keeps its name: the gateway knows a write by it
    def slow(*args, **kwargs):
        clock.advance(50)                                              # the try's read timeout
        return timing_out(*args, **kwargs)

    sched.api.core.create_namespaced_pod_eviction = slow
    sched.schedule_once()
    assert reservations(kube, "a")["default/urgent"]["expires"] == rfc3339(clock.now + 300)
    for k in range(1, UNANSWERED_ASKS):
        clock.advance(120)
        sched.schedule_once()
        assert reservations(kube, "a")["default/urgent"]["expires"] == rfc3339(clock.now + 300), k
    assert len(tries) == 4 * UNANSWERED_ASKS
    clock.advance(120)
    sched.schedule_once()
    assert reservations(kube, "a") == {} and placed(kube, "fits") == "a"   # given back, used in the same pass
    assert len(tries) == 4 * UNANSWERED_ASKS
