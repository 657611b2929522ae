"""While a pod passes over a victim (its evictions went unanswered `UNANSWERED_ASKS` times, the node given back), the
reason it waits can name the pass-over (`Preemptor.passed_over_said`): it read only "Insufficient nvidia.com/gpu" for
`reserve_s`, though that victim would make room. Against the fake API server."""

from __future__ import annotations

from fakeapi import FakeKube
from test_k8s_preemption_records_uid import given_back
from test_k8s_preemption_unanswered import terminate

from balancer.actuate.k8s_preempt import UNANSWERED_ASKS
from balancer.actuate.k8s_reads import Usage
from balancer.actuate.kubernetes import rfc3339


def test_the_pass_over_is_said_until_it_runs_out(kube: FakeKube, api, clock):
    start = clock.now
    sched, _ = given_back(kube, api, clock)
    preemptor = sched.holds.preemptor
    req = {"name": "default/urgent", "uid": kube.get("pods", "urgent", "default")["metadata"]["uid"]}
    bound = {"a": [Usage("a", 8, 0, 0, (), key="default/p")]}
    until = start + 5 * UNANSWERED_ASKS + preemptor.reserve_s          # given back at the pass after the 3rd ask
    assert preemptor.passed_over_said(req, bound) == (
        f" preemption: victim default/p passed over on a until {rfc3339(until)} after {UNANSWERED_ASKS} unanswered"
        " evictions.")
    assert preemptor.passed_over_said({**req, "uid": "another"}, bound) == ""   # a pod made again under its name
    clock.now = until
    assert preemptor.passed_over_said(req, bound) == ""


def test_the_scheduler_says_the_pass_over_in_the_reason_the_pod_waits(kube: FakeKube, api, clock):
    """The pass after the give-back: no preemption is tried (the victim is passed over), and the reason the pod
    waits names the pass-over beside "Insufficient ..." instead of that alone."""
    sched, _ = given_back(kube, api, clock)
    sched.schedule_once()
    why = sched.reasons["default/urgent"]
    assert "Insufficient nvidia.com/gpu" in why
    assert "preemption: victim default/p passed over on a until " in why
    assert f"after {UNANSWERED_ASKS} unanswered evictions." in why


def test_a_victim_gone_since_is_not_said(kube: FakeKube, api, clock):
    """p no longer bound on a (deleted by its owner, its node's pods read without it): no reason any more, though
    the pass-over still runs."""
    sched, _ = given_back(kube, api, clock)
    preemptor = sched.holds.preemptor
    req = {"name": "default/urgent", "uid": kube.get("pods", "urgent", "default")["metadata"]["uid"]}
    assert "victim default/p passed over on a" in preemptor.passed_over_said(
        req, {"a": [Usage("a", 8, 0, 0, (), key="default/p")]})
    assert preemptor.passed_over_said(req, {"a": [Usage("a", 8, 0, 0, (), key="default/fits")]}) == ""
    assert preemptor.passed_over_said(req, {"b": [Usage("b", 8, 0, 0, (), key="default/p")]}) == ""


def test_a_victim_made_again_under_its_name_is_not_said(kube: FakeKube, api, clock):
    """By the victim's uid: p made again under its name (another uid) was never asked; one read without a uid
    matches by name, as before."""
    sched, _ = given_back(kube, api, clock)
    preemptor = sched.holds.preemptor
    req = {"name": "default/urgent", "uid": kube.get("pods", "urgent", "default")["metadata"]["uid"]}
    uid = kube.get("pods", "p", "default")["metadata"]["uid"]
    assert "victim default/p passed over on a" in preemptor.passed_over_said(
        req, {"a": [Usage("a", 8, 0, 0, (), key="default/p", uid=uid)]})
    assert preemptor.passed_over_said(req, {"a": [Usage("a", 8, 0, 0, (), key="default/p", uid="again")]}) == ""


def test_a_victim_its_owner_deletes_is_not_said(kube: FakeKube, api, clock):
    """p deleted by its owner after the give-back: still bound on a while its grace period runs (bound pods are
    listed by node, not phase), it leaves whether or not it is preempted, and is no reason any more."""
    sched, _ = given_back(kube, api, clock)
    preemptor = sched.holds.preemptor
    req = {"name": "default/urgent", "uid": kube.get("pods", "urgent", "default")["metadata"]["uid"]}
    assert preemptor.passed_over_said(req, {"a": [Usage("a", 8, 0, 0, (), key="default/p", terminating=True)]}) == ""
    terminate(kube, clock, "p")
    clock.advance(1)
    sched.schedule_once()
    why = sched.reasons["default/urgent"]
    assert "Insufficient nvidia.com/gpu" in why and "passed over" not in why
