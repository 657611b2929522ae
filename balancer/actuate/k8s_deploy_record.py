"""gputide's record of the operator's replicas for the Deployments no HPA scales, decided from the API's answers (no
calls here; `k8s_inference` makes them). The HPA floor's record (`k8s_hpa`), for the Deployments without an HPA.

gputide scales such a Deployment itself, through its scale subresource (`InferenceScaling._scale_deployment`): the
night's low count lends its GPUs to training, the morning's reclaim takes them back. Without a record, a service that
left gputide's management at night (its namespace protected, capacity shifting off, the service left out of
--services' profiles) kept the night's count for good: nothing knew the operator's.

The record is kept beside the controller, not on the Deployment: patching a Deployment can change its pod template
(any image under any ServiceAccount of its namespace), a right the controller is refused on purpose
(deploy/components/capacity/rbac.yaml). It is one ConfigMap, "gputide-replicas" (`RECORD_NAME`), in the
controller's own namespace (its Lease's, `floor_owner` "ns/name": `record_name`), shared by every shard and
controller there: a fixed name is what lets the Role grant get and update on it alone (resourceNames), never on the
controller's own policy and services ConfigMaps, which it live-reloads; and one record for all keeps the operator's
count when a service moves between shards (shard A lowers it 6 -> 2, shard B raises it next: B's write finds A's 2
gputide's and keeps the 6). One key per Deployment (`record_key`): "<namespace>.<name>", or where that would pass a
ConfigMap key's 253 characters (a long namespace and name) "<namespace>.<sha256 of the name, 32 hex digits>", so
that every key is one the API server takes ([-._a-zA-Z0-9]+); the Deployment is named in the value, the key is never
parsed. Valued {"namespace", "name": the Deployment's, "own": the operator's count, "scaled": the count gputide's
last recorded write asked (only so that scaling back to "own" drops the key while no later write recorded another),
"owner": the controller that wrote it, its Lease "ns/name", as HPA floors carry gputide.io/floor-owner}; the
"from", "rv" and "also" of entries written by older versions are ignored.
A writer keeps an entry's "own" whoever wrote it and names itself; a give-back takes only the entries this
controller wrote or whose writer is not recorded (`k8s_hpa.floor_owned`'s rule): another shard's are its own. An
actuator without `floor_owner` (no Lease: tests, one-off runs) keeps none.

Whose the count is, the API server says (`replicas_gputides`): the manager that owns `f:spec.f:replicas` in the
Deployment's metadata.managedFields. gputide's scale, written through the scale subresource under the field manager
"gputide" (`k8s_hpa.FIELD_MANAGER`), makes it gputide's; `kubectl scale`, an edit or an apply that changes the count
moves it to their own manager. So at each write the count is gputide's (the entry's "own" kept) or the operator's
(recorded as "own"), and a give-back restores "own" only while the count is still gputide's. Counts compared with the
record (gputide's last write and the one it replaced, racing writers' from one resourceVersion) lost the operator's
count where the Deployment changed in ways the record did not see: two writers reading at different
resourceVersions (a status write between), a raise made without its record (the record unwritable), a hand scale to a
count gputide once asked. Limits: a hand scale to the very count gputide wrote changes nothing, so the count stays
gputide's (and a give-back sets "own"); a raise made without its record from a count someone else set since
gputide's last write gives back the entry's older "own". Two controllers whose field managers differ (a fork, a
renamed manager) count each other's writes as the operator's.
Where no managedFields entry owns `f:spec.f:replicas`, the API server records no owner for gputide's scale either
(`replicas_told`): an update of an object with no managedFields is not tracked (fieldmanager skipnonapplied.go: one
created before 1.18, or stripped), nor a write through the scale subresource where no entry owns the replicas
(scalehandler.go, kubernetes#131892: a Deployment applied server-side from a manifest without replicas, Flux, Argo
CD, kubectl apply --server-side, the usual setup for a workload something else scales). There the record's count
tells: the count is gputide's iff it is the entry's "scaled", the count gputide's last recorded write asked (taken
for the operator's, gputide's 2 became "own" at the next lowering and a give-back left 1 for the 6). Its limits are
the older rule's: a hand scale to that very count, or a raise made without its record (the count then the
operator's: recorded as "own" at the next write, nothing lowered by a give-back).

The record is written before the scale, and a lowering whose record cannot be written is not made: a record without
its scale is harmless (the count is then not gputide's, so a give-back leaves it and drops the key), a lowering
without its record would lose the operator's count. A raise (the morning's reclaim) is made anyway, logged: the SLO
waits on no bookkeeping; where managedFields tell, the count stays gputide's, so the entry's "own" still goes
back (where they do not, the raised count is not the entry's "scaled": the operator's, nothing lowered).

A Deployment lowered by a version before this record has no entry: its next write records gputide's count as the
operator's (scale it back by hand once). One ConfigMap holds at most 1 MiB: some thousands of entries.

Given back (`restore_change`) when the Deployment's service leaves gputide's management, only while spec.replicas is
still gputide's; never on a plain shutdown (a restart under load must keep the count the tide still
needs).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from balancer.actuate.k8s_hpa import FIELD_MANAGER, owned_by

Json = dict[str, Any]
RECORD_NAME = "gputide-replicas"   # the ConfigMap, in the controller's Lease's namespace (its Role's resourceNames)
KEY_MAX = 253   # a ConfigMap key's length, and its characters:
KEY_CHARS = re.compile(r"[-._a-zA-Z0-9]+")


@dataclass(frozen=True)
class Entry:
    """One Deployment's record: the operator's count and the count gputide's last recorded write asked, by whom, of
    which Deployment."""

    own: int
    scaled: int
    owner: str | None = None   # the controller that wrote it (its Lease, "ns/name"); None: not recorded
    namespace: str = ""
    name: str = ""

    def owned(self, owner: str | None) -> bool:
        """Whether the controller `owner` may give it back: `k8s_hpa.owned_by`'s rule, as for HPA floors."""
        return owned_by(self.owner, owner)

    def text(self) -> str:
        value = {"namespace": self.namespace, "name": self.name, "own": self.own, "scaled": self.scaled,
                 "owner": self.owner}
        return json.dumps({k: v for k, v in value.items() if v is not None}, sort_keys=True)


def replicas_managers(deployment: Json) -> tuple[str, ...] | None:
    """The field managers owning the Deployment's `f:spec.f:replicas` in its metadata.managedFields (one, but for
    an apply sharing a value); None: the object carries no managedFields."""
    fields = (deployment.get("metadata") or {}).get("managedFields")
    if not fields:
        return None
    return tuple(sorted({str(e.get("manager")) for e in fields if isinstance(e, dict)
                         and "f:replicas" in (((e.get("fieldsV1") or {}).get("f:spec")) or {})}))


def replicas_told(deployment: Json) -> bool:
    """Whether the Deployment's managedFields tell whose its spec.replicas is: some entry owns them. Where none does
    (no managedFields, or an apply without replicas) the API server records no one's scale of them, gputide's
    included (the module docstring)."""
    return bool(replicas_managers(deployment))


def replicas_gputides(deployment: Json, scaled: int | None = None) -> bool:
    """Whether the Deployment's spec.replicas is gputide's: the API server names `FIELD_MANAGER` its only manager
    (gputide's scale wrote it and no one changed it since). Where it names none (`replicas_told`), the count is
    gputide's iff it is `scaled`, the count gputide's last recorded write asked (None: no record, not gputide's)."""
    managers = replicas_managers(deployment)
    if not managers:
        return scaled is not None and replicas(deployment) == scaled
    return managers == (FIELD_MANAGER,)


def record_name(owner: str) -> tuple[str, str]:
    """(namespace, name) of the ConfigMap holding the records of the controller `owner` (its Lease, "ns/name"): the
    one shared record of its namespace."""
    return owner.partition("/")[0], RECORD_NAME


def record_key(namespace: str, name: str) -> str:
    """The key of deployment `namespace/name`: "<namespace>.<name>" where it is a valid ConfigMap key, else the name
    hashed (a namespace and a name of up to 63 and 253 characters would pass 253: refused, HTTP 422, for good)."""
    key = f"{namespace}.{name}"
    if len(key) <= KEY_MAX and KEY_CHARS.fullmatch(key):
        return key
    key = f"{namespace}.{hashlib.sha256(name.encode()).hexdigest()[:32]}"
    if len(key) <= KEY_MAX and KEY_CHARS.fullmatch(key):
        return key
    return hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:32]   # no namespace is (a DNS label)


def _key_deployment(key: str) -> tuple[str, str]:
    """(namespace, name) of a key whose value does not name its Deployment (hand-written): a namespace has no dots,
    a Deployment's name may."""
    ns, _, name = key.partition(".")
    return ns, name


def entries(configmap: Json | None) -> dict[str, Entry]:
    """The records of a ConfigMap (None: none). A value that is not a record (edited by hand) is left out: its
    Deployment counts as unrecorded, the operator's count whatever it is."""
    out: dict[str, Entry] = {}
    for key, value in ((configmap or {}).get("data") or {}).items():
        try:
            out[key] = _entry(key, json.loads(value))
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError):   # nested past the parser's depth
            continue
    return out


def _entry(key: str, raw: Json) -> Entry:
    owner, (ns, name) = raw.get("owner"), _key_deployment(key)
    return Entry(int(raw["own"]), int(raw["scaled"]), owner if isinstance(owner, str) else None,
                 str(raw.get("namespace", ns)), str(raw.get("name", name)))


def replicas(deployment: Json) -> int:
    """The Deployment's spec.replicas (1 when unset, the API server's default)."""
    return int((deployment.get("spec") or {}).get("replicas", 1))


def scaled_entry(entry: Entry | None, deployment: Json, want: int, owner: str | None) -> Entry:
    """The record of `owner`'s write of `deployment` (as read) to `want` replicas (its key's entry now `entry`,
    None: none): the operator's count kept while the count is gputide's (`replicas_gputides`, the entry's "scaled"
    where managedFields cannot tell; whichever controller wrote the entry: a service moved between shards), else the
    count itself (no record yet, or someone else set it since gputide's last write: theirs)."""
    current, meta = replicas(deployment), deployment["metadata"]
    own = entry.own if entry is not None and replicas_gputides(deployment, entry.scaled) else current
    return Entry(own, want, owner, meta["namespace"], meta["name"])


def record_body(configmap: Json | None, namespace: str, name: str, changes: Mapping[str, Entry | None]) -> Json | None:
    """The whole ConfigMap `configmap` (None: to create) with `changes` made (an Entry written, None its key
    dropped), for a replace (or create); None: nothing changes."""
    was = (configmap or {}).get("data") or {}
    data = dict(was)
    for key, entry in changes.items():
        if entry is None:
            data.pop(key, None)
        else:
            data[key] = entry.text()
    if data == was:
        return None
    if configmap is None:
        return {"apiVersion": "v1", "kind": "ConfigMap", "data": data,
                "metadata": {"name": name, "namespace": namespace,
                             "labels": {"app.kubernetes.io/part-of": "gputide"}}}
    return {**configmap, "data": data}


def _managed(entry: Entry, services: Collection[str]) -> bool:
    """Whether the Deployment of `entry` is one of `services` ("namespace/name", or a bare name: any namespace's)."""
    return entry.name in services or f"{entry.namespace}/{entry.name}" in services


def to_give_back(recorded: Mapping[str, Entry], namespaces: Iterable[str] | None, services: Collection[str],
                 owner: str | None) -> list[str]:
    """The record keys the controller `owner` gives back: those of `namespaces` (None: of any namespace) scaling none
    of `services`, written by it or by a writer not recorded (`Entry.owned`)."""
    where = None if namespaces is None else set(namespaces)
    return sorted(k for k, entry in recorded.items() if entry.owned(owner)
                  and (where is None or entry.namespace in where) and not _managed(entry, services))


def restore_change(entry: Entry, deployment: Json) -> tuple[Json | None, str]:
    """(the scale patch giving the operator's count back, what it does) for `deployment` (as read), whose service
    left gputide's management: while its count is gputide's (`replicas_gputides`, the entry's "scaled" where
    managedFields cannot tell), its recorded own count; a count someone else set since is left as it is (the key
    alone is dropped: the count is theirs)."""
    current = replicas(deployment)
    if current == entry.own:
        return None, f"replicas {current} are the operator's own already"
    if not replicas_gputides(deployment, entry.scaled):
        managers = replicas_managers(deployment)
        who = (f"spec.replicas managed by {', '.join(managers)}" if managers else
               f"no field manager owns them, and they are not the {entry.scaled} gputide wrote last")
        return None, f"replicas {current} were set by someone else since gputide's write ({who}): left as they are"
    return {"spec": {"replicas": entry.own}}, f"replicas {current} -> {entry.own} (the operator's own)"
