"""The secondary scheduler's terminationGracePeriodSeconds outlasts its way out: on SIGTERM `gputide schedule` ends
its pass before the next pod or binding and releases its Lease (balancer/cmd/schedule.py). With the 30 s default a
pass on a slow API server (reads up to 120 s, a pod's turn up to 60 s) was SIGKILLed with the Lease held, and the
standby waited out a whole lease duration before binding anything. The figure is `stop_budget_s` of the scheduler
and the Lease elector the deployed arguments build: since each of a pass's reads is begun only while not stopped,
what is in flight at the stop (a pod's turn and its Events, or one read) ends the pass, not the reads' 2 minutes."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.app.health import call_budget_s
from balancer.cli import build_parser
from balancer.cmd._args import parse_interval
from balancer.cmd.run import lease_elector
from balancer.cmd.schedule import stop_budget_s

MANIFEST = Path(__file__).resolve().parents[2] / "deploy" / "components" / "scheduler" / "scheduler.yaml"
SLACK_S = 60   # derived from the budget, not a guess far above it
# and leaves this much over the budget: at equality a way out that took its whole budget met the SIGKILL with the
# steps between its calls and the interpreter's exit still to go (100 s of 100 s once the release wrote again)
MARGIN_S = 10


def scheduler_pod() -> dict:
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    return next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]


def test_the_grace_period_outlasts_the_longest_stretch_between_stop_checks_and_the_lease_release():
    (container,) = scheduler_pod()["containers"]
    args = build_parser().parse_args(container["args"])
    assert args.leader_elect, "the Lease is what a SIGKILL would leave held"
    sched = SecondaryScheduler(None, args.scheduler_name, lambda r, n: None)
    lease = lease_elector(None, args.lease_name, "gputide", parse_interval(args.interval)).api
    assert (sched.turn_s, sched.tell_s, call_budget_s(sched.api), call_budget_s(lease)) == (60.0, 10.0, 43.5, 5.0)
    needed = stop_budget_s(sched, lease)
    # a turn and its Events outlast one read in flight (the reads' 120 s deadline no longer counts: each read is
    # begun only while not stopped); as the manifest's comment says
    assert needed == max(60.0 + 10.0, 43.5) + 6 * 5.0 == 100.0   # the release written again once after SIGTERM
    grace = scheduler_pod()["terminationGracePeriodSeconds"]
    assert needed + MARGIN_S <= grace <= needed + SLACK_S
    comment = re.sub(r"\s*#\s*", " ", MANIFEST.read_text())
    assert "(60 s: balancer/actuate/k8s_budget.py) and the Events to the pods it left unbound (10 s)" in comment
    assert "one read (4 tries x 10 s + backoff = 43.5 s)" in comment
    assert f"(6 calls x 5 s = 30 s): {needed:.0f} s, stop_budget_s" in comment
    assert f"and {grace - needed:.0f} s to spare" in comment and f"before SIGKILL: {grace} s" in comment
