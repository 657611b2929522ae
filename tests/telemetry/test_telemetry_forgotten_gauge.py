"""A GPU gone from telemetry is held for, then forgotten after `forget_vanished_after_s`; forgotten while its node is
still a Kubernetes node, it is out of the plan and `gputide_gpus_forgotten{node}` says so every reading, until it
reports again or its node leaves the cluster."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry
from test_telemetry_prometheus_unit import GPUS, NOW, FakeClient

from balancer.errors import TelemetryError
from balancer.metrics import ControllerMetrics
from balancer.model import NodeMeta
from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource
from balancer.telemetry.shard import ShardedSource, ShardSelector

NODE_C = [("node-c", "0", "GPU-c0", "Tesla T4"), ("node-c", "1", "GPU-c1", "Tesla T4")]


class Fleet:
    """A source over a fake Prometheus whose node-c exporter can go dark, with a settable clock and node list."""

    def __init__(self, kubernetes: bool = True) -> None:
        self.clock = [NOW]
        self.nodes = {f"node-{n}": NodeMeta(labels={}) for n in "abc"}
        self.client = FakeClient()
        self.src = PrometheusTelemetrySource(PrometheusOptions(url="http://prom.invalid", scrape_interval_s=15),
                                             client=self.client, clock=lambda: self.clock[0],
                                             node_overrides=(lambda: self.nodes) if kubernetes else None)
        self.registry = CollectorRegistry()
        self.metrics = ControllerMetrics(self.registry)
        self.read(node_c=True)

    def read(self, at: float = 0.0, node_c: bool = False, source=None):
        """One reading `at` seconds in, as the loop takes it: the metrics are set whether it is held or not."""
        self.clock[0] = NOW + at
        source = source or self.src
        GPUS.extend(NODE_C if node_c else ())
        snap = None
        try:
            snap = source.snapshot()
        except TelemetryError:
            pass
        finally:
            del GPUS[3:]
        self.metrics.set_reading(snap, source, held=snap is None)
        return snap

    def gauge(self, node: str = "node-c") -> float | None:
        return self.registry.get_sample_value("gputide_gpus_forgotten", {"node": node})


def test_gpus_forgotten_while_their_node_is_listed_are_gauged_until_they_report_again():
    fleet = Fleet()
    for at in (0, 300, 599):   # held still for them: missing telemetry, not forgotten yet
        assert fleet.read(at) is None and fleet.gauge() is None
    assert fleet.read(600) is not None
    assert fleet.src.forgotten == {"GPU-c0": "node-c", "GPU-c1": "node-c"}
    assert fleet.gauge() == 2
    fleet.client.fail = True   # a reading that gets nowhere: the controller has still forgotten them
    assert fleet.read(615) is None and fleet.gauge() == 2
    fleet.client.fail = False
    assert fleet.read(630) is not None and fleet.gauge() == 2   # every reading, not only the one that forgot them
    assert fleet.read(645, node_c=True).n_gpus == 5   # back: in the plan again, the series gone
    assert fleet.src.forgotten == {} and fleet.gauge() is None


def test_the_gauge_clears_when_the_node_leaves_the_cluster_and_counts_nothing_removed_at_once():
    fleet = Fleet()
    fleet.read(0)
    fleet.read(600)
    assert fleet.gauge() == 2
    del fleet.nodes["node-c"]
    fleet.read(615)
    assert fleet.src.forgotten == {} and fleet.gauge() is None

    fleet = Fleet()
    del fleet.nodes["node-c"]   # forgotten at once, its node gone: nothing to gauge
    assert fleet.read(0) is not None and fleet.src.forgotten == {} and fleet.gauge() is None


def test_without_the_kubernetes_node_list_a_forgotten_gpu_is_not_gauged():
    # nothing tells a removed node from a dark exporter there: a removed node must not read as forgotten for good
    fleet = Fleet(kubernetes=False)
    fleet.read(0)
    assert fleet.read(600) is not None
    assert fleet.src.forgotten == {} and fleet.gauge() is None


def test_a_replica_that_stops_leading_stops_reporting_forgotten_gpus():
    fleet = Fleet()
    fleet.read(0)
    fleet.read(600)
    fleet.metrics.standby()
    assert fleet.gauge() is None


@pytest.mark.parametrize(("shard_nodes", "gauged"), [({"node-c"}, 2.0), ({"node-a", "node-b"}, None)],
                         ids=["the shard holding the node", "another shard"])
def test_a_shard_gauges_the_forgotten_gpus_of_its_own_nodes(shard_nodes, gauged):
    fleet = Fleet()
    shard = ShardedSource(fleet.src, ShardSelector("s", nodes=frozenset(shard_nodes)))
    fleet.read(0, node_c=True, source=shard)
    fleet.read(10, source=shard)
    fleet.read(610, source=shard)
    assert fleet.gauge() == gauged
