"""A preemption paused by gputide's hot taint (`k8s_holds._paused`) writes its hold as a pass that carries it on
does: saying the pod's priority (`k8s_preempt.ranked`) and naming what it asks (`filled`). The paused renewal
renewed the hold as it was: one written by an older gputide, without its pod's priority, stayed held against every
pod, a more important one tolerating the taint too, which then preempted elsewhere (kube-scheduler ignores a
lower-priority nomination), up to the hour; its priority was to be written before any renewal. Against the fake
API server."""

from __future__ import annotations

import json

from fakeapi import FakeKube
from test_k8s_preemption import most_free, pending, reservations
from test_k8s_preemption_hot_taint import HOT, hot
from test_k8s_preemption_room_taken import half_preempted

from balancer.actions import HOT_TAINT_TTL_S
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import RESERVATION_ANNOTATION, parse_time


def older(kube: FakeKube, name: str, key: str) -> dict:
    """`key`'s hold on node `name` as a gputide that recorded neither its pod's priority nor what else it asks
    wrote it (read by this gputide once it is upgraded: a new replica)."""
    holds = reservations(kube, name)
    holds[key] = {k: v for k, v in holds[key].items() if k not in ("priority", "extended", "hostPorts")}
    kube.mutate("nodes", name, "", {"metadata": {"annotations": {RESERVATION_ANNOTATION: json.dumps(holds)}}})
    return holds[key]


def test_a_paused_hold_says_its_pods_priority_and_holds_no_more_important_pod_off(kube: FakeKube, api, clock):
    half_preempted(kube, api, clock)   # mid (10) holds a (8 GPUs) after evicting low-1: 4 free there
    was = older(kube, "a", "default/mid")
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    hot(kube, "a", clock() + HOT_TAINT_TTL_S)
    clock.advance(5)
    assert sched.schedule_once() == {"default/mid": None} and "paused while a" in sched.reasons["default/mid"]
    now = reservations(kube, "a")["default/mid"]
    assert now["priority"] == 10 and now["extended"] == {"pods": 1.0}
    assert now["expires"] == was["expires"] and now["victims"] == ["default/low-2"]   # not due for renewal yet
    top = pending("top", 4, 50, tolerations=[{"key": HOT["key"], "operator": "Exists", "effect": "NoSchedule"}])
    kube.add(top)
    clock.advance(5)
    # mid's hold is below top: top takes a's 4 free GPUs rather than evicting low-3 on b
    assert sched.schedule_once() == {"default/top": "a", "default/mid": None}
    assert sched.preempted == [] and kube.get("pods", "low-3", "default") is not None


def test_a_paused_hold_renewed_says_its_pods_priority(kube: FakeKube, api, clock):
    half_preempted(kube, api, clock)
    was = older(kube, "a", "default/mid")
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    hot(kube, "a", clock() + HOT_TAINT_TTL_S)
    clock.advance(parse_time(was["expires"]) - clock() - 60)   # running out: renewed up to the taint's expiry
    assert sched.schedule_once() == {"default/mid": None}
    now = reservations(kube, "a")["default/mid"]
    assert parse_time(now["expires"]) > parse_time(was["expires"])
    assert now["priority"] == 10 and now["extended"] == {"pods": 1.0}
