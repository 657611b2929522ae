"""A node held for a pod (its preemption's victims terminating, or it starves) is given back as soon as the pod no
longer waits for this scheduler: deleted, bound by someone else, finished. It stayed held for no one until the
reservation expired (5 minutes), while the pods that could have used the room waited. A Migrate's reservation,
keyed by a workload whose replacement pod does not exist yet, is never taken for such a hold."""

from __future__ import annotations

import json

from fakeapi import FakeKube, node
from test_k8s_preemption import bound, full, most_free, pending, reservations  # noqa: F401  (fixture)

from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import RESERVATION_ANNOTATION, rfc3339


def preempted_for_urgent(kube: FakeKube, api, clock) -> SecondaryScheduler:
    kube.add(pending("urgent", 4, 50))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert sched.preempted == [("default/low-1", "a")] and set(reservations(kube, "a")) == {"default/urgent"}
    return sched


def test_a_preemptor_deleted_while_its_victims_terminate_gives_the_node_back(full, api, clock):  # noqa: F811
    sched = preempted_for_urgent(full, api, clock)
    migration = {"pod": "default/web-1", "gpus": [0], "count": 1, "expires": rfc3339(clock.now + 300)}
    full.add(node("c", 1))   # a Migrate's reservation for a Deployment's replacement pod: not a hold of ours
    full.mutate("nodes", "c", "", {"metadata": {"annotations": {RESERVATION_ANNOTATION: json.dumps(
        {"default/web": migration})}}})
    full.delete("pods", "urgent", "default")
    full.add(pending("filler", 4, 0))
    clock.advance(5)
    assert sched.schedule_once() == {"default/filler": "a"}              # the room is no longer held for no one
    assert reservations(full, "a") == {}
    assert set(reservations(full, "c")) == {"default/web"}


def test_a_preemptor_bound_elsewhere_gives_the_node_back_even_to_another_replica(full, api, clock):  # noqa: F811
    preempted_for_urgent(full, api, clock)
    full.add(node("c", 4))
    full.mutate("pods", "urgent", "default", {"spec": {"nodeName": "c"}})   # bound by someone else
    full.add(pending("filler", 4, 0))
    other = SecondaryScheduler(api, "gputide", most_free, clock=clock)   # a new leader, which did not preempt
    assert other.schedule_once() == {"default/filler": "a"}
    assert reservations(full, "a") == {}


def test_a_preemptor_whose_binding_finds_it_bound_by_someone_else_frees_its_node_in_the_same_pass(
        full, api, clock):  # noqa: F811
    preempted_for_urgent(full, api, clock)
    full.add(node("c", 4))
    full.add(bound("busy", "c", 2, 100))                                 # filler does not fit c
    full.add(pending("filler", 4, 0))
    # between the pass's reads and urgent's binding (to the node it holds), someone else binds it to c: a 409
    full.before("POST", r"/pods/urgent/binding$", lambda: full.mutate(
        "pods", "urgent", "default", {"spec": {"nodeName": "c"}}))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/filler": "a"}              # urgent is left out: not ours to place
    assert reservations(full, "a") == {}


def test_a_preemptor_still_pending_keeps_its_node(full, api, clock):  # noqa: F811
    sched = preempted_for_urgent(full, api, clock)
    full.add(bound("low-1", "a", 4, 1))                                  # as if the victim were still terminating
    full.add(pending("filler", 4, 0))
    assert sched.schedule_once() == {"default/urgent": None, "default/filler": None}
    assert set(reservations(full, "a")) == {"default/urgent"}


def test_a_replica_that_lost_the_lease_gives_back_nothing(full, api, clock):  # noqa: F811
    """The holds are the leader's to give back: a pass that lost the Lease during its reads writes none."""
    preempted_for_urgent(full, api, clock)
    full.delete("pods", "urgent", "default")
    full.add(pending("filler", 4, 0))
    lease = {"held": True}
    full.before("GET", r"/pods\?fieldSelector=spec\.nodeName%21", lambda: lease.update(held=False))  # bound pods
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, leading=lambda: lease["held"])
    patches = len(full.calls("PATCH", r"/nodes/a$"))
    assert sched.schedule_once() == {}
    assert set(reservations(full, "a")) == {"default/urgent"} and len(full.calls("PATCH", r"/nodes/a$")) == patches
