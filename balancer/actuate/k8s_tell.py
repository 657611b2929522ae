"""Telling a pod's owner what the secondary scheduler did with it, as kube-scheduler tells it.

* a pod left pending gets a `FailedScheduling` Warning Event and the condition `PodScheduled=False`, reason
  `Unschedulable`, saying why (`kubectl describe pod` shows both, and the cluster autoscaler scales up for such
  pods). The same reason is said again only after `retell_s`, a new one at most every `min_tell_s`: in a busy
  cluster the counts in the message change at almost every pass, and an Event plus a status write per pod per
  pass would flood the API server;
* a bound pod gets a `Scheduled` Event.

All of it is best effort: a failure is logged, and the pod is placed (or retried) all the same.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from balancer.actuate.k8s_actuator import post_event
from balancer.actuate.kubernetes import MERGE_PATCH, _Api, rfc3339
from balancer.errors import ActuationError

log = logging.getLogger(__name__)
Json = dict[str, Any]


class Teller:
    """Events and the PodScheduled condition for the pods of one scheduler (module docstring)."""

    def __init__(self, api: _Api, scheduler_name: str, clock: Callable[[], float], retell_s: float,
                 min_tell_s: float) -> None:
        self.api, self.scheduler_name, self.clock = api, scheduler_name, clock
        self.retell_s, self.min_tell_s = retell_s, min_tell_s
        self.told: dict[str, tuple[str, float]] = {}   # pod -> (why it is pending, when that was said)

    def keep(self, pods: Iterable[str]) -> None:
        """Forget what was said to pods that no longer wait (only `pods` do)."""
        waiting = set(pods)
        self.told = {k: v for k, v in self.told.items() if k in waiting}

    def unschedulable(self, req: Json, message: str) -> None:
        """Tell a pod left pending why, unless that was said recently enough (module docstring)."""
        now, told = self.clock(), self.told.get(req["name"])
        if told is not None and now - told[1] < (self.retell_s if told[0] == message else self.min_tell_s):
            return
        self.told[req["name"]] = (message, now)
        self.event(req, "Warning", "FailedScheduling", message)
        what = f"pod {req['name']} status"
        core = self.api.core
        try:
            self.api.update(what, lambda: self.api(what, core.read_namespaced_pod, req["pod"], req["namespace"]),
                            lambda body: self.api(what, core.patch_namespaced_pod_status, req["pod"],
                                                  req["namespace"], body, _content_type=MERGE_PATCH),
                            lambda pod: unschedulable_condition(pod, message, now))
        except ActuationError as err:   # best effort: the pod is retried next pass all the same
            log.warning("scheduler %s: cannot mark %s unschedulable: %s", self.scheduler_name, req["name"], err)

    def scheduled(self, req: Json, node: str) -> None:
        """The pod was bound to `node`."""
        self.told.pop(req["name"], None)
        self.event(req, "Normal", "Scheduled", f"Successfully assigned {req['name']} to {node}")

    def event(self, req: Json, kind: str, reason: str, message: str) -> None:
        """An Event on the pod, as kube-scheduler posts them (best effort: a failure is logged)."""
        pod = {"apiVersion": "v1", "kind": "Pod", "name": req["pod"], "namespace": req["namespace"], "uid": req["uid"]}
        try:
            post_event(self.api, pod, kind, reason, message, self.scheduler_name, self.clock())
        except ActuationError as err:
            log.warning("scheduler %s: cannot post %s event on %s: %s", self.scheduler_name, reason, req["name"], err)


def unschedulable_condition(pod: Json, message: str, now: float) -> Json | None:
    """The merge patch that sets PodScheduled=False/Unschedulable with `message` (None: already so, or bound)."""
    if (pod.get("spec") or {}).get("nodeName"):
        return None
    conditions = (pod.get("status") or {}).get("conditions") or []
    old = next((c for c in conditions if c.get("type") == "PodScheduled"), {})
    if (old.get("status"), old.get("reason"), old.get("message")) == ("False", "Unschedulable", message):
        return None
    new = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
           "lastTransitionTime": old["lastTransitionTime"] if old.get("status") == "False" and old.get(
               "lastTransitionTime") else rfc3339(now)}
    return {"status": {"conditions": [*(c for c in conditions if c.get("type") != "PodScheduled"), new]}}
