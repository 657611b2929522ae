"""`gputide run --shard NAME --selector ...` hands the reconcile loop an actuator bound to its shard
(`_run_parts.ShardBound`: an action on a node relabelled out of the shard since the snapshot is refused); an
unsharded controller's actuator is the Kubernetes one as it is."""

from __future__ import annotations

import argparse

import pytest

from balancer.actuate import kubernetes as kube_mod
from balancer.actuate.dryrun import DryRunActuator
from balancer.cmd import run as run_cmd
from balancer.cmd._run_parts import ShardBound
from balancer.metrics import ControllerMetrics


@pytest.mark.parametrize("argv, bound", [
    (["--shard", "east", "--selector", "pool=H100-SXM"], True),
    ([], False),
], ids=["a shard", "no shard"])
def test_the_loops_actuator_is_bound_to_its_shard(api, monkeypatch, argv, bound) -> None:
    monkeypatch.setattr(kube_mod, "build_api_client", lambda kubeconfig=None: api)
    parser = argparse.ArgumentParser()
    run_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["run", "--prometheus", "http://127.0.0.1:9", "--dry-run", *argv])
    rec = run_cmd.build_reconciler(args, ControllerMetrics())
    assert isinstance(rec.actuator, ShardBound) is bound
    inner = rec.actuator.inner if bound else rec.actuator
    assert isinstance(inner, DryRunActuator)


def test_power_caps_are_renewed_ahead_of_the_interval_and_only_on_the_shards_nodes(api, monkeypatch) -> None:
    """A shard renews the expiry of its own nodes' caps only (a dead shard's caps must lapse), at least three reconcile
    intervals ahead (a 10-minute --interval would otherwise let a 15-minute expiry pass between two cycles)."""
    from balancer.actuate.k8s_nodes import POWER_CAP_TTL_S

    monkeypatch.setattr(kube_mod, "build_api_client", lambda kubeconfig=None: api)
    parser = argparse.ArgumentParser()
    run_cmd.register(parser.add_subparsers())
    base = ["run", "--prometheus", "http://127.0.0.1:9"]
    sharded = run_cmd.build_reconciler(parser.parse_args(
        [*base, "--interval", "10m", "--shard", "east", "--selector", "pool=H100-SXM"]), ControllerMetrics())
    actuator = sharded.actuator.inner
    assert actuator.power_cap_ttl_s == 1800.0
    assert not actuator.power_cap_nodes("node-a")
    sharded.source.nodes.add("node-a")   # as a snapshot of the shard would
    assert actuator.power_cap_nodes("node-a") and not actuator.power_cap_nodes("node-b")
    plain = run_cmd.build_reconciler(parser.parse_args(base), ControllerMetrics()).actuator
    assert plain.power_cap_ttl_s == POWER_CAP_TTL_S and plain.power_cap_nodes is None
