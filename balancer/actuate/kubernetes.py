"""The one gateway to the Kubernetes API: the only module in gputide that imports `kubernetes`.

It builds the client (`build_api_client`: in-cluster, a kubeconfig), wraps every call (`_Api`: retries with
exponential backoff on 5xx, throttling 429 and transport errors, optimistic-concurrency read-modify-write on 409,
`ApiException` mapped to gputide's `ActuationError` tree), and holds what every Kubernetes-facing module shares:
the annotations, labels and taint gputide writes, resource quantities and a pod's effective requests, RFC 3339
times. Built on it: the actuator (`k8s_actuator.py`), Lease leader election (`k8s_leader.py`), the watch caches
(`k8s_watch.py`), the pod and node metadata (`k8s_workloads.py`, `k8s_nodes.py`) and the secondary scheduler
(`k8s_scheduler.py`); none of them imports the client.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch  # noqa: F401 - the gateway's watch, used by k8s_watch.ListWatch
from kubernetes.client.exceptions import ApiException

from balancer.errors import ActuationError, PermanentActuationError, TemporaryActuationError

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
        self.storage = k8s.StorageV1Api(api_client)
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
    "HOT_TAINT_KEY", "POWER_CAP_ANNOTATION", "RESERVATION_ANNOTATION", "ConflictError", "NotFoundError",
    "ThrottledError", "build_api_client", "micro_time", "read_power_caps", "split_name",
]  # fmt: skip
