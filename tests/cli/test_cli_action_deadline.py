"""`gputide run --action-deadline`: every action's API calls, its undo included, end within it (balancer/actuate/
k8s_budget.py). It is refused, exit 2 naming the flag, when shorter than the longest action needs on a slow but
healthy API server or longer than 10 minutes (the grace period and the liveness limit follow it), and it reaches
the Kubernetes actuator `gputide run` builds."""

from __future__ import annotations

import argparse

import pytest
import yaml

from balancer.actuate.k8s_budget import ACTION_DEADLINE_S, least_action_deadline_s
from balancer.cli import main
from balancer.cmd import run as run_cmd
from balancer.metrics import ControllerMetrics

PROM = "http://127.0.0.1:1"   # nothing answers there: every case must fail before a query


@pytest.mark.parametrize("value", ["2m", "179s", "11m", "0", "-3m", "soon", "nan", "inf"])
def test_a_deadline_out_of_range_exits_2_naming_the_flag(value: str, capsys) -> None:
    assert main(["run", "--prometheus", PROM, "--dry-run", "--once", "--metrics-port", "0",
                 f"--action-deadline={value}"]) == 2
    err = capsys.readouterr().err
    assert "--action-deadline" in err and f"'{value}'" in err and "from 180s" in err and "to 600s" in err, err


def test_the_default_is_the_actuators_and_no_shorter_than_the_least() -> None:
    parser = argparse.ArgumentParser()
    run_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["run", "--prometheus", PROM])
    assert run_cmd.action_deadline(args.action_deadline) == ACTION_DEADLINE_S >= least_action_deadline_s()


def test_the_deadline_reaches_the_kubernetes_actuator(tmp_path) -> None:
    kubeconfig = tmp_path / "kubeconfig"   # nothing is asked of it while the reconciler is built
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "f",
        "clusters": [{"name": "f", "cluster": {"server": "http://127.0.0.1:1"}}], "users": [{"name": "f", "user": {}}],
        "contexts": [{"name": "f", "context": {"cluster": "f", "user": "f"}}]}))
    parser = argparse.ArgumentParser()
    run_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["run", "--prometheus", PROM, "--once", "--kubeconfig", str(kubeconfig),
                              "--action-deadline", "7m"])
    assert run_cmd.build_reconciler(args, ControllerMetrics()).actuator.action_deadline_s == 420.0
