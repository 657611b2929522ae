"""The Alibaba v2023 node list reads the same through `fleet.alibaba_fleet` (the simulator's fleet) and through
`replay.load_nodes` (`gputide place`)."""

from __future__ import annotations

from balancer import fleet
from balancer.plan.placement.replay import load_nodes

ROWS = "sn,cpu_milli,memory_mib,gpu,model\nn0,96000,786432,8,V100M32\nn1,32000,262144,0,\n"


def test_a_node_list_with_a_byte_order_mark_loads(tmp_path):
    """Excel writes UTF-8 CSVs with a BOM; it made the first column '\\ufeffsn', so the header missed 'sn'."""
    path = tmp_path / "nodes.csv"
    path.write_bytes(b"\xef\xbb\xbf" + ROWS.encode())
    built = fleet.alibaba_fleet(path)
    assert [n.name for n in built.nodes] == ["n0", "n1"] and built.n_gpus == 8
    assert load_nodes(path).names == ("n0", "n1")
