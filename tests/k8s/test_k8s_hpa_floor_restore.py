"""HPA floors given back when their service leaves gputide's management: a policy reload that protects its
namespace (`PolicyReloader(on_leave=actuator.restore_floors)`). The operator's own minReplicas comes back from the
floor record while minReplicas is still the floor gputide wrote; a value someone else wrote since is theirs and stays
(logged). A plain shutdown restores nothing: a restarted controller reads the record back and keeps the floor."""

from __future__ import annotations

import logging
import os
import textwrap

import numpy as np
import pytest
from fakeapi import FakeKube, deployment, hpa
from prometheus_client import CollectorRegistry

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_hpa import HPA_FLOOR_ANNOTATION, HPA_OWN_MIN_ANNOTATION
from balancer.app.policy_reload import PolicyReloader
from balancer.config import load
from balancer.model import GPU_ARRAYS, ClusterSnapshot, ScaleInference

SNAP = ClusterSnapshot(time=0.0, nodes=(), gpus=(), **{name: np.zeros(0) for name in GPU_ARRAYS})


def stored(kube: FakeKube, name: str = "web", ns: str = "serve") -> tuple[int, dict]:
    h = kube.get("horizontalpodautoscalers", name, ns)
    return h["spec"]["minReplicas"], h["metadata"].get("annotations") or {}


def raise_floor(actuator: KubernetesActuator, service: str, replicas: int) -> None:
    result = actuator.apply(ScaleInference(reason="tide", service=service, replicas=replicas, previous_replicas=3),
                            SNAP)
    assert result.outcome is Outcome.APPLIED, result.detail


@pytest.fixture
def actuator(kube: FakeKube, api, clock, sleeps) -> KubernetesActuator:
    for ns in ("serve", "other"):
        kube.add(deployment("web", ns))
        kube.add(hpa("web", "web", ns, lo=3, hi=10))
    kube.add(deployment("plain", "serve"))
    kube.add(hpa("plain", "plain", "serve", lo=2, hi=10))   # never floored: no record, nothing to give back
    act = KubernetesActuator(api, sleep=sleeps.append, clock=clock)
    raise_floor(act, "serve/web", 8)
    raise_floor(act, "other/web", 7)
    return act


def test_the_operators_own_min_replicas_comes_back_where_the_floor_is_still_gputides(kube, actuator) -> None:
    notes = actuator.restore_floors(["serve"])
    assert stored(kube) == (3, {})   # the record gone with it
    assert stored(kube, "web", "other")[0] == 7   # a namespace still managed keeps its floor
    assert stored(kube, "plain")[0] == 2 and not kube.calls("PATCH", r"/horizontalpodautoscalers/plain$")
    assert notes == ["hpa serve/web: service left gputide's management: minReplicas 8 -> 3 (the operator's own)"]


def test_a_min_replicas_someone_else_wrote_since_is_left_and_logged(kube, actuator, caplog) -> None:
    kube.mutate("horizontalpodautoscalers", "web", "serve", {"spec": {"minReplicas": 5}})   # kubectl edit, GitOps
    with caplog.at_level(logging.INFO, logger="balancer.actuate.k8s_actuator"):
        actuator.restore_floors(["serve"])
    assert stored(kube) == (5, {})   # theirs: kept, the stale record dropped
    assert any("written by someone else" in m and "left as it is" in m for m in caplog.messages)


def test_a_failing_namespace_is_a_note_and_the_others_are_still_given_back(kube, actuator) -> None:
    kube.inject("GET", r"/namespaces/other/horizontalpodautoscalers$", 403)
    notes = actuator.restore_floors(["other", "serve"])
    assert stored(kube)[0] == 3 and stored(kube, "web", "other")[0] == 7
    assert any(n.startswith("hpa floors in other not given back") for n in notes)


def write(path, protected: list[str]) -> None:
    path.write_text("apiVersion: gputide/v1alpha1\nkind: BalancerPolicy\nmetadata: {name: p}\nspec:\n"
                    + textwrap.indent(f"safety: {{protectedNamespaces: {protected}}}\n", "  "))
    st = os.stat(path)   # two writes within one clock tick must still read as a change
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))


def test_a_reload_protecting_the_namespace_gives_the_floor_back_and_a_restart_does_not(
        kube, api, clock, sleeps, actuator, tmp_path) -> None:
    path = tmp_path / "policy.yaml"
    write(path, ["kube-system"])
    reloader = PolicyReloader(path, load(path), registry=CollectorRegistry(), on_leave=actuator.restore_floors)
    assert reloader.poll() is None and stored(kube)[0] == 8   # the first read: nothing changed, nothing given back
    # a restart: a new controller (or leader) reads the same file; the floor stays, as the load may still need it
    again = KubernetesActuator(api, sleep=sleeps.append, clock=clock)
    PolicyReloader(path, load(path), registry=CollectorRegistry(), on_leave=again.restore_floors).poll()
    assert stored(kube) == (8, {HPA_OWN_MIN_ANNOTATION: "3", HPA_FLOOR_ANNOTATION: "8"})
    write(path, ["kube-system", "serve"])
    assert reloader.poll().safety.protected_namespaces == ("kube-system", "serve")
    assert stored(kube) == (3, {}) and stored(kube, "web", "other")[0] == 7
