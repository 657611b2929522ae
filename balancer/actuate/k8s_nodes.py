"""Node labels and taints from the Kubernetes API: the `node_overrides` of `PrometheusTelemetrySource`.

GPU metrics name a node but say nothing of its labels or taints, and planning needs both:

* **where a workload may move.** A pod's node selector, required node affinity and tolerations
  (`Workload.node_rules`) are checked against the node's labels and taints (`ClusterSnapshot.admits`), so the
  planner proposes only targets the replacement pod can run on, and the safety guard refuses any other;
* **the emergency stop on a node** (label `gputide.io/emergency-stop=true`), which the guard reads from the node's
  labels;
* **gputide's own hot taint**, so a restarted controller knows which nodes it tainted and gives them back when
  they cool.

`KubernetesNodes(api_client, watch=True)` (what a long-running `gputide run` uses) lists the nodes once and follows
the API server's watch (`ListWatch`), so a cycle costs the API server nothing; until the watch has synced, and
without `watch` (`gputide run --once`), it lists them itself at most once per `ttl_s`. Until a list has succeeded
it answers None and the controller holds still (telemetry unavailable): it would otherwise act without seeing an
emergency-stop label. After that, a failing API leaves the last known nodes in place (logged).

`NodeAnnotationCaps(api_client, node)` reads one node's other annotation for the power-cap agent: the power limits
the actuator's `SetPowerLimit` wrote into `gputide.io/power-caps` (None when it cannot be read or is malformed).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from balancer.actuate.k8s_watch import ListCache
from balancer.actuate.kubernetes import POWER_CAP_ANNOTATION, _Api
from balancer.errors import ActuationError
from balancer.model import NodeMeta
from balancer.noderules import Taint
from exporters.power_caps import parse_caps

log = logging.getLogger(__name__)

Json = dict[str, Any]


def node_meta(node: Json) -> NodeMeta:
    """A Node object's labels and taints."""
    return NodeMeta(labels=MappingProxyType(dict((node.get("metadata") or {}).get("labels") or {})),
                    taints=tuple(str(Taint.from_json(t)) for t in (node.get("spec") or {}).get("taints") or ()))


def by_name(items: dict[str, NodeMeta]) -> Mapping[str, NodeMeta]:
    """{node name: NodeMeta} of `ListCache`'s items (a Node is cluster-scoped: its key is "default/<name>")."""
    return MappingProxyType({key.split("/", 1)[1]: meta for key, meta in items.items()})


class KubernetesNodes:
    """`node_overrides` for `PrometheusTelemetrySource`: {node name: NodeMeta}, None until the first list."""

    def __init__(self, api_client: Any, ttl_s: float = 60.0, clock: Callable[[], float] = time.time, *,
                 watch: bool = False, watch_s: float = 300.0, max_retries: int = 1,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.api = _Api(api_client, max_retries, 0.5, sleep, 10.0)
        self.nodes = ListCache("nodes", lambda **kw: self.api("list nodes", self.api.core.list_node, **kw),
                               self.api.core.list_node, node_meta, view=by_name, ttl_s=ttl_s, clock=clock,
                               watch=watch, watch_s=watch_s)
        self.watch = self.nodes.watch  # None without `watch`

    def __call__(self) -> Mapping[str, NodeMeta] | None:
        """The nodes as last seen; the same mapping object until a node's labels or taints change (callers memoise
        on it: a kubelet's status updates change a Node every few minutes without touching either)."""
        return self.nodes.current()

    def close(self) -> None:
        """Stop watching (a no-op without `watch`)."""
        self.nodes.close()


class NodeAnnotationCaps:
    """The power-cap agent's source on Kubernetes: `read()` -> {uuid: watts} from this node's annotation.

    Same contract as exporters.power_caps.JsonFileCaps: no annotation is no caps (the agent gives back the limits
    it applied); an API error, or an annotation that is not a JSON object of positive watts (a hand edit gone
    wrong), is logged and reads as None, so the agent keeps every limit as it is and counts a failed sync, which
    an alert watches. One bad entry spoils the whole annotation: read as "no cap", it would give a hot GPU back."""

    def __init__(self, api_client: Any, node: str, annotation: str = POWER_CAP_ANNOTATION,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.api = _Api(api_client, 1, 0.5, sleep, 5.0)
        self.node, self.annotation = node, annotation

    def read(self) -> dict[str, float] | None:
        try:
            obj = self.api(f"node {self.node}", self.api.core.read_node, self.node)
        except ActuationError as err:
            log.error("power caps of node %s unreadable, keeping current limits: %s", self.node, err)
            return None
        raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(self.annotation)
        try:
            return parse_caps(json.loads(raw)) if raw else {}
        except ValueError as err:
            log.error("annotation %s of node %s is malformed, keeping current limits: %s", self.annotation,
                      self.node, err)
            return None
