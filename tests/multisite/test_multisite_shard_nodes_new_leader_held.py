"""A shard's nodes are its own whether their telemetry is fresh or not: a replica that takes the lead starts with no
node recorded, and a reading refused for one of its nodes' telemetry (a stale sample, a NaN) still shows which nodes
its selector matches. It reported gputide_shard_nodes{shard="a"} 0 and no gputide_shard_node_info while it held
still, so after 15 minutes GputideGpuNodeInNoShard fired for every node of the shard, and its runbook said to
relabel nodes labelled right."""

from __future__ import annotations

import math

import pytest

from tests.multisite.test_multisite_shard_fail_static import NOW, Fleet, controller
from tests.multisite.test_multisite_shard_nodes_gauge import owned

FAULTS = {
    "a stale sample": lambda f: f.values.update({("GPU-a1", "last_sample"): NOW - 600}),
    "a NaN reading": lambda f: f.values.update({("GPU-a1", "temperature_c"): math.nan}),
}


@pytest.mark.parametrize("fault", FAULTS.values(), ids=FAULTS.keys())
def test_a_new_leader_held_from_its_first_reading_reports_its_shards_nodes(fault):
    fleet = Fleet()
    fleet.hosts["node-c"] = "a"
    fault(fleet)
    a = controller(fleet, "a")   # the new leader: no reading of its own yet
    assert a.run_once().status == "fail_static"
    assert owned(a) == {"a": {"node-a", "node-c"}}


def test_a_node_relabelled_out_during_a_hold_leaves_the_shards_series():
    fleet = Fleet()
    fleet.hosts["node-c"] = "a"
    a = controller(fleet, "a")
    assert a.run_once().status == "ok" and owned(a) == {"a": {"node-a", "node-c"}}
    FAULTS["a stale sample"](fleet)
    fleet.hosts["node-c"] = "b"   # relabelled into shard b while shard a holds still
    assert a.run_once().status == "fail_static"
    assert owned(a) == {"a": {"node-a"}}
