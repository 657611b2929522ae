"""The controller's terminationGracePeriodSeconds outlasts the longest action plus the Lease release: on SIGTERM the
controller finishes the action in progress and releases its Lease (balancer/cmd/run.py); a SIGKILL before that
leaves the action half done (Kueue quota lent for a grow that never happened, with nobody to give it back) and
the Lease held, and the standby waits it out (90 s) before anyone acts. Every action ends within the deadline the
manifest's `--action-deadline` sets (balancer/actuate/k8s_budget.py), so the figure is
`balancer.app.health.stop_budget_s` of that deadline and of the Lease elector `gputide run` builds. The liveness
limits of the controller and of the secondary scheduler follow from the same deadlines, and
GputideControllerNotReconciling fires only once the kubelet's restart of a stuck controller has not helped."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.app.health import action_budget_s, call_budget_s, stall_limit, stop_budget_s
from balancer.cli import build_parser
from balancer.cmd._args import parse_interval
from balancer.cmd.run import action_deadline, lease_elector

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "deploy" / "base"
SLACK_S = 60   # the grace period is derived from the budget, not a guess far above it
# and leaves this much over the budget: at equality a way out that took its whole budget met the SIGKILL with the
# steps between its calls and the interpreter's exit still to go (240 s of 240 s once the release wrote again)
MARGIN_S = 10


def deployment(path: Path) -> dict:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]


def controller_pod() -> dict:
    return deployment(BASE / "controller.yaml")


def controller_budgets() -> tuple[float, object, object]:
    """The action deadline, the Lease elector's API and the parsed arguments of the deployed `gputide run`."""
    (container,) = controller_pod()["containers"]
    args = build_parser().parse_args(container["args"])
    deadline = action_deadline(args.action_deadline)
    assert KubernetesActuator(None, action_deadline_s=deadline).action_deadline_s == deadline
    return deadline, lease_elector(None, "gputide-controller", "gputide", parse_interval(args.interval)).api, args


def restart_after_s(probe: dict, stall_s: float) -> float:
    """The longest the kubelet takes to restart a container whose /healthz has failed since `stall_s`: the failures
    it needs, `periodSeconds` apart, the first up to one period late."""
    return stall_s + probe["failureThreshold"] * probe["periodSeconds"]


def test_the_grace_period_outlasts_the_longest_action_and_the_lease_release():
    deadline, lease, _ = controller_budgets()
    assert (deadline, call_budget_s(lease)) == (180.0, 5.0)   # --action-deadline=3m; one try of 5 s per Lease call
    needed = stop_budget_s(deadline, lease)
    # the save and the release each after a renewal in flight, each written again once after SIGTERM: 6 + 6 calls
    assert needed == 180.0 + 12 * 5.0 == 240.0   # as deploy/base/controller.yaml's comment says
    grace = controller_pod()["terminationGracePeriodSeconds"]
    assert needed + MARGIN_S <= grace <= needed + SLACK_S
    comment = re.sub(r"\s*#\s*", " ", (BASE / "controller.yaml").read_text())
    assert f"Lease released, each after a renewal in flight (12 calls x 5 s = 60 s): {needed:.0f} s" in comment
    assert f"stop_budget_s, and {grace - needed:.0f} s to spare" in comment and f"before SIGKILL: {grace} s" in comment


def test_the_liveness_probe_allows_the_longest_action_and_the_manifest_says_so():
    """The kubelet restarts the controller once /healthz fails `failureThreshold` times: never before the loop has
    gone without moving for longer than an action's deadline and the ledger's write (balancer/app/health.py), whose
    figure the manifest's comment gives for its own --interval."""
    (container,) = controller_pod()["containers"]
    probe = container["livenessProbe"]
    assert probe["httpGet"] == {"path": "/healthz", "port": "metrics"}
    deadline, lease, args = controller_budgets()
    assert args.metrics_port == next(p["containerPort"] for p in container["ports"] if p["name"] == "metrics")
    action_s = action_budget_s(deadline, lease)
    limit = stall_limit(parse_interval(args.interval), action_s)
    assert (action_s, limit) == (260.0, 300.0)   # the action's deadline, then the ledger; under the 5-minute floor
    text = (BASE / "controller.yaml").read_text()
    assert f"({action_s:.0f} s): {limit:.0f} s at --interval={args.interval}" in text
    assert restart_after_s(probe, limit) == 360.0 and "restarted within 6 minutes" in text


def test_the_schedulers_liveness_probe_allows_its_deadlines_and_the_manifest_says_so():
    """A pass's reads and each pod's turn end within their deadlines (balancer/actuate/k8s_scheduler.py) and each
    begins with a heartbeat: the limit `gputide schedule` gives its probe, at the deployed --interval."""
    path = ROOT / "deploy" / "components" / "scheduler" / "scheduler.yaml"
    (container,) = deployment(path)["containers"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    args = build_parser().parse_args(container["args"])
    sched = SecondaryScheduler(None, args.scheduler_name, lambda r, n: None)
    limit = stall_limit(parse_interval(args.interval), sched.turn_budget_s)
    assert (sched.reads_s, sched.turn_s, limit) == (120.0, 60.0, 300.0)
    assert f"{limit:.0f} s at --interval={args.interval}" in re.sub(r"\s*#\s*", " ", path.read_text())


def test_the_not_reconciling_alert_fires_only_after_the_kubelet_has_restarted_a_stuck_controller():
    """GputideControllerNotReconciling (the last cycle ended more than `threshold` ago, for `for`) must not page
    for what the liveness probe mends by itself: a controller stuck in a call is restarted first. With the limit
    derived from retries (977 s) the alert fired 7 minutes before the kubelet acted. It must not fire either for a
    cycle holding an action that runs to its deadline, between two cycle ends an interval apart."""
    rules = yaml.safe_load((ROOT / "rules" / "gputide-alerts.yaml").read_text())
    alert = next(r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "GputideControllerNotReconciling")
    threshold = float(re.search(r"gputide_last_reconcile_timestamp_seconds > (\d+)", alert["expr"]).group(1))
    fires_after = threshold + parse_interval(alert["for"])
    deadline, lease, args = controller_budgets()
    interval = parse_interval(args.interval)
    probe = controller_pod()["containers"][0]["livenessProbe"]
    restarted = restart_after_s(probe, stall_limit(interval, action_budget_s(deadline, lease)))
    assert (threshold, fires_after, restarted) == (300.0, 600.0, 360.0)
    assert fires_after > restarted + probe["periodSeconds"]   # the first failure may come a period late
    assert threshold > interval + action_budget_s(deadline, lease)   # 290 s: a cycle of one action at its deadline
