"""The snapshot says which nodes' GPUs telemetry has forgotten while Kubernetes still lists them, and how many
(`ClusterSnapshot.forgotten_nodes`): their pods are not in it, and the capacity planner must not read the replicas
running there as pending, nor more of them than those GPUs hold. A shard's cut keeps the whole cluster's: a service
placed there may run on another's."""

from __future__ import annotations

from test_telemetry_dark_node_restart import GPU, Controller, dark_b
from test_telemetry_forgotten_gauge import Fleet

from balancer.model import NodeMeta
from balancer.telemetry.shard import ShardSelector, restrict


def test_the_snapshot_names_the_nodes_forgotten_while_listed_until_they_report_again():
    fleet = Fleet()
    assert fleet.read(0) is None   # held still for node-c: missing, not forgotten yet
    snap = fleet.read(600)
    assert snap.forgotten_nodes == {"node-c": 2} and "node-c" not in {n.name for n in snap.nodes}
    part, _ = restrict(snap, ShardSelector(name="a", nodes=frozenset({"node-a"})))
    assert part.forgotten_nodes == {"node-c": 2}
    assert fleet.read(615, node_c=True).forgotten_nodes == {}


def test_a_node_gone_from_kubernetes_is_not_forgotten_in_the_snapshot():
    fleet = Fleet()
    del fleet.nodes["node-c"]   # its pods are gone with it (rescheduled: pending for real)
    assert fleet.read(0).forgotten_nodes == {}


def test_a_node_known_by_name_only_counts_its_gpu_count_label_else_unknown():
    """A node dark since before this process saw its GPUs: GPU feature discovery's label says how many, if any."""
    for labels, count in (({**GPU, "nvidia.com/gpu.count": "8"}, 8), (GPU, 0)):
        ctl = Controller({"node-a": NodeMeta(labels=GPU), "node-b": NodeMeta(labels=labels)}, dark_b())
        assert ctl.read(0) is None
        assert ctl.read(600).forgotten_nodes == {"node-b": count}
