"""A migration's target must let the replacement run by the pod's hard topology spread constraints, as
kube-scheduler's PodTopologySpread filter judges it (`k8s_spread`): a move that would skew the spread beyond
`maxSkew` left the evicted pod's replacement refused on its target (Pending, or wherever kube-scheduler found
room), with its GPUs held there for nothing. Judged on the snapshot's pods and nodes, before anything changes."""

from __future__ import annotations

from types import MappingProxyType

import numpy as np
import pytest
from fakeapi import ZONE_LABEL, FakeKube, node, pod
from test_k8s_actuator import ARRAYS, migrate

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_spread import spread_refusal
from balancer.model import ClusterSnapshot, Gpu, Node, Workload, WorkloadClass

ZONES = {"n1": "a", "n2": "b", "n3": "c"}
WEB = {"app": "web"}


def snapshot(placed: dict[str, int]) -> ClusterSnapshot:
    """n1, n2, n3 (zones a, b, c) of two GPUs each; the web replicas `placed` on GPU index."""
    gpus = tuple(Gpu(index=i, uuid=f"GPU-{i}", node=f"n{i // 2 + 1}", slot=i % 2, model="H100") for i in range(6))
    nodes = tuple(Node(name=n, gpu_model="H100", gpu_count=2, labels=MappingProxyType({ZONE_LABEL: z}))
                  for n, z in ZONES.items())
    workloads = tuple(Workload(name=f"default/{name}", workload_class=WorkloadClass.INFERENCE, owner="web",
                               labels=MappingProxyType(WEB)) for name in placed)
    return ClusterSnapshot(time=0.0, nodes=nodes, gpus=gpus, workloads=workloads,
                           placements={f"default/{name}": (i,) for name, i in placed.items()},
                           **{name: np.zeros(6) for name in ARRAYS})


def spread(max_skew: int = 1, **extra) -> list[dict]:
    return [{"maxSkew": max_skew, "topologyKey": ZONE_LABEL, "whenUnsatisfiable": "DoNotSchedule",
             "labelSelector": {"matchLabels": WEB}, **extra}]


@pytest.fixture
def cluster(kube: FakeKube) -> FakeKube:
    for name, zone in ZONES.items():
        kube.add(node(name, 2))
        kube.mutate("nodes", name, "", {"metadata": {"labels": {ZONE_LABEL: zone}}})
    web = pod("web-1", labels=WEB, node_name="n1", owner=("ReplicaSet", "web-5d8f"))
    web["spec"]["topologySpreadConstraints"] = spread()
    kube.add(web)
    return kube


@pytest.fixture
def actuator(api, clock) -> KubernetesActuator:
    return KubernetesActuator(api, sleep=lambda s: None, clock=clock)


SPREAD = {"web-1": 0, "web-3": 1, "web-2": 2}   # zone a: web-1 and web-3; zone b: web-2; zone c: none


@pytest.mark.parametrize(("target", "gpu", "moved"), [("n2", 2, False), ("n3", 4, True)])
def test_a_move_that_would_skew_the_spread_is_refused_before_anything_changes(cluster: FakeKube, actuator, target,
                                                                             gpu, moved) -> None:
    """Zones a, b, c hold 2, 1, 0 replicas. web-1 to zone b leaves 1, 2, 0: skew 2 > 1, kube-scheduler refuses
    its replacement there. To zone c (1, 1, 1) it goes."""
    result = actuator.apply(migrate(target=(gpu + 1,), node_name=target), snapshot(SPREAD))
    assert (result.outcome is Outcome.APPLIED) is moved, result.detail
    if not moved:
        assert result.outcome is Outcome.FAILED and "topology spread constraint" in result.detail
        assert not [r for r in cluster.requests if r.method != "GET"]


def spec_with(constraints: list[dict]) -> dict:
    p = pod("web-1", labels=WEB, node_name="n1", owner=("ReplicaSet", "web-5d8f"))
    p["spec"]["topologySpreadConstraints"] = constraints
    return p


@pytest.mark.parametrize(("constraints", "refused"), [
    (spread(), True),
    (spread(max_skew=2), False),
    ([dict(spread()[0], whenUnsatisfiable="ScheduleAnyway")], False),        # a preference, never a refusal
    ([{k: v for k, v in spread()[0].items() if k != "labelSelector"}], False),   # selects no pod
    ([dict(spread()[0], topologyKey="example.com/rack")], True),               # the target lacks the key
])
def test_spread_refusal(constraints, refused) -> None:
    why = spread_refusal(spec_with(constraints), snapshot(SPREAD), "default/web-1", "n2")
    assert (why is not None) is refused, why


def test_a_move_within_the_spread_is_allowed() -> None:
    """n3 in zone c: 1, 1, 1 after the move."""
    assert spread_refusal(spec_with(spread()), snapshot(SPREAD), "default/web-1", "n3") is None


def test_fewer_domains_than_min_domains_count_the_least_as_none() -> None:
    """Zones a, b, c hold 2, 1, 1: web-1 to zone b leaves 1, 2, 1, skew 1; with minDomains 4 (three zones) the
    least is taken as 0, skew 2."""
    placed = {**SPREAD, "web-4": 5}
    assert spread_refusal(spec_with(spread()), snapshot(placed), "default/web-1", "n2") is None
    assert spread_refusal(spec_with(spread(minDomains=4)), snapshot(placed), "default/web-1", "n2") is not None
