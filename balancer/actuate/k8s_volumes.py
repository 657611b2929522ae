"""A pod's PersistentVolumeClaims, for the secondary scheduler: kube-scheduler's VolumeBinding, for what GPU pods use.

A training pod mounts its checkpoints from a claim, and where a volume can be attached decides where the pod may
run. kube-scheduler's VolumeBinding plugin knows it; a scheduler that posts the Binding without it leaves two
failures on a real cluster:

* the default StorageClass of GKE, EKS and AKS binds `WaitForFirstConsumer`: its volume is provisioned only once
  the scheduler has written the node it chose on the claim (annotation `volume.kubernetes.io/selected-node`).
  Without it the claim stays Pending and the pod sits in ContainerCreating for ever (kubernetes/kubernetes#86262);
* a claim bound to a zonal disk (a PersistentVolume with `spec.nodeAffinity`) can be attached only in its zone: a
  pod bound elsewhere never starts.

So, for each claim of a pending pod (its `persistentVolumeClaim` volumes, and its generic `ephemeral` volumes,
whose claim `<pod>-<volume>` the ephemeral volume controller creates):

* **bound** (`spec.volumeName`): the pod may go only where the volume's `spec.nodeAffinity.required` terms admit
  (`node(s) had volume node affinity conflict`); a claim bound to a volume that does not exist admits no node;
* **unbound, WaitForFirstConsumer**: the pod may go where the class's `allowedTopologies` admit, and, when the
  claim already names a node (`selected-node`, written for another pod of a Job sharing it), only there (`node(s)
  didn't find available persistent volumes to bind`). Once the node is chosen and before the Binding is posted,
  the claim gets `selected-node: <node>` (kube-scheduler's PreBind), read-modify-write: a claim that was bound or
  given another node meanwhile, or a write that fails, leaves the pod unbound this pass;
* **unbound otherwise** (an Immediate class, no class, a class that does not exist: the volume controller binds
  it on its own), **missing** or **being deleted**: no node is considered until that changes (`pod has unbound
  immediate PersistentVolumeClaims`, `persistentvolumeclaim "x" not found`), and the pod preempts no one;
* a WaitForFirstConsumer class without a provisioner (`kubernetes.io/no-provisioner`, local volumes) needs a
  pre-provisioned volume matched to the claim, which gputide does not do: the pod waits and is told so.

A pod with DRA resource claims (`spec.resourceClaims`: a GPU, NIC or other device of a DRA driver) waits too, told
why (`dra_waiting`): only kube-scheduler's DynamicResources plugin allocates its claims and reserves them for it;
bound without that, the kubelet cannot prepare its devices and the pod never starts.

Unlike kube-scheduler, the pod is bound right after its claims name the node, without waiting for them to be
bound: the kubelet waits for the volume, and a pass does not block for minutes.

`pod_claims(pod)` reads what a pod mounts; `claim_entry`, `volume_entry` and `class_entry` turn the API objects
into cache items (all but the last in `k8s_claims`, with which the controller reads running pods' claims too);
`resolve` decides, without I/O, what the claims allow (`Volumes`, a placement rule the filters apply as they apply
node affinity, `k8s_filters`); `VolumeBinding` reads the objects (a `ListCache` each: by watch once synced, else a
list in a pass that has a pod with claims) and writes `selected-node`. A pass told to stop, or whose replica lost
the Lease, begins none of these reads or writes (each is checked before it begins): the call in flight ends within
its timeout, and the pass ends with it.
"""

from __future__ import annotations

import logging
from collections import ChainMap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from balancer.actuate.k8s_claims import (  # noqa: F401  (Claim, SELECTED_NODE: re-exported)
    SELECTED_NODE,
    Claim,
    claim_entry,
    unusable,
    volume_entry,
)
from balancer.actuate.k8s_claims import pod_claims as mounted_claims
from balancer.actuate.k8s_nodes import by_name
from balancer.actuate.k8s_watch import ListCache
from balancer.actuate.kubernetes import MERGE_PATCH, _Api
from balancer.errors import ActuationError, PermanentActuationError
from balancer.noderules import Requirement, Term

log = logging.getLogger(__name__)
Json = dict[str, Any]
WAIT = "WaitForFirstConsumer"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
AFFINITY_CONFLICT = "node(s) had volume node affinity conflict"
NO_VOLUME = "node(s) didn't find available persistent volumes to bind"
LOST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"


RESOURCE_CLAIM = "resourceclaim"   # a pending pod's claim entry that is a DRA ResourceClaim, not a volume's claim


def pod_claims(pod: Json) -> tuple[tuple[str, bool | str], ...]:
    """What a pending pod's claims are (`scheduling_request`'s `claims`): (name, whether a generic ephemeral
    volume's) of each PersistentVolumeClaim it mounts (`k8s_claims.pod_claims`), then (name, `RESOURCE_CLAIM`) of
    each of its DRA resource claims (`spec.resourceClaims`), which keep it waiting (`dra_waiting`)."""
    dra = tuple((str(c.get("name") or ""), RESOURCE_CLAIM) for c in (pod.get("spec") or {}).get("resourceClaims") or ())
    return mounted_claims(pod) + dra


def _volume_claims(req: Json) -> list[tuple[str, bool]]:
    """The PersistentVolumeClaims of `req`'s `claims` (its DRA resource claims left out)."""
    return [(name, kind) for name, kind in req.get("claims") or () if kind != RESOURCE_CLAIM]


def dra_waiting(req: Json) -> str:
    """Why a pod with DRA resource claims is not bound ("": it has none). Its claims are allocated, and it is put in
    their `reservedFor`, only by kube-scheduler's DynamicResources plugin; bound without that, the kubelet cannot
    prepare its devices and the pod never starts. It waits, told so, preempts no one and holds no node."""
    names = [name for name, kind in req.get("claims") or () if kind == RESOURCE_CLAIM]
    if not names:
        return ""
    return (f"pod uses dynamic resource allocation (spec.resourceClaims: {', '.join(names)}), whose claims only "
            "kube-scheduler allocates: gputide does not bind it")


class StorageClass(NamedTuple):
    mode: str                # volumeBindingMode
    provisioner: str
    topologies: tuple[Term, ...]   # allowedTopologies, ORed (none: anywhere)


def _topology_term(term: Json) -> Term:
    """A StorageClass's `allowedTopologies` term: every label it names, with one of its values (a term naming none
    matches no node, as in kube-scheduler's MatchTopologySelectorTerms)."""
    return Term(tuple(Requirement(str(e.get("key") or ""), "In", tuple(str(v) for v in e.get("values") or ()))
                      for e in term.get("matchLabelExpressions") or ()))


def class_entry(obj: Json) -> StorageClass:
    return StorageClass(str(obj.get("volumeBindingMode") or "Immediate"), str(obj.get("provisioner") or ""),
                        tuple(_topology_term(t) for t in obj.get("allowedTopologies") or ()))


@dataclass(frozen=True, slots=True)
class Volumes:
    """What a pending pod's claims allow: a placement rule (`refusal`) and the claims to annotate before binding.
    False when it restricts nothing and writes nothing."""

    waiting: str = ""                             # why no node is considered at all ("": none)
    lost: bool = False                            # a claim is bound to a volume that does not exist
    attach: tuple[tuple[Term, ...], ...] = ()     # per bound volume with node affinity: its terms, ORed
    provision: tuple[tuple[Term, ...], ...] = ()  # per unbound WaitForFirstConsumer claim: where it may be made
    select: tuple[str, ...] = ()                  # "namespace/claim": unbound WaitForFirstConsumer, no node yet

    def __bool__(self) -> bool:
        return bool(self.waiting or self.lost or self.attach or self.provision or self.select)

    @property
    def rule(self) -> tuple | None:
        """What of it refuses nodes (None: nothing), by which pods with the same refusals share them (`Offers`
        evaluates each distinct rule once per pass): a Job's pods each with its own claim have the same."""
        return (self.lost, self.attach, self.provision) if self.lost or self.attach or self.provision else None

    def refusal(self, name: str, labels: Mapping[str, str]) -> str | None:
        """Why the pod's volumes keep it off the node (`name`, `labels`), in kube-scheduler's words; None: they
        do not."""
        if self.lost:
            return LOST
        if not all(any(t.allows(name, labels) for t in terms) for terms in self.attach):
            return AFFINITY_CONFLICT
        if not all(any(t.allows(name, labels) for t in terms) for terms in self.provision):
            return NO_VOLUME
        return None


def resolve(req: Json, claims: Mapping[str, Claim], volumes: Mapping[str, tuple[Term, ...]],
            classes: Mapping[str, StorageClass]) -> Volumes:
    """What the claims of `req` (`scheduling_request`) allow, by the claims, volumes and classes as read."""
    attach, provision, select, lost = [], [], [], False
    for name, ephemeral in _volume_claims(req):
        key = f"{req['namespace']}/{name}"
        claim = claims.get(key)
        why = unusable(claim, key, ephemeral, req["name"], req.get("uid", ""))
        if why or claim is None:
            return Volumes(waiting=why)
        if claim.volume:
            terms = volumes.get(claim.volume)
            lost = lost or terms is None
            attach += [terms] if terms else []
            continue
        cls = classes.get(claim.storage_class) if claim.storage_class else None
        if cls is None or cls.mode != WAIT:   # the volume controller binds it on its own; until then, nowhere
            return Volumes(waiting=UNBOUND_IMMEDIATE)
        if cls.provisioner in ("", NO_PROVISIONER):
            return Volumes(waiting=f'persistentvolumeclaim "{name}" of StorageClass "{claim.storage_class}" waits for '
                                   "a pre-provisioned PersistentVolume, which gputide does not bind (no provisioner)")
        provision += [cls.topologies] if cls.topologies else []
        if claim.selected:   # chosen for another pod sharing it: its volume is being made for that node
            provision.append(_on(claim.selected))
        else:
            select.append(key)
    return Volumes("", lost, tuple(attach), tuple(provision), tuple(select))


def _on(node: str) -> tuple[Term, ...]:
    """The terms (one) that admit only `node`: where a claim given that node lets its pods go."""
    return (Term(fields=(Requirement("metadata.name", "In", (node,)),)),)


def sharing(req: Json, taken: Mapping[str, str]) -> Json:
    """`req` kept to the node each of its unbound WaitForFirstConsumer claims was given by an earlier pod of the
    same placement (`taken`: "namespace/claim" -> node), as `resolve` keeps it to a claim's `selected-node`; `req`
    itself when none was. A pod group's members are placed together before any claim is written (`k8s_gang`):
    without it a member sharing a claim with an earlier one would be placed elsewhere, and its claim found given
    the other node when it is bound (`ClaimChanged`), after the earlier member was."""
    volumes = req.get("volumes")
    nodes = dict.fromkeys(taken[k] for k in volumes.select if k in taken) if volumes else {}
    if not nodes:
        return req
    return dict(req, volumes=replace(volumes, provision=volumes.provision + tuple(_on(n) for n in nodes)))


def selects(req: Json) -> tuple[str, ...]:
    """The claims ("namespace/claim") the pod gives its node before its Binding (`Volumes.select`)."""
    volumes = req.get("volumes")
    return volumes.select if volumes else ()


def waiting(req: Json, nodes: int) -> str:
    """kube-scheduler's message for a pod whose claims keep every one of `nodes` nodes from being considered ("":
    they do not)."""
    volumes = req.get("volumes")
    return f"0/{nodes} nodes are available: {volumes.waiting}." if volumes and volumes.waiting else ""


def group_waiting(members: list[Json], nodes: int) -> str | None:
    """`waiting` for the first member of a pod group it holds back, naming it (None: it holds back none)."""
    return next((f"pod group {m['group']}: member {m['name']}: {w}" for m in members if (w := waiting(m, nodes))),
                None)


class ClaimChanged(PermanentActuationError):
    """A claim was bound, or given another node, since the pass read it."""


def selecting(node: str):
    """The merge patch that names `node` on a claim (None: it names it already), for `_Api.update`."""
    def change(pvc: Json) -> Json | None:
        claim = claim_entry(pvc)
        if claim.volume or (claim.selected and claim.selected != node):
            raise ClaimChanged(f"bound or given node {claim.selected or '-'} meanwhile, not {node}")
        return None if claim.selected == node else {"metadata": {"annotations": {SELECTED_NODE: node}}}
    return change


class VolumeBinding:
    """The claims, volumes and classes as the scheduler reads them, and the write of `selected-node` (module
    docstring). Per pass: `start_pass(pending)`, then `request(req)` at each pod's turn, `prebind(req, node)`
    before its Binding. A claim written in a pass is seen by the pods after it, and by later passes until the
    claims' cache holds that write (kube-scheduler's assume cache)."""

    def __init__(self, api: _Api, *, watch: bool = False, watch_s: float = 300.0) -> None:
        self.api = api
        core, storage = api.core, api.storage

        def cache(what: str, fn: Any, convert: Any, view: Any = None) -> ListCache:
            return ListCache(what, lambda **kw: api(f"list {what}", fn, **kw), fn, convert, view=view, ttl_s=0.0,
                             watch=watch, watch_s=watch_s)

        self.caches = {
            "persistentvolumeclaims": cache("persistentvolumeclaims",
                                            core.list_persistent_volume_claim_for_all_namespaces, claim_entry),
            "persistentvolumes": cache("persistentvolumes", core.list_persistent_volume, volume_entry, by_name),
            "storageclasses": cache("storageclasses", storage.list_storage_class, class_entry, by_name),
        }  # fmt: skip
        self.watches = {name: c.watch for name, c in self.caches.items() if c.watch is not None}
        self._assumed: dict[str, Claim] = {}   # claims written, until the cache shows the write
        self._read: tuple[Mapping[str, Claim], Mapping, Mapping] | None = None

    def start_pass(self, pending: list[Json], halted: Callable[[], bool] = lambda: False) -> None:
        """Read the claims, volumes and classes for this pass, only when a pending pod has claims; none more once
        `halted()` (the pass stopped, or the Lease is lost: the read in flight ends, the pass reads nothing else)."""
        self._read = None
        if not any(_volume_claims(r) for r in pending):
            return
        read = []
        for name in ("persistentvolumeclaims", "persistentvolumes", "storageclasses"):
            if halted():
                return
            read.append(self.caches[name].current())
        claims, volumes, classes = read
        if claims is None or volumes is None or classes is None:   # never listed yet: logged by the cache
            return
        # a write stays assumed until the cache holds it (or the claim is gone)
        self._assumed = {k: a for k, a in self._assumed.items() if k in claims and a.version > claims[k].version}
        self._read = (ChainMap(self._assumed, claims), volumes, classes)

    def request(self, req: Json) -> Json:
        """`req` with `volumes` (`Volumes`) when it has claims; `req` itself when it has none."""
        if not req.get("claims"):
            return req
        if why := dra_waiting(req):
            return dict(req, volumes=Volumes(waiting=why))
        if self._read is None:
            return dict(req, volumes=Volumes(waiting="PersistentVolumeClaims not known yet (their list failed)"))
        return dict(req, volumes=resolve(req, *self._read))

    def prebind(self, req: Json, node: str, halted: Callable[[], bool] = lambda: False) -> str:
        """Name `node` on the pod's unbound WaitForFirstConsumer claims: "" when done, else why not (the pod is
        then not bound this pass). Once `halted()`, no other claim is read or written: a replica that lost the
        Lease must not choose nodes, and a claim already named keeps the pod to that node, as in any pass."""
        volumes = req.get("volumes")
        for key in volumes.select if volumes else ():
            if halted():
                return f"binding volumes: the pass stopped before persistentvolumeclaim {key}"
            try:
                written = self._select(key, node, halted)
            except ActuationError as err:
                log.warning("%s not bound this pass: persistentvolumeclaim %s: %s", req["name"], key, err)
                return f"binding volumes: persistentvolumeclaim {key}: {err}"
            if written is not None:
                self._assumed[key] = claim_entry(written)
        return ""

    def _select(self, key: str, node: str, halted: Callable[[], bool]) -> Json | None:
        """Read-modify-write `selected-node: node` on claim `key` ("namespace/name"): the claim as written, None
        when it named `node` already; `ClaimChanged` when it was bound or given another node meanwhile. A failed
        try is not retried once `halted()`."""
        namespace, name = key.split("/", 1)
        what, core = f"persistentvolumeclaim {key}", self.api.core
        return self.api.update(
            what, lambda: self.api(what, core.read_namespaced_persistent_volume_claim, name, namespace, halt=halted),
            lambda body: self.api(what, core.patch_namespaced_persistent_volume_claim, name, namespace, body,
                                  _content_type=MERGE_PATCH, halt=halted), selecting(node))

    def close(self) -> None:
        for c in self.caches.values():
            c.close()
