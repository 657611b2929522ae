"""Which failed migrations the actuator refused for their target alone: the planner then moves the workload
elsewhere next cycle, rather than not at all (`balancer.plan.planner`, "Refused targets").

The planner does not model everything that decides whether a pod's replacement may run on a node. The Kubernetes
actuator checks the rest on the target before anything changes (`balancer.actuate.k8s_migrate`) and refuses the move
when the target fails it:

* the pod's own rules or its volumes' node affinity as the node reads now, and its hard topology spread constraints
  there (`placement_refusal`, `k8s_spread.spread_refusal`): FAILED, code `refused`, `migrate NS/POD: NODE has ...`;
* the target's GPUs held for others (`reserve_change`: a preemptor's or a starving pod's hold written by the
  secondary scheduler, `k8s_holds`, or another owner's move): RETRY, `migrate NS/POD: NODE is held for ...` or
  `migrate NS/POD: N GPU(s) of NODE are held for ...`.

Another node may well take the pod, so only that (workload, node) pair is remembered. Every other failure is about
the workload or the moment, not the target: the pod itself (pinned since, being deleted, no controller to recreate it,
its Job would fail, it runs elsewhere: the plan is stale), a PodDisruptionBudget (429), the API (409, 5xx, no answer,
the deadline). Those stay as they were: the workload is not moved for `hotspots.refusedRetryS`.

The actuator says which by its words only (`ActionResult` has an outcome and a code, and a hold's RETRY carries no
HTTP status): the phrases below are the ones `k8s_migrate` writes, and tests/k8s/test_k8s_refused_targets.py runs
the real actuator against each, so a rewording fails there rather than silently turning the memory off.
"""

from __future__ import annotations

from balancer.actuate.base import ActionResult, Outcome
from balancer.model import Migrate

# {node}: the Migrate's target node, as the actuator names it after "migrate NS/POD: "
TARGET_PHRASES = (": {node} has ", ": {node} is held for ", " GPU(s) of {node} are held for ")


def refused_target(result: ActionResult) -> bool:
    """Whether `result` is a migration the actuator refused for its target alone (module docstring): nothing was
    changed, and another node may take the pod."""
    a = result.action
    if not isinstance(a, Migrate) or result.maybe_applied or not result.detail.startswith("migrate "):
        return False
    if result.outcome is Outcome.FAILED and result.code != "refused":   # a 4xx of the API: not the actuator's check
        return False
    if result.outcome not in (Outcome.FAILED, Outcome.RETRY):
        return False
    return any(p.format(node=a.target_node) in result.detail for p in TARGET_PHRASES)
