"""A pod's PersistentVolumeClaims and the PersistentVolumes they are bound to, as plain values: what the secondary
scheduler (`k8s_volumes`: kube-scheduler's VolumeBinding for a pending pod) and the controller (`k8s_workloads`:
where a running pod's volumes let it move) both read. Pure: no API calls.

* `pod_claims(pod)`: the claims a pod mounts, its `persistentVolumeClaim` volumes and its generic `ephemeral`
  volumes (whose claim `<pod>-<volume>` the ephemeral volume controller creates);
* `claim_entry(pvc)` (`Claim`) and `volume_entry(pv)` (a volume's required node affinity terms): the cached items;
  `unusable`: why a claim keeps its pod from every node, in kube-scheduler's words (missing, being deleted, an
  ephemeral volume's claim that another pod owns);
* for the controller, which moves running pods: `volume_state(pv)` (`Volume`: its terms, and why a pod that mounts
  it stays where it is), `attachable` (per volume a running pod's claims are bound to, the terms of the nodes it
  attaches to; or why the pod stays) and `confined` (a pod's node rules narrowed to the nodes every one of its
  volumes attaches to: its replacement is then moved only where kube-scheduler's VolumeBinding would place it).

A claim bound to a volume without node affinity (network storage) restricts nothing. A pod stays where it is when
one of its claims is missing, being deleted, not bound (`status.phase` other than Bound, or no `volumeName`), or
bound to a volume that is missing, being deleted, not Bound itself, or a `local` or `hostPath` volume: its data is
on the one node the pod already runs on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, NamedTuple

from balancer.actuate.kubernetes import controller_ref
from balancer.noderules import NodeRules, Term

Json = dict[str, Any]
SELECTED_NODE = "volume.kubernetes.io/selected-node"
NODE_LOCAL = ("local", "hostPath")   # volume sources whose data is on one node
MAX_TERMS = 64   # node affinity terms a pod's rules and its volumes' may combine into (ORed); more: not moved


class Claim(NamedTuple):
    """A PersistentVolumeClaim as gputide reads it."""

    volume: str              # spec.volumeName: the volume it is bound to ("": unbound)
    storage_class: str
    selected: str            # the node a scheduler chose for it (annotation selected-node)
    deleting: bool
    owner: str               # the uid of its controlling owner (a generic ephemeral volume's pod)
    version: int             # resourceVersion, to tell the newer of two readings
    bound: bool = False      # status.phase is Bound


def claim_entry(obj: Json) -> Claim:
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    owner = controller_ref(meta) or {}
    # the beta annotation still wins over the field, as in kube-scheduler's GetPersistentVolumeClaimClass
    cls = (meta.get("annotations") or {}).get("volume.beta.kubernetes.io/storage-class", spec.get("storageClassName"))
    version = str(meta.get("resourceVersion") or "")
    return Claim(str(spec.get("volumeName") or ""), str(cls or ""),
                 str((meta.get("annotations") or {}).get(SELECTED_NODE) or ""), bool(meta.get("deletionTimestamp")),
                 str(owner.get("uid") or ""), int(version) if version.isdigit() else 0,
                 (obj.get("status") or {}).get("phase") == "Bound")


def volume_entry(obj: Json) -> tuple[Term, ...]:
    """A PersistentVolume's required node affinity terms, ORed (none: it attaches anywhere)."""
    required = ((obj.get("spec") or {}).get("nodeAffinity") or {}).get("required") or {}
    return tuple(Term.from_json(t) for t in required.get("nodeSelectorTerms") or ())


def pod_claims(pod: Json) -> tuple[tuple[str, bool], ...]:
    """(claim name, whether it is a generic ephemeral volume's) of each claim the pod mounts, once each."""
    name = pod["metadata"]["name"]
    claims = {}
    for v in (pod.get("spec") or {}).get("volumes") or ():
        if (v.get("persistentVolumeClaim") or {}).get("claimName"):
            claims.setdefault(str(v["persistentVolumeClaim"]["claimName"]), False)
        elif v.get("ephemeral") is not None:
            claims.setdefault(f"{name}-{v.get('name')}", True)
    return tuple(claims.items())


def unusable(claim: Claim | None, key: str, ephemeral: bool, pod: str, uid: str) -> str:
    """Why a claim keeps the pod from being considered at all, as kube-scheduler says it ("": it does not)."""
    name = key.split("/", 1)[1]
    if claim is None:
        return (f'waiting for ephemeral volume controller to create the persistentvolumeclaim "{name}"' if ephemeral
                else f'persistentvolumeclaim "{name}" not found')
    if claim.deleting:
        return f'persistentvolumeclaim "{name}" is being deleted'
    if ephemeral and claim.owner != uid:
        return f"PVC {key} was not created for pod {pod} (pod is not owner)"
    return ""


# ---- the controller: where a running pod's volumes let it move ------------------------------------------------


class Volume(NamedTuple):
    """A PersistentVolume as the controller reads it."""

    terms: tuple[Term, ...]   # its required node affinity, ORed (none: it attaches anywhere)
    pinned: str = ""          # why a pod that mounts it stays where it is ("": it may move where `terms` admit)


def volume_state(obj: Json) -> Volume:
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    phase = (obj.get("status") or {}).get("phase")
    local = next((k for k in NODE_LOCAL if spec.get(k) is not None), "")
    pinned = ("being deleted" if meta.get("deletionTimestamp")
              else f"a {local} volume: its data is on one node" if local
              else f"{phase or 'no'} phase, not Bound" if phase != "Bound" else "")
    return Volume(volume_entry(obj), pinned)


class Mounts(NamedTuple):
    """The claims a running pod mounts (`pod_claims`), what an ephemeral volume's claim is checked against."""

    pod: str                               # namespace/name
    uid: str
    claims: tuple[tuple[str, bool], ...]


def pod_mounts(pod: Json) -> Mounts | None:
    """The `Mounts` of a pod; None when it mounts no claim."""
    claims = pod_claims(pod)
    if not claims:
        return None
    meta = pod["metadata"]
    return Mounts(f"{meta.get('namespace', 'default')}/{meta['name']}", str(meta.get("uid") or ""), claims)


def attachable(mounts: Mounts, claims: Mapping[str, Claim],
               volumes: Mapping[str, Volume]) -> tuple[tuple[Term, ...], ...] | str:
    """Per volume the pod's claims are bound to that has node affinity: its terms, ORed; or why the pod stays where
    it is (module docstring)."""
    namespace = mounts.pod.split("/", 1)[0]
    out = []
    for name, ephemeral in mounts.claims:
        key = f"{namespace}/{name}"
        claim = claims.get(key)
        why = unusable(claim, key, ephemeral, mounts.pod, mounts.uid)
        if why or claim is None:
            return why
        if not claim.volume or not claim.bound:
            return f'persistentvolumeclaim "{name}" is not bound'
        volume = volumes.get(claim.volume)
        if volume is None:
            return f'persistentvolume "{claim.volume}" not found'
        if volume.pinned:
            return f'persistentvolume "{claim.volume}": {volume.pinned}'
        if volume.terms:
            out.append(volume.terms)
    return tuple(out)


def confined(rules: NodeRules, attach: tuple[tuple[Term, ...], ...]) -> NodeRules | None:
    """`rules` whose required node affinity also asks for every one of `attach` (each a volume's terms, ORed): the
    terms' cross product, each combined term holding both sides' requirements. None when that admits no node (a
    volume whose every term is empty) or takes more than `MAX_TERMS` terms."""
    terms = rules.terms
    for volume in attach:
        usable = tuple(t for t in volume if t.expressions or t.fields)   # an empty term matches no node
        if not usable:
            return None
        terms = usable if not terms else tuple(dict.fromkeys(
            Term(a.expressions + b.expressions, a.fields + b.fields)
            for a in terms if a.expressions or a.fields for b in usable))
        if not terms or len(terms) > MAX_TERMS:
            return None
    return rules if terms == rules.terms else replace(rules, terms=terms)
