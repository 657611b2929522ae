"""The controller's terminationGracePeriodSeconds outlasts the longest action plus the Lease release: on SIGTERM the
controller finishes the action in progress and releases its Lease (balancer/cmd/run.py); a SIGKILL before that
leaves the action half done (Kueue quota lent for a grow that never happened, with nobody to give it back) and
the Lease held, and the standby waits it out (90 s) before anyone acts. The figure is
`balancer.app.health.stop_budget_s` of the actuator and Lease elector `gputide run` builds, with their own retry
settings; the call counts it rests on are walked in tests/k8s/test_k8s_action_budget.py."""

from __future__ import annotations

from pathlib import Path

import yaml

from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.app.health import ACTION_API_CALLS, action_budget_s, call_budget_s, stall_limit, stop_budget_s
from balancer.cli import build_parser
from balancer.cmd.run import lease_elector, parse_interval

BASE = Path(__file__).resolve().parents[2] / "deploy" / "base"
SLACK_S = 60   # the grace period is derived from the budget, not a guess far above it


def budgets() -> tuple[object, object]:
    """The API gateways of the actuator and the Lease elector `gputide run` builds, with their retry settings."""
    return KubernetesActuator(None).api, lease_elector(None, "gputide-controller", "gputide", 30.0).api


def controller_pod() -> dict:
    docs = [d for d in yaml.safe_load_all((BASE / "controller.yaml").read_text()) if d]
    return next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]


def test_the_grace_period_outlasts_the_longest_action_and_the_lease_release():
    actuator, lease = budgets()
    assert (call_budget_s(actuator), call_budget_s(lease)) == (43.5, 5.0)   # 4 tries of 10 s + 3.5 s backoff; 1 of 5 s
    # a ScaleTraining that moves Kueue quota, 22 calls: as deploy/base/controller.yaml's comment says
    assert max(ACTION_API_CALLS, key=ACTION_API_CALLS.get) == "scale_training"
    needed = stop_budget_s(actuator, lease)
    assert needed == 22 * 43.5 + 8 * 5.0 == 997.0
    assert needed <= controller_pod()["terminationGracePeriodSeconds"] <= needed + SLACK_S


def test_the_liveness_probe_allows_the_longest_action_and_the_manifest_says_so():
    """The kubelet restarts the controller once /healthz fails `failureThreshold` times: never before the loop has
    gone without moving for longer than its worst action (balancer/app/health.py), whose figure the manifest's
    comment gives for its own --interval."""
    (container,) = controller_pod()["containers"]
    probe = container["livenessProbe"]
    assert probe["httpGet"] == {"path": "/healthz", "port": "metrics"}
    args = build_parser().parse_args(container["args"])
    assert args.metrics_port == next(p["containerPort"] for p in container["ports"] if p["name"] == "metrics")
    actuator, lease = budgets()
    limit = stall_limit(parse_interval(args.interval), action_budget_s(actuator, lease))
    assert limit == 977.0 > max(ACTION_API_CALLS.values()) * call_budget_s(actuator)   # the action, then the ledger
    text = (BASE / "controller.yaml").read_text()
    assert f": {limit:.0f} s at --interval={args.interval}" in text
    assert f": {stop_budget_s(actuator, lease):.0f} s, balancer/app/health.py" in text
