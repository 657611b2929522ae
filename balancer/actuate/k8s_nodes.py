"""Node labels and taints from the Kubernetes API: the `node_overrides` of `PrometheusTelemetrySource`.

GPU metrics name a node but say nothing of its labels or taints, and planning needs both:

* **where a workload may move.** A pod's node selector, required node affinity and tolerations
  (`Workload.node_rules`) are checked against the node's labels and taints (`ClusterSnapshot.admits`), so the
  planner proposes only targets the replacement pod can run on, and the safety guard refuses any other;
* **the emergency stop on a node** (label `gputide.io/emergency-stop=true`), which the guard reads from the node's
  labels;
* **gputide's own hot taint**, so a restarted controller knows which nodes it tainted and gives them back when
  they cool, and its expiry (`gputide.io/hot-until`, `Node.hot_until`), so the planner renews the taint of a node
  still hot before it passes (`taints_change` writes both);
* **gputide's own power caps** (the `{uuid: watts}` entries of `gputide.io/power-caps`, `Node.power_caps`), so a
  restarted controller, or a replica that becomes the leader, gives back the GPUs an earlier one throttled.

`KubernetesNodes(api_client, watch=True)` (what a long-running `gputide run` uses) lists the nodes once and follows
the API server's watch (`ListWatch`), so a cycle costs the API server nothing; until the watch has synced, and
without `watch` (`gputide run --once`), it lists them itself at most once per `ttl_s`. Until a list has succeeded
it answers None and the controller holds still (telemetry unavailable): it would otherwise act without seeing an
emergency-stop label. After that, a failing API leaves the last known nodes in place (logged).

`NodeAnnotationCaps(api_client, node)` reads that annotation for the power-cap agent of one node (None when it
cannot be read or is malformed). `power_caps_update` is what the actuator's `SetPowerLimit` writes into it:

* a throttle sets `{uuid: watts}`;
* a give-back replaces the GPU's cap by `{"restore": watts}` (`exporters.power_caps.Restore`), not by a number: the
  agent puts back the board's own default limit, whatever the catalogue says, and only while the GPU still runs at
  that cap, so a limit an operator set since is never overridden; and the entry survives an agent that is down
  when it is written. A GPU that holds no gputide cap is left alone;
* the same write drops what no agent needs any more: the entries of GPUs no longer on the node (replaced), and
  `restore` entries whose GPU's limit (as the snapshot reports it) has left the cap they name (carried out, or set
  otherwise since). So the annotation holds at most one entry per GPU of the node.

The caps expire, as the hot taint does: beside the map, `gputide.io/power-caps-until` (RFC 3339, one per node, for
all its caps; `power_caps_patch` writes it with every change, `POWER_CAP_TTL_S` ahead, and takes it away with the
last cap) is when the node's agent gives them back unless the controller renewed it. A live leader renews it in its
housekeeping once less than half the TTL is left (`power_caps_renewal`: about twice per TTL, not a patch every
cycle), and also when it is missing (caps an older controller wrote) or already passed (a controller back from a
hold longer than the TTL: its planner still counts the GPUs capped and gives them back when they cool). While it
holds still for fail-static (telemetry it does not trust) it renews only an expiry still to come (`power_caps_kept`),
so a blind controller neither lets its caps lapse nor writes or re-applies any; under an emergency stop it renews
nothing, and a new leader whose first cycle holds still renews only as a hold does (its `recover` waits for a cycle
that plans). A node that carries the emergency-stop label (`node_stopped`) has nothing renewed, the caps' expiry
judged again on the node the write reads: the label stops every action touching the node, so its caps lapse as the
global stop's do (its expired taint and reservations are still released: their expiry running out is no action).
A controller that dies, is uninstalled without cleanup or has no working leader renews nothing, so its caps
lapse. The agent (`NodeAnnotationCaps` -> `exporters.power_caps.Expiring`) reads caps without the annotation as caps
without expiry: an upgrade, whichever side goes first, drops no live cap, and the new controller's first cycle gives
them one.

`release_expired` (the actuator's housekeeping) removes an expired hot taint or reservation with
`expired_taint_removal` / `expired_reservations`, which judge the expiry again on the node the write reads: the write
carries that read's resourceVersion, so a renewal landing after the list (another shard's, or this controller's own)
is never undone.

Node annotations that hold a JSON map (the power caps, the migration reservations `gputide.io/reserved-for`, the
secondary scheduler's holds) are changed entry by entry with `annotation_map_change` / `annotation_patch`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from balancer.actuate.k8s_filters import CORDON
from balancer.actuate.k8s_watch import ListCache
from balancer.actuate.kubernetes import (
    HOT_UNTIL_ANNOTATION,
    POWER_CAP_ANNOTATION,
    _Api,
    _json_annotation,
    parse_time,
    read_power_caps,
    rfc3339,
)
from balancer.errors import ActuationError
from balancer.model import ClusterSnapshot, NodeMeta
from balancer.noderules import Taint
from balancer.safety import EMERGENCY_LABEL
from exporters.power_caps import TOLERANCE_W, Entry, expiring, parse_caps

log = logging.getLogger(__name__)

Json = dict[str, Any]

# how long the power caps of a node hold once written or renewed, by default: the safety net for a controller that
# stops renewing them (the hot taint's TTL, `balancer.actions.HOT_TAINT_TTL_S`; 30 cycles at `gputide run`'s default
# 30 s interval)
POWER_CAP_TTL_S = 900.0


def caps_until_key(annotation: str) -> str:
    """The annotation holding the expiry of the caps in `annotation` (`gputide.io/power-caps-until`)."""
    return annotation + "-until"


def node_meta(node: Json) -> NodeMeta:
    """A Node object's labels, taints, gputide power caps and hot-taint expiry.

    A cordoned node (`spec.unschedulable`) counts as carrying the cordon's taint (`k8s_filters.CORDON`) even before
    the node lifecycle controller has added it (a while, or never where that controller does not run): kube-scheduler
    refuses new pods there unless they tolerate it (its NodeUnschedulable filter), and so does the actuator
    (`k8s_migrate.placement_refusal`), so the planner must not pick such a node as a target either."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    taints = tuple(str(Taint.from_json(t)) for t in spec.get("taints") or ())
    if spec.get("unschedulable") and str(CORDON) not in taints:
        taints += (str(CORDON),)
    return NodeMeta(labels=MappingProxyType(dict(meta.get("labels") or {})),
                    taints=taints,
                    power_caps=MappingProxyType(read_power_caps(node)),
                    hot_until=parse_time((meta.get("annotations") or {}).get(HOT_UNTIL_ANNOTATION)))


def taints_change(node: Json, key: str, add: bool, until: float | None) -> Json | None:
    """The patch that puts gputide's hot taint `key` on `node` with a fresh expiry `until` (a renewal: the taint
    stays, the expiry moves), or takes both away; None when there is nothing to remove."""
    taints = list((node.get("spec") or {}).get("taints") or [])
    has = any(t.get("key") == key for t in taints)
    annotations: dict[str, str | None] = {}
    if add:
        if not has:
            taints.append({"key": key, "value": "true", "effect": "NoSchedule"})
        annotations[HOT_UNTIL_ANNOTATION] = rfc3339(until) if until is not None else None
    else:
        if not has and HOT_UNTIL_ANNOTATION not in ((node.get("metadata") or {}).get("annotations") or {}):
            return None
        taints = [t for t in taints if t.get("key") != key]
        annotations[HOT_UNTIL_ANNOTATION] = None
    return {"metadata": {"annotations": annotations}, "spec": {"taints": taints}}


def expired_taint_removal(node: Json, key: str, now: float) -> Json | None:
    """The patch that takes gputide's hot taint `key` and its expiry off `node` once that expiry
    (`gputide.io/hot-until`) has passed by `now`; None while it is still to come, or where there is none. Judged on the
    node as the write reads it (`_Api.update_node`, guarded by its resourceVersion), never as listed earlier: a taint
    renewed since (by this controller or another shard's) is kept."""
    until = parse_time(((node.get("metadata") or {}).get("annotations") or {}).get(HOT_UNTIL_ANNOTATION))
    return taints_change(node, key, False, None) if until is not None and until <= now else None


def expired_reservations(node: Json, key: str, now: float) -> dict[str, None]:
    """{owner: None} for the reservations in annotation `key` of `node` whose expiry has passed by `now`: what
    `annotation_map_change` removes. An entry that is not {"expires": RFC 3339 time} (hand-edited, an older writer) is
    nobody's: expired. Like `expired_taint_removal`, judged on the node the write reads, so a reservation renewed
    since it was listed is kept."""
    return {k: None for k, v in _json_annotation(node, key).items()
            if (parse_time(v.get("expires") if isinstance(v, dict) else None) or 0) <= now}


def annotation_map_change(node: Json, key: str, updates: Mapping[str, Any]) -> Json | None:
    """Merge `updates` into the JSON map in annotation `key` (a None value deletes the entry)."""
    current = _json_annotation(node, key)
    return annotation_patch(node, key, current, {k: v for k, v in {**current, **updates}.items() if v is not None})


def same_json(a: Any, b: Any) -> bool:
    """Whether `a` and `b` (values of an annotation's JSON map) are equal and would be written alike: Python's
    equality holds across types a reader tells apart (`10.0 == 10`, `True == 1`, while `k8s_filters.counts_against`
    ranks only an integer priority), so an entry saved by an older or foreign writer as `10.0` compared equal to
    its correction and was never rewritten. What reads equal is serialised only then (`json.dumps`, as written)."""
    return a == b and json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def annotation_patch(node: Json, key: str, current: Mapping[str, Any], new: Mapping[str, Any]) -> Json | None:
    """The patch that turns annotation `key`'s JSON map `current` into `new` (none when nothing changes, types
    included: `same_json`)."""
    if same_json(new, current) and (not new or key in ((node.get("metadata") or {}).get("annotations") or {})):
        return None
    return {"metadata": {"annotations": {key: json.dumps(new, sort_keys=True) if new else None}}}


def node_power_limits(snapshot: ClusterSnapshot | None, node: str) -> dict[str, float] | None:
    """{uuid: reported power limit} of `node`'s GPUs in `snapshot`; None when it shows none (nothing to judge by)."""
    if snapshot is None:
        return None
    limits = {g.uuid: float(snapshot.power_limit_w[g.index]) for g in snapshot.gpus if g.node == node}
    return limits or None


def power_caps_update(entries: Mapping[str, Any], uuid: str, watts: float | None,
                      limits: Mapping[str, float] | None) -> dict[str, Any]:
    """The annotation's entries after capping `uuid` at `watts`, or giving it back (`watts` None), pruned of what no
    agent needs (see the module's docstring). `limits`: `node_power_limits` (None: nothing is pruned)."""
    out = dict(entries)
    if watts is not None:
        out[uuid] = watts
    elif _is_cap(out.get(uuid)):
        out[uuid] = {"restore": out[uuid]}
    if limits is None:
        return out
    # the entry this write makes is kept whatever the limits say: they are the snapshot's, which may not show the
    # cap yet (or show it clamped to the board's minimum), and a restore dropped before any agent read it leaves the
    # cap on for good; it is pruned by a later write once done
    return {k: v for k, v in out.items() if k == uuid or (k in limits and not _done(v, limits[k]))}


def power_caps_patch(node: Json, key: str, current: Mapping[str, Any], new: Mapping[str, Any],
                     until: float) -> Json | None:
    """`annotation_patch` of the caps annotation `key`, with their expiry: `until` while `new` holds a cap, none once
    it holds none (what is left is give-backs, which do not expire). None when the caps do not change."""
    patch = annotation_patch(node, key, current, new)
    if patch is not None:
        capped = any(_is_cap(v) for v in new.values())
        patch["metadata"]["annotations"][caps_until_key(key)] = rfc3339(until) if capped else None
    return patch


def caps_until(node: Json, key: str) -> float | None:
    """When the caps in annotation `key` of `node` expire (None: no expiry, or unreadable)."""
    return parse_time(((node.get("metadata") or {}).get("annotations") or {}).get(caps_until_key(key)))


def power_caps_renewal(node: Json, key: str, now: float, ttl_s: float) -> Json | None:
    """The patch that renews the expiry of the caps in annotation `key` to `now + ttl_s` when it is due: less than
    half of `ttl_s` left, passed, missing or unreadable; or that removes an expiry left without a cap. None: nothing
    due. A caps annotation that is not JSON is left to the agent, which keeps its limits and says so."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    try:
        entries = json.loads(annotations[key]) if annotations.get(key) else {}
    except ValueError:
        return None
    if not any(_is_cap(v) for v in (entries.values() if isinstance(entries, dict) else ())):
        return {"metadata": {"annotations": {caps_until_key(key): None}}} if caps_until_key(key) in annotations \
            else None
    until = caps_until(node, key)
    if until is not None and until - now > ttl_s / 2:
        return None
    return {"metadata": {"annotations": {caps_until_key(key): rfc3339(now + ttl_s)}}}


def node_stopped(node: Json) -> bool:
    """Whether `node` carries the per-node emergency stop (`gputide.io/emergency-stop=true`, any case of "true", as
    the safety guard reads it): gputide renews nothing there, so the caps it set lapse."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    return str(labels.get(EMERGENCY_LABEL, "")).lower() == "true"


def power_caps_kept(node: Json, key: str, now: float, ttl_s: float) -> Json | None:
    """`power_caps_renewal` for a controller that holds still (fail-static): only the renewal of an expiry still to
    come, of caps the node holds. Never an expiry written where there was none (caps without one do not lapse), never
    one that has passed renewed (the agent may have given those caps back: renewing would apply them again, a change
    made blind), never an expiry removed; the caps themselves are never touched. None: nothing to renew."""
    until = caps_until(node, key)
    if until is None or until <= now:
        return None
    patch = power_caps_renewal(node, key, now, ttl_s)
    return patch if patch is not None and None not in patch["metadata"]["annotations"].values() else None


def power_caps_note(where: str, uuid: str, watts: float | None, before: Mapping[str, Any],
                    after: Mapping[str, Any]) -> str:
    """What `power_caps_update` did to the annotation at `where`, for the action's result and Event."""
    if watts is not None:
        done = f"{where}[{uuid}] = {watts} W"
    elif _is_cap(before.get(uuid)):
        done = f"{where}[{uuid}] given back: the node's agent restores the GPU's default limit"
    else:
        done = f"{where}[{uuid}]: no gputide cap to give back"
    gone = sorted(before.keys() - after.keys() - {uuid})
    return done + (f"; dropped {', '.join(gone)} (not on the node, or given back)" if gone else "")


def _is_cap(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _done(value: Any, limit: float) -> bool:
    """Whether `value` is a `restore` entry with nothing left to do: the GPU's limit has left the cap it names."""
    if not isinstance(value, dict):
        return False
    cap = value.get("restore")
    return not _is_cap(cap) or not abs(limit - cap) <= TOLERANCE_W


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
    """The power-cap agent's source on Kubernetes: `read()` -> {uuid: watts or Restore} from this node's annotation,
    each cap an `Expiring` when the node carries their expiry (`caps_until_key`; without it they do not expire).

    Same contract as exporters.power_caps.JsonFileCaps: no annotation is no caps (the agent gives back the limits
    it applied); an API error, or an annotation that is not a JSON object of positive watts (a hand edit gone
    wrong), is logged and reads as None, so the agent keeps every limit as it is and counts a failed sync, which
    an alert watches. One bad entry spoils the whole annotation: read as "no cap", it would give a hot GPU back. So
    does an expiry that is no RFC 3339 time: read as "none", the caps would never expire; the controller writes a
    good one at its next renewal."""

    def __init__(self, api_client: Any, node: str, annotation: str = POWER_CAP_ANNOTATION,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.api = _Api(api_client, 1, 0.5, sleep, 5.0)
        self.node, self.annotation = node, annotation

    def read(self) -> dict[str, Entry] | None:
        try:
            obj = self.api(f"node {self.node}", self.api.core.read_node, self.node)
        except ActuationError as err:
            log.error("power caps of node %s unreadable, keeping current limits: %s", self.node, err)
            return None
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        raw, raw_until = annotations.get(self.annotation), annotations.get(caps_until_key(self.annotation))
        until = parse_time(raw_until)
        try:
            if raw_until and until is None:
                raise ValueError(f"{caps_until_key(self.annotation)}: {raw_until!r} is not an RFC 3339 time")
            return expiring(parse_caps(json.loads(raw)), until) if raw else {}
        except ValueError as err:
            log.error("annotation %s of node %s is malformed, keeping current limits: %s", self.annotation,
                      self.node, err)
            return None
