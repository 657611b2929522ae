"""The Kubernetes actuator and Lease leader election.

This is the only module in gputide that imports `kubernetes`. It turns frozen actions into API calls and every
API failure into an `ActionResult`; nothing here decides *what* to do.

How each action reaches the cluster:

    Migrate         reserve the target node (annotation `gputide.io/reserved-for`, a JSON map keyed by the
                    workload's owner so the replacement pod matches it), taint the hot source node
                    `gputide.io/hot=true:NoSchedule` with an expiry (`gputide.io/hot-until`), then evict the pod
                    through the Eviction API. 429 = a PodDisruptionBudget says no -> RETRY, reservation released.
    SetPowerLimit   merge {uuid: watts} into the node annotation `gputide.io/power-caps`; the exporter's NVML agent
                    mode reads it back with `read_power_caps` and applies it clamped to the GPU's constraints.
    ScaleInference  raise/lower the HPA's spec.minReplicas (a predictive floor under the HPA) when an autoscaling/v2
                    HPA targets the Deployment, else the Deployment's scale subresource.
    ScaleTraining   batch/v1 Job: suspend when workers == 0 (labelled `gputide.io/suspended=true`, its pods'
                    priority kept in `gputide.io/priority`, so `KubernetesWorkloads.suspended_jobs` finds it again),
                    else parallelism = workers and the label removed; with `kueue_queues` set and the Job queued
                    through Kueue, GPU quota moves between the two ClusterQueues of the cohort, in the
                    ResourceFlavor Kueue admitted the Job under (its Workload; `k8s_kueue` decides).
    Jobs and Deployments are named by their bare name (a pod's owner); the namespace is that of their pods in the
    snapshot (or of the suspended Job), else `default_namespace`.
    TaintNode       add or remove the hot taint.

Every read-modify-write carries the object's `metadata.resourceVersion` (optimistic concurrency): a 409 means
someone else wrote in between, so the object is read again and the change recomputed. 5xx, throttling 429 and
transport errors are retried with exponential backoff (`backoff_s * 2**attempt`, injected `sleep`) up to
`max_retries`; after that the action comes back as RETRY. 404/403/422 are permanent (FAILED).
Patches are sent as `application/merge-patch+json` explicitly: the generated client would otherwise pick a
strategic merge patch, which custom resources (Kueue) do not support.

`LeaseLeaderElector` follows client-go's leaderelection: a coordination.k8s.io/v1 Lease holds holderIdentity,
leaseDurationSeconds, acquireTime, renewTime and leaseTransitions; a contender takes over only when the record it
observed has not changed for a lease duration (measured on its own clock, so clock skew between replicas does
not matter), and writes with the observed resourceVersion so that of two racing contenders only one wins.
The secondary scheduler (`SecondaryScheduler`, binding pods with `schedulerName: gputide`) is in k8s_scheduler.py.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch  # noqa: F401 - the gateway's watch, used by k8s_watch.ListWatch
from kubernetes.client.exceptions import ApiException

from balancer.actuate.base import ActionResult, Outcome
from balancer.actuate.k8s_kueue import JOB_UID_LABEL, admitted_flavor, choose_flavor, owned_by
from balancer.errors import ActuationError, PermanentActuationError, TemporaryActuationError
from balancer.model import (
    Action,
    ClusterSnapshot,
    Migrate,
    ScaleInference,
    ScaleTraining,
    SetPowerLimit,
    TaintNode,
)
from balancer.noderules import NodeRules, Taint

log = logging.getLogger(__name__)

POWER_CAP_ANNOTATION = "gputide.io/power-caps"
HOT_TAINT_KEY = "gputide.io/hot"
HOT_UNTIL_ANNOTATION = "gputide.io/hot-until"
RESERVATION_ANNOTATION = "gputide.io/reserved-for"
GPU_RESOURCE = "nvidia.com/gpu"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
SUSPENDED_LABEL = "gputide.io/suspended"  # on the Jobs gputide suspended (and only those: it resumes only them)
PRIORITY_ANNOTATION = "gputide.io/priority"  # the suspended Job's pods' priority, for when it has none
KUEUE = ("kueue.x-k8s.io", "v1beta1", "clusterqueues")
KUEUE_WORKLOADS = ("kueue.x-k8s.io", "v1beta1")   # + namespace, "workloads": namespaced
MERGE_PATCH = "application/merge-patch+json"
# the Event reason gputide posts on the object an applied action changed
EVENT_REASONS: dict[type, str] = {Migrate: "GputideMigrated", SetPowerLimit: "GputidePowerCapped",
                                  ScaleInference: "GputideScaledInference", ScaleTraining: "GputideScaledTraining",
                                  TaintNode: "GputideTainted"}
Json = dict[str, Any]


# ---- errors: ApiException is mapped here, at the boundary ----------------------------------------------------


class KubeTemporaryError(TemporaryActuationError):
    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class ConflictError(KubeTemporaryError):
    """409: stale resourceVersion or the object already exists."""


class ThrottledError(KubeTemporaryError):
    """429: API priority and fairness, or on an eviction a PodDisruptionBudget."""


class KubePermanentError(PermanentActuationError):
    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class NotFoundError(KubePermanentError):
    """404."""


def _translate(exc: ApiException, what: str) -> ActuationError:
    status = int(exc.status or 0)
    try:
        message = json.loads(exc.body or "{}").get("message", "") or exc.reason
    except (ValueError, AttributeError):
        message = exc.reason
    text = f"{what}: HTTP {status} {message}"
    if status == 409:
        return ConflictError(text, status)
    if status == 429:
        return ThrottledError(text, status)
    if status == 404:
        return NotFoundError(text, status)
    if status in (0, 408) or status >= 500:
        return KubeTemporaryError(text, status)
    return KubePermanentError(text, status)


def _code(err: ActuationError) -> str:
    """The `code` label of gputide_actuation_errors_total: the HTTP status, or "transport" when none came back."""
    status = int(getattr(err, "status", 0) or 0)
    return str(status) if status else ("transport" if isinstance(err, TemporaryActuationError) else "refused")


# ---- small pure helpers --------------------------------------------------------------------------------------


def micro_time(t: float) -> datetime:
    """An aware datetime for a MicroTime field. The client serialises with isoformat(), which drops the fraction
    when microsecond == 0, and the API server then rejects the value (RFC3339Micro needs six digits)."""
    dt = datetime.fromtimestamp(t, UTC)
    return dt if dt.microsecond else dt.replace(microsecond=1)


def parse_time(value: Any) -> float | None:
    if isinstance(value, datetime):
        return value.timestamp()
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def split_name(qualified: str, default_namespace: str = "default") -> tuple[str, str]:
    """`"ns/name"` -> ("ns", "name"); a bare name lives in `default_namespace`."""
    ns, _, name = qualified.rpartition("/")
    return (ns or default_namespace), name


def _json_annotation(obj: Json, key: str) -> dict[str, Any]:
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(key)
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        log.warning("annotation %s is not JSON, ignoring it: %r", key, raw)
        return {}
    return value if isinstance(value, dict) else {}


def read_power_caps(node: Any, annotation: str = POWER_CAP_ANNOTATION) -> dict[str, float]:
    """The per-GPU power caps {uuid: watts} requested for a node (a dict as from the API or a V1Node).

    Used by the exporter's NVML agent mode; entries that are not positive numbers are skipped."""
    if not isinstance(node, Mapping):
        node = {"metadata": {"annotations": getattr(getattr(node, "metadata", None), "annotations", None)}}
    caps = {}
    for uuid, watts in _json_annotation(dict(node), annotation).items():
        if isinstance(watts, int | float) and not isinstance(watts, bool) and watts > 0:
            caps[str(uuid)] = float(watts)
    return caps


_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "m": 1e-3}  # fmt: skip


def quantity(value: Any) -> float:
    """A Kubernetes resource quantity ("2", "500m", "8Gi") as a number of base units."""
    if isinstance(value, int | float):
        return float(value)
    m = re.fullmatch(r"\s*([0-9.]+)\s*([a-zA-Z]*)\s*", str(value))
    if not m or m.group(2) not in _UNITS:
        raise KubePermanentError(f"invalid quantity {value!r}")
    return float(m.group(1)) * _UNITS[m.group(2)]


def effective_requests(pod: Json) -> dict[str, float]:
    """What a pod holds of each resource, by Kubernetes' rule for the effective request: the sum over its
    containers and sidecars (init containers with `restartPolicy: Always`), or the largest one-shot init container
    if that is more, plus the pod's `overhead`. A container's request defaults to its limit (the API server does
    so), which is how GPUs and other extended resources, set as limits, are counted."""
    spec = pod.get("spec") or {}

    def need(c: Json) -> dict[str, float]:
        res = c.get("resources") or {}
        return {k: quantity(v) for k, v in {**(res.get("limits") or {}), **(res.get("requests") or {})}.items()}

    inits = spec.get("initContainers") or []
    total: dict[str, float] = {}
    for c in [*(spec.get("containers") or []), *(c for c in inits if c.get("restartPolicy") == "Always")]:
        for k, v in need(c).items():
            total[k] = total.get(k, 0.0) + v
    for c in inits:
        if c.get("restartPolicy") != "Always":
            for k, v in need(c).items():
                total[k] = max(total.get(k, 0.0), v)
    for k, v in (spec.get("overhead") or {}).items():
        total[k] = total.get(k, 0.0) + quantity(v)
    return total


def _pod_requests(pod: Json) -> tuple[int, int, int]:
    """(gpus, cpu_milli, memory_mib) a pod holds (`effective_requests`)."""
    return basic_requests(effective_requests(pod))


def basic_requests(total: Mapping[str, float]) -> tuple[int, int, int]:
    """(gpus, cpu_milli, memory_mib) of `effective_requests`' answer."""
    return (int(total.get(GPU_RESOURCE, 0)), int(round(total.get("cpu", 0) * 1000)),
            int(round(total.get("memory", 0) / 2**20)))


class _Api:
    """Calls the generated client, returns parsed JSON, retries what is worth retrying, maps the rest."""

    def __init__(self, api_client: k8s.ApiClient, max_retries: int, backoff_s: float,
                 sleep: Callable[[float], None], timeout_s: float) -> None:
        self.core = k8s.CoreV1Api(api_client)
        self.apps = k8s.AppsV1Api(api_client)
        self.autoscaling = k8s.AutoscalingV2Api(api_client)
        self.batch = k8s.BatchV1Api(api_client)
        self.coordination = k8s.CoordinationV1Api(api_client)
        self.custom = k8s.CustomObjectsApi(api_client)
        self.policy = k8s.PolicyV1Api(api_client)
        self.max_retries, self.backoff_s, self.sleep, self.timeout_s = max_retries, backoff_s, sleep, timeout_s

    def __call__(self, what: str, fn: Callable[..., Any], *args: Any, retry_throttled: bool = True,
                 retries: int | None = None, **kwargs: Any) -> Json:
        limit = self.max_retries if retries is None else retries
        for attempt in range(limit + 1):
            try:
                resp = fn(*args, _preload_content=False, _request_timeout=self.timeout_s, **kwargs)
                data = resp.data
                return json.loads(data) if data else {}
            except ApiException as exc:
                err: ActuationError = _translate(exc, what)
                cause: Exception = exc
            except (urllib3.exceptions.HTTPError, OSError) as exc:   # timeouts, refused connections
                err, cause = KubeTemporaryError(f"{what}: {type(exc).__name__}: {exc}"), exc
            retryable = isinstance(err, KubeTemporaryError) and not isinstance(err, ConflictError) and (
                retry_throttled or not isinstance(err, ThrottledError))
            if not retryable or attempt == limit:
                raise err from cause
            log.info("%s; retry %d/%d", err, attempt + 1, limit)
            self.sleep(self.backoff_s * 2**attempt)
        raise AssertionError("unreachable")

    def update(self, what: str, read: Callable[[], Json], patch: Callable[[Json], Json],
               change: Callable[[Json], Json | None]) -> Json | None:
        """Read-modify-write with resourceVersion; on 409 read again and recompute, up to max_retries times.

        `change(obj)` returns a merge patch, or None when nothing needs changing."""
        for attempt in range(self.max_retries + 1):
            obj = read()
            body = change(obj)
            if body is None:
                return None
            body.setdefault("metadata", {})["resourceVersion"] = obj["metadata"]["resourceVersion"]
            try:
                return patch(body)
            except ConflictError:
                if attempt == self.max_retries:
                    raise
                log.info("%s: conflict, re-reading (%d/%d)", what, attempt + 1, self.max_retries)
        return None

    def update_node(self, name: str, change: Callable[[Json], Json | None]) -> Json | None:
        what = f"node {name}"
        return self.update(
            what, lambda: self(what, self.core.read_node, name),
            lambda body: self(what, self.core.patch_node, name, body, _content_type=MERGE_PATCH), change)


def placement_refusal(pod: Json, node: Json) -> str | None:
    """Why Kubernetes would not run `pod` on `node` by the pod's own rules (a NoSchedule or NoExecute taint it
    does not tolerate, its node selector, its required node affinity), None when they allow it."""
    meta = node.get("metadata") or {}
    return NodeRules.from_pod_spec(pod.get("spec") or {}).refusal(
        meta.get("name", ""), meta.get("labels") or {},
        map(Taint.from_json, (node.get("spec") or {}).get("taints") or ()))


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


def _taints_change(node: Json, key: str, add: bool, until: float | None) -> Json | None:
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


def _annotation_map_change(node: Json, key: str, updates: Mapping[str, Any]) -> Json | None:
    """Merge `updates` into the JSON map in annotation `key` (a None value deletes the entry)."""
    current = _json_annotation(node, key)
    merged = {k: v for k, v in {**current, **updates}.items() if v is not None}
    if merged == current and key in ((node.get("metadata") or {}).get("annotations") or {}):
        return None
    value = json.dumps(merged, sort_keys=True) if merged else None
    return {"metadata": {"annotations": {key: value}}}


# ---- the actuator --------------------------------------------------------------------------------------------


class KubernetesActuator:
    """Applies actions through the Kubernetes API. Failures come back as RETRY / FAILED results, never raised."""

    name = "kubernetes"

    def __init__(
        self,
        api_client: k8s.ApiClient,
        *,
        default_namespace: str = "default",
        power_cap_annotation: str = POWER_CAP_ANNOTATION,
        hot_taint_key: str = HOT_TAINT_KEY,
        reservation_annotation: str = RESERVATION_ANNOTATION,
        hot_taint_ttl_s: float = 900.0,
        reservation_ttl_s: float = 300.0,
        kueue_queues: tuple[str, str] | None = None,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        request_timeout_s: float = 10.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.api = _Api(api_client, max_retries, backoff_s, sleep, request_timeout_s)
        self.default_namespace = default_namespace
        self.power_cap_annotation = power_cap_annotation
        self.hot_taint_key = hot_taint_key
        self.reservation_annotation = reservation_annotation
        self.hot_taint_ttl_s = hot_taint_ttl_s
        self.reservation_ttl_s = reservation_ttl_s
        self.kueue_queues = kueue_queues   # (inference ClusterQueue, training ClusterQueue) of one cohort
        self.clock = clock
        self._handlers: dict[type, Callable[[Any, ClusterSnapshot], str]] = {
            Migrate: self._migrate, SetPowerLimit: self._power_limit, ScaleInference: self._scale_inference,
            ScaleTraining: self._scale_training, TaintNode: self._taint,
        }  # fmt: skip

    def apply(self, action: Action, snapshot: ClusterSnapshot) -> ActionResult:
        handler = self._handlers.get(type(action))
        if handler is None:
            return ActionResult(action, Outcome.FAILED, f"kubernetes actuator cannot apply {action.kind}")
        try:
            detail = handler(action, snapshot)
        except TemporaryActuationError as err:
            return ActionResult(action, Outcome.RETRY, str(err), _code(err))
        except PermanentActuationError as err:
            return ActionResult(action, Outcome.FAILED, str(err), _code(err))
        self._tell(action, snapshot, detail)
        return ActionResult(action, Outcome.APPLIED, detail)

    def _tell(self, action: Action, snapshot: ClusterSnapshot, detail: str) -> None:
        """An Event on what the action changed (the pod, Deployment, Job or node), so `kubectl describe` and
        `kubectl get events` say what gputide did and why. Best effort: a failure is logged."""
        try:
            if isinstance(action, Migrate):
                ns, name = split_name(action.workload, self.default_namespace)
                involved = {"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": name}
            elif isinstance(action, ScaleInference | ScaleTraining):
                owner = action.service if isinstance(action, ScaleInference) else action.job
                ns, name = split_name(owner, self._owner_namespace(owner, snapshot))
                kind = ("apps/v1", "Deployment") if isinstance(action, ScaleInference) else ("batch/v1", "Job")
                involved = {"apiVersion": kind[0], "kind": kind[1], "namespace": ns, "name": name}
            else:   # SetPowerLimit, TaintNode
                involved = {"apiVersion": "v1", "kind": "Node", "name": action.node}
            post_event(self.api, involved, "Normal", EVENT_REASONS[type(action)], f"{action.reason}: {detail}",
                       "gputide-controller", self.clock())
        except ActuationError as err:
            log.warning("no event for %s: %s", action.describe(), err)

    # ---- Migrate: reserve, taint, evict ----

    def _migrate(self, action: Migrate, snapshot: ClusterSnapshot) -> str:
        ns, pod = split_name(action.workload, self.default_namespace)
        try:
            slots = [snapshot.gpus[i].slot for i in action.target_gpus]
            source = snapshot.gpus[action.source_gpus[0]].node if action.source_gpus else ""
        except IndexError as exc:
            raise PermanentActuationError(f"migrate {action.workload}: GPU index not in snapshot") from exc
        current = self.api(f"pod {ns}/{pod}", self.api.core.read_namespaced_pod, pod, ns)
        running_on = (current.get("spec") or {}).get("nodeName")
        if source and running_on and running_on != source:
            raise PermanentActuationError(f"pod {ns}/{pod} runs on {running_on}, not {source}: the plan is stale")
        target = self.api(f"node {action.target_node}", self.api.core.read_node, action.target_node)
        refusal = placement_refusal(current, target)
        if refusal is not None:   # its replacement could not run there: moving it could leave it without a place
            raise PermanentActuationError(f"migrate {ns}/{pod}: {action.target_node} has {refusal}")
        workload = snapshot.workload_by_name.get(action.workload)
        # the reservation is the owner's (its replacement pod has another name); an owner may already be qualified
        key = "/".join(split_name(workload.owner, ns)) if workload is not None and workload.owner else f"{ns}/{pod}"
        now = self.clock()
        entry = {"pod": f"{ns}/{pod}", "gpus": slots, "count": len(slots),
                 "expires": rfc3339(now + self.reservation_ttl_s)}
        self.api.update_node(action.target_node, lambda n: _annotation_map_change(
            n, self.reservation_annotation, {key: entry}))
        try:
            if source and source != action.target_node:
                self.api.update_node(source, lambda n: _taints_change(
                    n, self.hot_taint_key, True, now + self.hot_taint_ttl_s))
            body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": ns}}
            self.api(f"evict pod {ns}/{pod}", self.api.core.create_namespaced_pod_eviction, pod, ns, body,
                     retry_throttled=False)
        except NotFoundError:   # gone since we read it: deleted, or our own timed-out eviction went through
            return f"reserved {action.target_node} GPUs {slots} for {key}; {ns}/{pod} was already gone"
        except ActuationError as err:
            self._release_reservation(action.target_node, key)
            if isinstance(err, ThrottledError):
                raise KubeTemporaryError(f"eviction blocked by a PodDisruptionBudget: {err}", err.status) from err
            raise
        return f"reserved {action.target_node} GPUs {slots} for {key}, evicted {ns}/{pod} from {source or '?'}"

    def _release_reservation(self, node: str, key: str) -> None:
        try:
            self.api.update_node(node, lambda n: _annotation_map_change(n, self.reservation_annotation, {key: None}))
        except ActuationError as err:   # it expires on its own; the action's own error is what matters
            log.warning("could not release reservation %s on %s: %s", key, node, err)

    # ---- power caps, taints ----

    def _power_limit(self, action: SetPowerLimit, snapshot: ClusterSnapshot) -> str:
        watts = round(float(action.watts), 1)
        self.api.update_node(action.node, lambda n: _annotation_map_change(
            n, self.power_cap_annotation, {action.uuid: watts}))
        return f"{action.node} {self.power_cap_annotation}[{action.uuid}] = {watts} W"

    def _taint(self, action: TaintNode, snapshot: ClusterSnapshot) -> str:
        until = None if action.remove else self.clock() + self.hot_taint_ttl_s
        self.api.update_node(action.node, lambda n: _taints_change(n, self.hot_taint_key, not action.remove, until))
        return f"{'removed' if action.remove else 'added'} taint {self.hot_taint_key} on {action.node}"

    def power_caps(self, node: str) -> dict[str, float]:
        return read_power_caps(self.api(f"node {node}", self.api.core.read_node, node), self.power_cap_annotation)

    def recover(self) -> list[str]:
        """The loop's first cycle as leader: what a previous leader left behind is released once expired.

        Migrations are make-room-first and level-triggered here (the reservation and the taint carry their own
        expiry; an eviction either happened or did not), so recovering is `release_expired`; an API failure
        becomes a note, the expiries stay and the next cycle's housekeeping tries again.
        """
        return self._release_expired_noting("recover")

    def housekeeping(self) -> list[str]:
        """Once per planning cycle (the loop's duck-typed hook): `release_expired`, API failures as a note."""
        return self._release_expired_noting("housekeeping")

    def _release_expired_noting(self, what: str) -> list[str]:
        try:
            return self.release_expired()
        except ActuationError as err:
            return [f"{what}: could not release expired taints and reservations: {err}"]

    def release_expired(self) -> list[str]:
        """Remove hot taints and reservations whose expiry has passed; call once per reconcile. Returns notes."""
        now, notes = self.clock(), []
        for node in self.api("list nodes", self.api.core.list_node).get("items", []):
            name = node["metadata"]["name"]
            until = parse_time((node["metadata"].get("annotations") or {}).get(HOT_UNTIL_ANNOTATION))
            if until is not None and until <= now:
                self.api.update_node(name, lambda n: _taints_change(n, self.hot_taint_key, False, None))
                notes.append(f"{name}: hot taint expired")
            stale = {k: None for k, v in _json_annotation(node, self.reservation_annotation).items()
                     if (parse_time(v.get("expires")) or 0) <= now}
            if stale:
                self.api.update_node(name, lambda n, s=stale: _annotation_map_change(n, self.reservation_annotation, s))
                notes.append(f"{name}: reservations expired: {sorted(stale)}")
        return notes

    # ---- inference: HPA floor or Deployment scale ----

    def _scale_inference(self, action: ScaleInference, snapshot: ClusterSnapshot) -> str:
        ns, name = split_name(action.service, self._owner_namespace(action.service, snapshot))
        hpas = self.api(f"list HPAs in {ns}", self.api.autoscaling.list_namespaced_horizontal_pod_autoscaler, ns)
        hpa = next((h for h in hpas.get("items", []) if (h["spec"].get("scaleTargetRef") or {}).get("kind")
                    == "Deployment" and h["spec"]["scaleTargetRef"].get("name") == name), None)
        if hpa is None:
            what = f"deployment {ns}/{name} scale"
            self.api(what, self.api.apps.patch_namespaced_deployment_scale, name, ns,
                     {"spec": {"replicas": int(action.replicas)}}, _content_type=MERGE_PATCH)
            return f"{ns}/{name} replicas = {action.replicas}"
        hname, floor = hpa["metadata"]["name"], {}

        def change(h: Json) -> Json | None:
            want = min(max(int(action.replicas), 1), int(h["spec"]["maxReplicas"]))
            floor["value"] = want
            return None if h["spec"].get("minReplicas", 1) == want else {"spec": {"minReplicas": want}}

        what = f"hpa {ns}/{hname}"
        self.api.update(
            what, lambda: self.api(what, self.api.autoscaling.read_namespaced_horizontal_pod_autoscaler, hname, ns),
            lambda body: self.api(what, self.api.autoscaling.patch_namespaced_horizontal_pod_autoscaler, hname, ns,
                                  body, _content_type=MERGE_PATCH), change)
        clamped = "" if floor["value"] == action.replicas else f" (asked {action.replicas}, clamped to HPA range)"
        return f"hpa {ns}/{hname} minReplicas = {floor['value']}{clamped}"

    # ---- training: Job suspend / parallelism, Kueue quota ----

    def _owner_namespace(self, owner: str, snapshot: ClusterSnapshot) -> str:
        """The namespace of a job or service named by its bare name: that of its pods (or, for a suspended job,
        the one the snapshot lists it in), else the actuator's default. A bare name whose pods and suspended jobs
        sit in two namespaces names two objects: acting on either could scale the wrong one, so it is refused
        (`KubernetesWorkloads` qualifies such owners as `namespace/name`)."""
        spaces = {w.namespace for w in snapshot.workloads_by_owner.get(owner, ())}
        spaces |= {j.namespace for j in snapshot.suspended_jobs or () if j.name == owner}
        if len(spaces) > 1:
            raise PermanentActuationError(f"{owner!r} names objects in namespaces {', '.join(sorted(spaces))}: "
                                          "refusing to guess; owners must be namespace/name")
        return spaces.pop() if spaces else self.default_namespace

    def _scale_training(self, action: ScaleTraining, snapshot: ClusterSnapshot) -> str:
        ns, name = split_name(action.job, self._owner_namespace(action.job, snapshot))
        what = f"job {ns}/{name}"
        job = self.api(what, self.api.batch.read_namespaced_job, name, ns)
        queued = bool((job["metadata"].get("labels") or {}).get(KUEUE_QUEUE_LABEL))
        per_worker = _pod_requests(job["spec"].get("template") or {})[0] or 1
        delta = (int(action.workers) - int(action.previous_workers)) * per_worker
        notes, flavor = [], None
        if self.kueue_queues and queued and delta:
            # resolved before anything changes: a refusal leaves the Job alone, and a suspend clears the admission
            flavor = self._check_queues(self.kueue_queues, self._admitted_flavor(ns, name, job))[0]
        if self.kueue_queues and queued and delta > 0:   # grow: quota first, so Kueue can admit the workers
            notes.append(self.shift_kueue_quota(self.kueue_queues[0], self.kueue_queues[1], delta, flavor))
        body: Json
        if action.workers == 0:
            # the label lets the next cycle (or the next leader) find the Job it suspended and resume it; the
            # priority of its pods is recorded because a suspended Job has none to read it from
            pods = snapshot.workloads_by_owner.get(action.job)
            meta: Json = {"labels": {SUSPENDED_LABEL: "true"}}
            if pods:
                meta["annotations"] = {PRIORITY_ANNOTATION: str(pods[0].priority)}
            body = {"metadata": meta, "spec": {"suspend": True}}
        else:
            body = {"metadata": {"labels": {SUSPENDED_LABEL: None}},
                    "spec": {"parallelism": int(action.workers), "suspend": False}}
        self.api(what, self.api.batch.patch_namespaced_job, name, ns, body, _content_type=MERGE_PATCH)
        if self.kueue_queues and queued and delta < 0:   # shrink: give the quota back once the job is smaller
            notes.append(self.shift_kueue_quota(self.kueue_queues[1], self.kueue_queues[0], -delta, flavor))
        state = "suspended" if action.workers == 0 else f"parallelism = {action.workers}"
        return "; ".join([f"{what} {state}", *notes])

    def _admitted_flavor(self, ns: str, name: str, job: Json) -> str | None:
        """The GPU flavor Kueue admitted the Job under, from its Workload(s); None while it is not admitted.

        Found by Kueue's `kueue.x-k8s.io/job-uid` label; a Workload without it (Kueue sets it only where the uid is
        a valid label value) is found by its owner reference, at the cost of listing the namespace's Workloads."""
        uid = job["metadata"].get("uid") or ""
        what = f"kueue workloads of job {ns}/{name}"
        items = self.api(what, self.api.custom.list_namespaced_custom_object, *KUEUE_WORKLOADS, ns, "workloads",
                         label_selector=f"{JOB_UID_LABEL}={uid}").get("items") or []
        if not items:
            items = self.api(what, self.api.custom.list_namespaced_custom_object, *KUEUE_WORKLOADS, ns,
                             "workloads").get("items") or []
        return admitted_flavor([w for w in items if owned_by(w, uid)], GPU_RESOURCE, f"{ns}/{name}")

    def _check_queues(self, queues: tuple[str, str], flavor: str | None) -> tuple[str, str]:
        """(flavor, cohort) of a quota move between two ClusterQueues, read fresh: both must be in one cohort and
        hold GPU quota in `flavor` (None: in exactly one common flavor, `k8s_kueue.choose_flavor`)."""
        read = {q: self._read_queue(q) for q in queues}
        cohorts = {q: cq["spec"].get("cohort") or "" for q, cq in read.items()}
        if not cohorts[queues[0]] or cohorts[queues[0]] != cohorts[queues[1]]:
            raise PermanentActuationError(f"ClusterQueues {queues[0]}, {queues[1]} are not in one cohort: {cohorts}")
        return choose_flavor(read, flavor, GPU_RESOURCE), cohorts[queues[0]]

    def shift_kueue_quota(self, from_queue: str, to_queue: str, gpus: int, flavor: str | None = None) -> str:
        """Move `gpus` of nominalQuota (nvidia.com/gpu) in one ResourceFlavor from one ClusterQueue to another in
        the same cohort. Without `flavor`, the queues must hold GPU quota in exactly one common flavor (never a
        guess between several); with it, both must hold quota in it. Nothing changes when either is not so.

        The lender is lowered first, so the cohort's total never exceeds what exists; its lendingLimit is clamped
        to the new nominal quota. If raising the borrower fails, the lender is restored (best effort)."""
        if gpus <= 0:
            raise PermanentActuationError(f"shift_kueue_quota: gpus must be > 0, got {gpus}")
        flavor, cohort = self._check_queues((from_queue, to_queue), flavor)
        self._change_quota(from_queue, -gpus, flavor)
        try:
            self._change_quota(to_queue, gpus, flavor)
        except ActuationError:
            try:
                self._change_quota(from_queue, gpus, flavor)
            except ActuationError as undo:
                log.error("kueue quota shift half-done, %s lost %d GPUs: %s", from_queue, gpus, undo)
            raise
        return f"kueue quota {gpus} x {GPU_RESOURCE} ({flavor}): {from_queue} -> {to_queue} (cohort {cohort})"

    def _read_queue(self, name: str) -> Json:
        return self.api(f"clusterqueue {name}", self.api.custom.get_cluster_custom_object, *KUEUE, name)

    def _change_quota(self, queue: str, delta: int, flavor: str) -> None:
        """Add `delta` to the queue's GPU nominalQuota in `flavor` (only there: other flavors stay as they are)."""
        def change(cq: Json) -> Json:
            groups = cq["spec"].get("resourceGroups") or []
            for group in groups:
                for fl in group.get("flavors") or []:
                    for res in fl.get("resources") or []:
                        if res.get("name") == GPU_RESOURCE and fl.get("name") == flavor:
                            nominal = int(quantity(res["nominalQuota"])) + delta
                            if nominal < 0:
                                raise PermanentActuationError(
                                    f"clusterqueue {queue}: {flavor} nominalQuota would be {nominal}")
                            res["nominalQuota"] = nominal
                            if "lendingLimit" in res and int(quantity(res["lendingLimit"])) > nominal:
                                res["lendingLimit"] = nominal
                            return {"spec": {"resourceGroups": groups}}
            raise PermanentActuationError(f"clusterqueue {queue} has no {GPU_RESOURCE} quota (flavor {flavor})")

        what = f"clusterqueue {queue}"
        self.api.update(what, lambda: self._read_queue(queue), lambda body: self.api(
            what, self.api.custom.patch_cluster_custom_object, *KUEUE, queue, body, _content_type=MERGE_PATCH), change)


class NodeAnnotationCaps:
    """The power-cap agent's source on Kubernetes: `read()` -> {uuid: watts} from this node's annotation.

    Same contract as exporters.power_caps.JsonFileCaps: an API error is logged and reads as no caps, so the
    agent keeps the limits it already applied."""

    def __init__(self, api_client: k8s.ApiClient, node: str, annotation: str = POWER_CAP_ANNOTATION,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.api = _Api(api_client, 1, 0.5, sleep, 5.0)
        self.node, self.annotation = node, annotation

    def read(self) -> dict[str, float]:
        try:
            return read_power_caps(self.api(f"node {self.node}", self.api.core.read_node, self.node), self.annotation)
        except ActuationError as err:
            log.error("power caps of node %s unreadable, keeping current limits: %s", self.node, err)
            return {}


# ---- leader election -----------------------------------------------------------------------------------------


LEDGER_ANNOTATION = "gputide.io/safety-ledger"  # the holder's SafetyLedger (JSON), inherited by the next holder
MAX_LEDGER_BYTES = 128 * 1024  # well inside the API server's 256 KiB limit on all annotations of an object


class LeaseLeaderElector:
    """client-go style leader election on a coordination.k8s.io/v1 Lease; call `try_acquire_or_renew()` each cycle.

    It is also the loop's `LeaderElector` (`try_acquire(now)` / `release()`). The lease is timed on the elector's
    own `clock` (wall time), not the loop's `now`: lease expiry is a matter between replicas, and a simulated
    or skewed loop clock must not shorten or stretch it.

    The Lease also carries the holder's safety ledger (cooldowns, evictions and migrations in their windows) in
    the `gputide.io/safety-ledger` annotation: `save_state` writes it whenever the loop acted, `load_state` hands
    a new holder what the previous one left, so a fail-over or restart never resets the safety budgets.
    """

    def __init__(self, api_client: k8s.ApiClient, name: str, namespace: str, identity: str,
                 lease_duration_s: int = 15, renew_deadline_s: float = 10, clock: Callable[[], float] = time.time,
                 *, max_retries: int = 0, sleep: Callable[[float], None] = time.sleep) -> None:
        if renew_deadline_s >= lease_duration_s:
            raise ValueError("renew_deadline_s must be shorter than lease_duration_s")
        self.api = _Api(api_client, max_retries, 0.1, sleep, 5.0)
        self.name, self.namespace, self.identity = name, namespace, identity
        self.lease_duration_s, self.renew_deadline_s, self.clock = int(lease_duration_s), renew_deadline_s, clock
        self._observed: tuple[Any, ...] | None = None   # (holder, renewTime, transitions) last seen
        self._observed_at = 0.0                          # our clock when the record last changed
        self._renewed_at: float | None = None            # our clock at our last successful write as holder
        self._state: str | None = None                   # our safety ledger, written to LEDGER_ANNOTATION
        self._inherited: str | None = None               # the ledger found on the Lease when we took it

    @property
    def is_leader(self) -> bool:
        return self._renewed_at is not None and self.clock() - self._renewed_at < self.renew_deadline_s

    def _spec(self, now: float, acquired: float, transitions: int, holder: str, duration: int) -> Json:
        return {"holderIdentity": holder, "leaseDurationSeconds": duration, "acquireTime": micro_time(acquired),
                "renewTime": micro_time(now), "leaseTransitions": transitions}

    def try_acquire_or_renew(self) -> bool:
        now, what = self.clock(), f"lease {self.namespace}/{self.name}"
        try:
            lease = self.api(what, self.api.coordination.read_namespaced_lease, self.name, self.namespace)
        except NotFoundError:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(now, now, 0, self.identity, self.lease_duration_s)}
            return self._write(what, now, self.api.coordination.create_namespaced_lease, self.namespace, body)
        except ActuationError as err:
            log.warning("%s: %s", what, err)
            return self.is_leader
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"), spec.get("leaseTransitions"))
        if record != self._observed:
            self._observed, self._observed_at = record, now
        duration = int(spec.get("leaseDurationSeconds") or self.lease_duration_s)
        if holder and holder != self.identity and self._observed_at + duration > now:
            self._renewed_at = None
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == self.identity:
            acquired = parse_time(spec.get("acquireTime")) or now
        else:
            acquired, transitions = now, transitions + 1
        annotations = self._annotations(lease)
        taking_over = holder != self.identity or self._renewed_at is None
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace, "annotations": annotations,
                             "resourceVersion": lease["metadata"]["resourceVersion"]},
                "spec": self._spec(now, acquired, transitions, self.identity, self.lease_duration_s)}
        won = self._write(what, now, self.api.coordination.replace_namespaced_lease, self.name, self.namespace, body)
        if won and taking_over:
            self._inherited = ((lease.get("metadata") or {}).get("annotations") or {}).get(LEDGER_ANNOTATION)
        return won

    def _annotations(self, lease: Json) -> dict[str, str]:
        """The Lease's annotations, with our safety ledger when we have one (a replace must carry them all)."""
        out = dict((lease.get("metadata") or {}).get("annotations") or {})
        if self._state is not None:
            out[LEDGER_ANNOTATION] = self._state
        return out

    def load_state(self) -> str | None:
        """The safety ledger the previous holder left on the Lease (once, after we took it over)."""
        text, self._inherited = self._inherited, None
        return text

    def save_state(self, text: str) -> None:
        """Keep our safety ledger on the Lease for whoever holds it next; written now if we hold it."""
        if len(text) > MAX_LEDGER_BYTES:
            log.warning("safety ledger of %d bytes not written to the Lease (limit %d)", len(text), MAX_LEDGER_BYTES)
            return
        self._state = text
        if self.is_leader:
            self.try_acquire_or_renew()

    def try_acquire(self, now: float) -> bool:
        """The loop's LeaderElector protocol: acquire or renew; True while this replica may act."""
        return self.try_acquire_or_renew()

    def _write(self, what: str, now: float, fn: Callable[..., Any], *args: Any) -> bool:
        try:
            written = self.api(what, fn, *args)
        except ActuationError as err:   # 409: another contender wrote first; others: try again next cycle
            log.info("%s: %s is not leader: %s", what, self.identity, err)
            return False if isinstance(err, ConflictError) else self.is_leader
        spec = written.get("spec") or {}
        self._observed = (spec.get("holderIdentity") or "", spec.get("renewTime"), spec.get("leaseTransitions"))
        self._observed_at = self._renewed_at = now
        return True

    def release(self) -> bool:
        """Give the lease up (holderIdentity empty) so another replica takes over at once; True if released."""
        if not self.is_leader:
            return False
        now, what = self.clock(), f"lease {self.namespace}/{self.name}"
        try:
            lease = self.api(what, self.api.coordination.read_namespaced_lease, self.name, self.namespace)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                self._renewed_at = None
                return False
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace,
                                 "annotations": self._annotations(lease),
                                 "resourceVersion": lease["metadata"]["resourceVersion"]},
                    "spec": self._spec(now, now, int(spec.get("leaseTransitions") or 0), "", 1)}
            self.api(what, self.api.coordination.replace_namespaced_lease, self.name, self.namespace, body)
        except ActuationError as err:
            log.warning("%s: release failed: %s", what, err)
            return False
        finally:
            self._renewed_at = None
        return True


# ---- client construction -------------------------------------------------------------------------------------


def build_api_client(kubeconfig: str | None = None, in_cluster: bool | None = None,
                     context: str | None = None) -> k8s.ApiClient:
    """An ApiClient from the in-cluster service account, or a kubeconfig (default: $KUBECONFIG, ~/.kube/config).

    `in_cluster=None` picks in-cluster config when running in a pod (KUBERNETES_SERVICE_HOST is set) and no
    kubeconfig was given."""
    if in_cluster is None:
        in_cluster = kubeconfig is None and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    try:
        if in_cluster:
            cfg = k8s.Configuration()
            k8s_config.load_incluster_config(client_configuration=cfg)
            return k8s.ApiClient(cfg)
        return k8s_config.new_client_from_config(config_file=kubeconfig, context=context)
    except k8s_config.ConfigException as exc:
        raise PermanentActuationError(f"no Kubernetes API configuration: {exc}") from exc


__all__ = [
    "HOT_TAINT_KEY", "POWER_CAP_ANNOTATION", "RESERVATION_ANNOTATION", "ConflictError", "KubernetesActuator",
    "LeaseLeaderElector", "NodeAnnotationCaps", "NotFoundError", "ThrottledError", "build_api_client",
    "micro_time", "read_power_caps", "split_name",
]  # fmt: skip
