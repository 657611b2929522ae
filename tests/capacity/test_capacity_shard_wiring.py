"""`gputide run --shard NAME` with capacity shifting builds a sharded capacity planner: a service none of whose
replicas is placed is then left to no shard (balancer/app/capacity_run.py), so two shards never both shrink their
training for its demand. Without --shard the one controller plans every service."""

from __future__ import annotations

import pytest

from balancer.cli import build_parser
from balancer.cmd._run_parts import capacity_parts
from balancer.config import BalancerPolicy


@pytest.mark.parametrize(("shard", "sharded"), [(["--shard", "a", "--selector", "pool=x"], True), ([], False)])
def test_the_shard_flag_reaches_the_capacity_planner(shard, sharded):
    args = build_parser().parse_args(["run", "--prometheus", "http://prom.invalid", "--services", "unused.yaml",
                                      *shard])
    policy = BalancerPolicy().with_section("capacity", enabled=True)
    planner, _ = capacity_parts(args, policy, source=None, interval=60.0, profiles={})
    assert planner.sharded is sharded
