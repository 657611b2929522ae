"""HPA floors given back once gputide no longer manages their service: capacity shifting turned off
(`capacity.enabled: false`, no --services), or a service taken out of --services' profiles.

Before, only a namespace newly protected by the policy gave a floor back (`cmd.run.floors_given_back` returned None
without a capacity planner, and nothing looked at the profiles): an HPA floored at 8 over the operator's 3 stayed at
8 for good once the controller restarted without capacity shifting or without that service. Now the leading replica,
at the first poll of each term, lists the HPAs cluster-wide and gives back those carrying gputide's floor record that
scale no profiled service (`cmd.run.floors_released`, `KubernetesActuator.restore_floors(None, managed)`), with
restore_floors' per-HPA rule (a minReplicas someone else wrote since is theirs)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from fakeapi import FakeKube, deployment, hpa
from test_k8s_hpa_floor_restore import raise_floor, stored, write

from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.app.policy_reload import PolicyReloader
from balancer.cmd.run import floors_given_back, floors_released, in_office
from balancer.config import load


@pytest.fixture
def floored(kube: FakeKube, api, clock, sleeps) -> KubernetesActuator:
    """serve/web floored at 8 and other/web at 7 over the operator's 3; serve/plain never floored (its 2)."""
    for ns, name, lo in (("serve", "web", 3), ("other", "web", 3), ("serve", "plain", 2)):
        kube.add(deployment(name, ns))
        kube.add(hpa(name, name, ns, lo=lo, hi=10))
    act = KubernetesActuator(api, sleep=sleeps.append, clock=clock)
    raise_floor(act, "serve/web", 8)
    raise_floor(act, "other/web", 7)
    return act


class Replica:
    """What `gputide run` hands the reloader: its reconciler, with a Lease elector's flag and term count."""

    def __init__(self, leads: bool = True, terms: int = 1) -> None:
        self.elector = SimpleNamespace(is_leader=leads, terms=terms)
        self.leading = False

    def reloader(self, path, actuator, planner=None, profiles=None) -> PolicyReloader:
        """As `gputide run` builds it: `profiles` None is capacity shifting off (no planner)."""
        return PolicyReloader(path, load(path), on_leave=floors_given_back(actuator, planner, lambda: self),
                              office=in_office(lambda: self), release=floors_released(actuator, profiles, lambda: self))


def test_capacity_shifting_off_gives_every_recorded_floor_back_when_taking_office(tmp_path, kube, floored) -> None:
    path = tmp_path / "policy.yaml"
    write(path, ["kube-system"])
    Replica().reloader(path, floored).poll()   # restarted with capacity.enabled false
    assert stored(kube) == (3, {}) and stored(kube, "web", "other") == (3, {})
    assert stored(kube, "plain")[0] == 2 and not kube.calls("PATCH", r"/horizontalpodautoscalers/plain$")


def test_a_service_taken_out_of_the_profiles_gets_its_floor_back_and_the_others_keep_theirs(
        tmp_path, kube, floored) -> None:
    path = tmp_path / "policy.yaml"
    write(path, ["kube-system"])
    Replica().reloader(path, floored, planner=object(), profiles={"other/web": None}).poll()
    assert stored(kube) == (3, {})
    assert stored(kube, "web", "other")[0] == 7   # still managed: its floor stays


def test_a_bare_profile_name_keeps_that_name_managed_in_every_namespace(tmp_path, kube, floored) -> None:
    path = tmp_path / "policy.yaml"
    write(path, ["kube-system"])
    Replica().reloader(path, floored, planner=object(), profiles={"web": None}).poll()   # pods tell its namespace
    assert stored(kube)[0] == 8 and stored(kube, "web", "other")[0] == 7
    assert not kube.calls("PATCH", r"/horizontalpodautoscalers/")[2:]   # the two floors' patches only


def test_a_min_replicas_the_operator_wrote_since_is_kept(tmp_path, kube, floored) -> None:
    kube.mutate("horizontalpodautoscalers", "web", "serve", {"spec": {"minReplicas": 5}})   # kubectl edit, GitOps
    path = tmp_path / "policy.yaml"
    write(path, ["kube-system"])
    Replica().reloader(path, floored).poll()
    assert stored(kube) == (5, {})   # theirs, the stale record dropped
    assert stored(kube, "web", "other") == (3, {})


def test_a_standby_leaves_them_until_it_takes_office_and_a_failed_list_is_tried_again(
        tmp_path, kube, floored) -> None:
    path = tmp_path / "policy.yaml"
    write(path, ["kube-system"])
    replica = Replica(leads=False, terms=0)
    r = replica.reloader(path, floored)
    r.poll()
    assert stored(kube)[0] == 8 and not kube.calls("GET", r"^/apis/autoscaling/v2/horizontalpodautoscalers")
    replica.elector.is_leader, replica.elector.terms = True, 1
    fault = kube.inject("GET", r"^/apis/autoscaling/v2/horizontalpodautoscalers", 503, count=100)
    r.poll()
    assert stored(kube)[0] == 8   # the API server failing (its retries spent): still owed
    fault.remaining = 0
    r.poll()
    assert stored(kube) == (3, {}) and stored(kube, "web", "other") == (3, {})
    calls = len(kube.calls("GET", r"^/apis/autoscaling/v2/horizontalpodautoscalers"))
    r.poll()   # given back this term: not listed again
    assert len(kube.calls("GET", r"^/apis/autoscaling/v2/horizontalpodautoscalers")) == calls


def test_a_controller_without_hpa_rights_is_told_once_per_term_and_not_refused_every_cycle(
        tmp_path, kube, floored, caplog) -> None:
    path = tmp_path / "policy.yaml"
    write(path, ["kube-system"])
    r = Replica().reloader(path, floored)
    kube.inject("GET", r"^/apis/autoscaling/v2/horizontalpodautoscalers", 403, count=5)   # no components/capacity
    caplog.set_level("WARNING")
    r.poll()
    r.poll()
    assert len(kube.calls("GET", r"^/apis/autoscaling/v2/horizontalpodautoscalers")) == 1
    assert stored(kube)[0] == 8
    assert sum("not given back" in m and "HTTP 403" in m for m in caplog.messages) == 1
