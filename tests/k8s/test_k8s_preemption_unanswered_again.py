"""A victim whose eviction keeps getting no answer (every try times out) while reads of it keep working and find it
running: the node is given back after `UNANSWERED_ASKS` such evictions, and the pod does not preempt that victim
there again for `reserve_s`. Before, the hold, not renewed (nothing left the node), ran out, and the pod preempted
afresh there at once (a new `since`: its hour never reached), asking the eviction again unanswered: the node was
held for it pass after pass, for ever, and a pod fitting beside the victim never bound there. Against the fake API
server."""

from __future__ import annotations

from fakeapi import FakeKube, node
from test_k8s_preemption import bound, events, most_free, pending, reservations
from test_k8s_preemption_grace import terminating
from test_k8s_preemption_unanswered import unanswered

from balancer.actuate.k8s_preempt import UNANSWERED_ASKS
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import rfc3339


def placed(kube: FakeKube, name: str) -> str | None:
    pod = kube.get("pods", name, "default")
    return pod and pod["spec"].get("nodeName")


def fits_beside(kube: FakeKube, api, clock) -> SecondaryScheduler:
    """a: p (4 of its 8 GPUs); urgent asks all 8 (p its only victim), fits asks 4 (fits beside p)."""
    kube.add(node("a", 8))
    kube.add(bound("p", "a", 4, 1))
    kube.add(pending("urgent", 8, 50))
    kube.add(pending("fits", 4, 10))
    return SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None)


def test_a_victim_whose_evictions_keep_getting_no_answer_has_its_node_given_back(kube: FakeKube, api, clock):
    sched = fits_beside(kube, api, clock)
    tries = unanswered(sched, "p", lambda: None)                       # p runs on: no eviction lands
    for _ in range(UNANSWERED_ASKS):
        sched.schedule_once()
        assert "default/urgent" in reservations(kube, "a") and placed(kube, "fits") is None
        clock.advance(5)
    assert len(tries) == 4 * UNANSWERED_ASKS                           # each eviction: a try and 3 retries
    sched.schedule_once()
    assert len(tries) == 4 * UNANSWERED_ASKS                           # not asked again
    assert reservations(kube, "a") == {} and placed(kube, "fits") == "a"   # given back: used in the same pass
    assert kube.get("pods", "urgent", "default")["status"].get("nominatedNodeName") is None
    assert (f"preemption: evicting default/p got no answer {UNANSWERED_ASKS} times while it kept running on a: not "
            "asked again; the node is given back and it plans afresh at the next pass.") in \
        sched.reasons["default/urgent"]
    assert sched.preempted == [] and events(kube, "p") == []

    for _ in range(10):                                                # p passed over: fits is not evicted for it
        clock.advance(5)
        sched.schedule_once()
        assert reservations(kube, "a") == {} and placed(kube, "fits") == "a"
    assert len(tries) == 4 * UNANSWERED_ASKS

    clock.advance(300)                                                 # reserve_s later it may preempt p again
    sched.schedule_once()
    assert "default/urgent" in reservations(kube, "a") and len(tries) == 4 * UNANSWERED_ASKS + 4


def test_an_answered_refusal_does_not_begin_the_count_again(kube: FakeKube, api, clock):
    """An eviction answered (refused, 429: its budget, or throttling) between unanswered ones: the API server is
    there, but its refusal says nothing of whether the unanswered ones landed (each was found not landed), so the
    node is given back after `UNANSWERED_ASKS` unanswered evictions in all for the preemption, refusals between
    them or not. Before, an answer began the count again: passes minutes apart, each unanswered eviction renewing
    the hold, it was held up to the hour's cap (`test_k8s_preemption_unanswered_refused`)."""
    kube.add(node("a", 4))
    kube.add(bound("p", "a", 4, 1))
    kube.add(pending("urgent", 4, 50))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None)
    real = sched.api.core.create_namespaced_pod_eviction
    tries = unanswered(sched, "p", lambda: None)
    timing_out = sched.api.core.create_namespaced_pod_eviction
    for k in range(UNANSWERED_ASKS + 1):                               # one refused among them
        sched.api.core.create_namespaced_pod_eviction = real if k == UNANSWERED_ASKS - 1 else timing_out
        if k == UNANSWERED_ASKS - 1:
            kube.inject("POST", r"/pods/p/eviction$", 429)
        sched.schedule_once()
        assert "default/urgent" in reservations(kube, "a"), k
        clock.advance(5)
    assert len(tries) == 4 * UNANSWERED_ASKS
    sched.schedule_once()
    assert reservations(kube, "a") == {} and len(tries) == 4 * UNANSWERED_ASKS   # not asked again: given back
    assert "not asked again; the node is given back" in sched.reasons["default/urgent"]


def test_a_node_is_kept_while_another_victim_terminates_and_given_back_then(kube: FakeKube, api, clock):
    """low-1 evicted (terminating, 30 min), p's evictions unanswered while it runs on: p is not asked again, the node
    stays held while low-1 terminates (its room is the pod's), and is given back once low-1 is gone. Said so, not
    "evicting p failed (...): a stays held, and p is evicted at the next pass"."""
    kube.add(node("a", 8))
    kube.add(bound("low-1", "a", 4, 2))
    kube.add(bound("p", "a", 4, 1))
    kube.add(pending("urgent", 8, 50))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None)
    tries = unanswered(sched, "p", lambda: None)
    sched.schedule_once()
    assert sched.preempted == [("default/low-1", "a")]
    terminating(kube, "low-1", "a", 4, 2, clock.now + 1800)           # the fake deletes at once; a kubelet waits
    for _ in range(UNANSWERED_ASKS):
        clock.advance(5)
        sched.schedule_once()
        assert reservations(kube, "a")["default/urgent"]["evicted"] == ["default/low-1"]
    assert len(tries) == 4 * UNANSWERED_ASKS
    said = sched.reasons["default/urgent"]
    assert said.endswith(f"; evicting default/p got no answer {UNANSWERED_ASKS} times while it kept running on a: "
                         "not asked again: a stays held, then it is given back.")
    assert "evicted at the next pass" not in said

    kube.delete("pods", "low-1", "default")
    clock.advance(5)
    sched.schedule_once()
    assert reservations(kube, "a") == {} and len(tries) == 4 * UNANSWERED_ASKS
    assert "the node is given back and it plans afresh at the next pass." in sched.reasons["default/urgent"]


def test_passes_minutes_apart_give_the_node_back_too(kube: FakeKube, api, clock):
    """Passes 2 min apart (`--interval 2m`, no watch event between them; or slow asks): each eviction that gets no
    answer renews the hold as it waits for its verdict, so the count is not forgotten with a hold that ran out, and
    the node is given back at the 4th pass. Before, nothing leaving renewed nothing: the hold ran out after
    `reserve_s`, its count with it, before the 4th pass, and the pod preempted afresh, asking p again unanswered
    pass after pass (48 tries in 12 passes), the node never given back. The hold lasts no longer than that: `reserve_s`
    after the last unanswered eviction (the 3rd), and the victim is not asked again."""
    kube.add(node("a", 8))
    kube.add(bound("p", "a", 4, 1))
    kube.add(pending("urgent", 8, 50))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None)
    tries = unanswered(sched, "p", lambda: None)
    for k in range(UNANSWERED_ASKS):
        sched.schedule_once()
        assert reservations(kube, "a")["default/urgent"]["expires"] == rfc3339(clock.now + 300), k
        clock.advance(120)
    sched.schedule_once()
    assert reservations(kube, "a") == {} and len(tries) == 4 * UNANSWERED_ASKS
    assert "not asked again; the node is given back" in sched.reasons["default/urgent"]
    for _ in range(2):                                                 # passed over for reserve_s: not asked
        clock.advance(120)
        sched.schedule_once()
    assert len(tries) == 4 * UNANSWERED_ASKS


def test_a_victim_made_again_under_its_name_starts_its_own_count(kube: FakeKube, api, clock):
    """p's evictions got no answer twice while it ran on; its owner then deletes it and makes it again under its name
    on the node (a StatefulSet's: another uid). The new pod's evictions are counted from its first: it is asked
    `UNANSWERED_ASKS` times, as any victim, before the node is given back. Before, the count was kept by name: the
    new pod inherited the old one's two and was given up on after one unanswered eviction."""
    kube.add(node("a", 8))
    kube.add(bound("p", "a", 4, 1))
    kube.add(pending("urgent", 8, 50))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None)
    tries = unanswered(sched, "p", lambda: None)
    for _ in range(UNANSWERED_ASKS - 1):
        sched.schedule_once()
        clock.advance(5)
    kube.delete("pods", "p", "default")
    kube.add(bound("p", "a", 4, 1))                                    # a new uid
    for k in range(UNANSWERED_ASKS):
        sched.schedule_once()
        assert "default/urgent" in reservations(kube, "a"), k
        clock.advance(5)
    assert len(tries) == 4 * (2 * UNANSWERED_ASKS - 1)
    sched.schedule_once()
    assert reservations(kube, "a") == {} and len(tries) == 4 * (2 * UNANSWERED_ASKS - 1)
