"""The HPA under an inference service and gputide's floor on it, decided from the API's answers (no calls here;
`k8s_inference` makes them).

An autoscaling/v2 HPA scales anything with a /scale subresource: a Deployment, a StatefulSet, an Argo Rollout (which
exposes /scale as a Deployment does). The service's HPA is the one whose `scaleTargetRef` names it, whatever the
target's kind, one on a Deployment first: gputide's floor is the HPA's `minReplicas` either way, and only a service
no HPA scales has its Deployment's own scale set. Matching Deployments alone sent a StatefulSet's or a Rollout's
floor to `deployments/{name}/scale`: a 404 every cycle, or, for a Rollout that took over a Deployment of its name
(Argo Rollouts' `workloadRef`, which keeps that Deployment at 0), the old Deployment scaled up beside the Rollout.

The floor is the HPA's `minReplicas`, never below the operator's own (nor 1), never above `maxReplicas`. While it
differs from the operator's own, the HPA carries both: `gputide.io/own-min-replicas` (theirs, given back when the
tide recedes, read back by a restarted controller or a new leader) and `gputide.io/floor-min-replicas` (the floor
gputide wrote). A `minReplicas` that is no longer that floor was written by someone else (`kubectl edit`, a GitOps
sync of a new value): it is the operator's own from then on, so gputide neither lowers an operator's raise nor gives
back a minimum they have since changed. A record without the floor (written before it was kept) is trusted as is.

An HPA another controller generates and keeps (a controlling ownerReference: KEDA's `keda-hpa-<name>`, controlled
by its ScaledObject) is not floored at all (`hpa_controller`): KEDA's reconciler updates the HPA whenever its spec
differs from the ScaledObject's (`minReplicaCount`), so a floor written there was undone within moments, reported
APPLIED and written again every cycle. The action is refused instead, naming the owner. A Deployment no HPA scales
is refused the same way when another controller keeps it (`controller_name` of the Deployment: a KServe
InferenceService, an operator's custom resource): its owner writes `spec.replicas` back, so a scale written there
flaps or is silently lost.

A floor is given back when its service leaves gputide's management (`floor_restore_patch`): its namespace protected
(balancer/app/policy_reload.py), its service no longer in --services' profiles, or capacity shifting off altogether
(`floored_namespaces`: the namespaces whose recorded HPAs scale no profiled service). The operator's own minReplicas
comes back from the record, only while minReplicas is still the floor gputide wrote; one someone else wrote since is
left alone (the record dropped). Never on a plain shutdown: a restart under load must not drop the floors the tide
still needs.

Only the controller that set a floor gives it back. Several controllers may floor HPAs of one cluster: shards
(`gputide run --shard`), or installs with different --services; to each, the others' services are "no longer
managed", so each leader term gave back the others' floors and they wrote them again. The record names the controller
that wrote the floor (`gputide.io/floor-owner`: gputide run's Lease, "namespace/name", a shard's own `<lease>-NAME`),
and a controller gives back only floors it owns (`floor_owned`). A record without an owner (written by a version that
kept none, or by an actuator without `floor_owner`) is given back by any controller, as before: the first term after
an upgrade may still drop another controller's old floor once, and that controller writes it again, owned, at its next
scale. A floor whose owner no longer runs (its Lease renamed, its shard removed) stays until the annotation is removed
(`kubectl annotate hpa NAME gputide.io/floor-owner-`): then any controller that no longer manages it gives it back.

The floor and the scale are written under the field manager `gputide` (`FIELD_MANAGER`), not the generic
"OpenAPI-Generator" every Python client shares, so the object's managedFields say whose they are and a GitOps tool
can be told to leave them alone by manager (Argo CD: `ignoreDifferences` with `managedFieldsManagers: [gputide]`).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from balancer.actuate.kubernetes import controller_ref

Json = dict[str, Any]
FIELD_MANAGER = "gputide"   # the field manager of gputide's inference writes (managedFields)


def service_hpa(hpas: Json, name: str) -> Json | None:
    """The HPA (of a namespace's HPA list) that scales `name`: one targeting a Deployment of that name, else one
    targeting any other kind of that name; None when no HPA names it."""
    named = [h for h in hpas.get("items", [])
             if ((h.get("spec") or {}).get("scaleTargetRef") or {}).get("name") == name]
    return next((h for h in named if h["spec"]["scaleTargetRef"].get("kind") == "Deployment"),
                named[0] if named else None)


def controller_name(obj: Json) -> str | None:
    """The controller that generates and keeps `obj` (its controlling ownerReference), as "Kind name (apiVersion)";
    None for an object nobody controls, which people (or their GitOps tool) write."""
    ref = controller_ref(obj.get("metadata") or {})
    return None if ref is None else f"{ref.get('kind', '?')} {ref.get('name', '?')} ({ref.get('apiVersion', '?')})"


hpa_controller = controller_name   # an HPA's (KEDA's ScaledObject), as the actuator has always named it


# the operator's own minReplicas of an HPA whose floor gputide raised, and the floor gputide wrote (module docstring)
HPA_OWN_MIN_ANNOTATION = "gputide.io/own-min-replicas"
HPA_FLOOR_ANNOTATION = "gputide.io/floor-min-replicas"
HPA_FLOOR_OWNER_ANNOTATION = "gputide.io/floor-owner"   # the controller that wrote the floor (module docstring)
_RECORD = (HPA_OWN_MIN_ANNOTATION, HPA_FLOOR_ANNOTATION, HPA_FLOOR_OWNER_ANNOTATION)


def own_min_replicas(hpa: Json) -> int:
    """The operator's own minReplicas: gputide's record of it while the HPA's minReplicas is still the floor gputide
    wrote (or no floor is recorded), else the HPA's minReplicas (theirs, or nobody has raised it)."""
    spec, notes = hpa["spec"], (hpa.get("metadata") or {}).get("annotations") or {}
    current = int(spec.get("minReplicas", 1))
    floor = notes.get(HPA_FLOOR_ANNOTATION)
    if floor is not None and floor != str(current):   # someone else wrote minReplicas since gputide's floor
        return current
    try:
        return int(notes[HPA_OWN_MIN_ANNOTATION])
    except (KeyError, ValueError):
        return current


def hpa_floor(hpa: Json, replicas: int) -> tuple[int, int]:
    """(the minReplicas for a floor of `replicas`, the operator's own minReplicas): never below the operator's own
    (`own_min_replicas`) nor 1, never above maxReplicas."""
    own = own_min_replicas(hpa)
    return min(max(replicas, own, 1), int(hpa["spec"]["maxReplicas"])), own


def hpa_floor_patch(hpa: Json, want: int, own: int, owner: str | None = None) -> Json | None:
    """The merge patch setting minReplicas `want`: the operator's `own`, the floor and its `owner` (the controller
    writing it; None: unnamed) remembered while they differ, all forgotten once the floor is back at it (so an
    operator's later edit of minReplicas is theirs again). None: nothing to change."""
    note = None if want == own else str(own)
    record = dict(zip(_RECORD, (note, None, None) if note is None else (note, str(want), owner), strict=True))
    notes = (hpa.get("metadata") or {}).get("annotations") or {}
    if hpa["spec"].get("minReplicas", 1) == want and all(notes.get(k) == v for k, v in record.items()):
        return None
    return {"metadata": {"annotations": record}, "spec": {"minReplicas": want}}


def floor_recorded(hpa: Json) -> bool:
    """Whether the HPA carries gputide's floor record (the operator's own minReplicas, or the floor written)."""
    notes = (hpa.get("metadata") or {}).get("annotations") or {}
    return HPA_OWN_MIN_ANNOTATION in notes or HPA_FLOOR_ANNOTATION in notes


def floor_owner(hpa: Json) -> str | None:
    """The controller that wrote the HPA's floor (`HPA_FLOOR_OWNER_ANNOTATION`); None: not recorded."""
    return ((hpa.get("metadata") or {}).get("annotations") or {}).get(HPA_FLOOR_OWNER_ANNOTATION) or None


def owned_by(recorded: str | None, owner: str | None) -> bool:
    """Whether the controller `owner` may give back what the controller `recorded` wrote (a floor, a Deployment's
    count): its own, or one whose writer is not recorded (an older version's); anything for a controller that does
    not name itself (`owner` None)."""
    return owner is None or recorded is None or recorded == owner


def floor_owned(hpa: Json, owner: str | None) -> bool:
    """Whether the controller `owner` may give the HPA's floor back (`owned_by`, its writer as the floor records it)."""
    return owned_by(floor_owner(hpa), owner)


def floor_managed(hpa: Json, services: Collection[str]) -> bool:
    """Whether the HPA scales one of `services` (capacity shifting's profiles: "namespace/name", or a bare name,
    whose namespace is that of its pods: any namespace's HPA of that name counts as managed)."""
    target = ((hpa.get("spec") or {}).get("scaleTargetRef") or {}).get("name")
    ns = (hpa.get("metadata") or {}).get("namespace")
    return target in services or f"{ns}/{target}" in services


def floored_namespaces(hpas: Json, services: Collection[str] = (), owner: str | None = None) -> tuple[str, ...]:
    """The namespaces (of a cluster-wide HPA list) holding an HPA with gputide's floor record, that the controller
    `owner` may give back (`floor_owned`), scaling none of `services`: the floors no longer managed, to give back
    (`floor_restore_patch`)."""
    return tuple(sorted({h["metadata"]["namespace"] for h in hpas.get("items", [])
                         if floor_recorded(h) and floor_owned(h, owner) and not floor_managed(h, services)}))


def floor_restore_patch(hpa: Json, owner: str | None = None) -> tuple[Json | None, str]:
    """(the merge patch giving the operator's own minReplicas back, what it does) for an HPA whose service leaves
    the management of the controller `owner`. No record: None, nothing of gputide's there. A floor another controller
    wrote (`floor_owned`): None, it is that one's to give back. minReplicas still the floor gputide wrote (or a record
    without the floor, trusted as is): the recorded own minReplicas back, the record gone. minReplicas someone else
    wrote since: left as it is, the record alone dropped (it is theirs)."""
    notes = (hpa.get("metadata") or {}).get("annotations") or {}
    if not floor_recorded(hpa):
        return None, "no floor of gputide's"
    if not floor_owned(hpa, owner):
        return None, f"floor set by {floor_owner(hpa)}, not by {owner}: left to it"
    current = int(hpa["spec"].get("minReplicas", 1))
    own = own_min_replicas(hpa)
    forget = {"metadata": {"annotations": dict.fromkeys(_RECORD)}}
    if own == current:
        floor = notes.get(HPA_FLOOR_ANNOTATION)
        changed = floor is not None and floor != str(current)
        return forget, (f"minReplicas {current} was written by someone else since gputide's floor {floor}: left as "
                        "it is" if changed else f"minReplicas {current} is the operator's own already")
    return {**forget, "spec": {"minReplicas": own}}, f"minReplicas {current} -> {own} (the operator's own)"
