"""The `code` label of `gputide_actuation_errors_total{type, outcome, code}`: a fixed set, so every series the
controller can count is created at 0 (balancer.metrics) and the first error of a code reads as an increase.

An actuator's `ActionResult.code` is whatever it saw (the Kubernetes actuator: the API server's HTTP status, or its
own names, `balancer.actuate.kubernetes._code`); `error_code` maps it into `CODES`, one table of the codes and the
outcomes each can come with, from which `error_label_triples` reads every (type, outcome, code) series. The raw
status stays in the action's detail (the log line and the audit record: "HTTP 502 ...").

The HTTP statuses are those the Kubernetes API answers the actuator's calls with (reads, merge patches, evictions,
Events, Kueue objects): 404 also comes back as `retry` when a Kueue Workload was replaced mid-change. Any other
code (408, 401, 502 ...) counts as `other`, with the outcome it came with; no code at all (an actuator that gives
none, such as the simulator's) as `unknown`. The actuator's own refusals (`ActionResult.refused`) come as `refused`
with either outcome: a migration's target held for others is refused for now (retry), not a transport error. 5 action
kinds x 19 (outcome, code) pairs: 95 series.
"""

from __future__ import annotations

from balancer.action_labels import action_classes

RETRY, FAILED = "retry", "failed"   # balancer.actuate.base.Outcome's values (metrics may not import actuate)
BOTH = (RETRY, FAILED)

# code -> the outcomes it comes with (balancer.actuate.kubernetes._translate decides temporary or permanent)
CODES: dict[str, tuple[str, ...]] = {
    "400": (FAILED,),        # bad request: the change is malformed
    "403": (FAILED,),        # RBAC: the ServiceAccount may not
    "404": BOTH,             # the object is gone (retry: a Kueue Workload replaced mid-change)
    "409": (RETRY,),         # conflict that did not resolve on re-read
    "410": (FAILED,),        # gone (an expired resourceVersion)
    "422": (FAILED,),        # the object refuses the change (validation, admission)
    "429": (RETRY,),         # API priority and fairness, or a PodDisruptionBudget refusing an eviction
    "500": (RETRY,),
    "503": (RETRY,),
    "504": (RETRY,),
    "transport": (RETRY,),   # no answer: connection refused, reset or timed out
    "deadline": (RETRY,),    # the action ran out of --action-deadline
    # the actuator's own refusal: a stale plan, Kueue queues it cannot shift between, a migration's target (failed),
    # a target held for others (retry: `balancer.actuate.base.refused_result`)
    "refused": BOTH,
    "unknown": BOTH,         # the actuator gave no code
    "other": BOTH,           # any code not above; the raw one is in the action's detail
}


def error_code(outcome: str, raw: str) -> str:
    """The `code` label for an error `raw` that came back with `outcome`: `raw` if the table has it with that
    outcome, `unknown` for none, `other` otherwise."""
    if not raw:
        return "unknown"
    return raw if outcome in CODES.get(raw, ()) else "other"


def error_label_triples() -> tuple[tuple[str, str, str], ...]:
    """Every (type, outcome, code) `gputide_actuation_errors_total` can count: each action kind with each pair."""
    return tuple((cls.kind, outcome, code) for cls in action_classes()
                 for code, outcomes in CODES.items() for outcome in outcomes)
