"""The Events gputide posts: one core/v1 Event per applied action, on what it changed (the pod a Migrate moved,
the Deployment or Job it scaled, the node it tainted or capped), so `kubectl describe` and `kubectl get events` say
what gputide did and why. `post_event` is also the secondary scheduler's (`k8s_tell`, `k8s_preempt`).

Events are best effort: one attempt, never retried (they must not delay the work they report), and a failure is
logged, never the action's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from balancer.actuate.kubernetes import Json, _Api, rfc3339, split_name
from balancer.errors import ActuationError
from balancer.model import Action, Migrate, ScaleInference, ScaleTraining, SetPowerLimit, TaintNode

log = logging.getLogger(__name__)

# the Event reason gputide posts on the object an applied action changed
EVENT_REASONS: dict[type, str] = {Migrate: "GputideMigrated", SetPowerLimit: "GputidePowerCapped",
                                  ScaleInference: "GputideScaledInference", ScaleTraining: "GputideScaledTraining",
                                  TaintNode: "GputideTainted"}


def post_event(api: _Api, involved: Json, kind: str, reason: str, message: str, component: str, now: float) -> None:
    """A core/v1 Event about `involved` (apiVersion, kind, name, namespace, uid), as controllers post them; a
    cluster-scoped object's Events go to `default`. One attempt; raises ActuationError: callers treat Events as
    best effort."""
    namespace = involved.get("namespace") or "default"
    stamp = rfc3339(now)
    body = {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{involved['name']}.{time.time_ns():x}", "namespace": namespace},
        "involvedObject": {k: v for k, v in involved.items() if v}, "type": kind, "reason": reason,
        "message": message[:1024], "count": 1, "firstTimestamp": stamp, "lastTimestamp": stamp,
        "source": {"component": component}, "reportingComponent": component,
    }  # fmt: skip
    api(f"event on {involved['kind']} {involved['name']}", api.core.create_namespaced_event, namespace, body,
        retries=0)   # never worth delaying the work it reports


def tell_action(api: _Api, action: Action, detail: str, now: float, default_namespace: str,
                owner_namespace: Callable[[str], str]) -> None:
    """The Event of an applied `action` (`detail`: what was done). `owner_namespace(owner)`: the namespace of a
    Deployment or Job named by its bare name. Best effort: a failure is logged."""
    try:
        if isinstance(action, Migrate):
            ns, name = split_name(action.workload, default_namespace)
            involved = {"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": name}
        elif isinstance(action, ScaleInference | ScaleTraining):
            owner = action.service if isinstance(action, ScaleInference) else action.job
            ns, name = split_name(owner, owner_namespace(owner))
            kind = ("apps/v1", "Deployment") if isinstance(action, ScaleInference) else ("batch/v1", "Job")
            involved = {"apiVersion": kind[0], "kind": kind[1], "namespace": ns, "name": name}
        else:   # SetPowerLimit, TaintNode
            involved = {"apiVersion": "v1", "kind": "Node", "name": action.node}
        post_event(api, involved, "Normal", EVENT_REASONS[type(action)], f"{action.reason}: {detail}",
                   "gputide-controller", now)
    except ActuationError as err:
        log.warning("no event for %s: %s", action.describe(), err)
