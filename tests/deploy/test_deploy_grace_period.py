"""The controller's terminationGracePeriodSeconds outlasts the longest action plus the Lease release: on SIGTERM the
controller finishes the action in progress and releases its Lease (balancer/cmd/run.py); a SIGKILL before that
leaves the Lease held, and the standby waits it out (90 s) before anyone acts. The arithmetic of the comment in
deploy/base/controller.yaml, from the code's own retry settings."""

from __future__ import annotations

import inspect
from pathlib import Path

import yaml

from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.cmd.run import lease_elector

BASE = Path(__file__).resolve().parents[2] / "deploy" / "base"
MIGRATE_CALLS = 9   # read pod, read target node, read + patch it, read + patch source node, evict, Event or 2 to undo
LEASE_RELEASE_CALLS = 4   # a renewal in flight (read + write), then the release (read + write)


def test_the_grace_period_outlasts_the_longest_action_and_the_lease_release():
    defaults = {k: p.default for k, p in inspect.signature(KubernetesActuator).parameters.items()}
    tries = defaults["max_retries"] + 1
    per_call = tries * defaults["request_timeout_s"] + sum(defaults["backoff_s"] * 2**i for i in range(tries - 1))
    lease = lease_elector(None, "gputide-controller", "gputide", 30.0).api
    assert lease.max_retries == 0
    needed = MIGRATE_CALLS * per_call + LEASE_RELEASE_CALLS * lease.timeout_s
    assert (per_call, needed) == (43.5, 411.5)   # as the manifest's comment says

    docs = [d for d in yaml.safe_load_all((BASE / "controller.yaml").read_text()) if d]
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > needed
