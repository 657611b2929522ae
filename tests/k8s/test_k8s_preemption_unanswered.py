"""An eviction a preemption asked that got no answer (every try timed out) may have landed: the victim stays left to
evict on the reservation, and the next pass, finding it terminating or gone, counts it as evicted by this replica
(`preempted`, gputide_scheduler_preempted_pods_total) with its Event `Preempted`. It was neither: the pass took it for
one terminating already (another leader's eviction, or its owner's deletion) or dropped it gone, so the scheduler
counted fewer pods than it evicted. A victim it never asked to evict (its owner deleting it), or asked in an earlier
term (another leader may have evicted it since, and counted it), is still not counted; nor is one that finished on
its own or one made again under its name. One found running and asked again in vain (429) stays in doubt: found
terminating or gone later, it is counted, its owner's deletion not told from the earlier eviction landing late. A
retry answered 404 or 409 after a try that got no answer is what a landed try leaves: that victim is judged the same
way, while a first try answered 404 or 409 (no try unanswered) is not. A victim that cannot be read stays left for the
next pass, and an unanswered eviction spends its budget's disruption. Against the fake API server."""

from __future__ import annotations

import functools

import pytest
import urllib3
from fakeapi import FakeKube, node, pdb
from test_k8s_preemption import bound, events, most_free, pending, reservations
from test_k8s_preemption_emergency_stop import Switch

from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import rfc3339


def three_victims(kube: FakeKube) -> None:
    """a: low-1, low-2, low-3 (evicted in that order: the most important first); the urgent pod needs all of it."""
    kube.add(node("a", 12))
    for i in (1, 2, 3):
        kube.add(bound(f"low-{i}", "a", 4, 4 - i))
    kube.add(pending("urgent", 12, 50))


def terminate(kube: FakeKube, clock, name: str, reason: str | None = None, status: str = "True") -> None:
    """`name` deleted (its grace period running), marked `DisruptionTarget` `reason` (None: unmarked), of `status`
    ("False": a mark cleared, its disruption not carried out)."""
    patch: dict = {"metadata": {"deletionTimestamp": rfc3339(clock.now + 30)}}
    if reason is not None:
        patch["status"] = {"conditions": [{"type": "DisruptionTarget", "status": status, "reason": reason,
                                           "message": "deleting"}]}
    kube.mutate("pods", name, "default", patch)


def unanswered(sched: SecondaryScheduler, victim: str, landed) -> list[bool]:
    """Every try of the eviction of `victim` times out reading the answer; the first was carried out (`landed()`:
    what the API server did). Returns the tries, as they come."""
    real, tries = sched.api.core.create_namespaced_pod_eviction, []

    @functools.wraps(real)   # keeps its name: the gateway knows a write by it
    def evict(*args, **kwargs):
        if args[0] != victim:
            return real(*args, **kwargs)
        tries.append(True)
        if len(tries) == 1:
            landed()
        raise urllib3.exceptions.ReadTimeoutError(None, "/", "Read timed out. (read timeout=10.0)")

    sched.api.core.create_namespaced_pod_eviction = evict
    return tries


def first_pass(kube: FakeKube, api, clock, landed, **kwargs) -> tuple[SecondaryScheduler, list[bool]]:
    """low-1 evicted; low-2's eviction carried out (`landed`) but unanswered: low-2 and low-3 left to evict. The
    scheduler, and the tries of low-2's eviction."""
    three_victims(kube)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None, **kwargs)
    tries = unanswered(sched, "low-2", landed)
    assert sched.schedule_once() == {"default/urgent": None}
    assert len(tries) == 4                                             # the first try and 3 retries
    assert sched.preempted == [("default/low-1", "a")]
    assert reservations(kube, "a")["default/urgent"]["victims"] == ["default/low-2", "default/low-3"]
    return sched, tries


def test_a_victim_terminating_after_an_unanswered_eviction_is_counted_as_evicted(kube: FakeKube, api, clock):
    sched, tries = first_pass(kube, api, clock, lambda: terminate(kube, clock, "low-2"))
    assert events(kube, "low-2") == []                                 # no answer: not said yet
    kube.inject("POST", r"/pods/low-3/eviction$", 429)                 # refused: left for the next pass
    clock.advance(5)
    assert sched.schedule_once() == {"default/urgent": None}
    assert sched.preempted == [("default/low-2", "a")]                 # its eviction landed: this replica's
    assert events(kube, "low-2") == [("Preempted", "Preempted by default/urgent on node a")]
    assert len(tries) == 4                                             # not evicted again
    assert "evicted default/low-2 on a" in sched.reasons["default/urgent"]
    held = reservations(kube, "a")["default/urgent"]
    assert held["victims"] == ["default/low-3"] and held["evicted"] == ["default/low-2"]   # waited for

    terminate(kube, clock, "low-3")                                    # its owner deletes it
    clock.advance(5)
    sched.schedule_once()
    assert sched.preempted == []                                       # low-2 counted once; low-3 never evicted
    assert events(kube, "low-3") == [] and len(kube.calls("POST", r"/pods/low-3/eviction$")) == 1
    held = reservations(kube, "a")["default/urgent"]
    assert "victims" not in held and held["evicted"] == ["default/low-2", "default/low-3"]


@pytest.mark.parametrize("when", ["before the pass", "as the pass reads it"])
def test_a_victim_gone_after_an_unanswered_eviction_is_counted_as_evicted(kube: FakeKube, api, clock, when):
    sched, _ = first_pass(kube, api, clock, lambda: terminate(kube, clock, "low-2"))
    kube.inject("POST", r"/pods/low-3/eviction$", 429)
    clock.advance(5)
    if when == "before the pass":
        kube.delete("pods", "low-2", "default")
    else:   # the pass's list still shows it
        kube.before("GET", r"/namespaces/default/pods/low-2$", lambda: kube.delete("pods", "low-2", "default"))
    assert sched.schedule_once() == {"default/urgent": None}
    assert sched.preempted == [("default/low-2", "a")]
    assert events(kube, "low-2") == [("Preempted", "Preempted by default/urgent on node a")]
    assert "evicted default/low-2 on a" in sched.reasons["default/urgent"]
    held = reservations(kube, "a")["default/urgent"]
    assert held["victims"] == ["default/low-3"] and "default/low-2" not in held.get("evicted", [])   # none to wait for


def test_an_unanswered_eviction_of_an_earlier_term_is_not_counted(kube: FakeKube, api, clock):
    """The Lease lost and taken back after low-2's unanswered eviction: low-2 found terminating may be another
    leader's eviction (counted by it), so it is not counted; low-3's, unanswered in this term, is."""
    term = [1]
    sched, _ = first_pass(kube, api, clock, lambda: terminate(kube, clock, "low-2"), term=lambda: term[0])
    term[0] = 2
    unanswered(sched, "low-3", lambda: terminate(kube, clock, "low-3"))
    clock.advance(5)
    sched.schedule_once()
    assert sched.preempted == [] and events(kube, "low-2") == []
    assert reservations(kube, "a")["default/urgent"]["victims"] == ["default/low-3"]

    clock.advance(5)
    sched.schedule_once()
    assert sched.preempted == [("default/low-3", "a")]
    assert events(kube, "low-3") == [("Preempted", "Preempted by default/urgent on node a")]


@pytest.mark.parametrize("ends", ["the pod deleted", "the hold expired"])
def test_the_unanswered_evictions_of_a_preemption_that_ended_are_forgotten(kube: FakeKube, api, clock, ends):
    """What the replica remembers of its unanswered evictions is bounded: once the preemption ends unresolved (its
    pod gone, its hold given back or expired), it is dropped, not kept for the scheduler's lifetime."""
    sched, _ = first_pass(kube, api, clock, lambda: None)              # not carried out: low-2 runs on
    assert set(sched.holds.preemptor._unsure) == {("default/urgent", "a")}
    kube.add(pending("later", 1, 0))                                   # a pass reads the nodes while a pod waits
    if ends == "the pod deleted":
        kube.delete("pods", "urgent", "default")
    else:
        kube.mutate("pods", "urgent", "default", {"spec": {"preemptionPolicy": "Never"}})   # waits, preempts no more
        clock.advance(sched.holds.preemptor.reserve_s + 1)
    sched.schedule_once()
    assert sched.holds.preemptor._unsure == {}


def test_a_victim_finished_on_its_own_after_an_unanswered_eviction_is_not_counted(kube: FakeKube, api, clock):
    """low-2's unanswered eviction did not land, and its Job pod then finished on its own (Succeeded: no longer among
    the pods the pass lists bound, yet not gone): no eviction of this replica's made it leave, so it is neither
    counted nor said preempted, nor evicted again."""
    sched, tries = first_pass(kube, api, clock, lambda: None)          # not carried out: low-2 runs on
    kube.mutate("pods", "low-2", "default", {"status": {"phase": "Succeeded"}})
    kube.inject("POST", r"/pods/low-3/eviction$", 429)
    clock.advance(5)
    assert sched.schedule_once() == {"default/urgent": None}
    assert sched.preempted == [] and events(kube, "low-2") == [] and len(tries) == 4
    assert reservations(kube, "a")["default/urgent"]["victims"] == ["default/low-3"]
    assert sched.holds.preemptor._unsure == {}                         # resolved: it did not land


def test_a_pod_made_again_under_the_victims_name_and_terminating_is_not_counted(kube: FakeKube, api, clock):
    """low-2's unanswered eviction did not land; its owner deleted it and made it again under its name on the same
    node (a StatefulSet's), and the new pod (another uid) is terminating: that eviction did not touch it, so it is
    not counted (waited for all the same, as one terminating already)."""
    sched, _ = first_pass(kube, api, clock, lambda: None)
    kube.delete("pods", "low-2", "default")
    kube.add(bound("low-2", "a", 4, 2))                                # a new uid
    terminate(kube, clock, "low-2")
    kube.inject("POST", r"/pods/low-3/eviction$", 429)
    clock.advance(5)
    assert sched.schedule_once() == {"default/urgent": None}
    assert sched.preempted == [] and events(kube, "low-2") == []
    held = reservations(kube, "a")["default/urgent"]
    assert held["victims"] == ["default/low-3"] and held["evicted"] == ["default/low-2"]


@pytest.mark.parametrize("deleted", ["terminating", "gone"])
def test_a_victim_refused_again_after_an_unanswered_eviction_then_leaving_is_counted(
        kube: FakeKube, api, clock, deleted):
    """low-2 found still running after its unanswered eviction: that eviction has not landed yet, but it may still
    be in flight at the API server, so the doubt is kept. Evicted again, it is refused (429, a budget); low-2 then
    leaves (terminating, or gone): the earlier eviction may have landed, so it is counted with its Event (its owner
    deleting it meanwhile cannot be told from that), as is low-3, evicted then. It was not: the doubt was dropped at
    the read, and an eviction landing late went uncounted (test_k8s_preemption_unanswered_own_inflight.py)."""
    sched, tries = first_pass(kube, api, clock, lambda: None)
    del sched.api.core.create_namespaced_pod_eviction                  # the client's own again: answered
    kube.inject("POST", r"/pods/low-2/eviction$", 429)
    clock.advance(5)
    sched.schedule_once()
    assert sched.preempted == [] and len(kube.calls("POST", r"/pods/low-2/eviction$")) == 1
    assert reservations(kube, "a")["default/urgent"]["victims"] == ["default/low-2", "default/low-3"]

    if deleted == "terminating":
        terminate(kube, clock, "low-2")
    else:
        kube.delete("pods", "low-2", "default")
    clock.advance(5)
    sched.schedule_once()
    assert sorted(sched.preempted) == [("default/low-2", "a"), ("default/low-3", "a")]
    assert events(kube, "low-2") == [("Preempted", "Preempted by default/urgent on node a")]


def answer_lost(sched: SecondaryScheduler, victim: str, landed) -> None:
    """The first try of the eviction of `victim` is carried out (`landed()`: what the API server did) and times out
    reading the answer; the retries reach the API server."""
    real, tries = sched.api.core.create_namespaced_pod_eviction, []

    @functools.wraps(real)
    def evict(*args, **kwargs):
        if args[0] != victim or tries:
            return real(*args, **kwargs)
        tries.append(True)
        landed()
        raise urllib3.exceptions.ReadTimeoutError(None, "/", "Read timed out. (read timeout=10.0)")

    sched.api.core.create_namespaced_pod_eviction = evict


def test_a_retry_answered_404_after_an_unanswered_try_counts_the_victim_as_evicted(kube: FakeKube, api, clock):
    """low-2's first try landed (the pod gone at once) unanswered; the retry finds no pod (404): the eviction was
    this replica's, counted and said, with nothing to wait for."""
    three_victims(kube)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None)
    answer_lost(sched, "low-2", lambda: kube.delete("pods", "low-2", "default"))
    assert sched.schedule_once() == {"default/urgent": None}
    assert sched.preempted == [("default/low-1", "a"), ("default/low-2", "a"), ("default/low-3", "a")]
    assert events(kube, "low-2") == [("Preempted", "Preempted by default/urgent on node a")]
    assert len(kube.calls("POST", r"/pods/low-2/eviction$")) == 1      # the retry
    assert "default/low-2" not in reservations(kube, "a")["default/urgent"].get("evicted", [])


def test_a_retry_answered_409_after_an_unanswered_try_leaves_it_to_the_next_pass(kube: FakeKube, api, clock):
    """low-2's first try landed (the pod terminating) unanswered; the retry is refused (409): the next pass, finding
    low-2 terminating, counts it as this replica's eviction."""
    three_victims(kube)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None)
    answer_lost(sched, "low-2", lambda: terminate(kube, clock, "low-2"))
    kube.inject("POST", r"/pods/low-2/eviction$", 409)
    sched.schedule_once()
    assert sched.preempted == [("default/low-1", "a")] and events(kube, "low-2") == []
    assert reservations(kube, "a")["default/urgent"]["victims"] == ["default/low-2", "default/low-3"]
    clock.advance(5)
    sched.schedule_once()
    assert sched.preempted == [("default/low-2", "a"), ("default/low-3", "a")]
    assert events(kube, "low-2") == [("Preempted", "Preempted by default/urgent on node a")]


@pytest.mark.parametrize("status", [404, 409])
def test_a_first_try_refused_404_or_409_is_no_unanswered_eviction(kube: FakeKube, api, clock, status):
    """low-2's owner deletes it between its read and its eviction, whose first try is answered: 404 (gone), or 409
    (its uid no longer the one read; refused). No try went unanswered, so none of this replica's evictions can have
    landed: low-2 is not remembered, nor ever counted or said preempted."""
    three_victims(kube)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None)
    kube.before("POST", r"/pods/low-2/eviction$", lambda: kube.delete("pods", "low-2", "default"))
    if status == 409:
        kube.inject("POST", r"/pods/low-2/eviction$", status)
    sched.schedule_once()
    assert ("default/low-2", "a") not in sched.preempted and events(kube, "low-2") == []
    assert sched.holds.preemptor._unsure == {}
    clock.advance(5)
    sched.schedule_once()
    assert ("default/low-2", "a") not in sched.preempted and events(kube, "low-2") == []


def test_a_read_that_fails_leaves_an_unanswered_victim_to_the_next_pass(kube: FakeKube, api, clock):
    """low-2's unanswered eviction landed (the pod gone at once); the next pass cannot read it (500, every try): the
    doubt is left to the pass after, which finds it gone and counts it. It was forgotten, or dropped from the victims
    left (not read again): an eviction of this replica's never counted."""
    sched, tries = first_pass(kube, api, clock, lambda: kube.delete("pods", "low-2", "default"))
    kube.inject("POST", r"/pods/low-3/eviction$", 429)                 # room not made yet: the pod is not bound
    kube.inject("GET", r"/namespaces/default/pods/low-2$", 500, count=4)   # the read and its 3 retries
    clock.advance(5)
    sched.schedule_once()
    assert sched.preempted == [] and events(kube, "low-2") == []
    assert reservations(kube, "a")["default/urgent"]["victims"] == ["default/low-3", "default/low-2"]
    # low-2 is not running: it is read again (whether its eviction landed), not evicted
    assert ": a stays held, and default/low-3 is evicted and default/low-2 is read again at the next pass." in \
        sched.reasons["default/urgent"]
    clock.advance(5)
    sched.schedule_once()
    assert sched.preempted == [("default/low-3", "a"), ("default/low-2", "a")] and len(tries) == 4
    assert events(kube, "low-2") == [("Preempted", "Preempted by default/urgent on node a")]
    assert sched.holds.preemptor._unsure == {}


def test_a_running_victim_whose_read_fails_after_an_unanswered_eviction_is_said_read_again(kube: FakeKube, api,
                                                                                           clock):
    """low-2's unanswered eviction did not land (it runs on); the next pass cannot read it (500, every try), so it
    keeps its doubt, and the pass after reads it first. Said so: the read failed, low-2 is read again and low-3
    evicted at the next pass. It was said "evicting default/low-2 failed (pod default/low-2: HTTP 500 ...): ...
    default/low-2, default/low-3 are evicted at the next pass"; with low-2 marked unread alone, "evicting
    default/low-3 failed (<low-2's read error>)", low-3 never tried; with `Evictions.unanswered` any victim still in
    doubt (`_unsure`) rather than one whose eviction was asked now, "evicting default/low-2 got no answer"."""
    sched, tries = first_pass(kube, api, clock, lambda: None)
    kube.inject("GET", r"/namespaces/default/pods/low-2$", 500, count=4)   # the read and its 3 retries
    clock.advance(5)
    sched.schedule_once()
    said = sched.reasons["default/urgent"]
    assert "; cannot read default/low-2 to tell whether its unanswered eviction landed: " in said
    assert said.endswith(": a stays held, and default/low-3 is evicted and default/low-2 is read again at the next "
                         "pass.")
    assert "no answer (" not in said and "evicting default/low-3" not in said and "evicting default/low-2" not in said
    assert reservations(kube, "a")["default/urgent"]["victims"] == ["default/low-2", "default/low-3"]
    assert set(sched.holds.preemptor._unsure.get(("default/urgent", "a"), {})) == {"default/low-2"}   # kept
    assert len(tries) == 4 and not kube.calls("POST", r"/pods/low-3/eviction$")
    clock.advance(5)
    sched.schedule_once()                                              # read: running, its eviction asked again
    assert len(tries) == 8 and sched.preempted == []


def test_an_unanswered_eviction_spends_its_budget_for_the_next_preemption(kube: FakeKube, api, clock):
    """p's eviction got no answer, yet landed: the budget covering it (one disruption) is spent. The next preemption
    of the pass, on the budgets as listed, must not count on that disruption: it evicted nothing, yet it tried q2
    (refused, 429) and gave the node back. Spent where it may not have landed, the budget is counted short until it is
    listed again (`budgets_ttl_s`): a preemption put off, rather than one begun on a disruption already used."""
    kube.add(pdb("batch", "default", {"tier": "batch"}, 1))
    kube.add(node("a", 4))
    kube.add(bound("p", "a", 4, 1, labels={"tier": "batch"}))
    kube.add(node("b", 8))
    kube.add(bound("q1", "b", 4, 2))
    kube.add(bound("q2", "b", 4, 1, labels={"tier": "batch"}))
    kube.add(pending("urgent-1", 4, 50))                                   # evicts p on a: no answer
    kube.add(pending("urgent-2", 8, 40))                                   # would need q1 and q2
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None)
    unanswered(sched, "p", lambda: (terminate(kube, clock, "p"), kube.mutate(
        "poddisruptionbudgets", "batch", "default", {"status": {"disruptionsAllowed": 0}})))
    sched.schedule_once()
    assert kube.get("pods", "q1", "default") is not None and kube.get("pods", "q2", "default") is not None
    assert not kube.calls("POST", r"/q2/eviction$")                        # not even tried


@pytest.mark.parametrize("retry", [None, 409])
def test_a_first_victims_unanswered_eviction_keeps_the_node_held_for_the_next_pass(kube: FakeKube, api, clock, retry):
    """p, the only victim, is evicted (terminating) but every try goes unanswered (or a retry is refused 409, what the
    landed try leaves): nothing is known evicted, yet the eviction may have landed. The node stays held, p left on
    the reservation, and the next pass counts it. Given back, the doubt was forgotten with the hold: p's eviction
    never counted, nor said, and the pass said there was nothing to preempt."""
    kube.add(node("a", 4))
    kube.add(bound("p", "a", 4, 1))
    kube.add(pending("urgent", 4, 50))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None)
    if retry is None:
        unanswered(sched, "p", lambda: terminate(kube, clock, "p"))
    else:
        answer_lost(sched, "p", lambda: terminate(kube, clock, "p"))
        kube.inject("POST", r"/pods/p/eviction$", retry)
    sched.schedule_once()
    assert sched.preempted == [] and events(kube, "p") == []
    assert reservations(kube, "a")["default/urgent"]["victims"] == ["default/p"]
    said = sched.reasons["default/urgent"]
    assert "preemption: no pod evicted on a, the eviction of default/p sent, no answer yet: a held for it until " \
        in said and "nothing to preempt" not in said
    # what the next pass does, said once: it reads p (counted if the eviction landed), not "evicted at the next pass"
    assert "; evicting default/p got no answer (evict pod default/p: " in said
    assert said.endswith("): a stays held, and default/p is read again at the next pass.")
    assert "evicted at the next pass" not in said and "judged" not in said
    clock.advance(5)
    sched.schedule_once()
    assert sched.preempted == [("default/p", "a")]
    assert events(kube, "p") == [("Preempted", "Preempted by default/urgent on node a")]


def test_a_victim_gone_after_an_unanswered_eviction_then_a_refusal_keeps_it_counted(kube: FakeKube, api, clock):
    """low-1's first try landed (the pod gone at once) unanswered, its retry finds no pod (404): evicted, its Event
    `Preempted` posted. low-2 is then refused (429): the node stays held for the victims left, and low-1 is counted
    (`preempted`). Given back (low-1 gone, so nothing was leaving), its Event was posted with no count."""
    three_victims(kube)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None)
    answer_lost(sched, "low-1", lambda: kube.delete("pods", "low-1", "default"))
    kube.inject("POST", r"/pods/low-2/eviction$", 429)
    sched.schedule_once()
    assert events(kube, "low-1") == [("Preempted", "Preempted by default/urgent on node a")]
    assert sched.preempted == [("default/low-1", "a")]
    assert reservations(kube, "a")["default/urgent"]["victims"] == ["default/low-2", "default/low-3"]


def test_a_victim_that_only_cannot_be_read_is_said_read_again(kube: FakeKube, api, clock):
    """low-2's unanswered eviction landed (gone); low-3 is evicted at the next pass, while low-2 cannot be read: the
    pass says the read failed and that low-2 is read again, not "evicting low-2 failed ... evicted at the next
    pass" (no eviction of it is to come)."""
    sched, tries = first_pass(kube, api, clock, lambda: kube.delete("pods", "low-2", "default"))
    kube.inject("GET", r"/namespaces/default/pods/low-2$", 500, count=4)   # the read and its 3 retries
    clock.advance(5)
    sched.schedule_once()
    said = sched.reasons["default/urgent"]
    assert "; cannot read default/low-2 to tell whether its unanswered eviction landed: " in said
    assert ": a stays held while the evicted pods terminate, and default/low-2 is read again at the next pass." in said
    assert "evicting default/low-2" not in said


def test_an_unanswered_eviction_is_judged_while_an_emergency_stop_holds(kube: FakeKube, api, clock):
    """p's eviction got no answer and landed (p terminating, 30 min); then the emergency stop is set. The next pass
    reads p all the same (a read evicts nothing) and counts it, the node held while it terminates. Left unread under
    the stop, the hold ran out unrenewed, its doubt forgotten with it: p's eviction, landed and its budget's
    disruption spent, was never counted, nor said. A victim found running is not evicted under the stop."""
    kube.add(node("a", 4))
    kube.add(bound("p", "a", 4, 1))
    kube.add(pending("urgent", 4, 50))
    stop = Switch()
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None, emergency_stop=stop)
    tries = unanswered(sched, "p", lambda: kube.mutate("pods", "p", "default", {"metadata": {
        "deletionTimestamp": rfc3339(clock.now + 1800)}}))
    sched.schedule_once()
    assert sched.preempted == [] and len(tries) == 4
    stop.state = "the controller's emergency stop"
    clock.advance(5)
    sched.schedule_once()
    assert sched.preempted == [("default/p", "a")]
    assert events(kube, "p") == [("Preempted", "Preempted by default/urgent on node a")]
    held = reservations(kube, "a")["default/urgent"]
    assert held["evicted"] == ["default/p"] and "victims" not in held
    assert held["expires"] >= rfc3339(clock.now + 1800) and len(tries) == 4     # held while it terminates


def test_an_unanswered_eviction_found_not_landed_is_not_asked_again_under_a_stop(kube: FakeKube, api, clock):
    """p's eviction got no answer and did not land (p runs on); the emergency stop is then set: p is read (running:
    its doubt kept, the eviction may still land), but not evicted again while the stop holds, and not said to have
    got no answer nor to be unread."""
    kube.add(node("a", 4))
    kube.add(bound("p", "a", 4, 1))
    kube.add(pending("urgent", 4, 50))
    stop = Switch()
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None, emergency_stop=stop)
    tries = unanswered(sched, "p", lambda: None)
    sched.schedule_once()
    stop.state = "the controller's emergency stop"
    clock.advance(5)
    sched.schedule_once()
    assert len(tries) == 4 and sched.preempted == [] and kube.get("pods", "p", "default") is not None
    said = sched.reasons["default/urgent"]
    assert "evicting default/p failed (evicting no more for default/urgent: the controller's emergency stop)" in said
    assert "no answer" not in said
    assert reservations(kube, "a")["default/urgent"]["victims"] == ["default/p"]


@pytest.mark.parametrize("then", ["the pod is bound there", "the pod is deleted"])
def test_a_victim_gone_before_any_pass_read_it_is_counted_as_its_hold_is_released(kube: FakeKube, api, clock, then):
    """p's eviction got no answer, landed, and p was gone before the next pass: that pass binds the pod on the room
    p left (or the pod was deleted, and its hold is given back), and releasing the hold reads p first: gone, it is
    counted, with its Event `Preempted`, as a pass finding it gone counts it. Before, `release` forgot the doubt
    unread, and p's eviction was never counted."""
    kube.add(node("a", 4))
    kube.add(bound("p", "a", 4, 1))
    kube.add(pending("urgent", 4, 50))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None)
    unanswered(sched, "p", lambda: kube.delete("pods", "p", "default"))
    sched.schedule_once()
    assert sched.preempted == [] and events(kube, "p") == []
    if then == "the pod is deleted":
        kube.delete("pods", "urgent", "default")
        kube.add(pending("other", 8, 5))                                   # a pass that reads the nodes (fits none)
    clock.advance(5)
    assert sched.schedule_once() == ({"default/urgent": "a"} if then == "the pod is bound there" else
                                     {"default/other": None})
    assert sched.preempted == [("default/p", "a")]
    assert events(kube, "p") == [("Preempted", "Preempted by default/urgent on node a")]
    assert reservations(kube, "a") == {}
