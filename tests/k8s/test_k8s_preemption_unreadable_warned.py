"""A terminating pod whose `deletionTimestamp` cannot be read is taken as within its grace (`k8s_preempt.past_grace`):
a pod waiting for it holds its node again at every hour for as long as it stays, and nothing says it is stuck (no
PreemptionStuck Event). It is logged as a warning, once per pod while it stays so, by each scheduler (`room_coming`,
where its room is judged; `k8s_preempt.UnreadEnds`), naming the pod and quoting the text, so an operator can tell why;
unsaid, nothing showed it. Not one made again on its node (a DaemonSet's), whose room never comes. Against the fake
API server."""

from __future__ import annotations

import logging

import test_k8s_preemption_stuck_unreadable as unreadable
from fakeapi import FakeKube, node
from test_k8s_preemption import bound, most_free, pending

from balancer.actuate import k8s_preempt
from balancer.actuate.k8s_reads import Usage, pod_usage
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import rfc3339


def said(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and "deletionTimestamp cannot be read" in r.getMessage()]


def test_a_pod_waited_for_past_the_hours_is_warned_of_once(kube: FakeKube, api, clock, caplog):
    """The hold for urgent lapses at the hour and is made again while train stays, judged at every pass: said once."""
    caplog.set_level(logging.WARNING, logger=k8s_preempt.__name__)
    unreadable.test_a_victim_whose_grace_end_cannot_be_read_is_not_said_stuck_and_is_waited_for(kube, api, clock)
    (one,) = said(caplog)
    assert one.startswith("pod default/train (uid ") and " on a is terminating" in one
    assert "its deletionTimestamp cannot be read ('not a time')" in one    # quoted: what is wrong with it
    assert "kubectl get pod -n default train" in one
    assert "a pod waiting for it would hold node a again every hour" in one


def test_each_pod_is_warned_of_once_and_a_readable_one_or_one_made_again_never(caplog):
    """One made again on its node (a DaemonSet's, a static pod's mirror: `Usage.comes_back`) is never waited for, its
    room never coming whatever its time: it was warned of as though a pod waiting for it would hold its node."""
    caplog.set_level(logging.WARNING, logger=k8s_preempt.__name__)
    unread, ends = Usage("a", 8, 0, 0, (), key="default/x", uid="u1", terminating=True), k8s_preempt.UnreadEnds()
    for pod in (unread, unread, unread._replace(key="default/y", uid="u2"), unread._replace(deleting=1000.0),
                unread._replace(terminating=False), unread._replace(key="default/ds", uid="u3", comes_back=True)):
        k8s_preempt.room_coming(pod, 1000.0, ends)
    assert [m.split(" (")[0] for m in said(caplog)] == ["pod default/x", "pod default/y"]


def test_the_text_of_an_unreadable_deletion_timestamp_is_kept_and_only_then():
    """`pod_usage` keeps the text of a `deletionTimestamp` it cannot read (`Usage.deleting_raw`), for the warning to
    quote; none of one it reads, or of a pod not being deleted."""
    def usage(stamp: str | None) -> Usage:
        meta = {"name": "x", "namespace": "default", **({"deletionTimestamp": stamp} if stamp else {})}
        return pod_usage({"metadata": meta, "spec": {"nodeName": "a", "containers": []}})

    unread = usage("yesterday")
    assert (unread.terminating, unread.deleting, unread.deleting_raw) == (True, 0.0, "yesterday")
    read = usage("2026-12-07T10:00:00Z")
    assert read.terminating and read.deleting > 0 and read.deleting_raw == ""
    assert usage(None).deleting_raw == ""


def test_two_schedulers_in_one_process_each_warn(kube: FakeKube, api, clock, caplog):
    """Another scheduler in the process (another replica's, a test's) judging the same pod warns of it too: the pods
    said were one set for the whole process, and only the first scheduler to judge one said it."""
    caplog.set_level(logging.WARNING, logger=k8s_preempt.__name__)
    unreadable.waiting_for_unreadable(kube, api, clock)
    other = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    for _ in range(3):
        clock.advance(60)
        other.schedule_once()
    assert [m.split(" (")[0] for m in said(caplog)] == ["pod default/train", "pod default/train"]


def test_a_pod_whose_time_is_read_again_and_broken_again_is_warned_of_again(kube: FakeKube, api, clock, caplog):
    """Forgotten once a pass reads its time (`UnreadEnds.keep`); broken again, it is said again."""
    caplog.set_level(logging.WARNING, logger=k8s_preempt.__name__)
    sched = unreadable.waiting_for_unreadable(kube, api, clock)
    for stamp in (rfc3339(clock.now + 600), "not a time", "not a time"):
        kube.mutate("pods", "train", "default", {"metadata": {"deletionTimestamp": stamp}})
        clock.advance(60)
        sched.schedule_once()
    assert len(said(caplog)) == 2


def test_a_pod_gone_or_read_again_is_forgotten_as_the_pass_reads_them(caplog):
    caplog.set_level(logging.WARNING, logger=k8s_preempt.__name__)
    ends, x = k8s_preempt.UnreadEnds(), Usage("a", 8, 0, 0, (), key="default/x", uid="u1", terminating=True)
    y, z = x._replace(key="default/y", uid="u2"), x._replace(key="default/z", uid="u3")
    for pod in (x, y, z):
        ends.say(pod)
    ends.keep([x._replace(deleting=1000.0), z])      # x read, y gone, z as it was
    for pod in (x, y, z):
        ends.say(pod)
    assert [m.split(" (")[0] for m in said(caplog)] == ["pod default/x", "pod default/y", "pod default/z",
                                                        "pod default/x", "pod default/y"]


def test_a_pod_read_again_by_a_pass_where_every_pod_fits_and_broken_again_is_warned_of_again(
        kube: FakeKube, api, clock, caplog):
    """The pods said were forgotten only as the bound pods were grouped for preemption (`Holds._bound_by_node`: in a
    pass where some pod fits nowhere and may preempt), though every pass with a pod to place reads them: train, read
    again (its time fixed) by a pass whose one pod fits, then broken again, was never said again. Now every pass that
    reads the bound pods forgets those read again (`SecondaryScheduler._read_pass`)."""
    caplog.set_level(logging.WARNING, logger=k8s_preempt.__name__)
    train = bound("train", "a", 8, 1)
    train["metadata"]["deletionTimestamp"] = "not a time"               # terminating, its end unreadable
    for obj in (node("a", 8), train, node("b", 4), pending("urgent", 8, 100)):
        kube.add(obj)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()                                               # urgent waits for train: said
    kube.delete("pods", "urgent", "default")
    kube.mutate("pods", "train", "default", {"metadata": {"deletionTimestamp": rfc3339(clock.now + 600)}})
    kube.add(pending("small", 1, 100))
    clock.advance(60)
    assert sched.schedule_once() == {"default/small": "b"}              # every pod fits: train read, readable
    kube.mutate("pods", "train", "default", {"metadata": {"deletionTimestamp": "not a time"}})
    kube.add(pending("urgent-2", 8, 100))
    clock.advance(60)
    sched.schedule_once()                                               # urgent-2 waits for train: said again
    assert [m.split(" (")[0] for m in said(caplog)] == ["pod default/train", "pod default/train"]
