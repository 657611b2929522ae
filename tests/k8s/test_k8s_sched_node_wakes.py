"""The secondary scheduler wakes a pass when a node opens (added, uncordoned, a taint such as not-ready removed,
allocatable grown, labels changed, a reservation released), as kube-scheduler re-queues its unschedulable pods on
such Node events, instead of leaving a pod that fits now for the next interval; a status heartbeat, or a change
that only takes away, wakes nothing (balancer/actuate/k8s_sched_reads.py: `node_openings`, `node_opened`)."""

from __future__ import annotations

import json
import threading
from argparse import Namespace
from types import SimpleNamespace

import pytest
from fakeapi import FakeKube, node, pod
from test_k8s_watch import eventually

from balancer.actuate.k8s_reads import node_facts
from balancer.actuate.k8s_sched_reads import node_openings
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.k8s_watch import ListWatch
from balancer.actuate.kubernetes import RESERVATION_ANNOTATION, rfc3339
from balancer.cmd import schedule as schedule_cmd

HOUR = 3600.0   # the loop's interval in these tests: a pass after the first one was woken, not polled
NOT_READY = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
HOT = {"key": "gputide.io/hot", "effect": "PreferNoSchedule"}


def most_free(request: dict, nodes: list[dict]) -> str | None:
    fits = [n for n in nodes if n["gpus_free"] >= request["num_gpu"]]
    return max(fits, key=lambda n: (n["gpus_free"], n["name"]))["name"] if fits else None


def bound_to(kube: FakeKube, name: str) -> str | None:
    return kube.get("pods", name, "default")["spec"].get("nodeName")


def reservation(key: str, expires: float) -> dict:
    return {"metadata": {"annotations": {RESERVATION_ANNOTATION: json.dumps(
        {key: {"pod": key, "gpus": [0], "count": 1, "expires": rfc3339(expires)}})}}}


def heartbeat(at: int) -> dict:
    """The kubelet's node status update: the Ready condition's lastHeartbeatTime, nothing else."""
    return {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "lastHeartbeatTime": f"2024-01-01T00:{at:02d}:00Z",
                                       "lastTransitionTime": "2024-01-01T00:00:00Z"}]}}


def scheduler(api, clock, **kw) -> SecondaryScheduler:
    return SecondaryScheduler(api, "gputide", most_free, clock=clock, watch=True, watch_s=1.0, **kw)


def started(sched: SecondaryScheduler) -> SecondaryScheduler:
    """Watches synced, and the wake their first lists made consumed."""
    sched.start()
    eventually(lambda: all(w.synced for w in sched.watches.values()))
    sched.wait_for_work(0)
    return sched


def settled(kube: FakeKube, sched: SecondaryScheduler, mark: int) -> None:
    """Every node event so far has reached the node cache: a last change (one more taint on node "marker", which
    opens nothing) is seen there, and a watch delivers its events in order."""
    kube.mutate("nodes", "marker", "", {"spec": {"taints": [{"key": f"mark-{i}", "value": str(i),
                                                             "effect": "NoSchedule"} for i in range(1, mark + 1)]}})
    eventually(lambda: any(t.value == str(mark) for n in sched.nodes_view() if n["name"] == "marker"
                           for t in n["taints"]))


class Serving:
    """`gputide schedule`'s loop (balancer/cmd/schedule.py `serve`) over `sched` in a thread, every hour at least:
    `passes` holds each pass's results, the first one made before the test changes anything."""

    def __init__(self, kube: FakeKube, sched: SecondaryScheduler) -> None:
        self.kube, self.sched, self.passes = kube, sched, []
        once = sched.schedule_once

        def counted() -> dict:
            self.passes.append(once())
            return self.passes[-1]

        sched.schedule_once = counted
        args = Namespace(metrics_port=0, scheduler_name="gputide", policy="most_free")
        self.thread = threading.Thread(target=schedule_cmd.serve, daemon=True, args=(
            args, started(sched), SimpleNamespace(facts_nodes=0), lambda: True, HOUR))
        self.thread.start()
        eventually(lambda: len(self.passes) == 1)

    def second_pass_binds(self, name: str) -> None:
        """The pass after the first, woken (the interval is an hour), binds the pod to node `name`; the passes after
        it (the pod leaving the pending pods wakes one) find nothing to place."""
        eventually(lambda: len(self.passes) >= 2)
        assert self.passes[:2] == [{"default/train": None}, {"default/train": name}]
        assert all(p == {} for p in self.passes[2:])
        assert bound_to(self.kube, "train") == name

    def stop(self) -> None:
        self.sched.stop()
        self.thread.join(10.0)
        self.sched.close()


@pytest.fixture
def cluster(kube: FakeKube) -> FakeKube:
    kube.add(node("marker", 2))
    kube.add(pod("train", gpus=4, scheduler="gputide", phase="Pending"))   # fits no node of 2 GPUs
    return kube


def test_a_node_added_wakes_a_pass_that_binds_the_pod_waiting_for_it(cluster: FakeKube, api, clock) -> None:
    serving = Serving(cluster, scheduler(api, clock))   # nodes wake a pass half a second after, as deployed
    try:
        assert serving.passes == [{"default/train": None}]
        cluster.add(node("big", 8))
        serving.second_pass_binds("big")
        assert serving.sched.node_wakes == 1
    finally:
        serving.stop()


def test_heartbeats_wake_no_pass_and_the_node_turning_ready_does(cluster: FakeKube, api, clock) -> None:
    not_ready = node("big", 8)
    not_ready["spec"]["taints"] = [NOT_READY]
    cluster.add(not_ready)
    serving = Serving(cluster, scheduler(api, clock, node_wake_s=0.0))   # a wake, if any, before the next event is read
    try:
        for minute in range(1, 6):   # the kubelet's status updates: a new resourceVersion, a new heartbeat
            cluster.mutate("nodes", "big", "", heartbeat(minute))
            cluster.mutate("nodes", "marker", "", heartbeat(minute))
        settled(cluster, serving.sched, 1)
        assert serving.passes == [{"default/train": None}]
        assert serving.sched.node_wakes == 0 and not serving.sched.work.is_set()

        cluster.mutate("nodes", "big", "", {"spec": {"taints": None}, **heartbeat(7)})   # Ready: the taint goes
        serving.second_pass_binds("big")
        assert serving.sched.node_wakes == 1
    finally:
        serving.stop()


OPENS = {
    "uncordoned": {"spec": {"unschedulable": None}},
    "a NoSchedule taint removed": {"spec": {"taints": [HOT]}},
    "the device plugin registered its GPUs": {"status": {"allocatable": {"nvidia.com/gpu": "8"}}},
    "an extended resource appeared": {"status": {"allocatable": {"example.com/fpga": "2"}}},
    "a label added": {"metadata": {"labels": {"pool": "training"}}},
    "a reservation released": {"metadata": {"annotations": {RESERVATION_ANNOTATION: None}}},
}
KEEPS_SHUT = {
    "a heartbeat": heartbeat(9),
    "an annotation the scheduler does not read": {"metadata": {"annotations": {"node.alpha.kubernetes.io/ttl": "0"}}},
    "a taint added": {"spec": {"taints": [NOT_READY, HOT, {"key": "gpu-fault", "effect": "NoExecute"}]}},
    "a PreferNoSchedule taint removed": {"spec": {"taints": [NOT_READY]}},
    "allocatable shrunk": {"status": {"allocatable": {"cpu": "32"}}},
    "a reservation renewed": reservation("default/held", 1_700_000_900.0),
}


@pytest.mark.parametrize(("change", "wakes"), [*((k, 1) for k in OPENS), *((k, 0) for k in KEEPS_SHUT)])
def test_which_node_changes_wake_a_pass(cluster: FakeKube, api, clock, change: str, wakes: int) -> None:
    shut = node("n", 0)
    shut["spec"] = {"unschedulable": True, "taints": [NOT_READY, HOT]}
    cluster.add(shut)
    cluster.mutate("nodes", "n", "", reservation("default/held", 1_700_000_600.0))
    sched = started(scheduler(api, clock, node_wake_s=0.0))
    try:
        cluster.mutate("nodes", "n", "", {**OPENS, **KEEPS_SHUT}[change])
        settled(cluster, sched, 1)
        assert sched.node_wakes == wakes
        assert sched.wait_for_work(0) is bool(wakes)
        cluster.add(node("late", 8))   # and a node that opens after it wakes a pass, whatever came before
        settled(cluster, sched, 2)
        assert sched.node_wakes == wakes + 1 and sched.wait_for_work(0)
    finally:
        sched.close()


class Timers:
    """`wake_timer` that only records: the test fires them."""

    def __init__(self) -> None:
        self.started: list[tuple[float, object]] = []
        self.cancelled = 0

    def __call__(self, delay_s: float, fn) -> Timers:
        self.started.append((delay_s, fn))
        return self

    def cancel(self) -> None:
        self.cancelled += 1

    def fire(self) -> None:
        self.started[-1][1]()


def test_nodes_opening_together_wake_one_pass(cluster: FakeKube, api, clock) -> None:
    """A node pool scaling up: the openings within `node_wake_s` of the first join its wake."""
    sched = scheduler(api, clock)
    sched.wake_timer = timers = Timers()
    started(sched)
    try:
        for i in range(3):
            cluster.add(node(f"new-{i}", 8))
        settled(cluster, sched, 1)
        assert [delay for delay, _ in timers.started] == [0.5]   # one wake to come, for the three
        assert sched.node_wakes == 0 and not sched.wait_for_work(0)
        timers.fire()
        assert sched.node_wakes == 1 and sched.wait_for_work(0)
        cluster.add(node("new-3", 8))   # after the wake: a wake of its own
        settled(cluster, sched, 2)
        assert len(timers.started) == 2
    finally:
        sched.close()
    assert timers.cancelled == 1   # the wake to come goes with the scheduler


def test_a_node_added_while_the_watch_was_broken_wakes_a_pass_when_listed_again() -> None:
    """A list after a failed watch is compared with what the cache held: the nodes it adds open, those it lists
    unchanged do not, so a watch that keeps failing (one list per backoff) wakes no pass for nothing. The first
    list wakes none (until then each pass listed the nodes itself)."""
    nodes, opened = [node("small", 2)], []

    def list_nodes(**_kw) -> dict:
        return {"items": list(nodes), "metadata": {"resourceVersion": "1"}}

    def broken(**_kw):
        raise ValueError("watch refused")

    w = ListWatch("nodes", list_nodes, broken, node_facts, backoff_s=0.001, max_backoff_s=0.005,
                  on_change=node_openings(lambda name, why: opened.append((name, why))))
    w.start()
    try:
        eventually(lambda: w.lists >= 5)
        assert opened == []
        nodes.append(node("big", 8))
        eventually(lambda: opened == [("big", "added")])
        lists = w.lists
        eventually(lambda: w.lists >= lists + 5)
        assert opened == [("big", "added")]
    finally:
        w.stop()
