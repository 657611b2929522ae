"""Preemption in the secondary scheduler, against the fake API server: a pod that fits nowhere evicts the fewest,
least important pods of lower priority through the Eviction API, holds the node with a reservation, and is bound
once they are gone; PodDisruptionBudgets are never broken and a pod waiting for its victims does not preempt again."""

from __future__ import annotations

import json

import pytest
from fakeapi import FakeKube, node, pdb, pod

from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import RESERVATION_ANNOTATION


def most_free(request: dict, nodes: list[dict]) -> str | None:
    return max(nodes, key=lambda n: (n["gpus_free"], n["name"]))["name"] if nodes else None


def bound(name: str, node_name: str, gpus: int, priority: int, *, labels=None, started="2024-01-01T00:00:00Z"):
    p = pod(name, gpus=gpus, node_name=node_name, labels=labels)
    p["spec"]["priority"] = priority
    p["status"]["startTime"] = started
    return p


def pending(name: str, gpus: int, priority: int, **spec) -> dict:
    p = pod(name, gpus=gpus, scheduler="gputide", phase="Pending")
    p["spec"].update(priority=priority, **spec)
    return p


@pytest.fixture
def full(kube: FakeKube) -> FakeKube:
    """Two full nodes: `a` holds two pods of priority 1 and 5, `b` one of priority 100."""
    kube.add(node("a", 8))
    kube.add(node("b", 4))
    kube.add(bound("low-1", "a", 4, 1))
    kube.add(bound("low-5", "a", 4, 5))
    kube.add(bound("vip", "b", 4, 100))
    return kube


def events(kube: FakeKube, name: str) -> list[tuple[str, str]]:
    return [(e["reason"], e["message"]) for (plural, _, _), e in sorted(kube.objects.items())
            if plural == "events" and e["involvedObject"]["name"] == name]


def reservations(kube: FakeKube, name: str) -> dict:
    return json.loads((kube.get("nodes", name)["metadata"].get("annotations") or {}).get(RESERVATION_ANNOTATION, "{}"))


def test_a_pod_that_fits_nowhere_evicts_the_least_important_and_is_bound_once_they_are_gone(full, api, clock):
    full.add(pending("urgent", 4, 50))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/urgent": None}
    assert sched.preempted == [("default/low-1", "a")]                 # one victim, the least important
    assert full.get("pods", "low-1", "default") is None and full.get("pods", "low-5", "default") is not None
    assert full.get("pods", "vip", "default") is not None              # higher priority: never a victim
    assert events(full, "low-1") == [("Preempted", "Preempted by default/urgent on node a")]
    assert reservations(full, "a")["default/urgent"]["count"] == 4     # the node is held for it
    assert full.get("pods", "urgent", "default")["status"]["nominatedNodeName"] == "a"
    assert "preemption: preempting 1 pod(s) of lower priority on a: default/low-1" in sched.reasons["default/urgent"]
    assert [r for r in full.requests if r.path.endswith("/eviction")]   # through the Eviction API, not a delete
    full.add(pending("filler", 4, 0))                                  # would fit in the room just made
    assert sched.schedule_once() == {"default/urgent": "a", "default/filler": None}
    assert reservations(full, "a") == {}                               # released on binding
    assert sched.preempted == []                                       # filler is the lowest: no one to evict


def test_the_node_stays_held_for_the_preemptor_even_by_a_replica_that_did_not_preempt(full, api, clock):
    full.add(pending("urgent", 4, 50, preemptionPolicy="PreemptLowerPriority"))
    SecondaryScheduler(api, "gputide", most_free, clock=clock).schedule_once()
    full.add(pending("sneaky", 4, 50, preemptionPolicy="Never"))       # as important, and may not preempt
    other = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    # sneaky's turn comes first (by name): the reservation holds the room for urgent, which the same pass binds
    # there (a pod of higher priority it would not hold back, as kube-scheduler's nominated pods:
    # test_k8s_hold_priority)
    assert other.schedule_once() == {"default/sneaky": None, "default/urgent": "a"}
    assert "reserved for other pods" in other.reasons["default/sneaky"]


def test_a_disruption_budget_steers_preemption_and_is_never_broken(full, api, clock):
    full.add(pdb("low", "default", {"tier": "batch"}, 0))
    full.mutate("pods", "low-1", "default", {"metadata": {"labels": {"tier": "batch"}}})
    full.add(pending("urgent", 4, 50))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert sched.preempted == [("default/low-5", "a")]                 # low-1 is guarded: the next least important
    full.add(pending("urgent-2", 4, 50))
    sched.schedule_once()                                              # urgent takes a; urgent-2 finds only low-1
    assert full.get("pods", "low-1", "default") is not None and sched.preempted == []
    assert not [r for r in full.requests if r.path.endswith("/low-1/eviction")]   # not even tried


def test_no_preemption_for_equal_priority_or_a_pod_that_opts_out(full, api, clock):
    full.add(pending("never", 4, 50, preemptionPolicy="Never"))
    full.add(pending("peer", 4, 1))                                    # low-1 has the same priority
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert sched.preempted == [] and len([r for r in full.requests if r.path.endswith("/eviction")]) == 0
    off = SecondaryScheduler(api, "gputide", most_free, clock=clock, preemption=False)
    full.add(pending("urgent", 4, 50))
    off.schedule_once()
    assert off.preempted == [] and full.get("pods", "low-1", "default") is not None


def test_a_pod_waiting_for_its_victims_does_not_preempt_again(full, api, clock):
    full.add(pending("urgent", 4, 50))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    full.add(bound("low-1b", "a", 4, 1))                               # as if the victim were still terminating
    assert sched.schedule_once() == {"default/urgent": None}
    assert sched.preempted == [] and full.get("pods", "low-5", "default") is not None
    clock.advance(301)                                                 # the reservation expired: try again
    sched.schedule_once()
    assert sched.preempted == [("default/low-1b", "a")]


def test_the_scheduler_counts_its_victims_and_the_command_can_turn_preemption_off(full, api, clock):
    from balancer.cli import build_parser
    from balancer.cmd.schedule import SchedulerMetrics, one_pass

    full.add(pending("urgent", 4, 50))
    metrics = SchedulerMetrics()
    assert metrics.registry.get_sample_value("gputide_scheduler_preempted_pods_total") == 0
    one_pass(SecondaryScheduler(api, "gputide", most_free, clock=clock), metrics)
    assert metrics.registry.get_sample_value("gputide_scheduler_preempted_pods_total") == 1
    args = build_parser().parse_args(["schedule", "--no-preemption"])
    assert args.no_preemption is True


def test_two_pods_preempting_in_one_pass_never_count_on_the_same_room(full, api, clock):
    """The first preemption's victims are gone and its node held for the rest of the pass: the second pod must
    not pick the same victims (a 404 it would take for room made) nor reserve the same GPUs."""
    full.add(pending("urgent-1", 4, 50))
    full.add(pending("urgent-2", 4, 40))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert sched.preempted == [("default/low-1", "a")]
    assert set(reservations(full, "a")) == {"default/urgent-1"}
    assert full.get("pods", "low-5", "default") is not None   # evicting it would still leave no room for urgent-2


def test_a_pod_that_cannot_preempt_does_not_list_budgets_at_every_pass(full, api, clock):
    full.add(pdb("all", "default", {}, 0))                            # guards every pod: no preemption possible
    full.add(pending("urgent", 4, 50))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    for _ in range(3):                                                 # passes 2 s apart, as the scheduler runs
        sched.schedule_once()
        clock.advance(2)
    assert sched.preempted == [] and len(full.calls("GET", r"/poddisruptionbudgets")) == 1
    clock.advance(10)
    sched.schedule_once()
    assert len(full.calls("GET", r"/poddisruptionbudgets")) == 2      # read again after budgets_ttl_s


def test_a_pod_bound_by_the_last_pass_is_counted_once_when_weighing_victims(kube: FakeKube, api, clock):
    """Without watches a pass lists the bound pods, which already hold the last pass's bindings; counting those
    again as assumed made one victim look like two and preempted for room that was not there."""
    kube.add(node("a", 8))
    kube.add(bound("vip", "a", 4, 100))
    kube.add(pending("low", 4, 1))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/low": "a"}
    kube.add(pending("urgent", 8, 50))
    sched.schedule_once()
    assert sched.preempted == [] and kube.get("pods", "low", "default") is not None
