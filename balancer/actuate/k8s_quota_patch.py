"""The merge patch of a ClusterQueue's GPU nominalQuota that a Kueue quota move writes (`k8s_quota`): pure, from
the queue as read.

A move changes one ResourceFlavor's `nvidia.com/gpu` nominalQuota only, and notes with it the net GPUs gputide's
moves brought into the queue (`k8s_transfer.loans_note`). Kueue wants lendingLimit <= nominalQuota, so a lowering
clamps the operator's lendingLimit and keeps it in an annotation, and giving the quota back restores it; a
lendingLimit the operator changed since gputide's clamp is theirs, never undone.
"""

from __future__ import annotations

import json

from balancer.actuate.k8s_requests import quantity
from balancer.actuate.k8s_transfer import LOANS_ANNOTATION, loans_note, note_value, with_notes
from balancer.actuate.kubernetes import GPU_RESOURCE, Json
from balancer.errors import PermanentActuationError

# the operator's lendingLimit of a ClusterQueue's GPU flavors while a loan holds it lower (JSON {flavor: limit}):
# Kueue wants lendingLimit <= nominalQuota, so lowering the quota lowers it, and giving the quota back restores it
OWN_LENDING_ANNOTATION = "gputide.io/own-lending-limits"
# beside it, the lendingLimit gputide wrote in each such flavor (JSON {flavor: limit}): a live lendingLimit that is
# not that one was written by someone else since (the operator lowering it during a loan), and is the own one now
SET_LENDING_ANNOTATION = "gputide.io/lending-limits-set"


def _flavor_limits(notes: Json, key: str) -> dict[str, int]:
    try:
        return {k: int(v) for k, v in (note_value(notes, key) or {}).items()}
    except (ValueError, TypeError, AttributeError):
        return {}


def _lending_limit(cq: Json, res: Json, flavor: str, nominal: int) -> Json:
    """Set `res`'s lendingLimit (if it has one) for a nominalQuota of `nominal`: the operator's own, clamped to
    `nominal`. The own one is the annotation's while the live lendingLimit is still the one gputide wrote (or none is
    recorded: a note of an older gputide), else the live one (the operator's, or nobody's clamp). Returns the
    metadata merge patch that keeps the operator's value and the one written while clamped and forgets them once
    restored ({} when the notes stay as they are)."""
    notes = (cq.get("metadata") or {}).get("annotations") or {}
    own, written = _flavor_limits(notes, OWN_LENDING_ANNOTATION), _flavor_limits(notes, SET_LENDING_ANNOTATION)
    clamped = False   # without a lendingLimit (none, or the operator removed it) nothing is kept
    if "lendingLimit" in res:
        live = int(quantity(res["lendingLimit"]))
        edited = flavor in written and written[flavor] != live   # someone else's lendingLimit since gputide's clamp
        kept = live if edited or flavor not in own else own[flavor]
        res["lendingLimit"], clamped = min(kept, nominal), kept > nominal
    after = {**own, flavor: kept} if clamped else {k: v for k, v in own.items() if k != flavor}
    after_set = {**written, flavor: nominal} if clamped else {k: v for k, v in written.items() if k != flavor}
    patch = {key: json.dumps(value, sort_keys=True) if value else None
             for key, value, was in ((OWN_LENDING_ANNOTATION, after, own), (SET_LENDING_ANNOTATION, after_set, written))
             if value != was}
    return {"metadata": {"annotations": patch}} if patch else {}


def _quota_patch(cq: Json, queue: str, delta: int, flavor: str) -> Json:
    """The merge patch adding `delta` to the queue's GPU nominalQuota in `flavor` (only there: other flavors stay
    as they are), its lendingLimit kept within it (`_lending_limit`) and gputide's net moves noted with it
    (`k8s_transfer.loans_note`)."""
    groups = cq["spec"].get("resourceGroups") or []
    for group in groups:
        for fl in group.get("flavors") or []:
            for res in fl.get("resources") or []:
                if res.get("name") == GPU_RESOURCE and fl.get("name") == flavor:
                    nominal = int(quantity(res["nominalQuota"])) + delta
                    if nominal < 0:
                        raise PermanentActuationError(f"clusterqueue {queue}: {flavor} nominalQuota would be {nominal}")
                    res["nominalQuota"] = nominal
                    return with_notes({**_lending_limit(cq, res, flavor, nominal), "spec": {"resourceGroups": groups}},
                                      {LOANS_ANNOTATION: loans_note(cq, flavor, delta)})
    raise PermanentActuationError(f"clusterqueue {queue} has no {GPU_RESOURCE} quota (flavor {flavor})")
