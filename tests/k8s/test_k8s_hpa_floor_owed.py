"""HPA floors in a protected namespace are given back until they are (audit a5, floors.py).

Before, `restore_floors` ran once, only on the reload that newly protected the namespace, and only if that replica
led at that moment: a standby that reloaded the file and led afterwards, a leader whose give-back failed once, and a
controller restarted with the already-edited file (its policy at start protects the namespace: no reload "newly"
protects it) left the floors raised for good. Now the reloader gives back the floors of every protected namespace
whenever the replica takes office (`cmd.run.in_office`: the first term after start included) and retries a
give-back that failed at every later poll until it succeeds (`restore_floors` acts only on HPAs carrying gputide's
floor record, so giving back twice changes nothing)."""

from __future__ import annotations

import os
import textwrap
from types import SimpleNamespace

import numpy as np
import pytest
from fakeapi import FakeKube, deployment, hpa

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.leader import NullLeaderElector
from balancer.app.policy_reload import PolicyReloader
from balancer.cmd.run import floors_given_back, in_office
from balancer.config import load
from balancer.model import GPU_ARRAYS, ClusterSnapshot, ScaleInference

SNAP = ClusterSnapshot(time=0.0, nodes=(), gpus=(), **{name: np.zeros(0) for name in GPU_ARRAYS})


def write(path, protected: list[str]) -> None:
    path.write_text("apiVersion: gputide/v1alpha1\nkind: BalancerPolicy\nmetadata: {name: p}\nspec:\n"
                    + textwrap.indent(f"safety: {{protectedNamespaces: {protected}}}\n", "  "))
    st = os.stat(path)   # two writes within one clock tick must still read as a change
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))


def min_replicas(kube: FakeKube, ns: str = "serve") -> int:
    return kube.get("horizontalpodautoscalers", "web", ns)["spec"]["minReplicas"]


@pytest.fixture
def actuator(kube: FakeKube, api, clock, sleeps) -> KubernetesActuator:
    for ns in ("serve", "other"):
        kube.add(deployment("web", ns))
        kube.add(hpa("web", "web", ns, lo=3, hi=10))
    act = KubernetesActuator(api, sleep=sleeps.append, clock=clock)
    for ns in ("serve", "other"):   # capacity shifting raised both floors
        result = act.apply(ScaleInference(reason="tide", service=f"{ns}/web", replicas=8, previous_replicas=3), SNAP)
        assert result.outcome is Outcome.APPLIED, result.detail
    return act


class Replica:
    """What `gputide run` hands the reloader: its reconciler, with a Lease elector's flag and term count."""

    def __init__(self, leads: bool, terms: int = 1) -> None:
        self.elector = SimpleNamespace(is_leader=leads, terms=terms)
        self.leading = False   # the loop's view at its last cycle: none yet

    def reloader(self, path, actuator) -> PolicyReloader:
        return PolicyReloader(path, load(path), on_leave=floors_given_back(actuator, object(), lambda: self),
                              office=in_office(lambda: self))


def test_a_standby_at_the_reload_gives_the_floors_back_once_it_leads(tmp_path, kube, actuator) -> None:
    path = tmp_path / "policy.yaml"
    write(path, ["kube-system"])
    replica = Replica(leads=False, terms=0)
    r = replica.reloader(path, actuator)
    r.poll()
    write(path, ["kube-system", "serve"])
    assert r.poll() is not None   # the reload that protects serve, on a standby: it may not write
    assert min_replicas(kube) == 8
    r.poll()
    assert min_replicas(kube) == 8
    replica.elector.is_leader, replica.elector.terms = True, 1   # it takes the Lease over
    r.poll()
    assert min_replicas(kube) == 3 and min_replicas(kube, "other") == 8   # a namespace still managed keeps it
    patches = len(kube.calls("PATCH", r"/horizontalpodautoscalers/"))
    r.poll()
    r.poll()
    assert len(kube.calls("PATCH", r"/horizontalpodautoscalers/")) == patches   # given back: not again this term


def test_a_give_back_that_failed_is_tried_again_until_it_succeeds(tmp_path, kube, actuator) -> None:
    path = tmp_path / "policy.yaml"
    write(path, ["kube-system"])
    r = Replica(leads=True).reloader(path, actuator)
    r.poll()
    lists = len(kube.calls("GET", r"/namespaces/serve/horizontalpodautoscalers$"))
    kube.inject("GET", r"/namespaces/serve/horizontalpodautoscalers$", 403, count=2)
    write(path, ["kube-system", "serve"])
    assert r.poll() is not None
    assert min_replicas(kube) == 8   # a note from restore_floors, not an exception
    r.poll()
    assert min_replicas(kube) == 8
    r.poll()
    assert min_replicas(kube) == 3
    r.poll()
    assert len(kube.calls("GET", r"/namespaces/serve/horizontalpodautoscalers$")) == lists + 3


def test_a_controller_restarted_with_the_edited_file_gives_the_floors_back(tmp_path, kube, actuator) -> None:
    path = tmp_path / "policy.yaml"
    write(path, ["kube-system", "serve"])   # edited before the restart: protected from the start
    replica = Replica(leads=False, terms=0)
    r = replica.reloader(path, actuator)
    assert r.poll() is None
    assert min_replicas(kube) == 8   # a standby
    replica.elector.is_leader, replica.elector.terms = True, 1   # its first term after start
    assert r.poll() is None
    assert min_replicas(kube) == 3 and min_replicas(kube, "other") == 8


def test_a_single_replica_gives_them_back_at_its_first_poll(tmp_path, kube, actuator) -> None:
    path = tmp_path / "policy.yaml"
    write(path, ["kube-system", "serve"])
    loop = SimpleNamespace(elector=NullLeaderElector(), leading=False)   # no --leader-elect: always leads
    r = PolicyReloader(path, load(path), on_leave=floors_given_back(actuator, object(), lambda: loop),
                       office=in_office(lambda: loop))
    r.poll()
    assert min_replicas(kube) == 3


def test_each_term_gives_them_back_again_and_a_namespace_managed_again_keeps_its_floor(tmp_path, kube,
                                                                                         actuator) -> None:
    path = tmp_path / "policy.yaml"
    write(path, ["kube-system", "serve"])
    replica = Replica(leads=True)
    r = replica.reloader(path, actuator)
    r.poll()
    assert min_replicas(kube) == 3
    # another leader raised it again meanwhile (before it saw the file): this replica retakes the Lease
    kube.mutate("horizontalpodautoscalers", "web", "serve", {"spec": {"minReplicas": 8}, "metadata": {
        "annotations": kube.get("horizontalpodautoscalers", "web", "other")["metadata"]["annotations"]}})
    replica.elector.is_leader = False
    r.poll()
    replica.elector.is_leader, replica.elector.terms = True, 2
    r.poll()
    assert min_replicas(kube) == 3
    # owed while failing, then unprotected: gputide manages it again, its floor stays
    write(path, ["kube-system", "serve", "other"])
    kube.inject("GET", r"/namespaces/other/horizontalpodautoscalers$", 403)
    r.poll()
    write(path, ["kube-system", "serve"])
    r.poll()
    r.poll()
    assert min_replicas(kube, "other") == 8
