"""What the secondary scheduler reads of pods and nodes, as plain values (balancer/actuate/k8s_scheduler.py).

* `scheduling_request(pod)`: None for a pod being deleted or one with `spec.schedulingGates` (not ready to be
  scheduled, as kube-scheduler keeps it out of its queue: Kueue and other admission controllers gate pods until
  they admit them; the watch delivers the pod again once its gates are removed), else a pending pod's requests
  (kube-scheduler's: pod-level requests where set, else containers and sidecars or the largest init container, plus
  overhead, rounded up: `k8s_requests`; every extended resource and one pod slot), its rules
  (`balancer.noderules.NodeRules`), its required pod (anti-)affinity (`balancer.noderules.PodAffinity`), its
  preferred node and pod (anti-)affinity (`balancer.noderules.Preferences`), priority, owner, the reservations
  that are its own, its preemption policy and pod group, the PersistentVolumeClaims it mounts (`k8s_volumes`), the
  host ports it needs free (`host_ports`, kube-scheduler's NodePorts) and its hard topology spread constraints
  (`spread`, `k8s_podaffinity.Spread`). A pod whose `gputide.io/gpu-milli` is no whole number, or whose requests
  cannot be read (a quantity the API server would refuse), is held back, told why, as one whose claims are not
  ready: no node considered, no one preempted, and the watch and the pass go on;
* `node_facts(node)`: a node's allocatable, labels, taints, cordon and reservations (with their expiry; victim
  fields that name no pods left out, `k8s_filters.well_formed`);
* `pod_usage(pod)`: what a bound pod takes on its node (`Usage`), what preemption weighs it by, the required
  anti-affinity terms by which it keeps other pods away (`k8s_podaffinity`) and the host ports it takes there. One
  whose requests cannot be read takes its whole node (nothing more goes there) instead of failing every read;
* `sum_usage` / `with_usage`: what bound pods take per node;
* `scheduler_watches`: the `ListWatch` caches a running scheduler reads all of this from, as kube-scheduler's
  informers (its pending pods, the nodes, the bound pods that hold resources, the namespaces).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, NamedTuple

from balancer import catalog
from balancer.actuate.k8s_filters import ANY_IP, well_formed
from balancer.actuate.k8s_gang import group_of
from balancer.actuate.k8s_namespaces import namespace_entry
from balancer.actuate.k8s_podaffinity import spread_constraints
from balancer.actuate.k8s_pods import pod_owner
from balancer.actuate.k8s_requests import basic_requests, effective_requests, exact_quantity, quantity
from balancer.actuate.k8s_volumes import Volumes, pod_claims
from balancer.actuate.k8s_watch import ListWatch
from balancer.actuate.kubernetes import (
    GPU_RESOURCE,
    RESERVATION_ANNOTATION,
    KubePermanentError,
    _Api,
    _json_annotation,
    controller_ref,
    parse_time,
)
from balancer.noderules import AffinityTerm, NodeRules, PodAffinity, Preferences, Taint

log = logging.getLogger(__name__)
Json = dict[str, Any]
BASIC = frozenset({"cpu", "memory", GPU_RESOURCE})   # the rest (MIG slices, RDMA, hugepages, pods) are "extended"
BOUND = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"   # pods that hold a node's resources


UNREADABLE = 2**40   # what a bound pod whose requests cannot be read takes of each resource: its whole node


def _requests(pod: Json) -> tuple[int, int, int, dict[str, float]]:
    """(gpus, cpu_milli, memory_mib, the rest), rounded up: the rest are the pod's requests beyond CPU, memory and
    whole GPUs, and the one slot of the node's pod count it takes."""
    total = effective_requests(pod)
    extended = {k: float(v) for k, v in total.items() if k not in BASIC and v} | {"pods": 1.0}
    return *basic_requests(total), extended


HostPort = tuple[str, str, int]   # (protocol, host IP: "0.0.0.0" for every address, port)


def host_ports(pod: Json) -> frozenset[HostPort]:
    """The host ports a pod's containers (and sidecars) take on its node, as kube-scheduler's NodePorts filter and
    the kubelet's admission read them: each container port with a `hostPort` (a `hostNetwork` pod's container ports
    are given one by the API server). Protocol defaults to TCP, host IP to every address."""
    spec = pod.get("spec") or {}
    containers = [*(spec.get("containers") or ()),
                  *(c for c in spec.get("initContainers") or () if c.get("restartPolicy") == "Always")]
    return frozenset((str(p.get("protocol") or "TCP"), str(p.get("hostIP") or ANY_IP), int(p["hostPort"]))
                     for c in containers for p in c.get("ports") or () if int(p.get("hostPort") or 0) > 0)


MILLI_ANNOTATION = "gputide.io/gpu-milli"


def _gpu_milli(annotations: Json) -> tuple[int, Volumes | None]:
    """(the thousandths of a GPU the annotation asks for, 1000 when it asks none; None, or why the pod is held
    back: an annotation that is no whole number ("0.5") is a mistake, not a whole GPU). Held back as a pod whose
    claims are not ready is (`k8s_volumes.waiting`): no node considered, no one preempted, told why."""
    value = annotations.get(MILLI_ANNOTATION, 1000)
    try:
        return int(str(value).strip()), None
    except ValueError:
        return 1000, Volumes(waiting=f'annotation {MILLI_ANNOTATION} is "{value}", not a whole number of '
                                     "thousandths of a GPU (1 to 1000)")


def scheduling_request(pod: Json) -> Json | None:
    """What the scheduler needs of a pending pod, in plain values; None for a pod being deleted or gated."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    if meta.get("deletionTimestamp") or spec.get("schedulingGates"):
        # a gated pod is no scheduling request: no binding (the API server refuses it, 409), no preemption or
        # hold for it, and its PodScheduled=False/SchedulingGated condition is the API server's, not overwritten
        return None
    try:
        gpus, cpu, mem, extended = _requests(pod)
        unreadable = None
    except KubePermanentError as err:   # it waits, told why; the other pods are scheduled all the same
        gpus, cpu, mem, extended = 0, 0, 0, {"pods": 1.0}
        unreadable = Volumes(waiting=f"its resource requests cannot be read ({err})")
    group, least = group_of(meta)
    annotations = meta.get("annotations") or {}
    milli, held = _gpu_milli(annotations) if gpus else (0, None)
    held = unreadable or held
    gpu_spec = annotations.get("gputide.io/gpu-spec") or (spec.get("nodeSelector") or {}).get(catalog.PRODUCT_LABEL)
    namespace, owner = meta.get("namespace", "default"), (controller_ref(meta) or {}).get("name", "")
    # the reservation keys that are this pod's: itself, its controlling owner, and the owner a migration keys its
    # reservation by (`pod_owner`: the gputide.io/service or /job label first, a ReplicaSet's Deployment by its
    # pod-template-hash), never a name cut at a dash: Job "train-2"'s pods must not take Job "train"'s reservation
    owned = {f"{namespace}/{n}" for n in (meta["name"], owner, pod_owner(meta)[0]) if n}
    return {
        "name": f"{meta.get('namespace', 'default')}/{meta['name']}", "namespace": meta.get("namespace", "default"),
        "pod": meta["name"], "owner": owner, "num_gpu": gpus,
        "gpu_milli": milli,
        "cpu_milli": cpu, "memory_mib": mem, "priority": int(spec.get("priority") or 0),
        "created": str(meta.get("creationTimestamp") or ""), "uid": str(meta.get("uid") or ""),
        "allowed_models": tuple(sorted(gpu_spec.split("|"))) if gpu_spec else None,
        "rules": NodeRules.from_pod_spec(spec),   # tolerations, node selector, required node affinity
        "pod_affinity": PodAffinity.from_spec(namespace, spec),   # required pod (anti-)affinity; false: none
        "preferences": Preferences.from_spec(namespace, spec),    # preferred node and pod (anti-)affinity
        "owned": frozenset(owned), "extended": extended, "preempt": spec.get("preemptionPolicy") != "Never",
        "labels": dict(meta.get("labels") or {}), "group": group, "group_min": least,
        "host_ports": host_ports(pod),                                            # NodePorts
        "spread": spread_constraints(meta.get("labels") or {}, spec),             # hard topology spread
        # resolved at the pod's turn in a pass (`k8s_volumes.VolumeBinding.request`); none read for one held back
        **({"claims": pod_claims(pod)} if held is None else {"claims": (), "volumes": held}),
    }  # fmt: skip


def node_facts(node: Json, reservation_annotation: str = RESERVATION_ANNOTATION) -> Json:
    """A node's capacity (its allocatable, counted as a pod's requests are), labels, taints and reservations (with
    their expiry), before what its pods use."""
    alloc, meta = (node.get("status") or {}).get("allocatable") or {}, node["metadata"]
    labels = meta.get("labels") or {}
    # read exactly, then rounded down (16380m: 16380 milli-CPUs, never 16379; 1000000Ki: 976 MiB) where a pod's
    # requests are rounded up: no node is offered more than it has
    gpus, cpu, mem = basic_requests({k: exact_quantity(alloc[k]) for k in BASIC if k in alloc}, down=True)
    return {
        "name": meta["name"], "labels": labels, "gpu_model": labels.get(catalog.PRODUCT_LABEL, ""),
        "taints": tuple(Taint.from_json(t) for t in (node.get("spec") or {}).get("taints") or ()),
        "unschedulable": bool((node.get("spec") or {}).get("unschedulable")),
        "gpus_total": gpus, "cpu_milli_total": cpu, "memory_mib_total": mem,
        "extended_total": {k: quantity(v) for k, v in alloc.items() if k not in BASIC},
        # an entry that is no map (written by hand) holds nothing, as the controller reads it (`release_expired`);
        # one whose victim fields name no pods has them left out, for every reader (`k8s_filters.well_formed`)
        "reservations": {k: well_formed(v) for k, v in _json_annotation(node, reservation_annotation).items()
                         if isinstance(v, dict)},
    }  # fmt: skip


class Usage(NamedTuple):
    """What a bound pod takes on its node, and what preemption weighs it by. Bound pods are listed by their node,
    not their phase (`BOUND`): one being deleted is among them, taking its room until it is gone (`terminating`)."""

    node: str
    gpus: int
    cpu_milli: int
    memory_mib: int
    extended: tuple[tuple[str, float], ...]
    key: str = ""                         # namespace/name
    priority: int = 0
    started: float = 0.0
    labels: tuple[tuple[str, str], ...] = ()
    anti: tuple[AffinityTerm, ...] = ()   # its required pod anti-affinity terms (they keep other pods away)
    host_ports: frozenset[HostPort] = frozenset()   # the host ports it takes on its node (NodePorts)
    uid: str = ""                         # which pod of its name it is ("" for one read without)
    terminating: bool = False             # being deleted (`deletionTimestamp`): still bound while its grace runs
    # when its grace ends: its `deletionTimestamp`, which the API server sets to the deletion's time plus the grace
    # period (`deletionGracePeriodSeconds`), so it carries both; 0.0 where it is not being deleted (or the time is
    # unreadable). Past it (and a slack), it is stuck (a finalizer, a kubelet that hangs), its room not coming
    deleting: float = 0.0
    # made again on its node once deleted (a DaemonSet's pod, a static pod's mirror): its room is not coming
    comes_back: bool = False
    # the text of its `deletionTimestamp` where it is being deleted and that cannot be read ("" otherwise): quoted in
    # the warning that says so (`k8s_preempt.room_coming`), which could only send the operator to the pod for it
    deleting_raw: str = ""


def pod_usage(pod: Json) -> Usage:
    """The `Usage` of a bound pod. One whose requests cannot be read (a quantity the API server would refuse)
    takes its whole node (`UNREADABLE` of each), logged: nothing more goes there, and the other nodes are used."""
    meta, status = pod["metadata"], pod.get("status") or {}
    key = f"{meta.get('namespace', 'default')}/{meta['name']}"
    stamp = meta.get("deletionTimestamp")
    deleting = parse_time(stamp) if stamp else None
    try:
        g, c, m, extended = _requests(pod)
    except KubePermanentError as err:
        log.warning("bound pod %s: its requests cannot be read (%s): no pod is bound on its node %s",
                    key, err, pod["spec"].get("nodeName"))
        g, c, m, extended = UNREADABLE, UNREADABLE, UNREADABLE, {"pods": 1.0}
    return Usage(pod["spec"]["nodeName"], g, c, m, tuple(sorted(extended.items())),
                 key, int(pod["spec"].get("priority") or 0),
                 parse_time(status.get("startTime") or meta.get("creationTimestamp")) or 0.0,
                 tuple(sorted((meta.get("labels") or {}).items())),
                 PodAffinity.from_spec(meta.get("namespace", "default"), pod["spec"]).anti, host_ports(pod),
                 str(meta.get("uid") or ""), bool(stamp), deleting or 0.0, comes_back(meta),
                 str(stamp) if stamp and deleting is None else "")


MIRROR_ANNOTATION = "kubernetes.io/config.mirror"   # the kubelet's mirror of a static pod (its file, not the API)


def comes_back(meta: Json) -> bool:
    """Whether a pod (`meta`: its metadata) is made again on its node once deleted, so that its deletion frees no
    room there: a DaemonSet's (one pod per node), or a static pod's mirror (owned by its Node; deleting the mirror
    stops nothing, the kubelet runs the static pod from its file). Its controller's kind, read from the pod itself."""
    kind = (controller_ref(meta) or {}).get("kind")
    return kind in ("DaemonSet", "Node") or MIRROR_ANNOTATION in (meta.get("annotations") or {})


def sum_usage(usage) -> tuple[dict[str, list[int]], dict[str, dict[str, float]]]:
    """Per node: [gpus, cpu_milli, memory_mib] and the extended resources that `usage` (`pod_usage` tuples) takes."""
    used: dict[str, list[int]] = {}
    used_ext: dict[str, dict[str, float]] = {}
    for node, g, c, m, ext, *_ in usage:
        u = used.setdefault(node, [0, 0, 0])
        u[0], u[1], u[2] = u[0] + g, u[1] + c, u[2] + m
        e = used_ext.setdefault(node, {})
        for k, v in ext:
            e[k] = e.get(k, 0.0) + v
    return used, used_ext


def with_usage(summed: tuple[dict, dict], usage) -> tuple[dict[str, list[int]], dict[str, dict[str, float]]]:
    """`summed` plus `usage` (a few assumed bindings), as new dicts: `summed` itself is left as it is."""
    more, more_ext = sum_usage(usage)
    used, used_ext = dict(summed[0]), dict(summed[1])
    for node, (g, c, m) in more.items():
        u = used.get(node, (0, 0, 0))
        used[node] = [u[0] + g, u[1] + c, u[2] + m]
        e = used_ext[node] = dict(used_ext.get(node, {}))
        for k, v in more_ext[node].items():
            e[k] = e.get(k, 0.0) + v
    return used, used_ext


def scheduler_watches(api: _Api, scheduler_name: str, pending_selector: str, reservation_annotation: str,
                      watch_s: float, notify: threading.Event) -> dict[str, ListWatch]:
    """The `ListWatch` caches of a running scheduler, by the resource its metrics name: its pending pods (field
    selector `pending_selector`; `notify` is set on every change, so a new pod starts a pass), the nodes, the bound
    pods that hold resources and the namespaces."""
    core = api.core

    def follow(what: str, fn: Any, convert: Any, name: str = "", **kw: Any) -> ListWatch:
        return ListWatch(name or what, lambda **k: api(f"list {what}", fn, **k), fn, convert, watch_s=watch_s, **kw)

    return {
        "pending pods": follow("pending pods", core.list_pod_for_all_namespaces, scheduling_request,
                               f"pending pods of {scheduler_name}", selectors={"field_selector": pending_selector},
                               notify=notify),
        "nodes": follow("nodes", core.list_node, lambda n: node_facts(n, reservation_annotation)),
        "bound pods": follow("bound pods", core.list_pod_for_all_namespaces, pod_usage,
                             selectors={"field_selector": BOUND}),
        "namespaces": follow("namespaces", core.list_namespace, namespace_entry),
    }
