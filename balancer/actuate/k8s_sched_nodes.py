"""A node's last look before a binding, for the secondary scheduler (balancer/actuate/k8s_scheduler.py).

A pass reads the nodes once, as it begins (`k8s_sched_reads.nodes_view`), and may then bind for minutes (a turn
each pod, `turn_s`). A node deleted, cordoned or tainted meanwhile (drained for maintenance, its kubelet gone
`node.kubernetes.io/unreachable` NoExecute) kept getting pods until the pass ended: bound to a node that is gone,
the pod is lost until its owner deletes it; to one tainted NoExecute, the taint manager evicts it at once. So right
before each binding the node is looked at again (`node_now`), as the scheduler knows it freshest: the nodes
watch's cache as it is now (with watches, `watch=True`: free), else a GET of that node (one per binding; one that
fails, or that the turn leaves no time for, changes nothing: the pass's view is bound on, as before, and no other
GET is tried in that pass, `Changed.look`: a stalled API server would cost each binding a try's timeout). Its
placement rules (`RULES`: cordon, taints, labels) are asked again (`k8s_filters.rule_refusal`); a pod they now
refuse, or whose node is gone, is not bound: it waits for the next pass, told why (not lost, nor evicted); the
members of a pod group are all looked at before the first is bound, so that none is bound when one is refused
(bound, the others would hold their nodes while the group waits for a node that refuses it). What
the pass learned so (`Changed`) keeps the later pods of the pass off that node (`Changed.offered`) rather than each
choosing it to be refused in turn. Its resources are not asked again: the pass counts its own bindings, and
another scheduler's are the kubelet's to refuse, as for kube-scheduler.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from balancer.actuate.k8s_filters import rule_refusal
from balancer.actuate.k8s_watch import object_key
from balancer.actuate.kubernetes import NotFoundError
from balancer.errors import ActuationError

log = logging.getLogger(__name__)
Json = dict[str, Any]
RULES = ("unschedulable", "taints", "labels")   # the node's side of `rule_refusal`


def node_now(node: Json, cached: Mapping[str, Json] | None, read: Callable[[], Json | None]) -> Json | None:
    """`node` (of the pass's view) with its placement rules as the scheduler knows them now: the nodes cache's
    (`cached`: synced, by `namespace/name`), else `read()`'s (its `node_facts`; NotFoundError: gone); None once it
    is gone. `node` itself when nothing changed or the read fails (logged: bound on as the pass read it)."""
    if cached is not None:
        now = cached.get(object_key({"metadata": {"name": node["name"]}}))
    else:
        try:
            now = read()
        except NotFoundError:
            now = None
        except ActuationError as err:
            log.info("node %s not read again before a binding (bound as the pass read it): %s", node["name"], err)
            return node
    if now is None:
        return None
    if all(now[k] == node[k] for k in RULES):
        return node
    return {**node, **{k: now[k] for k in RULES}}


class Changed:
    """The nodes a pass found gone or changed right before a binding (view index -> the node now, None: gone)."""

    def __init__(self) -> None:
        self.nodes: dict[int, Json | None] = {}
        self.names: dict[int, str] = {}
        self.unread = ""   # a node GET of the pass that failed: no other is tried in it (`look`)

    def look(self, node: Json, cached: Mapping[str, Json] | None, read: Callable[[], Json | None]) -> Json | None:
        """`node_now`, save that once a GET of the pass failed (`unread`), none is tried again in it: `node` as the
        pass read it, as before these looks. A GET that stalls costs its try's timeout, and every binding after it
        would pay it again (3 pods 39 s, not 9), in a turn it leaves less time to bind in."""
        if cached is None and self.unread:
            return node

        def noted() -> Json | None:
            try:
                return read()
            except NotFoundError:
                raise
            except ActuationError as err:
                self.unread = f"{node['name']}: {err}"
                log.info("no node read again before a binding for the rest of the pass (bound as it read them)")
                raise

        return node_now(node, cached, noted)

    def why(self, i: int, node: Json, now: Json | None, req: Json) -> str | None:
        """Why `req` is not bound to node i (`node`, of the pass's view; `now`: as `node_now` says it is), None when
        it may be, as a clause. Noted for the rest of the pass."""
        if now is node:
            return None
        self.nodes[i], self.names[i] = now, node["name"]
        if now is None:
            return f"node {node['name']} was deleted during the pass"
        why = rule_refusal(now, req)
        return None if why is None else f"node {node['name']} changed during the pass: {why}"

    def offered(self, req: Json, offered: np.ndarray) -> np.ndarray:
        """`offered` (view indices) less the nodes found gone, or changed so that they refuse `req`."""
        if not self.nodes:
            return offered
        return np.array([i for i in offered.tolist() if i not in self.nodes or (
            (now := self.nodes[i]) is not None and rule_refusal(now, req) is None)], dtype=offered.dtype)

    def said(self, fitting: np.ndarray) -> str:
        """What a pod that fitted some of these nodes (`fitting`, as the pass read them) and is left pending for it
        is told: it neither preempts nor holds a node for it in this pass."""
        names = sorted(self.names[i] for i in fitting.tolist() if i in self.nodes)
        return (f" {', '.join(names)} changed during the pass (deleted, cordoned or tainted): it waits for the next "
                "pass.")
