"""A victim's evictions get no answer, twice, then one is answered with a refusal (429: its budget, or throttling),
and so on, passes 2 min apart: the refusal says nothing of whether the unanswered ones landed (each was found not
landed, the victim running), so it does not begin the count again: the node is given back after `UNANSWERED_ASKS`
unanswered evictions in all for the preemption, `reserve_s` after the last of them at most. Before, an answer ended
the count "in a row" while each unanswered eviction renewed the hold by `reserve_s`: the count never reached 3, the
hold was renewed up to the hour's cap (`MAX_HOLD_S`), and the pod preempted afresh there at once, hour after hour
(240 tries in 3 h), a pod fitting beside the victim never bound there. Against the fake API server."""

from __future__ import annotations

from fakeapi import FakeKube
from test_k8s_preemption import reservations
from test_k8s_preemption_unanswered import unanswered
from test_k8s_preemption_unanswered_again import fits_beside, placed

from balancer.actuate.k8s_preempt import UNANSWERED_ASKS
from balancer.actuate.kubernetes import parse_time


def test_refusals_between_unanswered_evictions_do_not_keep_the_node_held(kube: FakeKube, api, clock):
    sched = fits_beside(kube, api, clock)
    real = sched.api.core.create_namespaced_pod_eviction
    tries = unanswered(sched, "p", lambda: None)                       # p runs on: no eviction lands
    timing_out = sched.api.core.create_namespaced_pod_eviction
    asked, last = 0, 0.0
    for k in range(30):                                                # an hour, passes 2 min apart
        refused = k % 3 == 2                                           # no answer, no answer, 429, ...
        sched.api.core.create_namespaced_pod_eviction = real if refused else timing_out
        if refused:
            kube.inject("POST", r"/pods/p/eviction$", 429)
        sched.schedule_once()
        if held := reservations(kube, "a").get("default/urgent"):
            assert asked < UNANSWERED_ASKS, k                          # not held after the last of them
            if not refused:
                asked, last = asked + 1, clock.now
            assert parse_time(held["expires"]) <= last + 300, k        # reserve_s past the last unanswered at most
        elif placed(kube, "fits") == "a":
            break
        clock.advance(120)
    assert asked == UNANSWERED_ASKS and k == UNANSWERED_ASKS + 1       # given back at the pass after the 3rd
    assert len(tries) == 4 * UNANSWERED_ASKS                           # each unanswered: a try and 3 retries
    assert "not asked again; the node is given back" in sched.reasons["default/urgent"]
