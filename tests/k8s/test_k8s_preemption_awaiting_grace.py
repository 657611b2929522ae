"""A pod terminating already is waited for only while its room is coming (`k8s_preempt.room_coming`): until its grace
ends (its `deletionTimestamp`, the deletion's time plus the grace) and a minute more (`GRACE_SLACK_S`), and only
where it is not made again on its node (a DaemonSet's). One stuck past that (a finalizer no one removes) pinned a
more important pending pod to its node for ever, held and waiting, where before it preempted elsewhere. A hold that
only waits (`AWAITED`) is capped at the hour as a preemption's, said stuck only once the pod it waits for is past its
grace, and said "waited for", never "evicted for it"; a pod made again under its name (a StatefulSet's) is not
waited for; a node under the per-node emergency stop still lets the pod wait there for its terminating pods.
Against the fake API server."""

from __future__ import annotations

from fakeapi import FakeKube, node
from test_k8s_preemption import bound, events, most_free, pending, reservations

from balancer.actuate.k8s_preempt import GRACE_SLACK_S, MAX_HOLD_S
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import parse_time, rfc3339
from balancer.safety import EMERGENCY_LABEL

HOUR = MAX_HOLD_S


def going(kube: FakeKube, name: str, node_name: str, gpus: int, priority: int, ends: float, **meta) -> dict:
    """A bound pod being deleted, its grace ending at `ends` (its `deletionTimestamp`)."""
    p = bound(name, node_name, gpus, priority)
    p["metadata"] |= {"deletionTimestamp": rfc3339(ends), **meta}
    kube.add(p)
    return p


def evictions(kube: FakeKube) -> list[str]:
    return [r.path for r in kube.calls("POST", r"/eviction$")]


def stuck_events(kube: FakeKube) -> list[str]:
    return [message for reason, message in events(kube, "urgent") if reason == "PreemptionStuck"]


def a_and_b(kube: FakeKube) -> None:
    """a: 4 GPUs, vip's (set by the test); b: 4 GPUs, low (priority 1); urgent (4 GPUs, priority 100) pending."""
    kube.add(node("a", 4))
    kube.add(node("b", 4))
    kube.add(bound("low", "b", 4, 1))
    kube.add(pending("urgent", 4, 100))


def test_a_pod_stuck_past_its_grace_is_not_waited_for_and_the_pod_preempts_elsewhere(kube, api, clock):
    """vip (priority 200) terminating, its grace ended 2 h ago (a finalizer). Before, urgent waited on a for it for
    ever (held, stuck past the hour), where it evicted low on b."""
    a_and_b(kube)
    going(kube, "vip", "a", 4, 200, clock.now - 2 * HOUR)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert evictions(kube) == ["/api/v1/namespaces/default/pods/low/eviction"]
    assert "default/urgent" not in reservations(kube, "a") and "default/urgent" in reservations(kube, "b")


def test_a_pod_within_its_grace_and_the_slack_is_still_waited_for(kube, api, clock):
    """The slack a victim's hold keeps after its grace (`GRACE_SLACK_S`): within it the room is still coming."""
    a_and_b(kube)
    going(kube, "vip", "a", 4, 200, clock.now - GRACE_SLACK_S + 5)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert evictions(kube) == [] and reservations(kube, "a")["default/urgent"]["awaited"] == ["default/vip"]


def test_a_terminating_daemonset_pod_is_not_waited_for(kube, api, clock):
    """A DaemonSet's pod is made again on its node: its deletion frees nothing there."""
    a_and_b(kube)
    going(kube, "agent", "a", 4, 200, clock.now + 30,
          ownerReferences=[{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "ds-1",
                            "controller": True}])
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert evictions(kube) == ["/api/v1/namespaces/default/pods/low/eviction"]
    assert "default/urgent" not in reservations(kube, "a")


def test_a_wait_only_hold_is_capped_at_the_hour_and_not_said_stuck_within_the_pods_grace(kube, api, clock):
    """vip deleted by its owner with a 2 h grace: urgent waits for it, its hold (`since`) never past the hour, and
    nothing says it stuck. Before, vip was said stuck at 57 min (a `PreemptionStuck` Event, "evicted for this
    pod"), the hold kept past the hour."""
    kube.add(node("a", 4))
    going(kube, "vip", "a", 4, 200, clock.now + 2 * HOUR)
    kube.add(pending("urgent", 4, 100))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    start = clock.now
    sched.schedule_once()
    assert reservations(kube, "a")["default/urgent"]["since"] == rfc3339(start)
    while clock.now < start + 1.5 * HOUR:
        clock.advance(60)
        sched.schedule_once()
        if entry := reservations(kube, "a").get("default/urgent"):     # each hold (the first, then one anew)
            assert parse_time(entry["expires"]) <= parse_time(entry["since"]) + HOUR
        assert sched.stuck_holds == []
    assert stuck_events(kube) == [] and evictions(kube) == []
    assert "default/urgent" in reservations(kube, "a")                 # waiting again: its room still coming


def test_a_waited_for_pod_stuck_past_its_grace_is_said_waited_for_not_evicted(kube, api, clock, caplog):
    """vip deleted by its owner (30 s grace), then stuck: at the hour it is past its grace, and said stuck as a pod
    urgent waited for, not one evicted for it."""
    kube.add(node("a", 4))
    going(kube, "vip", "a", 4, 200, clock.now + 30)
    kube.add(pending("urgent", 4, 100))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    start = clock.now
    caplog.set_level("WARNING", logger="balancer.actuate.k8s_stuck")
    while clock.now < start + HOUR + 600:
        sched.schedule_once()
        clock.advance(60)
    assert sched.stuck_holds == [("default/urgent", "a", ("default/vip",))]
    [said] = stuck_events(kube)
    assert "default/vip, terminating already (not evicted for this pod), waited for" in said
    assert "evicted for this pod" not in said.replace("not evicted for this pod", "")
    assert "waited for" in caplog.text and "vip, evicted for it" not in caplog.text


def test_a_pod_made_again_under_the_name_waited_for_is_not_waited_for(kube, api, clock):
    """web-0 (a StatefulSet's) terminating on a, urgent waits for it; web-0 is made again on a, running. Before, the
    new web-0 was counted as leaving (matched by name): urgent held a up to the hour."""
    a_and_b(kube)
    going(kube, "web-0", "a", 4, 200, clock.now + 30)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert reservations(kube, "a")["default/urgent"]["awaited"] == ["default/web-0"]
    kube.delete("pods", "web-0", "default")
    again = bound("web-0", "a", 4, 200)
    again["metadata"]["uid"] = "web-0-again"
    kube.add(again)
    for _ in range(3):
        clock.advance(60)
        sched.schedule_once()
    assert evictions(kube) == ["/api/v1/namespaces/default/pods/low/eviction"]
    assert "default/urgent" not in reservations(kube, "a")


def test_a_node_under_the_per_node_stop_is_waited_on_for_its_terminating_pods(kube, api, clock):
    """a carries the per-node stop; vip (priority 200) terminates there, low-a (priority 1) runs beside it. urgent
    waits there for vip (held, nominated), evicting no one. Before, it was told "preemption failed ... so no pod is
    evicted there" and held nothing."""
    kube.add(node("a", 8, labels={EMERGENCY_LABEL: "true"}))
    going(kube, "vip", "a", 4, 200, clock.now + 30)
    kube.add(bound("low-a", "a", 4, 1))
    kube.add(pending("urgent", 4, 100))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/urgent": None}
    held = reservations(kube, "a")["default/urgent"]
    assert held["evicted"] == ["default/vip"] and "victims" not in held and evictions(kube) == []
    assert "preemption failed" not in sched.reasons["default/urgent"]
    assert kube.get("pods", "urgent", "default")["status"]["nominatedNodeName"] == "a"

