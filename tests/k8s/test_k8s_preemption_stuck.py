"""A preemption's victim stuck terminating past the hour a hold lasts (a finalizer, a kubelet that hangs): the node
stays held for the preemptor while the victim is there and terminating on a node that still admits the pod, and it
is said (a warning naming the victim, a `PreemptionStuck` Event on the pod, `stuck_holds`). The hold lapsed at the
hour although the GPUs were still taken: the pod planned afresh and preempted again (the same victim, or more pods
elsewhere) while what the victim freed at last went to whoever came first. It is given back as before once the pod
no longer waits, and once the victim is gone the pod is bound there."""

from __future__ import annotations

import logging

from fakeapi import FakeKube
from test_k8s_preemption import bound, events, most_free, pending, reservations
from test_k8s_preemption_grace import GRACE_S, HOUR, expires, terminating, two_nodes

from balancer.actuate.k8s_preempt import capped, kept_past_cap, noted
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import parse_time, rfc3339

RESERVE_S = 300   # Preemptor.reserve_s


def stuck_for_urgent(kube: FakeKube, api, clock) -> tuple[SecondaryScheduler, float]:
    """urgent preempted train on a; train stays terminating (a finalizer no one removes)."""
    two_nodes(kube)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    start = clock.now
    assert sched.schedule_once() == {"default/urgent": None} and sched.preempted == [("default/train", "a")]
    terminating(kube, "train", "a", 8, 1, start + GRACE_S)
    return sched, start


def passes_until(sched: SecondaryScheduler, clock, until: float, step: float = 60) -> None:
    while clock.now < until:
        clock.advance(step)
        sched.schedule_once()


def stuck_events(kube: FakeKube) -> list[str]:
    return [message for reason, message in events(kube, "urgent") if reason == "PreemptionStuck"]


def test_a_victim_stuck_terminating_keeps_the_node_held_past_the_hour_and_is_said(kube: FakeKube, api, clock,
                                                                                  caplog):
    sched, start = stuck_for_urgent(kube, api, clock)
    passes_until(sched, clock, start + HOUR - RESERVE_S)
    assert sched.stuck_holds == [] and stuck_events(kube) == []      # within the hour: held as before, nothing said
    reads = len(kube.calls("GET", r"/pods/train$"))
    with caplog.at_level(logging.WARNING, "balancer.actuate.k8s_stuck"):
        while clock.now < start + 3 * HOUR:
            clock.advance(60)
            assert sched.schedule_once() == {"default/urgent": None}
            assert clock.now < expires(kube, "a") <= clock.now + RESERVE_S   # kept, a renewal at a time
            assert reservations(kube, "a")["default/urgent"]["since"] == rfc3339(start)   # no preemption again
    assert sched.stuck_holds == [("default/urgent", "a", ("default/train",))]
    assert kube.get("pods", "low-3", "default") is not None and len(kube.calls("POST", r"/eviction$")) == 1
    [said] = stuck_events(kube)                                        # once, as the hold passed the hour
    assert "default/train" in said and "still terminating on a" in said
    assert "default/train" in caplog.text and "still terminating on a" in caplog.text
    assert "stays held past the 60 min" in sched.reasons["default/urgent"]
    # read at each renewal past the hour (every 3 passes here), not at every pass
    assert 0 < len(kube.calls("GET", r"/pods/train$")) - reads <= 2 * HOUR / (RESERVE_S / 2) + 2

    kube.delete("pods", "train", "default")                           # its finalizer removed at last
    clock.advance(5)
    assert sched.schedule_once() == {"default/urgent": "a"}
    assert reservations(kube, "a") == {} and sched.stuck_holds == []


def test_a_hold_kept_past_the_hour_is_given_back_once_the_pod_no_longer_waits(kube: FakeKube, api, clock):
    sched, start = stuck_for_urgent(kube, api, clock)
    passes_until(sched, clock, start + HOUR + 600)
    assert sched.stuck_holds == [("default/urgent", "a", ("default/train",))]
    kube.delete("pods", "urgent", "default")
    kube.add(pending("filler", 8, 0))
    clock.advance(5)
    assert sched.schedule_once() == {"default/filler": None}         # train still takes the GPUs
    # urgent's hold given back; filler does not wait there for train: past its grace, train is stuck, its room not
    # coming (`k8s_preempt.room_coming`); it waited there for it, for the hour and then past it
    assert reservations(kube, "a") == {} and sched.stuck_holds == []


def test_a_hold_kept_past_the_hour_lapses_once_no_one_renews_it(kube: FakeKube, api, clock):
    """With no pod pending a pass reads no node (nothing given back), and nothing renews the hold either."""
    sched, start = stuck_for_urgent(kube, api, clock)
    passes_until(sched, clock, start + HOUR + 600)
    kube.delete("pods", "urgent", "default")
    passes_until(sched, clock, clock.now + RESERVE_S)
    assert expires(kube, "a") <= clock.now                             # held for no one no longer than a renewal


def test_a_victim_replaced_by_a_running_pod_of_its_name_holds_nothing_past_the_hour(kube: FakeKube, api, clock):
    """A StatefulSet's victim, gone and made again under its name on the same node: not terminating, it frees
    nothing the pod waits for, and the hold is not kept for it."""
    sched, start = stuck_for_urgent(kube, api, clock)
    passes_until(sched, clock, start + HOUR / 2)
    kube.delete("pods", "train", "default")
    kube.add(bound("train", "a", 8, 1))                               # a new pod by its name, running
    while clock.now < start + HOUR + 600:
        clock.advance(60)
        sched.schedule_once()
        entry = reservations(kube, "a").get("default/urgent") or {}
        if entry.get("since") == rfc3339(start):
            assert parse_time(entry["expires"]) <= start + HOUR       # the first preemption's hold: never past
        assert sched.stuck_holds == []
    assert stuck_events(kube) == []


def test_a_hold_is_kept_past_its_cap_only_for_victims_stuck_there():
    entry = {"pod": "default/urgent", "count": 8, "expires": rfc3339(4600.0), "since": rfc3339(1000.0),
             "evicted": ["default/train"]}
    victims = ["default/train"]
    assert not capped(entry, victims, 4300.0, 300.0)                 # far from running out
    assert capped(entry, victims, 4500.0, 300.0) and not capped(entry, [], 4500.0, 300.0)
    assert noted(entry, [], victims, [], 4500.0, 300.0) is entry     # not stuck: never past the cap (4600)
    kept = noted(entry, [], victims, [], 4500.0, 300.0, stuck=True)
    assert parse_time(kept["expires"]) == 4800.0 and kept_past_cap(kept) == victims
    assert kept_past_cap(entry) == [] and kept_past_cap({**kept, "evicted": []}) == []
    assert capped(kept, victims, 4700.0, 300.0) and not capped(kept, victims, 4600.0, 300.0)
    assert noted(kept, [], victims, [], 4700.0, 300.0) is kept       # no longer stuck: lapses when it expires
    assert parse_time(noted(kept, [], victims, [], 4700.0, 300.0, stuck=True)["expires"]) == 5000.0
    gone = noted(kept, [], [], [], 4700.0, 300.0)                     # gone at last: room to bind, not cut to the cap
    assert parse_time(gone["expires"]) == 4800.0 and "evicted" not in gone



def test_a_hold_kept_past_the_hour_lapses_once_its_node_no_longer_admits_the_pod(kube: FakeKube, api, clock):
    """Kept for a victim stuck there, until the node's kubelet stops answering (tainted unreachable): the pod could
    never be bound there, the hold is renewed no more and the pod preempts elsewhere."""
    sched, start = stuck_for_urgent(kube, api, clock)
    passes_until(sched, clock, start + 2 * HOUR)
    held_until = expires(kube, "a")
    kube.mutate("nodes", "a", "", {"spec": {"taints": [{"key": "node.kubernetes.io/unreachable",
                                                         "effect": "NoSchedule"}]}})
    passes_until(sched, clock, held_until - 1, step=1)
    assert expires(kube, "a") == held_until                            # not renewed, nor cut back
    assert len(kube.calls("POST", r"/eviction$")) == 1
    clock.advance(1)                                                   # lapsed: it plans afresh
    sched.schedule_once()
    assert sched.preempted == [("default/low-3", "b")] and sched.stuck_holds == []


def test_the_stuck_hold_is_served_as_a_gauge(kube: FakeKube, api, clock):
    from balancer.cmd.schedule import SchedulerMetrics, one_pass

    sched, start = stuck_for_urgent(kube, api, clock)
    metrics = SchedulerMetrics()
    passes_until(sched, clock, start + 2 * HOUR)
    one_pass(sched, metrics)
    assert metrics.registry.get_sample_value("gputide_scheduler_holds_stuck") == 1
