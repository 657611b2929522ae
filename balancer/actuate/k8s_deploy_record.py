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
parsed. Valued {"namespace", "name": the Deployment's, "own": the operator's count, "scaled": the count gputide wrote
last, "from": the count that write replaced, "owner": the controller that wrote it, its Lease "ns/name", as HPA
floors carry gputide.io/floor-owner, "rv": the Deployment's resourceVersion that write was made from, "also": the
counts other writes made from that same resourceVersion asked, which may still land}.
A writer keeps an entry's "own" whoever wrote it and names itself; a give-back takes only the entries this
controller wrote or whose writer is not recorded (`k8s_hpa.floor_owned`'s rule): another shard's are its own. An
actuator without `floor_owner` (no Lease: tests, one-off runs) keeps none.

The record is written before the scale, and a lowering whose record cannot be written is not made: a record without
its scale is harmless (the count is then not gputide's, so a give-back leaves it and drops the key), a lowering
without its record would lose the operator's count. A raise (the morning's reclaim) is made anyway, logged: the SLO
waits on no bookkeeping, and the stale record takes the raised count for the operator's (neither of gputide's), so a
give-back leaves the higher count. "from" is what makes a write that did not land (or got no answer)
harmless too: the Deployment still at the count that write replaced is still gputide's, not the operator's.

Two writers at once (an old leader still writing as the new one takes office, a write in flight across a restart)
both read the Deployment at one resourceVersion and record their counts, one after the other; the one whose scale
is refused (409) reads the Deployment again at the other's count, which is neither its "scaled" nor its "from" (the
old leader recorded 2 -> 4, the new one 2 -> 5 over it, the 4 landed: 4 was once taken for the operator's count and
the 6 lost). Both scales carry the resourceVersion read, so at most one lands, and only while the Deployment is still at
it: a write recorded from the resourceVersion of the entry it replaces keeps that entry's counts ("also"), one from
a later resourceVersion drops them (the Deployment changed since, so none of them can land any more).

The HPA record's rule for a count someone else wrote: `spec.replicas` that is none of gputide's counts ("scaled",
"from", "also") was written by someone else (`kubectl scale`, a GitOps sync) between gputide's writes, and is the operator's
own from then on: gputide's next write records it as theirs, and a give-back leaves it (the key alone dropped). A
hand scale to exactly the count gputide's last write replaced (or a racing write's) cannot be told from gputide's
own, and counts as such. A Deployment lowered by a version before this record has no entry: its next write records
gputide's count as the operator's (scale it back by hand once). One ConfigMap holds at most 1 MiB: some thousands of
entries.

Given back (`restore_change`) when the Deployment's service leaves gputide's management, only while spec.replicas is
still one of gputide's counts; never on a plain shutdown (a restart under load must keep the count the tide still
needs).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]
RECORD_NAME = "gputide-replicas"   # the ConfigMap, in the controller's Lease's namespace (its Role's resourceNames)
KEY_MAX = 253   # a ConfigMap key's length, and its characters:
KEY_CHARS = re.compile(r"[-._a-zA-Z0-9]+")
ALSO_MAX = 8   # the racing writes' counts kept, the oldest dropped beyond (each write from one resourceVersion adds one)


@dataclass(frozen=True)
class Entry:
    """One Deployment's record: the operator's count, the count gputide wrote last and the count that write
    replaced, by whom, of which Deployment."""

    own: int
    scaled: int
    before: int
    owner: str | None = None   # the controller that wrote it (its Lease, "ns/name"); None: not recorded
    namespace: str = ""
    name: str = ""
    rv: str | None = None   # the Deployment's resourceVersion the last write was made from; None: not recorded
    also: tuple[int, ...] = ()   # the counts other writes from that resourceVersion asked (racing writers)

    def gputides(self, current: int) -> bool:
        """Whether `current` replicas are gputide's doing (its last write, landed or not, or a racing writer's from
        the same resourceVersion), not the operator's."""
        return current in (self.scaled, self.before) or current in self.also

    def owned(self, owner: str | None) -> bool:
        """Whether the controller `owner` may give it back: written by it, or by a writer not recorded; any for a
        controller that does not name itself (`owner` None). `k8s_hpa.floor_owned`'s rule."""
        return owner is None or self.owner is None or self.owner == owner

    def text(self) -> str:
        value = {"namespace": self.namespace, "name": self.name, "own": self.own, "scaled": self.scaled,
                 "from": self.before, "owner": self.owner, "rv": self.rv, "also": list(self.also)}
        return json.dumps({k: v for k, v in value.items() if v not in (None, [])}, sort_keys=True)


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
        except (ValueError, TypeError, KeyError, AttributeError):
            continue
    return out


def _entry(key: str, raw: Json) -> Entry:
    owner, rv, (ns, name) = raw.get("owner"), raw.get("rv"), _key_deployment(key)
    return Entry(int(raw["own"]), int(raw["scaled"]), int(raw.get("from", raw["scaled"])),
                 owner if isinstance(owner, str) else None, str(raw.get("namespace", ns)), str(raw.get("name", name)),
                 rv if isinstance(rv, str) else None, tuple(int(c) for c in raw.get("also") or ()))


def scaled_entry(entry: Entry | None, current: int, want: int, owner: str | None, deployment: tuple[str, str],
                 rv: str) -> Entry:
    """The record of `owner`'s write from `current` replicas to `want` of `deployment` (namespace, name) read at
    resourceVersion `rv` (its key's entry now `entry`, None: none): the operator's count kept while `current` is
    gputide's (whichever controller wrote the entry: a service moved between shards), else `current` itself (no
    record yet, or someone else set it since gputide's last write). An entry recorded from the same resourceVersion
    is a racing writer's whose scale may still land: its counts are kept ("also")."""
    own = entry.own if entry is not None and entry.gputides(current) else current
    racing = entry is not None and entry.rv is not None and entry.rv == rv
    also = [c for c in dict.fromkeys((*entry.also, entry.scaled)) if c != want] if racing else []
    return Entry(own, want, current, owner, *deployment, rv, tuple(also[-ALSO_MAX:]))


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


def restore_change(entry: Entry, current: int) -> tuple[Json | None, str]:
    """(the scale patch giving the operator's count back, what it does) for a Deployment at `current` replicas
    whose service left gputide's management: while `current` is gputide's, its recorded own count; a count someone
    else set since is left as it is (the key alone is dropped: the count is theirs)."""
    if current == entry.own:
        return None, f"replicas {current} are the operator's own already"
    if not entry.gputides(current):
        return None, f"replicas {current} were set by someone else since gputide's {entry.scaled}: left as they are"
    return {"spec": {"replicas": entry.own}}, f"replicas {current} -> {entry.own} (the operator's own)"
