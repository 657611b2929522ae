"""Preemption in the secondary scheduler honours the controller's emergency stop. It did not: `gputide schedule` read
neither the stop file nor the policy's `spec.safety.emergencyStop`, and evicted pods on a node labelled
`gputide.io/emergency-stop=true`. Now, while the stop holds (or its state cannot be read: held, fail-safe), no pod
is evicted and no node is reserved for a preemption; pods are still bound where there is room (that disrupts
nothing), and a preemption half done when the stop was set evicts the rest once it is lifted."""

from __future__ import annotations

import argparse
import os

import pytest
from fakeapi import FakeKube, node
from test_k8s_preemption import bound, events, most_free, pending, reservations

from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.cmd.schedule import EmergencyStop, emergency_stop
from balancer.errors import InputError
from balancer.safety import EMERGENCY_LABEL


def evictions(kube: FakeKube) -> list[str]:
    return [r.path for r in kube.requests if r.path.endswith("/eviction")]


class Switch:
    """An emergency stop the test sets: a reason, None, or an exception its read raises."""

    def __init__(self, state: str | Exception | None = None) -> None:
        self.state = state

    def __call__(self) -> str | None:
        if isinstance(self.state, Exception):
            raise self.state
        return self.state


def one_full_node(kube: FakeKube, **labels: str) -> None:
    kube.add(node("a", 4, labels=labels))
    kube.add(bound("low", "a", 4, 1))
    kube.add(pending("urgent", 4, 50))


def test_a_node_carrying_the_emergency_stop_label_loses_no_pod_to_preemption(kube: FakeKube, api, clock):
    one_full_node(kube, **{EMERGENCY_LABEL: "True"})
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/urgent": None}
    assert evictions(kube) == [] and sched.preempted == [] and events(kube, "low") == []
    assert kube.get("pods", "low", "default") is not None and reservations(kube, "a") == {}
    assert f"carries {EMERGENCY_LABEL}=true" in sched.reasons["default/urgent"]


def test_a_labelled_node_is_passed_over_for_one_that_may_preempt(kube: FakeKube, api, clock):
    one_full_node(kube, **{EMERGENCY_LABEL: "true"})
    kube.add(node("b", 4))
    kube.add(bound("low-b", "b", 4, 2))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert sched.preempted == [("default/low-b", "b")] and kube.get("pods", "low", "default") is not None


@pytest.mark.parametrize("state", ["the emergency stop file /etc/gputide/STOP exists",
                                   PermissionError(13, "Permission denied")],
                         ids=["set", "unreadable: taken as set"])
def test_while_the_emergency_stop_holds_no_pod_is_evicted_but_free_room_is_still_bound(kube, api, clock, state):
    one_full_node(kube)
    kube.add(node("c", 2))
    kube.add(pending("small", 2, 0))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, emergency_stop=Switch(state))
    assert sched.schedule_once() == {"default/urgent": None, "default/small": "c"}
    assert evictions(kube) == [] and sched.preempted == [] and reservations(kube, "a") == {}
    assert "preemption" in sched.reasons["default/urgent"] and "low on a is not evicted" in \
        sched.reasons["default/urgent"]


def test_a_preemption_half_done_waits_for_the_stop_to_be_lifted_then_evicts_the_rest(kube: FakeKube, api, clock):
    kube.add(node("a", 8))
    kube.add(bound("low-1", "a", 4, 1))
    kube.add(bound("low-2", "a", 4, 2))
    kube.add(pending("urgent", 8, 50))
    switch = Switch()
    kube.inject("POST", r"/pods/low-1/eviction$", 429, count=1)   # the first pass evicts low-2 only
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, emergency_stop=switch)
    sched.schedule_once()
    assert sched.preempted == [("default/low-2", "a")]
    switch.state = "spec.safety.emergencyStop is true in /etc/gputide/policy.yaml"
    clock.advance(5)
    sched.schedule_once()
    assert sched.preempted == [] and kube.get("pods", "low-1", "default") is not None
    assert reservations(kube, "a")["default/urgent"]["victims"] == ["default/low-1"]   # still held, still named
    assert "emergencyStop is true" in sched.reasons["default/urgent"]
    switch.state = None
    clock.advance(5)
    sched.schedule_once()
    assert sched.preempted == [("default/low-1", "a")]


def test_the_command_reads_the_stop_file_and_the_controllers_policy(tmp_path):
    stop, policy = tmp_path / "STOP", tmp_path / "policy.yaml"
    policy.write_text("apiVersion: gputide/v1alpha1\nkind: BalancerPolicy\nspec:\n  safety:\n"
                      "    emergencyStop: false\n")
    read = emergency_stop(argparse.Namespace(emergency_stop_file=str(stop), controller_policy=str(policy)))
    assert read() is None
    stop.touch()
    assert read() == f"the emergency stop file {stop} exists"
    stop.unlink()
    policy.write_text(policy.read_text().replace("false", "true"))
    os.utime(policy, ns=(1, 1))   # a new mtime, whatever the clock's resolution
    assert read() == f"spec.safety.emergencyStop is true in {policy}"
    policy.write_text("spec: [")   # invalid: held until it reads again
    assert "cannot be read" in read() and "taken as set" in read()


def test_an_unreadable_stop_file_holds_evictions(monkeypatch, tmp_path):
    def denied(path, *a, **kw):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(os, "stat", denied)
    assert "taken as set" in EmergencyStop(str(tmp_path / "STOP"))()


def test_a_stop_file_or_policy_the_scheduler_could_never_read_exits_2_at_start(tmp_path):
    with pytest.raises(InputError, match="--emergency-stop-file"):
        emergency_stop(argparse.Namespace(emergency_stop_file=str(tmp_path / "no" / "STOP"), controller_policy=None))
    with pytest.raises(InputError):
        emergency_stop(argparse.Namespace(emergency_stop_file=None, controller_policy=str(tmp_path / "none.yaml")))
