"""A GPU pod's object as a `Workload`: the translation `KubernetesWorkloads` (k8s_workloads.py, whose docstring
has the table of each field and where it comes from) applies to every running pod it lists or is sent.

`workload_from_pod` reads the owner (gputide labels, else the controlling ownerReference), the class, priority,
GPU and CPU/memory requests, shared-GPU milli, elastic bounds, allowed GPU models, node rules, pod affinity,
checkpoint and start times and the movable/protected annotations; `with_namespaces` settles pod affinity terms
that select namespaces by label (not movable while the namespaces' labels are unknown), `with_volumes` where the
volumes its PersistentVolumeClaims are bound to let it move (`k8s_claims`; not movable while they are unknown).
The helpers for annotations (`as_int`, `elastic_bounds`, `pod_models`) serve the suspended Jobs' templates there
too. Pure: no API calls.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from types import MappingProxyType
from typing import Any, NamedTuple

from balancer import catalog
from balancer.actuate.k8s_claims import Claim, Mounts, Volume, attachable, confined, pod_mounts
from balancer.actuate.k8s_requests import pod_requests
from balancer.actuate.kubernetes import CHECKPOINT_ANNOTATION, controller_ref
from balancer.model import Workload, WorkloadClass
from balancer.noderules import NO_RULES, NamespaceLabels, NodeRules, PodAffinity, affinity_terms

Json = dict[str, Any]
log = logging.getLogger(__name__)


def as_int(value: Any, default: int) -> int:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return default


def _models(spec: str | None) -> frozenset[str] | None:
    """Catalogue keys of `A|B` (keys, modelNames, Alibaba codes or GPU feature discovery's product labels such as
    `NVIDIA-H100-80GB-HBM3`); a model the catalogue does not know still constrains the pod by its own name."""
    if not spec:
        return None
    return frozenset(catalog.key_of(name) for name in filter(None, (s.strip() for s in spec.split("|")))) or None


def elastic_bounds(notes: Json) -> tuple[int, int]:
    """(elastic_min, elastic_max) workers from the annotations; min within 0..max, (0, 0) when not elastic."""
    hi = max(as_int(notes.get("gputide.io/elastic-max"), 0), 0)
    return (max(min(as_int(notes.get("gputide.io/elastic-min"), 0), hi), 0) if hi else 0), hi


def pod_models(notes: Json, spec: Json) -> frozenset[str] | None:
    """Allowed GPU models: annotation `gputide.io/gpu-spec`, else the `nvidia.com/gpu.product` node selector, else
    a required node affinity whose every term names the products it allows (`In`)."""
    named = notes.get("gputide.io/gpu-spec") or (spec.get("nodeSelector") or {}).get(catalog.PRODUCT_LABEL)
    if named:
        return _models(named)
    allowed: set[str] = set()
    for term in affinity_terms(spec):
        values = [v for e in term.get("matchExpressions") or [] if e.get("key") == catalog.PRODUCT_LABEL
                  and e.get("operator") == "In" for v in e.get("values") or []]
        if not values:   # a term that allows any model: the pod is not limited by model
            return None
        allowed.update(values)
    return _models("|".join(sorted(allowed)))


_RULES: dict[NodeRules, NodeRules] = {}


def _node_rules(spec: Json) -> NodeRules:
    """The pod's node rules, one shared object per distinct rule set (thousands of replicas, a few templates)."""
    return _shared(NodeRules.from_pod_spec(spec))


def _shared(rules: NodeRules) -> NodeRules:
    if rules == NO_RULES:
        return NO_RULES
    if len(_RULES) > 4096:   # bounded: rule sets of pods long gone do not accumulate
        _RULES.clear()
    return _RULES.setdefault(rules, rules)


def pod_owner(meta: Json) -> tuple[str, str]:
    """(owner name, owner kind) of a pod: the gputide labels first, then its controlling ownerReference. The owner
    keys a migration's reservation of its target, so the scheduler matches the replacement pod by this too."""
    labels = meta.get("labels") or {}
    for key, kind in (("gputide.io/service", "Deployment"), ("gputide.io/job", "Job")):
        if labels.get(key):
            return labels[key], kind
    ref = controller_ref(meta)
    if ref is None:
        return "", ""
    name, kind = ref.get("name", ""), ref.get("kind", "")
    suffix = labels.get("pod-template-hash")
    if kind == "ReplicaSet" and suffix and name.endswith(f"-{suffix}"):
        return name[: -len(suffix) - 1], "Deployment"
    return name, kind


# controllers known to run an evicted pod again, elsewhere: a Deployment's ReplicaSet, a StatefulSet (same name),
# a Job (the Job's own rules on failures are checked apart: `k8s_jobs.eviction_refusal`), a ReplicationController
RECREATING_KINDS = frozenset({"ReplicaSet", "StatefulSet", "Job", "ReplicationController"})


def recreated(meta: Json) -> bool:
    """Whether a controller recreates the pod elsewhere once it is evicted: a controlling ownerReference of a kind
    known to (`RECREATING_KINDS`), or of any other kind when the pod's `gputide.io/movable: "true"` vouches for it.
    Not a bare pod (evicted, gone for good), a static pod's mirror (owner Node: only its kubelet runs it), a
    DaemonSet's (run again on the same node), nor, unvouched, one of a kind gputide does not know: an operator's
    pod evicted may fail its whole job (a PyTorchJob or an Argo Workflow step with restartPolicy Never)."""
    ref = controller_ref(meta)
    if ref is None:
        return False
    return ref.get("kind") in RECREATING_KINDS or (
        ref.get("kind") not in ("Node", "DaemonSet") and _said(meta.get("annotations") or {}) == "true")


def _said(notes: Json) -> str:
    """The `gputide.io/movable` annotation: "false" keeps a pod in place; "true" moves one that mounts
    PersistentVolumeClaims or hostPath volumes, or uses DRA ResourceClaims, anywhere its own rules admit (the
    operator vouches its volumes attach, its host paths exist and its devices are to be had on any node)."""
    return str(notes.get("gputide.io/movable", "")).lower()


def may_move(meta: Json, spec: Json) -> bool:
    """Whether the pod may be moved, as its own object says: a controller recreates it (`recreated`), it is not
    being deleted already (evicted: its replacement is on its way), its annotation does not pin it, and it mounts no
    `hostPath` volume of its own unless the annotation vouches for it: what it reads there is on its node alone,
    and a replacement elsewhere finds the path empty or, of a type that must exist (`Directory`, `File`, ...), not
    at all and never starts (kube-scheduler does not look; the cluster autoscaler and the descheduler leave such
    pods in place too); nor does it use DRA ResourceClaims (`spec.resourceClaims`) unless vouched for: a claim it
    names is allocated already, to the devices of its node (the claim's `status.allocation.nodeSelector`), so a
    replacement elsewhere never starts, and one from a template is allocated afresh by the DRA driver's
    ResourceSlices, which gputide does not read."""
    said = _said(meta.get("annotations") or {})
    if not recreated(meta) or meta.get("deletionTimestamp") or said == "false":
        return False
    local = any(v.get("hostPath") is not None for v in spec.get("volumes") or ()) or spec.get("resourceClaims")
    return said == "true" or not local


def _claims_to_settle(pod: Json) -> Mounts | None:
    """The claims (`k8s_claims.Mounts`) that decide where the pod may move; None when it mounts none or its
    annotation settles it (`_said`)."""
    return None if _said((pod.get("metadata") or {}).get("annotations") or {}) in ("true", "false") else pod_mounts(pod)


CLASS_LABEL = "gputide.io/workload-class"


def said_class(labels: Json) -> WorkloadClass | None:
    """The class the pod's `gputide.io/workload-class` label says; None without one (or with a value no class has):
    its owner's kind then decides (`_pod_workload`), or its owner's profile (`servable`)."""
    try:
        return WorkloadClass(labels.get(CLASS_LABEL, ""))
    except ValueError:
        return None


def servable(meta: Json) -> bool:
    """Whether the pod is a replica of its owner's service where a profile names that owner: no label says its class
    and its controller is no Job (a Job runs to its end: its pod is the service's batch work, never a serving
    replica). A StatefulSet's or an operator's pod is otherwise batch (`_pod_workload`), and a profiled service
    served by one had no inference pod: its capacity lent while its series were missing (`KubernetesWorkloads`'
    `services`). A LeaderWorkerSet's leaders are its StatefulSet of its name; its workers', `<name>-<group>`, name
    no profile: only their label makes them inference."""
    return said_class(meta.get("labels") or {}) is None and pod_owner(meta)[1] not in ("Job", "")


def _pod_workload(pod: Json) -> Workload | None:
    """The Workload a GPU pod is, as its own object says: pod affinity terms with a namespaceSelector unresolved
    and `movable` by its own object alone (`may_move`, which `k8s_migrate` asks again of the pod as read at the
    move), its claims not read (`with_namespaces` and `with_volumes` settle these); None for a pod without GPUs."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    gpus, cpu, mem = pod_requests(pod)
    if gpus <= 0 or not meta.get("name"):
        return None
    labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
    owner, kind = pod_owner(meta)
    elastic_min, elastic_max = elastic_bounds(notes)
    klass = said_class(labels) or (WorkloadClass.INFERENCE if kind == "Deployment" else WorkloadClass.TRAINING
                                   if kind == "Job" and elastic_max > 0 else WorkloadClass.BATCH)
    namespace = meta.get("namespace", "default")
    milli = min(max(as_int(notes.get("gputide.io/gpu-milli"), 1000), 1), 1000)
    affinity = PodAffinity.from_spec(namespace, spec)
    return Workload(
        name=f"{namespace}/{meta['name']}", workload_class=klass, namespace=namespace, owner=owner,
        priority=as_int(spec.get("priority"), 0), gpus=gpus, gpu_milli=milli, cpu_milli=cpu, memory_mib=mem,
        allowed_models=pod_models(notes, spec), node_rules=_node_rules(spec), labels=MappingProxyType(dict(labels)),
        pod_affinity=affinity, movable=may_move(meta, spec),
        protected=str(notes.get("gputide.io/protected", "false")).lower() == "true",
        elastic_min=elastic_min, elastic_max=elastic_max,
        checkpointed_at=_epoch(notes.get(CHECKPOINT_ANNOTATION)),
        started_at=_epoch((pod.get("status") or {}).get("startTime")),
    )


def _epoch(value: Any) -> float:
    """Epoch seconds of an RFC 3339 time (`2026-12-04T06:00:00Z`, the API's) or of a number; NaN for anything else
    (a malformed annotation must not stop planning: the job is then costed from its start)."""
    if value is None or isinstance(value, bool):
        return float("nan")
    try:
        t = float(value)
    except (TypeError, ValueError):
        try:
            when = datetime.fromisoformat(str(value))
        except ValueError:
            return float("nan")
        if when.tzinfo is None:
            return float("nan")   # a time without its zone is ambiguous
        t = when.timestamp()
    return t if math.isfinite(t) and t > 0 else float("nan")


def with_namespaces(w: Workload, resolve: Callable[[PodAffinity], PodAffinity]) -> Workload:
    """`w` with its pod affinity's namespaceSelectors resolved by `resolve`; not movable while one stays
    unresolved (the namespaces' labels not known: where its replacement may run cannot be told)."""
    if not w.pod_affinity.unresolved:
        return w
    affinity = resolve(w.pod_affinity)
    return replace(w, pod_affinity=affinity) if not affinity.unresolved else replace(w, movable=False)


def with_volumes(w: Workload, mounts: Mounts | None, claims: Mapping[str, Claim] | None,
                 volumes: Mapping[str, Volume] | None) -> Workload:
    """`w` with its node rules narrowed to where the volumes its claims (`mounts`, None: none to settle) are bound
    to attach (`k8s_claims.confined`); not movable while the claims or volumes (`claims`: by namespace/name,
    `volumes`: by name; None: not known) are not read, or when one keeps it in place (`k8s_claims.attachable`)."""
    if mounts is None or not w.movable:
        return w
    attach = "not read yet" if claims is None or volumes is None else attachable(mounts, claims, volumes)
    rules = None if isinstance(attach, str) else confined(w.node_rules, attach)
    if rules is None:
        log.debug("%s stays where it is: its volumes: %s", w.name, attach or "attach on no node it may run on")
        return replace(w, movable=False)
    return w if rules is w.node_rules else replace(w, node_rules=_shared(rules))


def workload_from_pod(pod: Json, namespace_labels: NamespaceLabels | None = None) -> Workload | None:
    """The Workload a GPU pod is (see the module docstring), its pod affinity's namespaceSelectors resolved by
    `namespace_labels` (name -> labels of every namespace; None: not known, so such a pod is not movable); None for
    a pod without GPUs. Its claims are not read: one that mounts a claim is movable only when its annotation says
    "true" (`KubernetesWorkloads` reads the claims and their volumes, `with_volumes`)."""
    w = _pod_workload(pod)
    if w is None:
        return None
    return with_volumes(with_namespaces(w, lambda a: a.resolved(namespace_labels)), _claims_to_settle(pod), None, None)


def running_workload(pod: Json, namespace_labels: NamespaceLabels | None = None) -> Workload | None:
    """`workload_from_pod` of a Running pod; None otherwise (a watch also sees a pod that just finished)."""
    return workload_from_pod(pod, namespace_labels) if _running(pod) else None


def _running(pod: Json) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running"


class Running(NamedTuple):
    """What the pods cache holds of a running GPU pod: `_pod_workload`, the claims still to settle, and whether a
    profile naming its owner makes it inference."""

    workload: Workload
    mounts: Mounts | None   # `_claims_to_settle`
    servable: bool = False  # `servable`


def running_pod(pod: Json) -> Running | None:
    """What the pods cache holds of a Running pod (settled by `with_namespaces` and `with_volumes` as the workloads
    are handed out, against the namespaces' labels, claims and volumes of that moment); None otherwise."""
    w = _pod_workload(pod) if _running(pod) else None
    return None if w is None else Running(w, _claims_to_settle(pod), servable(pod.get("metadata") or {}))
