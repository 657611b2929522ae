"""A node held for a pod (after its preemption, or while it starves) is held only against pods of equal or lower
priority, as kube-scheduler weighs the pods nominated to a node (it ignores those of lower priority when placing a
pod). Holds did not say their pod's priority and counted against every pod: a starving low-priority pod's hold kept
a high-priority pod off the GPUs free on its node, and that pod preempted a running pod instead. A hold now records
its pod's priority; one that does not (written by an older gputide, or a Migrate's) still counts against every pod.
"""

from __future__ import annotations

import json

import pytest
from fakeapi import FakeKube, node, pod
from test_k8s_preemption import most_free
from test_k8s_preemption_grace import GRACE_S, HOUR, checkpointing, terminating
from test_k8s_preemption_stuck import passes_until

from balancer.actuate.k8s_filters import Offers, counts_against, why_not
from balancer.actuate.k8s_preempt import usable
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import RESERVATION_ANNOTATION, rfc3339
from balancer.app.scheduling import EnginePlacer
from balancer.noderules import NO_AFFINITY, NO_RULES


def pending(name: str, gpus: int, priority: int, clock, age_s: float = 0.0, **spec) -> dict:
    p = pod(name, gpus=gpus, scheduler="gputide", phase="Pending")
    p["metadata"]["creationTimestamp"] = rfc3339(clock.now - age_s)
    p["spec"].update(priority=priority, **spec)
    return p


def running(name: str, gpus: int, priority: int, node_name: str = "a") -> dict:
    p = pod(name, gpus=gpus, node_name=node_name)
    p["spec"]["priority"] = priority
    return p


def held(kube: FakeKube, name: str) -> dict:
    return json.loads((kube.get("nodes", name)["metadata"].get("annotations") or {}).get(RESERVATION_ANNOTATION, "{}"))


@pytest.mark.parametrize("engine", [False, True])
@pytest.mark.parametrize("policy", ["PreemptLowerPriority", "Never"])
def test_a_low_priority_pods_hold_keeps_no_more_important_pod_off_the_free_gpus(kube: FakeKube, api, clock,
                                                                                 engine, policy):
    """a: 8 GPUs, 6 used by a pod of priority 100; a starving batch pod of priority 0 (preempting or not) holds a
    for its 4 GPUs. An urgent pod that needs 2 is bound on a's 2 free GPUs, nobody evicted."""
    kube.add(node("a", 8))
    kube.add(running("busy", 6, 100))
    kube.add(pending("batch", 4, 0, clock, age_s=11 * 60, preemptionPolicy=policy))
    sched = SecondaryScheduler(api, "gputide", EnginePlacer("gputide") if engine else most_free, clock=clock)
    assert sched.schedule_once() == {"default/batch": None} and sched.starving == [("default/batch", "a")]
    assert held(kube, "a")["default/batch"]["priority"] == 0              # the hold says its pod's priority
    kube.add(pending("urgent", 2, 1_000_000, clock))
    assert sched.schedule_once() == {"default/urgent": "a", "default/batch": None}
    assert sched.preempted == [] and kube.get("pods", "busy", "default") is not None
    assert "default/batch" in held(kube, "a")                              # still held against pods below it


def test_the_hold_still_counts_against_pods_as_important(kube: FakeKube, api, clock):
    kube.add(node("a", 8))
    kube.add(running("busy", 6, 100))
    kube.add(pending("batch", 4, 5, clock, age_s=11 * 60))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    kube.add(pending("peer", 2, 5, clock))
    kube.add(pending("lower", 2, 1, clock))
    assert sched.schedule_once() == {"default/batch": None, "default/peer": None, "default/lower": None}
    assert "GPUs reserved for other pods" in sched.reasons["default/peer"]
    assert "GPUs reserved for other pods" in sched.reasons["default/lower"]


def test_a_preemptors_hold_is_not_a_reason_for_a_more_important_pod_to_preempt(kube: FakeKube, api, clock):
    """a (4 GPUs) is held after a preemption for `mid` (priority 10) while its victim terminates; `top` (priority
    50) needs 4 GPUs and b runs a pod of priority 1 on its 4. kube-scheduler ignores the nomination of lower
    priority: top takes a, b's pod keeps running."""
    kube.add(node("a", 4))
    kube.add(running("low", 4, 1))
    kube.add(pending("mid", 4, 10, clock))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert sched.preempted == [("default/low", "a")] and held(kube, "a")["default/mid"]["priority"] == 10
    kube.add(node("b", 4))
    kube.add(running("other", 4, 1, "b"))
    kube.add(pending("top", 4, 50, clock))
    assert sched.schedule_once() == {"default/top": "a", "default/mid": None}
    assert sched.preempted == [] and kube.get("pods", "other", "default") is not None


def view(reservations: dict) -> dict:
    return {"name": "a", "labels": {}, "gpu_model": "H100", "taints": (), "unschedulable": False, "gpus_total": 8,
            "gpus_free": 4, "cpu_milli_total": 16000, "cpu_milli_free": 16000, "memory_mib_total": 65536,
            "memory_mib_free": 65536, "extended_total": {}, "extended_free": {}, "reservations": reservations}


def request(priority) -> dict:
    return {"name": "ml/b", "namespace": "ml", "num_gpu": 4, "cpu_milli": 8000, "memory_mib": 1024,
            "rules": NO_RULES, "pod_affinity": NO_AFFINITY, "owned": frozenset(), "extended": {}, "labels": {},
            "priority": priority}


HOLD = {"count": 4, "cpu_milli": 8000, "memory_mib": 1024}


@pytest.mark.parametrize(("why", "hold", "priority", "counts"), [
    ("a lower-priority pod's hold", HOLD | {"priority": 9}, 10, False),
    ("an equal-priority pod's hold", HOLD | {"priority": 10}, 10, True),
    ("a higher-priority pod's hold", HOLD | {"priority": 11}, 10, True),
    ("a negative priority below", HOLD | {"priority": -5}, -1, False),
    # written by an older gputide: its pod may be of any priority, so it is held against every pod (as before)
    ("a hold that says no priority", HOLD, -(1 << 31), True),
    ("a priority that is no integer", HOLD | {"priority": "9"}, 10, True),
    ("a priority that is a bool", HOLD | {"priority": False}, 10, True),
    ("a request without a priority", HOLD | {"priority": 9}, None, True),
])
def test_which_holds_count_against_a_pod(why, hold, priority, counts) -> None:
    node, req = view({"ml/a": hold}), request(priority)
    assert counts_against(hold, req) is counts
    assert why_not(node, req) == (None if not counts else "node(s) had GPUs reserved for other pods")
    offers = Offers([node])
    assert offers.fitting(req).tolist() == ([] if counts else [0])
    assert usable(node, req) == ((0, 8000, 64512) if counts else (4, 16000, 65536))


def test_an_old_hold_without_priority_learns_it_when_renewed_and_holds_back_no_more_important_pod(
        kube: FakeKube, api, clock):
    """A preemption's hold written by a gputide that did not record priorities counts against every pod, on the
    ground that it lasts an hour at most; kept past the hour for a victim stuck terminating, it kept a more important
    pod off the node's free GPUs for as long as the victim was stuck. Carried on, it now says its pod's priority."""
    kube.add(node("a", 16))
    kube.add(checkpointing("train", "a", 8, 1))
    kube.add(pending("urgent", 16, 50, clock))
    start = clock.now
    SecondaryScheduler(api, "gputide", most_free, clock=clock).schedule_once()
    terminating(kube, "train", "a", 8, 1, start + GRACE_S)           # and stuck there (a finalizer)
    old = {k: v for k, v in held(kube, "a")["default/urgent"].items() if k != "priority"}
    kube.mutate("nodes", "a", "", {"metadata": {"annotations": {RESERVATION_ANNOTATION: json.dumps(
        {"default/urgent": old})}}})
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)   # the gputide of now takes over
    passes_until(sched, clock, start + HOUR + 600)
    assert sched.stuck_holds == [("default/urgent", "a", ("default/train",))]
    assert held(kube, "a")["default/urgent"]["priority"] == 50
    kube.add(pending("top", 8, 1_000_000, clock))
    assert sched.schedule_once()["default/top"] == "a"               # a's 8 free GPUs: not held against it
