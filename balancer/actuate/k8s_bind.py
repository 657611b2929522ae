"""The secondary scheduler's bindings (balancer/actuate/k8s_scheduler.py's `SecondaryScheduler` takes these methods
from `Binder`): a pod bound through the Binding API is *assumed* on its node (`k8s_sched_reads`) and the
reservation it used up there is released.

A 409 on a binding is a pod bound by someone else, unless the pod is bound to the very node asked for: then it is
this scheduler's own binding, made though its answer was lost (a 504 or a timeout, and the retry found it made),
and it is counted as made. The Binding names the pod's uid, the API server's precondition (kube-scheduler's
too): a pod deleted and created again under the same name since the pass read it (a StatefulSet's replica) gets
409, not the node chosen for its predecessor, and is placed by its own requests and rules at the next pass.
Otherwise the pass went on as if the pod's GPUs were free, and the next pod was bound on top of it. Bound to another
node (by a replica that lost the Lease with its binding in flight, say), the pod is no longer this pass's to place,
but it is assumed where it runs all the same, for the same reason.

So is any failure that does not say the binding was not made (every try a 504 or a timeout, a 5xx, the turn out of
time): the pod is read back, and found on the node asked for it is bound, its answer lost. A pod that cannot be read
back (after such a failure or a 409; out of time, it is not read) may be bound there (`bind_unsure`): it is assumed
there as a binding made, so neither this pass nor the next offers its room to another pod nor places it again, until
the bound-pod cache shows where it is, or the pod read back after `assume_s` holds no node's room (`k8s_sched_reads`;
without watches, after `assume_s`), in every mode: from the bound-pod cache, or from a pass's own list of the bound
pods (without watches, or before the watch syncs) that does not show it yet, the binding received but written after
that list. It used to count for its own pass only: its GPUs went to the next pass's pods whenever the cache had not
shown it yet, or the list did not (`k8s_sched_reads`). The cost: a binding that failed after all is tried again only
that much later.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from balancer.actuate.k8s_filters import take
from balancer.actuate.k8s_nodes import annotation_map_change
from balancer.actuate.k8s_reads import Usage
from balancer.actuate.k8s_sched_reads import Assumed
from balancer.actuate.kubernetes import ConflictError, NotFoundError, _Api
from balancer.errors import ActuationError, TemporaryActuationError

log = logging.getLogger(__name__)
Json = dict[str, Any]


class Binder:
    """The bindings of `SecondaryScheduler` (the module docstring), a mixin: the scheduler's `__init__` sets the
    attributes below, `SchedulerReads` gives `halted`."""

    api: _Api
    scheduler_name: str
    reservation_annotation: str
    clock: Callable[[], float]
    holds: Any                                   # k8s_holds.Holds: the nodes held for pods that preempt or starve
    _assumed: dict[str, Assumed]                 # pod -> the binding the bound-pod cache has not shown yet
    watches: dict[str, Any]                      # k8s_watch.ListWatch by what it caches (none without watches)
    halted: Callable[[], bool]
    reasons: dict[str, str]                      # the pass: why each pod it left pending waits
    bind_failure: ActuationError | None = None   # why the last binding that failed did
    bind_unsure: bool = False   # the last binding failed without saying it was not made, and the pod was unreadable

    def _bind(self, req: Json, node: Json) -> str | None:
        """Bind the pod to `node` and assume it there: its node's name; "" when the binding failed (the pod stays
        pending; `bind_unsure` when it may be bound all the same), None when the pod was bound by someone else or
        deleted (left out of the pass)."""
        self.bind_unsure = False
        # the pod's uid is the API server's precondition (as kube-scheduler sends it): a pod deleted and created
        # again under the same name (a StatefulSet's replica, a new revision) is not bound to the node chosen for
        # the one this pass read, whose requests and rules it may not share; that binding answers 409
        meta = {"name": req["pod"], "namespace": req["namespace"], **({"uid": req["uid"]} if req.get("uid") else {})}
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
                "target": {"apiVersion": "v1", "kind": "Node", "name": node["name"]}}
        try:
            # not retried once the Lease is lost (`halted`): the next leader may be placing on the same nodes
            self.api(f"bind {req['name']}", self.api.core.create_namespaced_pod_binding, req["pod"],
                     req["namespace"], body, halt=self.halted)
        except NotFoundError as err:   # deleted: not ours to place
            log.info("scheduler %s: %s no longer waits for a node: %s", self.scheduler_name, req["name"], err)
            return None
        except TemporaryActuationError as err:   # a 409, or no answer / out of time: it may be bound all the same
            return self._read_back(req, node, err)
        except ActuationError as err:   # a definite refusal: not bound
            return self._refused(req, err)
        return self._bound_to(req, node)

    def _read_back(self, req: Json, node: Json, err: ActuationError) -> str | None:
        """After a binding's 409 or a failure that does not say it was not made (a 504, a timeout, a 5xx, out of
        time): where the pod is now, read back in the turn's own time (out of time, it cannot be read). On `node`:
        the binding made, its answer lost. On another node: bound by someone else (a replica that lost the Lease
        with its binding in flight, say), assumed there. Gone (or another pod of its name since): left out. Still on
        no node: the binding failed (a 409 there is someone else's pod). Unreadable: `bind_unsure`, the binding may
        be made, and the pod is assumed on `node` (the module docstring)."""
        try:
            pod = self.api(f"pod {req['name']}", self.api.core.read_namespaced_pod, req["pod"], req["namespace"])
        except NotFoundError:
            pod = {}
        except ActuationError as read_err:
            log.warning("scheduler %s: %s; cannot read it back, assumed on %s: %s", self.scheduler_name,
                        err, node["name"], read_err)
            self.bind_unsure = True
            self._assume(req, node["name"])   # it may be bound there: counted there until the caches tell
            return self._refused(req, err, f"Binding outcome unknown ({read_err}): {err}")
        meta = pod.get("metadata") or {}
        if not pod or req.get("uid") and meta.get("uid") not in (None, req["uid"]):
            where = None   # gone, or another pod of the same name (deleted and created again): not this pod
        else:
            where = (pod.get("spec") or {}).get("nodeName") or ""
        if where == node["name"]:   # ours, its answer lost
            return self._bound_to(req, node)
        if where == "" and not isinstance(err, ConflictError):   # not bound: the binding failed
            return self._refused(req, err)
        if where:   # someone else's binding: it runs there all the same
            self._assume(req, where)
        log.info("scheduler %s: %s no longer waits for a node: %s", self.scheduler_name, req["name"], err)
        return None

    def _refused(self, req: Json, err: ActuationError, why: str = "") -> str:
        """The binding failed (or may have, `bind_unsure`): the pod stays pending, told why."""
        log.warning("scheduler %s: %s", self.scheduler_name, err)
        self.reasons[req["name"]] = why or f"Binding rejected: {err}"   # kube-scheduler's words for a failed Bind
        self.bind_failure = err
        return ""

    def _assume(self, req: Json, node: str) -> None:
        """Count `req` on `node` until the caches show it there (`k8s_sched_reads`), or the pod read back after
        `assume_s` says it holds no node's room (`k8s_sched_reads.read_back`, by its uid too)."""
        now = self.clock()
        self._assumed[req["name"]] = Assumed(now, Usage(
            node, req["num_gpu"], req["cpu_milli"], req["memory_mib"], tuple(sorted(req["extended"].items())),
            req["name"], req["priority"], now, tuple(sorted(req["labels"].items())),
            req["pod_affinity"].anti if req["pod_affinity"] else (), req.get("host_ports") or frozenset(),
            req.get("uid") or ""), req.get("uid") or "", now)

    def _bound_to(self, req: Json, node: Json) -> str:
        """`req` is bound to `node`: assumed there, and the reservation it used up there released: the node given
        back first, then the hold's doubted victims read (`Preemptor.release`, as `k8s_holds` releases after the
        give-back): read first, an API hanging on them spent the pod's turn and the node was not given back."""
        self._assume(req, node["name"])
        key = take(node, req)
        if key is not None:
            try:
                with self.api.reserve():   # the pod is bound: releasing what it used up may use the reserve
                    self.api.update_node(node["name"], lambda n, k=key: annotation_map_change(
                        n, self.reservation_annotation, {k: None}))
            except ActuationError as err:   # it expires on its own; the pod is bound all the same
                log.warning("scheduler %s: cannot release reservation %s on %s: %s", self.scheduler_name, key,
                            node["name"], err)
            self.holds.preemptor.release(node["name"], key)
        return node["name"]

