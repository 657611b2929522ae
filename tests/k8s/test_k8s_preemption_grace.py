"""A preemption holds its node as long as its victims take to terminate: their own grace period
(`terminationGracePeriodSeconds`, 30 min for a training job that checkpoints) and a minute more, renewed while they
are still there, never past an hour from the preemption's start (save for victims stuck terminating on a node that
still admits the pod: test_k8s_preemption_stuck.py). The hold was a flat 5 minutes: it ran out while
the victims checkpointed, the preemptor planned afresh and evicted more pods (or its room went to whoever came
first), the first victims killed for no one."""

from __future__ import annotations

import logging

from fakeapi import FakeKube, node
from test_k8s_preemption import bound, most_free, pending, reservations

from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import parse_time, rfc3339

GRACE_S = 1800
HOUR = 3600   # k8s_preempt.HOUR


def checkpointing(name: str, node_name: str, gpus: int, priority: int) -> dict:
    p = bound(name, node_name, gpus, priority)
    p["spec"]["terminationGracePeriodSeconds"] = GRACE_S
    return p


def terminating(kube: FakeKube, name: str, node_name: str, gpus: int, priority: int, ends: float) -> None:
    """`name` back on its node, terminating until `ends` (the fake deletes an evicted pod at once; a kubelet waits
    for its grace period)."""
    p = checkpointing(name, node_name, gpus, priority)
    p["metadata"]["deletionTimestamp"] = rfc3339(ends)
    p["metadata"]["deletionGracePeriodSeconds"] = GRACE_S
    kube.add(p)


def expires(kube: FakeKube, name: str, key: str = "default/urgent") -> float:
    return parse_time(reservations(kube, name)[key]["expires"])


def two_nodes(kube: FakeKube) -> None:
    """a: a training job of priority 1 with a 30-minute grace period; b: a pod of priority 3 (the next victim)."""
    for obj in (node("a", 8), checkpointing("train", "a", 8, 1), node("b", 8), bound("low-3", "b", 8, 3),
                pending("urgent", 8, 50)):
        kube.add(obj)


def test_the_hold_lasts_the_victims_grace_period_and_is_renewed_while_they_terminate(kube: FakeKube, api, clock):
    two_nodes(kube)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    start = clock.now
    assert sched.schedule_once() == {"default/urgent": None} and sched.preempted == [("default/train", "a")]
    assert expires(kube, "a") >= start + GRACE_S                     # not 5 minutes: the victim's grace period
    assert reservations(kube, "a")["default/urgent"]["evicted"] == ["default/train"]
    terminating(kube, "train", "a", 8, 1, start + GRACE_S)

    clock.advance(20 * 60)                                            # checkpointing still
    assert sched.schedule_once() == {"default/urgent": None}
    assert "held until" in sched.reasons["default/urgent"]
    clock.advance(9 * 60)                                             # its grace period nearly over, still there
    sched.schedule_once()
    assert expires(kube, "a") >= clock.now + 240                      # renewed while it terminates
    clock.advance(4 * 60)                                             # past its grace period: still there
    assert sched.schedule_once() == {"default/urgent": None}
    assert kube.get("pods", "low-3", "default") is not None and sched.preempted == []   # no one else killed

    kube.delete("pods", "train", "default")                           # gone at last
    clock.advance(5)
    assert sched.schedule_once() == {"default/urgent": "a"}
    assert reservations(kube, "a") == {}                              # used up by the binding
    assert len(kube.calls("POST", r"/eviction$")) == 1


def test_a_victim_stuck_on_a_node_that_stopped_answering_is_held_for_at_most_an_hour(kube: FakeKube, api, clock,
                                                                                     caplog):
    """Its kubelet gone, the node is tainted unreachable: the pod could never be bound there, so the hold is not kept
    past the hour for the victim still terminating there (k8s_stuck), and the pod preempts elsewhere."""
    two_nodes(kube)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    start = clock.now
    sched.schedule_once()
    terminating(kube, "train", "a", 8, 1, start + GRACE_S)            # its node stopped answering
    kube.mutate("nodes", "a", "", {"spec": {"taints": [{"key": "node.kubernetes.io/unreachable",
                                                         "effect": "NoSchedule"}]}})
    with caplog.at_level(logging.WARNING, "balancer.actuate.k8s_stuck"):
        while clock.now < start + HOUR - 60:
            clock.advance(60)
            sched.schedule_once()
            assert expires(kube, "a") <= start + HOUR and sched.stuck_holds == []
    [said] = [r.getMessage() for r in caplog.records if "no longer admits" in r.getMessage()]   # once
    assert "default/train" in said and f"not kept past {rfc3339(start + HOUR)}" in said
    assert expires(kube, "a") > start + GRACE_S + 60                  # renewed past its grace period
    assert len(kube.calls("POST", r"/eviction$")) == 1
    clock.advance(120)                                                # the hour is over: it plans afresh
    sched.schedule_once()
    assert sched.preempted == [("default/low-3", "b")] and sched.stuck_holds == []
    assert reservations(kube, "b")["default/urgent"]["since"] == rfc3339(clock.now)


def test_the_hold_is_cut_short_once_its_victims_are_gone():
    from balancer.actuate.k8s_preempt import MAX_HOLD_S, noted

    assert MAX_HOLD_S == HOUR
    entry = {"pod": "default/urgent", "count": 8, "expires": rfc3339(4000.0), "since": rfc3339(1000.0),
             "evicted": ["default/train"]}
    cut = noted(entry, [], [], [], 2000.0, 300.0)
    assert parse_time(cut["expires"]) == 2300.0 and "evicted" not in cut
    assert noted(entry, [], ["default/train"], [], 2000.0, 300.0) is entry   # still there, far from running out
    assert parse_time(noted(entry, [], ["default/train"], [], 3900.0, 300.0)["expires"]) == 4200.0
    assert parse_time(noted(entry, [], ["default/train"], [], 3900.0, 300.0, 3100.0)["expires"]) == 4100.0
