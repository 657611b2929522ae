"""A new `gputide run --shard` process on a selector by GPU model, with a GPU node dark from its start: the node's
product label (GPU feature discovery's `nvidia.com/gpu.product`) gives it its model (`shard.labelled_model`), so the
shard of that model owns it and holds still for it as the unsharded controller does. Before, no reading of the
process had shown its model: the node was no shard's, the shard read ok without it and its power caps were not
renewed."""

from __future__ import annotations

from types import MappingProxyType

from balancer.actuate.dryrun import DryRunActuator
from balancer.cmd._run_parts import bound_to_shard
from balancer.inventory import NodeMeta
from balancer.loop import Reconciler
from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource
from balancer.telemetry.shard import ShardedSource, parse_selector
from tests.multisite.test_multisite_shard_fail_static import NOW, taint_every_node
from tests.multisite.test_multisite_shard_nodes_gauge import owned
from tests.multisite.test_multisite_shard_nodes_new_term import Cluster

PRODUCT = "nvidia.com/gpu.product"


class Labelled(Cluster):
    """`Cluster` (node-a, node-b, node-c: H100s), each node labelled with its product as GPU feature discovery does."""

    def nodes(self):
        listed = super().nodes()
        return None if listed is None else {
            n: NodeMeta(labels=MappingProxyType(dict(m.labels) | {PRODUCT: "NVIDIA-H100-80GB-HBM3"}))
            for n, m in listed.items()}


def controller(fleet: Cluster, selector: str | None) -> Reconciler:
    """`gputide run [--shard s --selector SELECTOR] --dry-run`, a new process."""
    source = PrometheusTelemetrySource(PrometheusOptions(url="http://prom.invalid", stale_after_s=60.0),
                                       client=fleet, clock=lambda: NOW, node_overrides=fleet.nodes)
    actuator = DryRunActuator()
    if selector is not None:
        source = ShardedSource(source, parse_selector("s", selector))
        actuator = bound_to_shard(actuator, source)
    return Reconciler(source=source, actuator=actuator, planner=taint_every_node, clock=lambda: NOW)


def test_a_new_shard_process_on_model_owns_and_holds_still_for_a_node_dark_from_its_start_by_its_product_label():
    fleet = Labelled()
    fleet.dark.add("node-c")
    assert controller(fleet, None).run_once().status == "fail_static"   # the unsharded controller holds still
    for selector in ("model=H100-SXM", "pool=H100-SXM"):
        shard = controller(fleet, selector)
        assert shard.run_once().status == "fail_static", selector
        assert owned(shard) == {"s": {"node-a", "node-b", "node-c"}}, selector
    # another model's shard does not claim it
    other = controller(fleet, "model=A100-SXM4-80GB")
    other.run_once()
    assert "node-c" not in owned(other).get("s", set())
