"""What became of an action, as data: an actuator reports each action it was given as an `ActionResult`.

Temporary failures (429 on a PDB, 409 conflicts, 5xx) come back as `Outcome.RETRY`; permanent ones as
`Outcome.FAILED`; neither raises, so one bad action never stops a reconcile cycle. A failed action whose change
may have been made all the same (a write timed out: the API server may have carried it out) says so
(`ActionResult.maybe_applied`), and the safety budgets count it as spent.

Refusals. An actuator may refuse an action itself, before changing anything, for what the planner does not model.
`ActionResult.refused` says what it refused (`Refused`), so the loop and the planner need not read its words:
`TARGET`, the action's target alone (a migration's node: the pod's hard topology spread constraints there, the
node's GPUs held for others, the pod's rules as the node reads now), so the same workload may well go elsewhere;
`WORKLOAD`, the workload or service itself (a pod pinned or being deleted since the plan, a Deployment another
controller keeps), so no action of that kind on it would do for now. An actuator raising its errors marks its own
refusals with a `refused` attribute (`refusal`; the Kubernetes actuator's: `k8s_migrate.TargetRefused`,
`TargetHeld`, `WorkloadRefused`), and `refused_result` carries it into the result, with the code `refused` whatever
the outcome (a hold's RETRY has no HTTP status, and read as a transport error without it).

Caps. An action carried out, but short of what it asked, says how far it went when the planner must know: a scale
whose target runs at most so many replicas (`ActionResult.capped_to`: an HPA floor capped at its maxReplicas).

These are pure data and pure functions, below every layer that builds or reads a result: the actuators
(`balancer.actuate`, whose `base` re-exports them beside the `Actuator` protocol), the loop, and the shard wrappers
of `balancer.telemetry.shard`, which refuse for the shard they read.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from balancer.actions import Action


class Outcome(StrEnum):
    APPLIED = "applied"
    DRY_RUN = "dry_run"
    RETRY = "retry"        # temporary: try again in a later cycle
    FAILED = "failed"      # permanent: do not retry this action


class Refused(StrEnum):
    """What an actuator refused, before changing anything (module docstring, "Refusals")."""

    TARGET = "target"       # the action's target alone (a migration's node): the workload may go elsewhere
    WORKLOAD = "workload"   # the workload or service itself: no action of that kind on it would do for now


@dataclass(frozen=True, slots=True)
class ActionResult:
    action: Action
    outcome: Outcome
    detail: str = ""
    code: str = ""  # why a RETRY/FAILED happened: an HTTP status ("409", "429"), "transport" (balancer.actuation_codes)
    # a RETRY/FAILED whose change may have landed all the same (a write got no answer): the loop counts it against
    # the safety budgets as if applied (never told to the planner as done); the simulator and dry run never set it
    maybe_applied: bool = False
    # what the actuator refused itself, before changing anything (`Refused`); None: not such a refusal
    refused: Refused | None = None
    # an APPLIED result whose actuator wrote nothing, the world already as the action wanted it or past it: a
    # training resize left as it is ("(already)": a shrink of a Job its owner shrank as far since the plan's view, a
    # give-back without a valid record), by the Kubernetes actuator or the simulator's (`SimCluster.scale_training`
    # returning False). The loop tells the planner (`planner.acknowledge`), which remembers no such shrink as
    # gputide's. The dry run, which never writes, says True too (its DRY_RUN results are never acknowledged)
    unchanged: bool = False
    # an APPLIED ScaleInference whose target capped it: the most replicas it will run (an HPA floor above its
    # maxReplicas: that maxReplicas, the floor written), fewer than the action asked. The loop tells the capacity
    # planner (`planner.cap`), which asks no more of the service, nor makes room for more, while it believes the cap
    # (`balancer.plan.planner`, "Capped scales"). None: not capped (and always for the simulator and dry run)
    capped_to: int | None = None


def refusal(err: BaseException) -> Refused | None:
    """What an actuator's error says it refused: its `refused` attribute (an error class of the actuator's own
    refusals sets one), None for any other error."""
    what = getattr(err, "refused", None)
    return what if isinstance(what, Refused) else None


def refused_result(result: ActionResult, err: BaseException) -> ActionResult:
    """`result`, the failed result of the error `err`, with what `err` says the actuator refused (`refusal`) and the
    code `refused` (`balancer.actuation_codes`); `result` unchanged for any other error."""
    what = refusal(err)
    return result if what is None else replace(result, refused=what, code="refused")
