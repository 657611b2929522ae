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
