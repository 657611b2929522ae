"""A pod terminating already is waited for only while its room is coming (`k8s_preempt.room_coming`): until its grace
ends (its `deletionTimestamp`, the deletion's time plus the grace) and a minute more (`GRACE_SLACK_S`), once that end
is within the hour a hold lasts, and only where it is not made again on its node (a DaemonSet's, a static pod's
mirror). One stuck past that (a finalizer no one removes) pinned a more important pending pod to its node for ever,
held and waiting, where before it preempted elsewhere: so did a hold begun while it was within its grace, until it is
given back once the pod is stuck, and the pod plans afresh. A hold that only waits (`AWAITED`) names only the pods
whose room is still coming (not one stuck, gone, or made again under its name, a StatefulSet's); a node under the
per-node emergency stop still lets the pod wait there for its terminating pods, and takes no victim. Against the
fake API server."""

from __future__ import annotations

import pytest
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


def test_a_pod_whose_grace_ends_beyond_the_hour_is_waited_for_only_once_it_ends_within_it(kube, api, clock):
    """vip deleted by its owner with a 2 h grace, on a alone: urgent does not wait for it while its grace ends beyond
    the hour a hold lasts, and waits from then on, its hold never past the hour, nothing saying it stuck. Before,
    urgent held a from the start (said stuck at 57 min, then a hold lapsing at the hour and made again)."""
    kube.add(node("a", 4))
    going(kube, "vip", "a", 4, 200, clock.now + 2 * HOUR)
    kube.add(pending("urgent", 4, 100))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    start = clock.now
    sched.schedule_once()
    assert "default/urgent" not in reservations(kube, "a")
    while clock.now < start + 1.5 * HOUR:
        clock.advance(60)
        sched.schedule_once()
        if entry := reservations(kube, "a").get("default/urgent"):     # from the hour on: vip's grace ends within it
            assert parse_time(entry["since"]) >= start + HOUR
            assert parse_time(entry["expires"]) <= parse_time(entry["since"]) + HOUR
        assert sched.stuck_holds == []
    assert stuck_events(kube) == [] and evictions(kube) == []
    assert reservations(kube, "a")["default/urgent"]["awaited"] == ["default/vip"]


def test_a_pod_deleted_with_a_days_grace_is_not_waited_for(kube, api, clock):
    """vip (priority 200) deleted by its owner with a grace of a day: its room is not coming within the hour a hold
    lasts, so urgent evicts low on b. Before, urgent waited on a all day, its hold lapsing every hour and made
    again, and low was never evicted."""
    a_and_b(kube)
    going(kube, "vip", "a", 4, 200, clock.now + 24 * HOUR)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert evictions(kube) == ["/api/v1/namespaces/default/pods/low/eviction"]
    assert "default/urgent" not in reservations(kube, "a") and "default/urgent" in reservations(kube, "b")


def test_a_hold_whose_awaited_pod_gets_stuck_past_its_grace_is_given_back_and_the_pod_preempts(kube, api, clock):
    """vip (priority 200) deleted by its owner with a 30 s grace, then stuck (a finalizer): urgent waits for it on a,
    and once vip is past its grace (and the slack) the hold is given back, said so, and urgent plans afresh,
    evicting low on b. Before, vip was counted as leaving for ever: the hold was renewed, kept past the hour and
    said stuck, never given back, and low was never evicted."""
    a_and_b(kube)
    going(kube, "vip", "a", 4, 200, clock.now + 30)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert reservations(kube, "a")["default/urgent"]["awaited"] == ["default/vip"] and evictions(kube) == []
    clock.advance(60)                                                  # within its grace and the slack: held
    sched.schedule_once()
    assert "default/urgent" in reservations(kube, "a") and evictions(kube) == []
    clock.advance(60)                                                  # past them: its room is not coming
    sched.schedule_once()
    said = sched.reasons["default/urgent"]
    assert ("the room it waits for on a is not coming (default/vip, waited for, is stuck terminating past its "
            "grace") in said and "others took" not in said
    assert "default/urgent" not in reservations(kube, "a") and evictions(kube) == []
    sched.schedule_once()
    assert evictions(kube) == ["/api/v1/namespaces/default/pods/low/eviction"]
    assert "default/urgent" in reservations(kube, "b") and sched.stuck_holds == [] and stuck_events(kube) == []


def waits_for_both(kube: FakeKube, api, clock, other: str, ends: float) -> SecondaryScheduler:
    """a (8 GPUs): vip (30 min grace) and `other` (its grace ending at `ends`) terminating, priority 200; urgent (4
    GPUs) waits for both. The scheduler, after that first pass."""
    kube.add(node("a", 8))
    going(kube, "vip", "a", 4, 200, clock.now + 1800)
    going(kube, other, "a", 4, 200, ends)
    kube.add(pending("urgent", 4, 100))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert reservations(kube, "a")["default/urgent"]["awaited"] == sorted(["default/vip", f"default/{other}"])
    return sched


def waits_for_vip_alone(kube: FakeKube, sched: SecondaryScheduler, other: str) -> None:
    """The next pass: the hold goes on, for vip alone (`other` is neither `evicted` nor `awaited`, nor said)."""
    sched.schedule_once()
    held = reservations(kube, "a")["default/urgent"]
    assert held["evicted"] == held["awaited"] == ["default/vip"] and evictions(kube) == []
    assert other not in sched.reasons["default/urgent"]


def test_an_awaited_pod_stuck_past_its_grace_gives_the_hold_back_and_it_waits_again_where_the_rest_suffice(
        kube, api, clock):
    """stuck (30 s grace) gets stuck past it: the hold is given back, said so, and urgent plans afresh: vip still
    frees the room it needs, so it waits on a again, for vip alone, and goes on waiting (the new hold does not wait
    for stuck: no flapping). Before that, stuck was still named as terminating (renewed for, said "while ...
    terminate(s)", kept past the hour); then it was dropped from the hold, which went on (see the RDMA case
    below)."""
    sched = waits_for_both(kube, api, clock, "stuck", clock.now + 30)
    clock.advance(120)
    sched.schedule_once()
    assert "default/urgent" not in reservations(kube, "a")
    assert ("the room it waits for on a is not coming (default/stuck, waited for, is stuck terminating past its "
            "grace") in sched.reasons["default/urgent"]
    waits_for_vip_alone(kube, sched, "stuck")
    since = reservations(kube, "a")["default/urgent"]["since"]
    for _ in range(5):
        clock.advance(60)
        sched.schedule_once()
        assert reservations(kube, "a")["default/urgent"]["since"] == since and evictions(kube) == []


def test_an_awaited_pod_stuck_past_its_grace_that_frees_a_device_the_pod_needs_gives_the_hold_back(kube, api,
                                                                                                    clock):
    """a (8 GPUs, one RDMA device): vip (30 min grace) and r (30 s grace, holding the RDMA device) terminating,
    priority 200; b (4 GPUs, one RDMA device): low (priority 1) holds it. urgent (4 GPUs and an RDMA device) waits on
    a for both; r gets stuck past its grace: vip alone frees the GPUs but not the device, so the hold is given back
    and urgent evicts low on b. Before, r was dropped from the hold (its GPUs, CPU and memory not needed: the hold's
    room check weighs no device) and urgent waited on a for vip, 30 min, for a device that never came."""
    kube.add(rdma_node("a", 8))
    going(kube, "vip", "a", 4, 200, clock.now + 1800)
    r = with_rdma(bound("r", "a", 4, 200))
    r["metadata"]["deletionTimestamp"] = rfc3339(clock.now + 30)
    kube.add(r)
    kube.add(rdma_node("b", 4))
    kube.add(with_rdma(bound("low", "b", 4, 1)))
    kube.add(with_rdma(pending("urgent", 4, 100)))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert reservations(kube, "a")["default/urgent"]["awaited"] == ["default/r", "default/vip"]
    clock.advance(120)                                                 # r past its grace and the slack
    sched.schedule_once()
    assert "default/urgent" not in reservations(kube, "a") and evictions(kube) == []
    assert ("the room it waits for on a is not coming (default/r, waited for, is stuck terminating past its "
            "grace") in sched.reasons["default/urgent"]
    sched.schedule_once()
    assert evictions(kube) == ["/api/v1/namespaces/default/pods/low/eviction"]
    assert "default/urgent" in reservations(kube, "b") and "default/urgent" not in reservations(kube, "a")


def test_an_awaited_pod_made_again_is_waited_for_no_more_where_the_rest_suffice(kube, api, clock):
    """web-0 (a StatefulSet's) is made again on a, running: vip still frees the room urgent waits for, so the hold
    goes on, for vip alone. Before, web-0 was still named as terminating (matched by name: renewed for it, said
    "while ... terminate(s)")."""
    sched = waits_for_both(kube, api, clock, "web-0", clock.now + 1800)
    kube.delete("pods", "web-0", "default")
    again = bound("web-0", "a", 4, 200)
    again["metadata"]["uid"] = "web-0-again"
    kube.add(again)
    clock.advance(60)
    waits_for_vip_alone(kube, sched, "web-0")


def test_an_awaited_pod_gone_is_no_longer_named_awaited(kube, api, clock):
    """a (8 GPUs): vip-1 and vip-2 terminating, urgent (8 GPUs) waits for both. vip-1 goes: the hold names vip-2
    alone, in `evicted` and in `awaited` (before, `awaited` still named vip-1, gone)."""
    kube.add(node("a", 8))
    going(kube, "vip-1", "a", 4, 200, clock.now + 30)
    going(kube, "vip-2", "a", 4, 200, clock.now + 1800)
    kube.add(pending("urgent", 8, 100))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert reservations(kube, "a")["default/urgent"]["awaited"] == ["default/vip-1", "default/vip-2"]
    kube.delete("pods", "vip-1", "default")
    clock.advance(30)
    sched.schedule_once()
    held = reservations(kube, "a")["default/urgent"]
    assert held["evicted"] == held["awaited"] == ["default/vip-2"]


def test_the_hold_at_the_hour_on_a_node_that_no_longer_admits_the_pod_says_whom_it_waited_for(kube, api, clock,
                                                                                               caplog):
    """vip deleted by its owner, its grace ending just within the hour; urgent waits for it on a, which is cordoned
    meanwhile. At the hour the log says vip "terminating already as the hold began": it was said "not evicted for
    it", which a pod evicted by an earlier hold of urgent's that lapsed at the hour (a 2 h grace) had been."""
    kube.add(node("a", 4))
    going(kube, "vip", "a", 4, 200, clock.now + HOUR - 60)
    kube.add(pending("urgent", 4, 100))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    start = clock.now
    sched.schedule_once()
    kube.mutate("nodes", "a", "", {"spec": {"unschedulable": True}})
    caplog.set_level("WARNING", logger="balancer.actuate.k8s_stuck")
    while clock.now < start + HOUR:
        clock.advance(60)
        sched.schedule_once()
    assert "default/vip, terminating already as the hold began, waited for from" in caplog.text
    assert "not evicted for" not in caplog.text


@pytest.mark.parametrize("meta", [
    {"ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "a", "uid": "node-a", "controller": True}]},
    {"annotations": {"kubernetes.io/config.mirror": "0123abcd"}},
], ids=["owned-by-its-node", "mirror-annotation"])
def test_a_terminating_static_pods_mirror_is_not_waited_for(kube, api, clock, meta):
    """A static pod's mirror (owned by its Node, or annotated as a mirror): deleting it stops nothing, the kubelet
    runs the static pod from its file, so its room is not coming and urgent evicts low on b."""
    a_and_b(kube)
    going(kube, "etcd-a", "a", 4, 200, clock.now + 30, **meta)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert evictions(kube) == ["/api/v1/namespaces/default/pods/low/eviction"]
    assert "default/urgent" not in reservations(kube, "a")


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


def with_rdma(p: dict) -> dict:
    p["spec"]["containers"][0]["resources"]["limits"]["example.com/rdma"] = "1"
    return p


def rdma_node(name: str, gpus: int, **kwargs) -> dict:
    n = node(name, gpus, **kwargs)
    n["status"]["allocatable"]["example.com/rdma"] = n["status"]["capacity"]["example.com/rdma"] = "1"
    return n


def test_a_node_under_the_per_node_stop_whose_terminating_pods_do_not_suffice_takes_no_victim(kube, api, clock):
    """b carries the per-node stop: vip's room (terminating) frees the GPUs urgent needs, but its RDMA device is
    low-b's (priority 1), running. A candidate for its terminating pods' room alone, b is none: urgent evicts low-c
    (priority 5) on c. Weighed with low-b as a victim, b was chosen (the less important victim) and the eviction
    refused under the stop: "preemption failed", nothing evicted anywhere."""
    kube.add(rdma_node("b", 8, labels={EMERGENCY_LABEL: "true"}))
    going(kube, "vip", "b", 4, 200, clock.now + 30)
    kube.add(with_rdma(bound("low-b", "b", 4, 1)))
    kube.add(rdma_node("c", 4))
    kube.add(bound("low-c", "c", 4, 5))
    kube.add(with_rdma(pending("urgent", 4, 100)))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert evictions(kube) == ["/api/v1/namespaces/default/pods/low-c/eviction"]
    assert "default/urgent" in reservations(kube, "c") and "default/urgent" not in reservations(kube, "b")
    assert "preemption failed" not in sched.reasons["default/urgent"]



@pytest.mark.parametrize("before_the_hour", [236, 237, 238, 240])
def test_an_awaited_pod_whose_grace_ends_during_the_read_at_the_hour_does_not_keep_the_hold(kube, api, clock,
                                                                                           monkeypatch,
                                                                                           before_the_hour):
    """The hold at its hour judged its awaited pods as stuck victims too, on a clock read after `Holds.resume` had
    judged them coming: a grace ending within a slow read kept the hold past the hour once, with a PreemptionStuck
    Event (review r4). Only victims evicted for the pod keep a hold past the hour."""
    from balancer.actuate import k8s_stuck

    a_and_b(kube)
    t0 = clock.now
    going(kube, "vip", "a", 4, 200, t0 + HOUR - before_the_hour)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert reservations(kube, "a")["default/urgent"]["awaited"] == ["default/vip"]
    still_there = k8s_stuck._still_there

    def slow(preemptor, victim, node_name):
        clock.advance(5)   # the read takes 5 s
        return still_there(preemptor, victim, node_name)

    monkeypatch.setattr(k8s_stuck, "_still_there", slow)
    seen = []
    while clock.now < t0 + HOUR + 600:
        clock.advance(60)
        sched.schedule_once()
        seen += sched.stuck_holds
    assert seen == [] and stuck_events(kube) == []
