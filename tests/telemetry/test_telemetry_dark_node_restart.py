"""A GPU node whose exporter is dark holds the controller still whether or not this process ever saw its GPUs: a
restarted controller, or a standby that becomes the leader, knows the node from the Kubernetes API (labelled
`nvidia.com/gpu.present=true`, the exporter's nodeSelector) and holds for it (`missing_telemetry`) as the controller
that saw it vanish does, for `forget_vanished_after_s`; then it is forgotten loudly, as a vanished GPU is. Before, the
node and its pods silently left the snapshot and the controller planned without them."""

from __future__ import annotations

import contextlib
import logging

import pytest
from prometheus_client import CollectorRegistry
from test_telemetry_prometheus_unit import FIELDS, NOW, FakeClient

from balancer.errors import MissingTelemetry, TelemetryError
from balancer.metrics import ControllerMetrics
from balancer.model import NodeMeta
from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource
from balancer.telemetry.shard import ShardedSource, ShardSelector

GPU = {"nvidia.com/gpu.present": "true"}
PODS = [("GPU-a0", "ml", "infer-0", "inference"), ("GPU-b0", "ml", "train-0", "training")]


def dark_b() -> FakeClient:
    """node-b's exporter down: its GPU-b0 and the pod on it gone from telemetry."""
    return FakeClient(drop={("GPU-b0", f) for f in FIELDS}, workloads=PODS[:1])


class Controller:
    def __init__(self, nodes: dict[str, NodeMeta], client: FakeClient) -> None:
        self.clock, self.nodes = [NOW], nodes
        self.src = PrometheusTelemetrySource(PrometheusOptions(url="http://prom.invalid", scrape_interval_s=15),
                                             client=client, clock=lambda: self.clock[0],
                                             node_overrides=lambda: self.nodes)
        self.registry = CollectorRegistry()
        self.metrics = ControllerMetrics(self.registry)

    def read(self, at: float = 0.0, source=None):
        self.clock[0] = NOW + at
        source = source or self.src
        snap = None
        with contextlib.suppress(TelemetryError):
            snap = source.snapshot()
        self.metrics.set_reading(snap, source, held=snap is None)
        return snap

    def gauge(self, node: str = "node-b") -> float | None:
        return self.registry.get_sample_value("gputide_gpus_forgotten", {"node": node})


def gpu_nodes() -> dict[str, NodeMeta]:
    return {"node-a": NodeMeta(labels=GPU), "node-b": NodeMeta(labels=GPU)}


def test_a_restarted_controller_holds_for_a_dark_gpu_node_as_the_one_that_saw_it_does():
    running = Controller(gpu_nodes(), FakeClient(workloads=PODS))
    assert running.read() is not None
    running.src.client = dark_b()
    with pytest.raises(MissingTelemetry, match="vanished") as err:
        running.src.snapshot()
    assert err.value.reason == "missing_telemetry"

    restarted = Controller(gpu_nodes(), dark_b())   # never saw node-b's GPU
    with pytest.raises(MissingTelemetry, match="node-b") as err:
        restarted.src.snapshot()
    assert err.value.reason == "missing_telemetry" and err.value.subjects == ("node-b",)


def test_a_dark_gpu_node_is_held_for_then_forgotten_loudly_and_gauged_until_it_reports(caplog):
    ctl = Controller(gpu_nodes(), dark_b())
    with caplog.at_level(logging.WARNING, logger="balancer.telemetry.prometheus"):
        for at in (0, 300, 599):
            assert ctl.read(at) is None and ctl.gauge() is None
        snap = ctl.read(600)
    assert snap is not None and [n.name for n in snap.nodes] == ["node-a"]
    assert ctl.src.forgotten == {"node:node-b": "node-b"} and ctl.gauge() == 1
    assert any("node-b" in r.getMessage() and "still in Kubernetes" in r.getMessage() for r in caplog.records)
    assert ctl.read(615) is not None and ctl.gauge() == 1   # not known anew: forgotten until it reports
    ctl.src.client = FakeClient(workloads=PODS)
    assert ctl.read(630).n_gpus == 3 and ctl.gauge() is None and ctl.src.forgotten == {}
    ctl.src.client = dark_b()   # dark again: its GPU is known now, held for by its UUID
    with pytest.raises(MissingTelemetry, match="GPU-b0"):
        ctl.src.snapshot()


def test_a_gpu_node_that_reports_in_time_is_planned_with_its_pods():
    ctl = Controller(gpu_nodes(), dark_b())
    assert ctl.read(0) is None
    ctl.src.client = FakeClient(workloads=PODS)
    snap = ctl.read(60)
    assert snap is not None and {w.name for w in snap.workloads} == {"ml/infer-0", "ml/train-0"}
    assert "node:node-b" not in ctl.src.absences.known


def test_a_dark_gpu_node_leaving_kubernetes_is_forgotten_at_once_and_not_gauged():
    ctl = Controller(gpu_nodes(), dark_b())
    assert ctl.read(0) is None
    del ctl.nodes["node-b"]
    assert ctl.read(15) is not None and ctl.gauge() is None and ctl.src.forgotten == {}


@pytest.mark.parametrize("nodes", [
    {"node-a": NodeMeta(labels=GPU), "node-b": NodeMeta(labels={})},
    {"node-a": NodeMeta(labels=GPU), "node-b": NodeMeta(labels={"nvidia.com/gpu.present": "false"})},
    {"node-a.example.com": NodeMeta(labels=GPU), "node-b.example.com": NodeMeta(labels=GPU)},
], ids=["a node without the label (a CPU node, a pool the exporter does not run on)", "labelled not present",
        "hostname labels that are not node names"])
def test_no_hold_for_a_node_the_exporter_does_not_run_on_or_that_cannot_be_told_by_name(nodes):
    ctl = Controller(nodes, dark_b())
    assert ctl.read(0) is not None and ctl.src.forgotten == {}


def test_gpus_forgotten_while_their_node_is_listed_do_not_hold_again_by_its_name():
    ctl = Controller(gpu_nodes(), FakeClient(workloads=PODS))
    assert ctl.read(0) is not None
    ctl.src.client = dark_b()
    assert ctl.read(15) is None
    assert ctl.read(615) is not None and ctl.src.forgotten == {"GPU-b0": "node-b"}
    assert ctl.read(630) is not None and ctl.gauge() == 1


@pytest.mark.parametrize(("shard_nodes", "held"), [({"node-b"}, True), ({"node-a"}, False)],
                         ids=["the shard owning the dark node", "another shard"])
def test_a_restarted_shard_holds_for_a_dark_gpu_node_only_where_it_owns_it(shard_nodes, held):
    ctl = Controller(gpu_nodes(), dark_b())
    shard = ShardedSource(ctl.src, ShardSelector("s", nodes=frozenset(shard_nodes)))
    assert (ctl.read(0, source=shard) is None) is held
