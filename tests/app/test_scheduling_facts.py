"""The secondary scheduler's placer with GPU facts from Prometheus: which slots are free and how hot they are,
for the nodes Prometheus knows; without them (or while Prometheus fails) it places as before."""

from __future__ import annotations

import logging

import numpy as np

from balancer.app.scheduling import EnginePlacer
from balancer.errors import TelemetryUnavailable
from balancer.model import NodeGpuFacts
from balancer.plan.placement.state import MILLI, NO_GPU

ONE = {"name": "ml/a", "num_gpu": 1, "gpu_milli": 1000, "cpu_milli": 1000, "memory_mib": 1024, "allowed_models": None}
TWO = dict(ONE, name="ml/b", num_gpu=2)


def view(name, total=8, usable=8, model="NVIDIA-H100-80GB-HBM3", domain=None):
    return {"name": name, "gpu_model": model, "gpus_total": total, "gpus_free": usable, "gpus_usable": usable,
            "cpu_milli_total": 64000, "cpu_milli_free": 64000, "memory_mib_total": 262144,
            "memory_mib_free": 262144, "labels": {"gputide.io/nvlink-domain-size": str(domain)} if domain else {}}


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_thermal_score_separates_a_hot_node_from_a_cool_one_whatever_the_order():
    facts = {"hot": NodeGpuFacts({s: 2.0 for s in range(8)}), "cool": NodeGpuFacts({s: 30.0 for s in range(8)})}
    nodes = [view("hot"), view("cool")]
    assert EnginePlacer("gputide")(ONE, nodes) == "hot"                       # no facts: ties go to the first
    placer = EnginePlacer("gputide", gpu_facts=lambda: facts)
    assert placer(ONE, nodes) == placer(ONE, nodes[::-1]) == "cool"
    state = placer.cluster(nodes)
    assert state.temp_headroom[0].tolist() == [2.0] * 8 and placer.facts_nodes == 2


def test_free_slots_are_the_ones_no_pod_is_on_so_a_pair_goes_where_a_whole_nvlink_pair_is_free():
    # NVLink pairs, 4 of 8 GPUs in use on both nodes: on "split" one GPU of every pair, on "pairs" two whole pairs
    facts = {"split": NodeGpuFacts({}, frozenset({0, 2, 4, 6})), "pairs": NodeGpuFacts({}, frozenset({0, 1, 2, 3}))}
    nodes = [view("split", usable=4, domain=2), view("pairs", usable=4, domain=2)]
    placer = EnginePlacer("gputide", gpu_facts=lambda: facts)
    state = placer.cluster(nodes)
    assert state.gpu_free[0].tolist() == [0, MILLI] * 4
    assert state.gpu_free[1].tolist() == [0] * 4 + [MILLI] * 4
    assert placer(TWO, nodes) == placer(TWO, nodes[::-1]) == "pairs"
    # without the facts both look alike (the first slots free): the first offered node gets it
    assert EnginePlacer("gputide")(TWO, nodes) == "split"


def test_kubernetes_decides_how_many_slots_are_free_prometheus_only_which():
    facts = {"n": NodeGpuFacts({0: 20.0, 1: 21.0, 2: 22.0, 3: 23.0}, frozenset({0}))}
    placer = EnginePlacer("gputide", gpu_facts=lambda: facts)
    state = placer.cluster([view("n", total=4, usable=2), view("other", total=2, usable=1)])
    assert state.gpu_free[0].tolist() == [0, MILLI, MILLI, 0]        # 2 free, not the busy slot 0
    assert state.gpu_free[1].tolist() == [MILLI, 0, NO_GPU, NO_GPU]  # unknown to Prometheus: as Kubernetes says
    assert np.isnan(state.temp_headroom[1]).all()


def test_failing_facts_are_reported_once_retried_after_the_ttl_and_never_hold_a_pod_back(caplog):
    calls, clock = [], Clock()

    def facts():
        calls.append(clock.now)
        if len(calls) < 3:
            raise TelemetryUnavailable("Prometheus at http://prom:9090 did not answer")
        return {"b": NodeGpuFacts({s: 30.0 for s in range(8)}), "a": NodeGpuFacts({s: 1.0 for s in range(8)})}

    placer = EnginePlacer("gputide", gpu_facts=facts, facts_ttl_s=15.0, clock=clock)
    nodes = [view("a"), view("b")]
    with caplog.at_level(logging.WARNING):
        assert placer(ONE, nodes) == "a" and placer(ONE, nodes) == "a"     # placed without facts
        clock.now = 20.0
        assert placer(ONE, nodes) == "a"
    assert calls == [0.0, 20.0] and placer.facts_failing
    assert sum("GPU facts unavailable" in r.message for r in caplog.records) == 1
    clock.now = 40.0
    assert placer(ONE, nodes) == "b" and not placer.facts_failing          # back: the cool node wins


def test_a_gpu_with_bad_memory_is_the_last_slot_counted_free():
    # Kubernetes says 2 of 4 free; slot 0 is idle but its memory is unhealthy, slot 3 is busy: 1 and 2 are free
    facts = {"n": NodeGpuFacts({s: 20.0 for s in range(4)}, frozenset({3}), frozenset({0}))}
    state = EnginePlacer("gputide", gpu_facts=lambda: facts).cluster([view("n", total=4, usable=2)])
    assert state.gpu_free[0].tolist() == [0, MILLI, MILLI, 0]
    # with three free by Kubernetes' count it is taken only after the busy one would be: idle slots first
    state = EnginePlacer("gputide", gpu_facts=lambda: facts).cluster([view("n", total=4, usable=3)])
    assert state.gpu_free[0].tolist() == [0, MILLI, MILLI, MILLI]
