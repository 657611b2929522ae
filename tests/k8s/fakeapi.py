"""A fake Kubernetes API server for the actuator tests: real HTTP, real semantics, only the endpoints used.

`FakeKube()` starts `http.server` in a thread on 127.0.0.1:<free port>; the official `kubernetes` client talks
to it through `FakeKube.client()`. What it implements the way the real API server does:

- resourceVersion: one cluster-wide counter, bumped on every write; a PUT or a merge patch that carries a stale
  `metadata.resourceVersion` answers 409 Conflict; a Lease PUT without one answers 422 (no unconditional update).
- POST of an existing name answers 409 AlreadyExists; unknown objects 404 NotFound.
- PATCH accepts `application/merge-patch+json` only (RFC 7386) and answers 415 otherwise, so a client that
  relies on the generated client's default (strategic merge, or JSON patch) is caught.
- Every full request body, and the result of every patch, is validated against the Kubernetes schema with
  kubernetes-validate (strict), plus the semantic checks the API server adds (HPA min <= max, taint effects,
  Lease MicroTime format); Kueue ClusterQueues and Workloads against a subset of their CRD schemas. Invalid -> 422.
- Jobs: `spec.completions` is immutable except on an Indexed Job whose completions equal its parallelism after the
  update (Elastic Indexed Jobs, KEP-3715), `spec.completionMode` is immutable and an Indexed Job needs completions,
  as the API server's Job validation says.
- Kueue's job reconciler, reduced to what gputide meets (`kueue = True`, the default; `_kueue_change`): a queued Job
  (label `kueue.x-k8s.io/queue-name`) follows its Workload, re-checked after every write of a Job or a Workload. A
  deactivated Workload (`spec.active: false`) loses its admission and its Job is suspended; activated again it is
  admitted again as it was (the fake checks no quota); a suspended Job whose Workload is admitted is unsuspended
  and a running one whose Workload is not is suspended (steps 7 and 8 of kueue's
  pkg/controller/jobframework/reconciler.go). A Job without a Workload is left alone (Kueue would make one).
- Eviction API: 429 TooManyRequests when a PodDisruptionBudget selecting the pod has no disruptions left,
  404 for unknown pods, otherwise the pod is deleted and the budget decremented.
- Binding: sets spec.nodeName once; a second binding answers 409, and so does binding a pod with
  `spec.schedulingGates` ("pod X has non-empty .spec.schedulingGates"). A pod created with gates gets the condition
  PodScheduled=False/SchedulingGated, as the API server gives it; gates may only be removed, never added.
- Storage (`claim`, `volume`, `storage_class`): PersistentVolumeClaims (namespaced), PersistentVolumes and
  StorageClasses (cluster-scoped) are listed, watched, read and merge-patched like any other object, validated as
  the API server validates them (access modes and size required, a StorageClass's volumeBindingMode defaulted to
  Immediate, a claim's spec immutable but for its volumeName once and its requests, a class's provisioner,
  parameters and binding mode immutable, a volume's node affinity immutable once set).
- Pod status subresource (PATCH pods/{name}/status): only the patch's `status` applies, as on the real server.
- Events (core v1): created and listed like any other object.
- Deployments' metadata.managedFields, as the API server's Update operation keeps them (`_manage`): every write
  (create, replace, merge patch, the scale subresource's patch) names its field manager (the query's `fieldManager`,
  the client's `field_manager`; else the User-Agent up to its first "/", "OpenAPI-Generator" for the Python client;
  `add` and `mutate` take `manager=`), which then owns the spec fields the write added or changed, taken from every
  other manager's entry (one entry per manager, operation and subresource: a scale's carries subresource "scale");
  a value written unchanged moves nothing. Only spec's fields are tracked, a list as one field. A request's own
  managedFields replace the stored ones ([{}] strips them), as on the real server; `add(..., manager=None)` stores
  an object with none (one the server never tracked, or stripped). As on the real server, an update of an object
  with none is not tracked (it keeps none), nor a scale write to a Deployment whose replicas no entry owns
  (`_untracked`).
- ConfigMaps (core v1, namespaced): created (409 AlreadyExists for an existing name), read and replaced (409 for a
  stale resourceVersion) like any other object, their data validated as the API server's ValidateConfigMap does
  (k8s.io/apimachinery IsConfigMapKey): every key of `data` and `binaryData` [-._a-zA-Z0-9]+, at most 253 bytes,
  not ".", ".." nor starting with "..", in one of the two only, and the values 1 MiB at most in all. Invalid -> 422.
- Namespaces (cluster-scoped, `namespace(name, **labels)`): listed and watched like any other object, for pod
  affinity terms that select namespaces by their labels.
- Pod list field selectors: spec.schedulerName, spec.nodeName, status.phase, metadata.name/namespace; label
  selectors of equality terms (`key=value`, `key!=value`) on every list.
- Watch (`?watch=true` on any list, chunked JSON lines): from `resourceVersion` N every later change, as the
  filtered watch of the real server sends it (an object that stops matching the selectors comes as DELETED, one
  that starts matching as ADDED); without one (or "0"), synthetic ADDED events for what exists now. The stream
  ends after `timeoutSeconds` (with a BOOKMARK when `allowWatchBookmarks=true`). A resourceVersion older than the
  kept history (`compact()` forgets it all) gets an ERROR event with a 410 Expired Status, as etcd compaction
  does. Faults apply to watch requests like any other.
- Lists and the watch cache: a list without `resourceVersion` is consistent (what exists now); one with
  `resourceVersion=0` is served from the API server's watch cache, and one with `resourceVersion=N` (with
  `resourceVersionMatch=NotOlderThan`, or none: the legacy meaning) from it too, at N or later. The cache is current
  unless `hold_cache()` froze it (another API server, behind the same address, whose watch cache lags: what a client
  reconnecting after a failure may reach), until `release_cache()`: lists at "0" then get the state it froze (its
  resourceVersion, older than changes a watch already sent), and a list at an N it has not reached answers 504
  "Too large resource version", as the API server does when its cache does not catch up in time (it waits 3 s;
  the fake answers at once). An N past the server's own version answers the same. Watches are not held: they keep
  serving every change (from a server that is current). `resourceVersionMatch=Exact` is not supported (400).

Faults on demand: `inject("POST", r"/eviction$", 500, count=2)` makes the next two matching requests fail;
`before("PUT", r"/leases/", fn)` runs `fn()` just before the next matching request, to stage races;
`delete(plural, name, namespace)` removes an object behind the client's back.
Every request is logged in `requests` for assertions.
"""

from __future__ import annotations

import base64
import copy
import functools
import json
import re
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl

import jsonschema
from kubernetes import client as k8s
from kubernetes_validate import utils as kv_utils
from referencing import Registry, Resource

from balancer.actuate.kubernetes import build_api_client

K8S_VERSION = "1.29"
MERGE_PATCH = "application/merge-patch+json"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)$")
CONFIG_KEY, CONFIG_KEY_MAX, CONFIG_MAX = re.compile(r"[-._a-zA-Z0-9]+"), 253, 1024 * 1024   # IsConfigMapKey, 1 MiB

# resource plural -> (kind, apiVersion, namespaced)
RESOURCES: dict[str, tuple[str, str, bool]] = {
    "nodes": ("Node", "v1", False),
    "pods": ("Pod", "v1", True),
    "deployments": ("Deployment", "apps/v1", True),
    "horizontalpodautoscalers": ("HorizontalPodAutoscaler", "autoscaling/v2", True),
    "jobs": ("Job", "batch/v1", True),
    "leases": ("Lease", "coordination.k8s.io/v1", True),
    "poddisruptionbudgets": ("PodDisruptionBudget", "policy/v1", True),
    "clusterqueues": ("ClusterQueue", "kueue.x-k8s.io/v1beta1", False),
    "workloads": ("Workload", "kueue.x-k8s.io/v1beta1", True),
    "events": ("Event", "v1", True),
    "configmaps": ("ConfigMap", "v1", True),
    "namespaces": ("Namespace", "v1", False),
    "persistentvolumeclaims": ("PersistentVolumeClaim", "v1", True),
    "persistentvolumes": ("PersistentVolume", "v1", False),
    "storageclasses": ("StorageClass", "storage.k8s.io/v1", False),
}
PLURAL = {kind: plural for plural, (kind, _, _) in RESOURCES.items()}
POD_FIELDS = {
    "spec.schedulerName": lambda p: p.get("spec", {}).get("schedulerName", "default-scheduler"),
    "spec.nodeName": lambda p: p.get("spec", {}).get("nodeName", ""),
    "status.phase": lambda p: p.get("status", {}).get("phase", ""),
    "metadata.name": lambda p: p["metadata"]["name"],
    "metadata.namespace": lambda p: p["metadata"].get("namespace", ""),
}

# A subset of Kueue's ClusterQueue CRD (v1beta1) openAPIV3Schema: the fields gputide reads and writes.
_QUANTITY = {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": r"^\d+$"}]}
CLUSTERQUEUE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "kueue.x-k8s.io/v1beta1"},
        "kind": {"const": "ClusterQueue"},
        "metadata": {"type": "object"},
        "status": {"type": "object"},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "cohort": {"type": "string"},
                "namespaceSelector": {"type": "object"},
                "queueingStrategy": {"enum": ["StrictFIFO", "BestEffortFIFO"]},
                "resourceGroups": {
                    "type": "array",
                    "maxItems": 16,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["coveredResources", "flavors"],
                        "properties": {
                            "coveredResources": {"type": "array", "items": {"type": "string"}},
                            "flavors": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "required": ["name", "resources"],
                                    "properties": {
                                        "name": {"type": "string"},
                                        "resources": {
                                            "type": "array",
                                            "items": {
                                                "type": "object",
                                                "additionalProperties": False,
                                                "required": ["name", "nominalQuota"],
                                                "properties": {
                                                    "name": {"type": "string"},
                                                    "nominalQuota": _QUANTITY,
                                                    "borrowingLimit": _QUANTITY,
                                                    "lendingLimit": _QUANTITY,
                                                },
                                            },
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}

# A subset of Kueue's Workload CRD (v1beta1): the admission gputide reads (which ResourceFlavor each pod set got).
_POD_SET_ASSIGNMENT = {"type": "object", "required": ["name"], "properties": {
    "name": {"type": "string"}, "flavors": {"type": "object", "additionalProperties": {"type": "string"}},
    "resourceUsage": {"type": "object"}, "count": {"type": "integer", "minimum": 0}}}
_ADMISSION = {"type": "object", "additionalProperties": False, "required": ["clusterQueue", "podSetAssignments"],
              "properties": {"clusterQueue": {"type": "string"},
                             "podSetAssignments": {"type": "array", "maxItems": 8, "items": _POD_SET_ASSIGNMENT}}}
WORKLOAD_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "kueue.x-k8s.io/v1beta1"}, "kind": {"const": "Workload"},
        "metadata": {"type": "object"},
        "spec": {"type": "object", "required": ["podSets"],
                 "properties": {"podSets": {"type": "array", "minItems": 1, "maxItems": 8},
                                "queueName": {"type": "string"}, "active": {"type": "boolean"}}},
        "status": {"type": "object", "properties": {"admission": _ADMISSION, "conditions": {"type": "array"}}},
    },
}  # fmt: skip


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    ok = code < 400
    return {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success" if ok else "Failure",
        "message": message, "reason": "" if ok else reason, "code": code,
    }  # fmt: skip


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _taint_errors(spec: dict[str, Any]) -> list[str]:
    return [f"spec.taints: unsupported effect {taint.get('effect')!r}" for taint in spec.get("taints") or []
            if taint.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute")]


def _hpa_errors(spec: dict[str, Any]) -> list[str]:
    lo, hi = spec.get("minReplicas", 1), spec.get("maxReplicas", 0)
    return [f"spec.minReplicas: {lo} must be >= 1 and <= maxReplicas {hi}"] if lo < 1 or lo > hi else []


def _lease_errors(spec: dict[str, Any]) -> list[str]:
    return [f"spec.{key}: {spec[key]!r} is not RFC3339 MicroTime" for key in ("acquireTime", "renewTime")
            if key in spec and spec[key] is not None and not MICRO_TIME.match(str(spec[key]))]


def _clusterqueue_errors(spec: dict[str, Any]) -> list[str]:
    return [f"{flavor['name']}/{res['name']}: lendingLimit > nominalQuota"
            for group in spec.get("resourceGroups", []) for flavor in group["flavors"] for res in flavor["resources"]
            if "lendingLimit" in res and int(res["lendingLimit"]) > int(res["nominalQuota"])]


# kind -> the semantic checks the API server adds to its schema, on the object's spec
_SPEC_ERRORS: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "Node": _taint_errors,
    "HorizontalPodAutoscaler": _hpa_errors,
    "Lease": _lease_errors,
    "ClusterQueue": _clusterqueue_errors,
}


def _semantic_errors(obj: dict[str, Any]) -> list[str]:
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    errors = _SPEC_ERRORS[kind](spec) if kind in _SPEC_ERRORS else []
    errors += [f"spec.{key} must be >= 0" for key in ("replicas", "parallelism")
               if spec.get(key, 0) is not None and spec.get(key, 0) < 0]
    return errors + _job_errors(obj)


def _job_errors(obj: dict[str, Any]) -> list[str]:
    """A Job's completions as the API server checks them (pkg/apis/batch/validation, validateJobSpec)."""
    spec = obj.get("spec") or {}
    if obj.get("kind") != "Job":
        return []
    if spec.get("completions") is not None and spec["completions"] < 0:
        return ["spec.completions must be >= 0"]
    if spec.get("completionMode") == "Indexed" and spec.get("completions") is None:
        return ["spec.completions: Required value: when completion mode is Indexed"]
    return []


def _job_update_errors(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What the API server refuses in an update of a Job's size (pkg/apis/batch/validation, validateCompletions)."""
    if new.get("kind") != "Job":
        return []
    was, spec = old.get("spec") or {}, new.get("spec") or {}
    errors = []
    if spec.get("completionMode", "NonIndexed") != was.get("completionMode", "NonIndexed"):
        errors.append("spec.completionMode: field is immutable")
    if spec.get("completions") != was.get("completions"):
        if spec.get("completionMode") != "Indexed":
            errors.append("spec.completions: field is immutable")
        elif spec.get("completions") != spec.get("parallelism", 1):
            errors.append("spec.completions: can only be modified in tandem with spec.parallelism")
    return errors


def _owned(obj: dict[str, Any], uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in (obj.get("metadata") or {}).get("ownerReferences") or [])


def _kueue_change(job_obj: dict[str, Any], wl: dict[str, Any],
                  evicted: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(plural, merge patch) of the one change Kueue makes next to a queued Job or its Workload, None when they
    agree. `evicted` keeps the admission a deactivation cleared, to admit the Workload again once it is active."""
    uid = wl["metadata"]["uid"]
    admission = (wl.get("status") or {}).get("admission")
    suspended = bool(job_obj["spec"].get("suspend"))
    if (wl.get("spec") or {}).get("active", True) is False:   # deactivated: evicted, its Job stopped
        if admission:
            evicted[uid] = admission
            return "workloads", {"status": {"admission": None}}
        return None if suspended else ("jobs", {"spec": {"suspend": True}})
    if admission is None and uid in evicted:   # active again: admitted again, at the Job's size of now
        again = copy.deepcopy(evicted.pop(uid))
        for ps in again.get("podSetAssignments") or []:
            ps["count"] = job_obj["spec"].get("parallelism", 1)
        return "workloads", {"status": {"admission": again}}
    if admission and suspended:          # 7. "Job admitted, unsuspending"
        return "jobs", {"spec": {"suspend": False}}
    if not admission and not suspended:  # 8. "Not admitted by cluster queue", suspending
        return "jobs", {"spec": {"suspend": True}}
    return None


def _storage_errors(obj: dict[str, Any]) -> list[str]:
    """What the API server checks of claims, volumes and classes beyond their schema."""
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    errors = []
    if kind in ("PersistentVolumeClaim", "PersistentVolume"):
        if not spec.get("accessModes"):
            errors.append("spec.accessModes: Required value: at least 1 access mode is required")
        size = ((spec.get("resources") or {}).get("requests") if kind == "PersistentVolumeClaim"
                else spec.get("capacity"))
        if "storage" not in (size or {}):
            errors.append("spec: Required value: storage size")
    required = (spec.get("nodeAffinity") or {}).get("required") if kind == "PersistentVolume" else None
    if required is not None and not required.get("nodeSelectorTerms"):
        errors.append("spec.nodeAffinity.required.nodeSelectorTerms: Required value: must have at least one term")
    if kind == "StorageClass":
        if obj.get("volumeBindingMode") not in ("Immediate", "WaitForFirstConsumer"):
            errors.append(f"volumeBindingMode: Unsupported value: {obj.get('volumeBindingMode')!r}")
        if any(not t.get("matchLabelExpressions") for t in obj.get("allowedTopologies") or []):
            errors.append("allowedTopologies: Required value: must contain at least one requirement")
    return errors


def _configmap_errors(obj: dict[str, Any]) -> list[str]:
    """A ConfigMap's keys and size as the API server checks them (ValidateConfigMap; IsConfigMapKey, whose length
    is in bytes and whose pattern must match the whole key)."""
    if obj.get("kind") != "ConfigMap":
        return []
    data, binary = obj.get("data") or {}, obj.get("binaryData") or {}
    errors = []
    for field_, keys in (("data", data), ("binaryData", binary)):
        for key in keys:
            if len(key.encode()) > CONFIG_KEY_MAX:
                errors.append(f"{field_}[{key}]: Invalid value: must be no more than {CONFIG_KEY_MAX} characters")
            if not CONFIG_KEY.fullmatch(key):
                errors.append(f"{field_}[{key}]: Invalid value: a valid config key must consist of alphanumeric "
                              "characters, '-', '_' or '.'")
            if key in (".", "..") or key.startswith(".."):
                errors.append(f"{field_}[{key}]: Invalid value: must not be '.' or '..' nor start with '..'")
    errors += [f"binaryData[{key}]: Invalid value: duplicate of key {key!r} in data" for key in binary if key in data]
    size = sum(len(str(v).encode()) for v in data.values()) + sum(len(base64.b64decode(v)) for v in binary.values())
    if size > CONFIG_MAX:
        errors.append(f"data: Too long: must have at most {CONFIG_MAX} bytes")
    return errors


def _update_errors(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What the API server refuses to change on an update (its ValidateXUpdate), for the kinds the tests change."""
    kind, was, now = new.get("kind"), old.get("spec") or {}, new.get("spec") or {}
    if kind == "Pod":
        added = ({g["name"] for g in now.get("schedulingGates") or []}
                 - {g["name"] for g in was.get("schedulingGates") or []})
        return [f"spec.schedulingGates: Forbidden: only deletion is allowed, but found new scheduling gate {g!r}"
                for g in sorted(added)]
    if kind == "PersistentVolumeClaim":
        mutable = {"resources"} | ({"volumeName"} if not was.get("volumeName") else set())
        if {k: v for k, v in was.items() if k not in mutable} != {k: v for k, v in now.items() if k not in mutable}:
            return ["spec: Forbidden: spec is immutable after creation except resources.requests for bound claims"]
    if kind == "PersistentVolume" and was.get("nodeAffinity") and was["nodeAffinity"] != now.get("nodeAffinity"):
        return ["spec.nodeAffinity: Invalid value: field is immutable"]
    if kind == "StorageClass":
        return [f"{k}: Forbidden: updates to {k} are forbidden."
                for k in ("provisioner", "parameters", "reclaimPolicy", "volumeBindingMode")
                if old.get(k) != new.get(k)]
    return []


def _defaults(obj: dict[str, Any]) -> None:
    """What the API server sets on create: a StorageClass's binding mode and reclaim policy, a gated pod's
    PodScheduled=False/SchedulingGated condition."""
    if obj.get("kind") == "StorageClass":
        obj.setdefault("volumeBindingMode", "Immediate")
        obj.setdefault("reclaimPolicy", "Delete")
    if obj.get("kind") == "Pod" and (obj.get("spec") or {}).get("schedulingGates"):
        status = obj.setdefault("status", {})
        status["conditions"] = [*(c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"), {
            "type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
            "message": "Scheduling is blocked due to non-empty scheduling gates"}]


MANAGED = {"deployments": "apps/v1"}   # the kinds whose managedFields the fake keeps (their spec's fields), by plural


def _leaves(value: Any, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """Every field of `value` by its path: a non-empty object's fields, else the value itself (a list is one)."""
    if isinstance(value, dict) and value:
        return {p: v for key, sub in value.items() for p, v in _leaves(sub, (*path, key)).items()}
    return {path: value}


def _fields_v1(paths: set[tuple[str, ...]]) -> dict[str, Any]:
    """FieldsV1 of field paths: {"f:spec": {"f:replicas": {}}}."""
    out: dict[str, Any] = {}
    for path in sorted(paths):
        level = out
        for key in path:
            level = level.setdefault(f"f:{key}", {})
    return out


def _paths(fields: dict[str, Any], path: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """The field paths of FieldsV1 `fields` (its "f:" keys; a list's "k:"/"v:" members as the list itself)."""
    out: set[tuple[str, ...]] = set()
    for key, sub in fields.items():
        if key.startswith("f:"):
            out |= _paths(sub, (*path, key[2:])) if isinstance(sub, dict) and any(
                k.startswith("f:") for k in sub) else {(*path, key[2:])}
    return out


def _manage(plural: str, old: dict[str, Any] | None, new: dict[str, Any], manager: str | None,
            subresource: str | None = None) -> None:
    """metadata.managedFields of `new` (replacing `old`, None: created) after a write by `manager` (None: left as
    they are), as the API server's Update operation keeps them: the spec fields the write added or changed are
    `manager`'s (its entry for operation Update and `subresource`), taken from every other entry; removed fields
    leave every entry; an entry left empty is dropped. managedFields the write sent replace the stored ones first
    ([{}] strips them); none sent, or []: the stored ones. What the real server leaves untracked is left so here
    (`_untracked`)."""
    if plural not in MANAGED or manager is None:
        return
    meta = new["metadata"]
    sent = meta.get("managedFields")
    if old is not None and sent in (None, []):   # none sent, or [] (the real server: no change): the stored ones
        sent = old["metadata"].get("managedFields")
    base = [] if sent in (None, [{}]) else sent
    if old is not None and _untracked(base, subresource):
        if base:
            meta["managedFields"] = base
        else:
            meta.pop("managedFields", None)
        return
    was, now = _leaves({"spec": (old or {}).get("spec") or {}}), _leaves({"spec": new.get("spec") or {}})
    changed, removed = {p for p, v in now.items() if p not in was or was[p] != v}, set(was) - set(now)
    key, mine, entries = (manager, "Update", subresource), set(changed), []
    for entry in base:
        paths = _paths(entry.get("fieldsV1") or {}) - removed
        if (entry.get("manager"), entry.get("operation"), entry.get("subresource")) == key:
            mine |= paths
        elif paths - changed:
            entries.append({**entry, "fieldsV1": _fields_v1(paths - changed)})
    if mine:
        entries.append({"manager": manager, "operation": "Update", "apiVersion": MANAGED[plural],
                        "time": "2024-01-01T00:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": _fields_v1(mine),
                        **({"subresource": subresource} if subresource else {})})
    if entries:
        meta["managedFields"] = entries
    else:
        meta.pop("managedFields", None)


def _untracked(entries: list[dict[str, Any]], subresource: str | None) -> bool:
    """Whether the real API server records nothing of a write (not a create) to an object whose managedFields are
    `entries` (those the write sent, else the stored ones): an Update to an object with none is not tracked
    (fieldmanager skipnonapplied.go), and a write through the scale subresource sees only the entries owning
    spec.replicas (scalehandler.go ToSubresource), so where none does it is not tracked either (kubernetes#131892:
    a Deployment applied server-side from a manifest without replicas)."""
    if subresource == "scale":
        entries = [e for e in entries if ("spec", "replicas") in _paths(e.get("fieldsV1") or {})]
    return not entries


@functools.cache
def _validator(kind: str, api_version: str) -> jsonschema.protocols.Validator:
    """kubernetes-validate's strict schema for one kind, built once (its `validate()` re-reads ~1 MB per call)."""
    if kind == "ClusterQueue":
        return jsonschema.Draft202012Validator(CLUSTERQUEUE_SCHEMA)
    if kind == "Workload":
        return jsonschema.Draft202012Validator(WORKLOAD_SCHEMA)
    version = [v for v in kv_utils.all_versions() if kv_utils.major_minor(v) <= K8S_VERSION][-1]
    folder = f"kubernetes-json-schema/v{version}-local-strict"
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        schema = kv_utils.schema_contents(f"{folder}/{kind.lower()}-{group}.json", K8S_VERSION)
    except FileNotFoundError as exc:
        raise ApiError(404, "NotFound", f"no schema for {api_version}/{kind}") from exc
    definitions = kv_utils.schema_contents(f"{folder}/_definitions.json", K8S_VERSION)
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def validate(obj: dict[str, Any]) -> None:
    """Schema + semantic validation; raises ApiError(422) like the API server's Invalid."""
    try:
        _validator(str(obj.get("kind")), str(obj.get("apiVersion"))).validate(obj)
    except jsonschema.ValidationError as exc:
        raise ApiError(422, "Invalid", f"{obj.get('kind')} is invalid: {exc.message}") from exc
    errors = _semantic_errors(obj) + _storage_errors(obj) + _configmap_errors(obj)
    if errors:
        raise ApiError(422, "Invalid", f"{obj.get('kind')} is invalid: {'; '.join(errors)}")


@dataclass
class Fault:
    method: str | None
    path: re.Pattern[str]
    code: int
    remaining: int
    delay_s: float = 0.0


@dataclass
class Hook:
    method: str | None
    path: re.Pattern[str]
    run: Callable[[], object]
    remaining: int


@dataclass
class _Event:
    rv: int
    plural: str
    namespace: str
    type: str                       # ADDED, MODIFIED, DELETED
    old: dict[str, Any] | None      # before the change (None when ADDED)
    new: dict[str, Any]             # after it (the last state when DELETED)


@dataclass
class Request:
    method: str
    path: str
    query: str
    content_type: str | None
    body: Any


@dataclass
class _Route:
    plural: str
    namespace: str | None
    name: str | None
    sub: str | None
    query: dict[str, str] = field(default_factory=dict)
    manager: str = ""   # the write's field manager: the query's fieldManager, else the User-Agent's prefix


_PATH = re.compile(r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))/(?P<rest>.+)$")


def _get_list(kube: FakeKube, r: _Route) -> tuple[int, Any]:
    watch = r.query.get("watch") in ("true", "1")
    return 200, (kube._watch if watch else kube._list)(r.plural, r.namespace, r.query)


# What the fake serves: (method, plural or "*" for any, shape) -> serve(kube, route, namespace, body) -> (code,
# payload); any other request is 405. The shape is "list", "item" or "item/<subresource>" (no path segment has a "/").
_ROUTES: dict[tuple[str, str, str], Callable[[FakeKube, _Route, str, Any], tuple[int, Any]]] = {
    ("GET", "*", "list"): lambda k, r, ns, body: _get_list(k, r),
    ("POST", "*", "list"): lambda k, r, ns, body: (201, copy.deepcopy(k._create(r.plural, ns, body, r.manager))),
    ("GET", "*", "item"): lambda k, r, ns, body: (200, copy.deepcopy(k._existing(r.plural, ns, r.name))),
    ("PUT", "*", "item"):
        lambda k, r, ns, body: (200, copy.deepcopy(k._replace(r.plural, ns, r.name, body, r.manager))),
    ("PATCH", "*", "item"):
        lambda k, r, ns, body: (200, copy.deepcopy(k._patch(r.plural, ns, r.name, body, r.manager))),
    ("DELETE", "pods", "item"): lambda k, r, ns, body: (200, copy.deepcopy(k._remove(r.plural, ns, r.name))),
    ("PATCH", "pods", "item/status"):
        lambda k, r, ns, body: (200, copy.deepcopy(k._patch_status(r.plural, ns, r.name, body))),
    ("POST", "pods", "item/eviction"): lambda k, r, ns, body: (201, k._evict(ns, r.name, body)),
    ("POST", "pods", "item/binding"): lambda k, r, ns, body: (201, k._bind(ns, r.name, body)),
    ("GET", "deployments", "item/scale"): lambda k, r, ns, body: (200, k._scale(ns, r.name)),
    ("PATCH", "deployments", "item/scale"):
        lambda k, r, ns, body: (200, k._patch_scale(ns, r.name, body, r.manager)),
}


class FakeKube:
    """In-memory API server state plus the HTTP front end. Use as a context manager or call `close()`."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._rv = 0
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.faults: list[Fault] = []
        self.hooks: list[Hook] = []
        self.requests: list[Request] = []
        self.history_limit = 10_000
        self.kueue = True   # Kueue's job reconciler runs (the module docstring); False: queued Jobs are left alone
        self._kueue_busy = False
        self._kueue_evicted: dict[str, Any] = {}   # Workload uid -> the admission its deactivation cleared
        self._history: list[_Event] = []
        self._expired_below = 0    # watches from a resourceVersion below this answer 410 Expired
        self._cache: tuple[int, dict[tuple[str, str, str], dict[str, Any]]] | None = None   # `hold_cache()`
        self._changed = threading.Condition(self._lock)
        self._agent = threading.local()   # the User-Agent of the request each handler thread serves
        self._closing = False
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,), daemon=True)
        self._thread.start()

    # ---- test-side API -------------------------------------------------------------------------------------

    def client(self) -> k8s.ApiClient:
        """A client of this server built by `build_api_client` itself (not a copy of its settings that could drift):
        urllib3's own retries off, so a request is sent once per try of the caller's (a timed-out GET is not sent 3
        more times behind `_Api`'s back)."""
        return build_api_client(host=self.url)

    def add(self, obj: dict[str, Any], manager: str | None = "kubectl-create") -> dict[str, Any]:
        """Store a (validated) object as if created through the API by `manager` (None: with no managedFields, as
        an object the API server never tracked); returns the stored copy."""
        with self._lock:
            plural = PLURAL[obj["kind"]]
            ns = obj["metadata"].get("namespace", "default") if RESOURCES[plural][2] else ""
            return copy.deepcopy(self._create(plural, ns, copy.deepcopy(obj), manager))

    def get(self, plural: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        with self._lock:
            obj = self.objects.get((plural, namespace, name))
            return copy.deepcopy(obj) if obj else None

    def mutate(self, plural: str, name: str, namespace: str, patch: dict[str, Any],
               manager: str = "kubectl-edit") -> dict[str, Any]:
        """Change an object behind the client's back (another writer, field manager `manager`): merge-patch,
        validate, bump rv."""
        with self._lock:
            return copy.deepcopy(self._patch(plural, namespace, name, patch, manager))

    def delete(self, plural: str, name: str, namespace: str = "") -> None:
        """Delete an object behind the client's back (another writer)."""
        with self._lock:
            self._remove(plural, namespace, name)

    def compact(self) -> None:
        """Forget the change history, as etcd compaction does: watches from any older version get 410."""
        with self._lock:
            self._history.clear()
            self._expired_below = self._rv

    def hold_cache(self, state: tuple[int, dict] | None = None) -> None:
        """Freeze the watch cache that lists at a resourceVersion are served from at what exists now (or at `state`,
        an earlier `cache_state()`), until `release_cache()` (the module docstring): a lagging API server's cache."""
        with self._lock:
            self._cache = state or self.cache_state()

    def cache_state(self) -> tuple[int, dict]:
        """What exists now, as `hold_cache(state)` can hold it later."""
        with self._lock:
            return self._rv, copy.deepcopy(self.objects)

    def release_cache(self) -> None:
        """The watch cache is current again."""
        with self._lock:
            self._cache = None

    def inject(self, method: str | None, path: str, code: int, count: int = 1, delay_s: float = 0.0) -> Fault:
        """The next `count` requests whose path matches regex `path` (and method, if given) answer `code`,
        after `delay_s` (a client with a shorter timeout sees a read timeout)."""
        fault = Fault(method, re.compile(path), code, count, delay_s)
        with self._lock:
            self.faults.append(fault)
        return fault

    def before(self, method: str | None, path: str, run: Callable[[], object], count: int = 1) -> None:
        """Run `run()` just before the next `count` matching requests are handled (to stage races)."""
        with self._lock:
            self.hooks.append(Hook(method, re.compile(path), run, count))

    def rbac_requests(self) -> set[tuple[str, str, str]]:
        """(API group, resource[/subresource], verb) of every request served, as RBAC authorises it."""
        out = set()
        for r in list(self.requests):
            try:
                route = self.route(f"{r.path}?{r.query}")
            except ApiError:
                continue
            group = RESOURCES[route.plural][1].rpartition("/")[0]
            verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(r.method)
            if verb is None:   # GET
                verb = "get" if route.name else "watch" if route.query.get("watch") in ("true", "1") else "list"
            out.add((group, route.plural + (f"/{route.sub}" if route.sub else ""), verb))
        return out

    def calls(self, method: str, path_regex: str) -> list[Request]:
        pattern = re.compile(path_regex)
        return [r for r in self.requests if r.method == method and pattern.search(r.path)]

    def close(self) -> None:
        with self._lock:
            self._closing = True
            self._changed.notify_all()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FakeKube:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- storage ---------------------------------------------------------------------------------------------

    def _bump(self, obj: dict[str, Any]) -> None:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)

    def _record(self, plural: str, namespace: str, type_: str, old: dict[str, Any] | None,
                new: dict[str, Any]) -> None:
        """Keep a change for watches (after `_bump` of `new`) and wake them."""
        self._history.append(_Event(self._rv, plural, namespace, type_, copy.deepcopy(old), copy.deepcopy(new)))
        if len(self._history) > self.history_limit:
            self._expired_below = self._history.pop(0).rv
        self._changed.notify_all()

    def _remove(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        obj = self._existing(plural, namespace, name)
        del self.objects[(plural, namespace, name)]
        self._bump(obj)
        self._record(plural, namespace, "DELETED", obj, obj)
        return obj

    def _typed(self, plural: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        kind, api_version, namespaced = RESOURCES[plural]
        if body.get("kind", kind) != kind or body.get("apiVersion", api_version) != api_version:
            raise ApiError(400, "BadRequest", f"body is {body.get('apiVersion')}/{body.get('kind')}, not {kind}")
        body["kind"], body["apiVersion"] = kind, api_version
        meta = body.setdefault("metadata", {})
        if namespaced and meta.setdefault("namespace", namespace) != namespace:
            raise ApiError(400, "BadRequest", "the namespace of the object does not match the request")
        return body

    def _create(self, plural: str, namespace: str, body: dict[str, Any],
                manager: str | None = None) -> dict[str, Any]:
        obj = self._typed(plural, namespace, body)
        key = (plural, namespace, obj["metadata"].get("name", ""))
        if key in self.objects:
            raise ApiError(409, "AlreadyExists", f'{plural} "{key[2]}" already exists')
        obj["metadata"].pop("resourceVersion", None)
        obj["metadata"].setdefault("uid", str(uuidlib.uuid4()))
        obj["metadata"].setdefault("creationTimestamp", "2024-01-01T00:00:00Z")
        _defaults(obj)
        _manage(plural, None, obj, manager)
        validate(obj)
        self._bump(obj)
        self.objects[key] = obj
        self._record(plural, namespace, "ADDED", None, obj)
        self._kueue_reconcile(plural)
        return obj

    def _existing(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        obj = self.objects.get((plural, namespace, name))
        if obj is None:
            raise ApiError(404, "NotFound", f'{plural} "{name}" not found')
        return obj

    def _store(self, plural: str, namespace: str, name: str, new: dict[str, Any], manager: str | None = None,
               subresource: str | None = None) -> dict[str, Any]:
        old = self._existing(plural, namespace, name)
        sent = new["metadata"].get("resourceVersion")
        if sent is not None and sent != old["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {plural} "{name}": the object '
                           "has been modified; please apply your changes to the latest version and try again")
        if new["metadata"].get("name") != name:
            raise ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
        for key in ("uid", "creationTimestamp"):
            new["metadata"][key] = old["metadata"][key]
        _manage(plural, old, new, manager, subresource)
        validate(new)
        job_errors = _job_update_errors(old, new)
        if job_errors:
            raise ApiError(422, "Invalid", f"Job {name!r} is invalid: {'; '.join(job_errors)}")
        refused = _update_errors(old, new)
        if refused:
            raise ApiError(422, "Invalid", f"{new['kind']} {name!r} is invalid: {'; '.join(refused)}")
        self._bump(new)
        self.objects[(plural, namespace, name)] = new
        self._record(plural, namespace, "MODIFIED", old, new)
        self._kueue_reconcile(plural)
        return new

    def _replace(self, plural: str, namespace: str, name: str, body: dict[str, Any],
                 manager: str | None = None) -> dict[str, Any]:
        new = self._typed(plural, namespace, body)
        if plural == "leases" and not new["metadata"].get("resourceVersion"):
            raise ApiError(422, "Invalid", "metadata.resourceVersion: must be specified for an update")
        return self._store(plural, namespace, name, new, manager)

    def _patch(self, plural: str, namespace: str, name: str, patch: Any, manager: str | None = None) -> dict[str, Any]:
        if not isinstance(patch, dict):
            raise ApiError(400, "BadRequest", "a merge patch must be a JSON object")
        merged = merge_patch(self._existing(plural, namespace, name), patch)
        return self._store(plural, namespace, name, merged, manager)

    # ---- Kueue's job reconciler -------------------------------------------------------------------------------

    def _kueue_reconcile(self, plural: str) -> None:
        """After a write of a Job or a Workload, what Kueue's job reconciler would do, until nothing is left (its
        own writes come back here and return at once)."""
        if not self.kueue or self._kueue_busy or plural not in ("jobs", "workloads"):
            return
        self._kueue_busy = True
        try:
            while self._kueue_step():
                pass
        finally:
            self._kueue_busy = False

    def _kueue_step(self) -> bool:
        """Make the next change Kueue would make to a queued Job or its Workload; False when there is none."""
        for (plural, ns, name), job_obj in sorted(self.objects.items()):
            if plural != "jobs" or not _label(job_obj, KUEUE_QUEUE_LABEL):
                continue
            for (wplural, wns, wname), wl in sorted(self.objects.items()):
                if wplural == "workloads" and wns == ns and _owned(wl, job_obj["metadata"]["uid"]):
                    change = _kueue_change(job_obj, wl, self._kueue_evicted)
                    if change is not None:
                        self._patch(change[0], ns, name if change[0] == "jobs" else wname, change[1])
                        return True
        return False

    # ---- sub-resources ---------------------------------------------------------------------------------------

    def _patch_status(self, plural: str, namespace: str, name: str, patch: Any) -> dict[str, Any]:
        """The status subresource: only `status` (and the resourceVersion precondition) of the patch applies."""
        if not isinstance(patch, dict):
            raise ApiError(400, "BadRequest", "a merge patch must be a JSON object")
        current = self._existing(plural, namespace, name)
        merged = merge_patch(current, {"status": patch.get("status") or {}})
        sent = (patch.get("metadata") or {}).get("resourceVersion")
        merged["metadata"]["resourceVersion"] = sent or current["metadata"]["resourceVersion"]
        return self._store(plural, namespace, name, merged)

    def _evict(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        body = dict(body, apiVersion=body.get("apiVersion", "policy/v1"), kind=body.get("kind", "Eviction"))
        validate(body)
        if body["metadata"].get("name") != name:
            raise ApiError(400, "BadRequest", "name in URL does not match name in Eviction object")
        pod = self._existing("pods", namespace, name)
        labels = pod["metadata"].get("labels", {})
        budgets = [
            pdb for (plural, ns, _), pdb in self.objects.items()
            if plural == "poddisruptionbudgets" and ns == namespace
            and pdb["spec"].get("selector") is not None   # policy/v1: a null selector selects no pod, {} every pod
            and all(labels.get(k) == v for k, v in pdb["spec"]["selector"].get("matchLabels", {}).items())
        ]  # fmt: skip
        for pdb in budgets:
            if pdb["status"]["disruptionsAllowed"] < 1:
                raise ApiError(429, "TooManyRequests",
                               "Cannot evict pod as it would violate the pod's disruption budget.")
        for pdb in budgets:
            old = copy.deepcopy(pdb)
            pdb["status"]["disruptionsAllowed"] -= 1
            self._bump(pdb)
            self._record("poddisruptionbudgets", namespace, "MODIFIED", old, pdb)
        self._remove("pods", namespace, name)
        return status_body(201, "", "")

    def _bind(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        body = dict(body, apiVersion=body.get("apiVersion", "v1"), kind=body.get("kind", "Binding"))
        validate(body)
        if body["metadata"].get("name") != name:
            raise ApiError(400, "BadRequest", "name in URL does not match name in Binding object")
        pod = self._existing("pods", namespace, name)
        if pod["spec"].get("nodeName"):
            raise ApiError(409, "Conflict", f"pod {name} is already assigned to node {pod['spec']['nodeName']}")
        if pod["spec"].get("schedulingGates"):   # the real server's assignPod refuses a scheduling un-ready pod
            raise ApiError(409, "Conflict", f"pod {name} has non-empty .spec.schedulingGates")
        self._store("pods", namespace, name, merge_patch(pod, {"spec": {"nodeName": body["target"]["name"]}}))
        return status_body(201, "", "")

    def _scale(self, namespace: str, name: str) -> dict[str, Any]:
        dep = self._existing("deployments", namespace, name)
        return {
            "apiVersion": "autoscaling/v1", "kind": "Scale",
            "metadata": {"name": name, "namespace": namespace,
                         "resourceVersion": dep["metadata"]["resourceVersion"]},
            "spec": {"replicas": dep["spec"].get("replicas", 1)},
            "status": {"replicas": dep.get("status", {}).get("replicas", 0)},
        }  # fmt: skip

    def _patch_scale(self, namespace: str, name: str, patch: Any, manager: str | None = None) -> dict[str, Any]:
        scale = merge_patch(self._scale(namespace, name), patch)
        validate(scale)
        dep = self._existing("deployments", namespace, name)
        if scale["metadata"]["resourceVersion"] != dep["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", "the object has been modified")
        self._store("deployments", namespace, name, merge_patch(dep, {"spec": {"replicas": scale["spec"]["replicas"]}}),
                    manager, "scale")
        return self._scale(namespace, name)

    # ---- lists -----------------------------------------------------------------------------------------------

    def _matcher(self, plural: str, namespace: str | None, query: dict[str, str]) -> Callable[[Any], bool]:
        """The list's namespace, field and label selectors as one predicate on an object (None never matches)."""
        selectors = []
        for term in filter(None, query.get("fieldSelector", "").split(",")):
            m = re.match(r"^([\w.]+)(!=|==|=)(.*)$", term)
            getter = (POD_FIELDS if plural == "pods" else {"metadata.name": POD_FIELDS["metadata.name"]}).get(
                m.group(1) if m else "")
            if m is None or getter is None:
                raise ApiError(400, "BadRequest", f'field label not supported: "{term}"')
            selectors.append((getter, m.group(2) == "!=", m.group(3)))
        for term in filter(None, query.get("labelSelector", "").split(",")):
            m = re.match(r"^([\w./-]+)(!=|==|=)(.*)$", term)
            if m is None:
                raise ApiError(400, "BadRequest", f'label selector not supported by the fake: "{term}"')
            selectors.append((functools.partial(_label, key=m.group(1)), m.group(2) == "!=", m.group(3)))

        def matches(obj: Any) -> bool:
            return obj is not None and (namespace is None or obj["metadata"].get("namespace") == namespace) and all(
                (g(obj) != v) if neg else (g(obj) == v) for g, neg, v in selectors)
        return matches

    def _list(self, plural: str, namespace: str | None, query: dict[str, str]) -> dict[str, Any]:
        matches = self._matcher(plural, namespace, query)
        at, objects = self._listed_state(query.get("resourceVersion") or "", query.get("resourceVersionMatch") or "")
        items = [copy.deepcopy(obj) for (p, _, _), obj in sorted(objects.items()) if p == plural and matches(obj)]
        kind, api_version, _ = RESOURCES[plural]
        return {"kind": f"{kind}List", "apiVersion": api_version,
                "metadata": {"resourceVersion": str(at)}, "items": items}

    def _listed_state(self, version: str, match: str) -> tuple[int, dict[tuple[str, str, str], dict[str, Any]]]:
        """(resourceVersion, objects) a list at `version` (and `resourceVersionMatch` `match`) is served from: what
        exists now without one, else the watch cache, held or current (the module docstring)."""
        if match and not version:
            raise ApiError(400, "BadRequest", "resourceVersionMatch is forbidden unless resourceVersion is provided")
        if match not in ("", "NotOlderThan"):
            raise ApiError(400, "BadRequest", f"resourceVersionMatch {match!r} is not supported by the fake")
        if not version:
            return self._rv, self.objects
        if not version.isdigit():
            raise ApiError(400, "BadRequest", f"invalid resourceVersion {version!r}")
        at, objects = self._cache or (self._rv, self.objects)
        if int(version) > at:
            raise ApiError(504, "Timeout", f"Too large resource version: {version}, current: {at}")
        return at, objects

    def _watch(self, plural: str, namespace: str | None, query: dict[str, str]) -> Iterator[dict[str, Any]]:
        """Watch events (see the module docstring); a bad selector answers before the stream starts."""
        return self._events(plural, self._matcher(plural, namespace, query), query)

    def _events(self, plural: str, matches: Callable[[Any], bool], query: dict[str, str]) -> Iterator[dict[str, Any]]:
        """Runs in the handler's thread, taking the lock per batch."""
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
        since = query.get("resourceVersion") or "0"
        with self._lock:
            if since == "0":
                at = self._rv
                initial = [{"type": "ADDED", "object": copy.deepcopy(o)}
                           for (p, _, _), o in sorted(self.objects.items()) if p == plural and matches(o)]
            else:
                initial, at = [], int(since) if since.isdigit() else -1
        yield from initial
        while True:
            with self._lock:
                expired_below = self._expired_below
                batch = [e for e in self._history if e.rv > at and e.plural == plural]
                if not batch and at >= expired_below:
                    at = max(at, self._rv)  # nothing of this resource up to now
                    left = deadline - time.monotonic()
                    if self._closing or left <= 0:
                        break
                    self._changed.wait(min(left, 0.5))
                    continue
            if at < expired_below:  # compacted before this watcher read it: it must list again
                yield {"type": "ERROR", "object": status_body(
                    410, "Expired", f"too old resource version: {at} ({expired_below})")}
                return
            at = batch[-1].rv
            for e in batch:
                was, now = matches(e.old), matches(e.new) and e.type != "DELETED"
                kind = {(False, True): "ADDED", (True, True): "MODIFIED", (True, False): "DELETED"}.get((was, now))
                if kind:
                    yield {"type": kind, "object": e.new}
        if query.get("allowWatchBookmarks") == "true":
            kind, api_version, _ = RESOURCES[plural]
            yield {"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version,
                                                  "metadata": {"resourceVersion": str(at)}}}

    # ---- HTTP ------------------------------------------------------------------------------------------------

    def route(self, path: str) -> _Route:
        base, _, qs = path.partition("?")
        m = _PATH.match(base)
        if not m:
            raise ApiError(404, "NotFound", f"no route for {base}")
        api_version = m.group("core") or f"{m.group('group')}/{m.group('version')}"
        parts = m.group("rest").strip("/").split("/")
        namespace = None
        if parts[0] == "namespaces" and len(parts) >= 3:
            namespace, parts = parts[1], parts[2:]
        plural = parts[0]
        if plural not in RESOURCES or RESOURCES[plural][1] != api_version or len(parts) > 3:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({base})")
        if RESOURCES[plural][2] is False and namespace is not None:
            raise ApiError(404, "NotFound", f"{plural} is not namespaced")
        query = dict(parse_qsl(qs, keep_blank_values=True))
        return _Route(plural, namespace, parts[1] if len(parts) > 1 else None, parts[2] if len(parts) > 2 else None,
                      query)

    def dispatch(self, method: str, path: str, content_type: str | None, body: Any) -> tuple[int, Any]:
        with self._lock:
            hooks = [h for h in self.hooks if h.remaining > 0 and h.method in (None, method) and h.path.search(path)]
            for hook in hooks:
                hook.remaining -= 1
            self.requests.append(Request(method, path.partition("?")[0], path.partition("?")[2], content_type, body))
            fault = next((f for f in self.faults
                          if f.remaining > 0 and f.method in (None, method) and f.path.search(path)), None)
            if fault is not None:
                fault.remaining -= 1
        for hook in hooks:   # outside the lock: a hook may itself call the API
            hook.run()
        if fault is not None:
            time.sleep(fault.delay_s)
            reason = {409: "Conflict", 429: "TooManyRequests"}.get(fault.code, "InternalError")
            return fault.code, status_body(fault.code, reason, "injected fault")
        with self._lock:
            try:
                r = self.route(path)
                agent = getattr(self._agent, "value", None) or "unknown"   # the HTTP request's User-Agent
                r.manager = r.query.get("fieldManager") or agent.partition("/")[0]
                return self._dispatch(method, content_type, body, r)
            except ApiError as err:
                return err.code, status_body(err.code, err.reason, err.message)

    def _dispatch(self, method: str, content_type: str | None, body: Any, r: _Route) -> tuple[int, Any]:
        if method == "PATCH" and (content_type or "").split(";")[0] != MERGE_PATCH:
            raise ApiError(415, "UnsupportedMediaType", f"fake supports {MERGE_PATCH} only, got {content_type}")
        shape = "list" if r.name is None else "item" if r.sub is None else f"item/{r.sub}"
        serve = _ROUTES.get((method, r.plural, shape)) or _ROUTES.get((method, "*", shape))
        if serve is None:
            raise ApiError(405, "MethodNotAllowed", f"{method} not supported on {r}")
        return serve(self, r, r.namespace or "", body)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True   # headers and body go out in two writes; no 40 ms delayed-ACK stalls

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except json.JSONDecodeError:
                    code, payload = 400, status_body(400, "BadRequest", "body is not JSON")
                else:
                    owner._agent.value = self.headers.get("User-Agent")   # this thread's request (`dispatch`)
                    code, payload = owner.dispatch(self.command, self.path, self.headers.get("Content-Type"), body)
                if isinstance(payload, Iterator):
                    self._stream(payload)
                    return
                out = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def _stream(self, events: Iterator[dict[str, Any]]) -> None:
                """A watch: one JSON event per line, each line its own chunk, as the API server sends them."""
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for event in events:
                        line = json.dumps(event).encode() + b"\n"
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):  # the client stopped watching
                    self.close_connection = True

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve  # noqa: N815 - http.server's naming

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


# ---- object builders for tests -------------------------------------------------------------------------------


def node(name: str, gpus: int = 8, *, model: str = "H100", labels: dict[str, str] | None = None,
         cpu: str = "64", memory: str = "256Gi") -> dict[str, Any]:
    alloc = {"cpu": cpu, "memory": memory, "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": model, **(labels or {})}},
        "spec": {},
        "status": {"capacity": dict(alloc), "allocatable": dict(alloc)},
    }  # fmt: skip


def namespace(name: str, **labels: str) -> dict[str, Any]:
    """A Namespace with `labels` (those a pod affinity term's namespaceSelector selects by)."""
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": dict(labels)}}


def pod(name: str, namespace: str = "default", *, gpus: int = 1, labels: dict[str, str] | None = None,
        scheduler: str | None = None, node_name: str | None = None, phase: str = "Running",
        owner: tuple[str, str] | None = None) -> dict[str, Any]:
    container = {"name": "main", "image": "registry.example/app:1",
                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"cpu": "2", "memory": "8Gi"}}}
    spec: dict[str, Any] = {"containers": [container]}
    if scheduler:
        spec["schedulerName"] = scheduler
    if node_name:
        spec["nodeName"] = node_name
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1],
                                    "uid": str(uuidlib.uuid4()), "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": phase}}


def pdb(name: str, namespace: str, match_labels: dict[str, str], allowed: int) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": match_labels}},
        "status": {"currentHealthy": 2, "desiredHealthy": 1, "disruptionsAllowed": allowed, "expectedPods": 2},
    }  # fmt: skip


def deployment(name: str, namespace: str = "default", replicas: int = 2) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [{"name": "srv", "image": "registry.example/srv:1"}]}}},
    }  # fmt: skip


def _label(obj: dict[str, Any], key: str) -> str | None:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(key)


def hpa(name: str, target: str, namespace: str = "default", lo: int = 1, hi: int = 10) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                 "minReplicas": lo, "maxReplicas": hi},
    }  # fmt: skip


def job(name: str, namespace: str = "default", parallelism: int = 4, gpus: int = 1,
        queue: str | None = None, suspend: bool = False, completions: int | None = None,
        indexed: bool = False) -> dict[str, Any]:
    """A Job; with `completions` one that runs to that many successes (`indexed`: completionMode Indexed)."""
    labels = {KUEUE_QUEUE_LABEL: queue} if queue else {}
    container = {"name": "train", "image": "registry.example/train:1",
                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
    spec: dict[str, Any] = {"parallelism": parallelism, "suspend": suspend,
                            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}
    if completions is not None:
        spec["completions"] = completions
    if indexed:
        spec["completionMode"] = "Indexed"
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": spec,
    }  # fmt: skip


def clusterqueue(name: str, cohort: str, gpus: int, lending: int | None = None,
                 flavor: str = "h100") -> dict[str, Any]:
    resource: dict[str, Any] = {"name": "nvidia.com/gpu", "nominalQuota": gpus}
    if lending is not None:
        resource["lendingLimit"] = lending
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": name},
        "spec": {"cohort": cohort, "resourceGroups": [
            {"coveredResources": ["cpu", "nvidia.com/gpu"], "flavors": [
                {"name": flavor, "resources": [{"name": "cpu", "nominalQuota": 512}, resource]}]}]},
    }  # fmt: skip


def multi_flavor_clusterqueue(name: str, cohort: str, gpus: dict[str, int]) -> dict[str, Any]:
    """A ClusterQueue of a heterogeneous cluster: one resourceGroup, one flavor per GPU model ({flavor: gpus})."""
    flavors = [{"name": fl, "resources": [{"name": "cpu", "nominalQuota": 512}, {"name": "nvidia.com/gpu",
                                                                               "nominalQuota": n}]}
               for fl, n in gpus.items()]
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": name},
        "spec": {"cohort": cohort, "resourceGroups": [{"coveredResources": ["cpu", "nvidia.com/gpu"],
                                                        "flavors": flavors}]},
    }  # fmt: skip


def workload(job_obj: dict[str, Any], flavor: str | None = None, *, cluster_queue: str = "training",
             label: bool = True) -> dict[str, Any]:
    """The Workload Kueue makes for a Job (`job_obj` as stored, with its uid): owned by it, labelled with its uid
    unless `label` is False, and admitted under `flavor` (None: not admitted yet)."""
    meta = job_obj["metadata"]
    labels = {"kueue.x-k8s.io/job-uid": meta["uid"]} if label else {}
    pod_set = {"name": "main", "count": job_obj["spec"].get("parallelism", 1), "template": job_obj["spec"]["template"]}
    obj: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
        "metadata": {"name": f"job-{meta['name']}-{meta['uid'][:5]}", "namespace": meta["namespace"], "labels": labels,
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"],
                                          "uid": meta["uid"], "controller": True}]},
        "spec": {"podSets": [pod_set], "queueName": meta["labels"].get("kueue.x-k8s.io/queue-name", "")},
    }  # fmt: skip
    if flavor is not None:
        obj["status"] = {"admission": {"clusterQueue": cluster_queue, "podSetAssignments": [
            {"name": "main", "flavors": {"cpu": flavor, "nvidia.com/gpu": flavor}, "count": pod_set["count"]}]}}
    return obj


def iter_taints(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield from obj.get("spec", {}).get("taints") or []


ZONE_LABEL = "topology.kubernetes.io/zone"


def claim(name: str, namespace: str = "default", *, storage_class: str | None = "standard", volume: str | None = None,
          selected_node: str | None = None, size: str = "100Gi") -> dict[str, Any]:
    """A PersistentVolumeClaim: bound to `volume` when given, else Pending (`selected_node`: the annotation
    kube-scheduler writes for a WaitForFirstConsumer claim)."""
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    if volume:
        spec["volumeName"] = volume
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if selected_node:
        meta["annotations"] = {"volume.kubernetes.io/selected-node": selected_node}
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec,
            "status": {"phase": "Bound" if volume else "Pending"}}


def volume(name: str, *, zone: str | None = None, claim_ref: tuple[str, str] | None = None,
           storage_class: str = "standard", size: str = "100Gi") -> dict[str, Any]:
    """A CSI PersistentVolume, attachable only in `zone` when given (a zonal disk), bound to `claim_ref`
    (namespace, name) when given."""
    spec: dict[str, Any] = {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                            "storageClassName": storage_class,
                            "csi": {"driver": "pd.csi.storage.gke.io", "volumeHandle": f"disks/{name}"}}
    if zone:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": ZONE_LABEL, "operator": "In", "values": [zone]}]}]}}
    if claim_ref:
        spec["claimRef"] = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": claim_ref[0],
                            "name": claim_ref[1]}
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name}, "spec": spec,
            "status": {"phase": "Bound" if claim_ref else "Available"}}


def storage_class(name: str, mode: str | None = "WaitForFirstConsumer", *,
                  provisioner: str = "pd.csi.storage.gke.io", zones: tuple[str, ...] = ()) -> dict[str, Any]:
    """A StorageClass (`mode` None: left to the API server's default, Immediate), its volumes allowed only in
    `zones` when given."""
    obj: dict[str, Any] = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
                           "provisioner": provisioner}
    if mode is not None:
        obj["volumeBindingMode"] = mode
    if zones:
        obj["allowedTopologies"] = [{"matchLabelExpressions": [{"key": ZONE_LABEL, "values": list(zones)}]}]
    return obj
