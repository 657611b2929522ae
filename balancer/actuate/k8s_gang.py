"""Gang scheduling for the secondary scheduler: the pods of one group are bound all together, or none is.

A distributed training job whose workers are bound one by one can hold GPUs with half its workers while the rest
wait for room that never comes, and two such jobs can each hold half of what both need and block each other for
ever. Pods labelled `scheduling.x-k8s.io/pod-group: <name>` (the label of the Kubernetes coscheduling plugin)
form a group in their namespace; the annotation `gputide.io/pod-group-min: <n>` says how many members must run
together (without it: the members pending at the time, together).

In a pass a group comes up at its most important member's turn, and its pending members are placed together
(`trial`): each on a copy of the pass's nodes that already holds the members placed before it, by the same
filters and placement policy as any pod (pod affinity, required and preferred, included: the members placed
before it count where they run; an unbound WaitForFirstConsumer claim an earlier member takes keeps the members
sharing it on that member's node, as a claim's `selected-node` does: if they cannot all fit there, none is bound).
Only when every member found a node are they bound, each to the node it found; otherwise none is bound, and each
is told why: which member fits nowhere, or how many members are still missing. Members already bound count
towards n (a member bound earlier gave its claims its node: the others sharing them are kept there, completing
the group if they fit); once n are bound, later members are placed one by one. Gangs do not preempt; a group
that has waited longer than `--starving-after` holds a node for each member instead (`k8s_holds`; one node for
the members sharing an unbound claim, `sharers`, as the binding keeps them to one). A binding the API refuses
half-way (an error, not a lack of room) leaves the members bound so far in place, and the rest are tried again
next pass. So does a pass that stops between members (SIGTERM, the Lease lost): each member left unbound is told
so (`DEFERRED`, `deferred_message`), as otherwise nothing would say why it still waits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from balancer.actuate.k8s_filters import Offers, take, unschedulable
from balancer.actuate.k8s_podaffinity import PodPlacement
from balancer.actuate.k8s_preferred import Preferred
from balancer.actuate.k8s_volumes import selects, sharing

Json = dict[str, Any]
GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
MIN_ANNOTATION = "gputide.io/pod-group-min"
DEFERRED = "SchedulingDeferred"   # the Event reason of a pod a stopped pass left unbound in the turn it cut


def group_of(meta: Json) -> tuple[str | None, int]:
    """("namespace/group", the members that must run together; 0: whoever is pending) of a pod, (None, 0) if none."""
    name = (meta.get("labels") or {}).get(GROUP_LABEL)
    if not name:
        return None, 0
    try:
        least = max(int(str((meta.get("annotations") or {}).get(MIN_ANNOTATION, "0")).strip()), 0)
    except ValueError:
        least = 0
    return f"{meta.get('namespace', 'default')}/{name}", least


def member_counts(bound: Iterable[Any]) -> Counter[str]:
    """How many pods of each group ("namespace/group") are bound already (`k8s_reads.Usage`: key and labels);
    counted once per pass, not once per group."""
    return Counter(f"{u.key.split('/', 1)[0]}/{g}" for u in bound if (g := dict(u.labels).get(GROUP_LABEL)))


def missing(members: Sequence[Json], bound: int) -> str | None:
    """Why the group cannot be placed yet for want of members, None when enough are pending."""
    least = max(m["group_min"] for m in members)
    if least and len(members) + bound < least:
        return (f"pod group {members[0]['group']} waits for its members: {len(members)} pending and {bound} "
                f"bound of the {least} that must run together.")
    return None


def trial(members: Sequence[Json], view: list[Json], place: Callable[[Json, list[Json]], str | None],
          pods: PodPlacement | None = None) -> tuple[dict[str, int], str | None]:
    """Place every member on a copy of `view`, each seeing the members placed before it (their resources, and
    for pod affinity where they run, on `pods`: a copy of the pass's placement, counted on): ({member: node
    index}, None), or ({}, why the first member that fits nowhere does not fit). A member that shares an unbound
    WaitForFirstConsumer claim with one placed before it is kept to that one's node, where its binding will give
    the claim (`k8s_volumes.sharing`); an answer of `place` that the member does not fit is refused."""
    copy = list(view)   # nodes are copied when a member is counted on them; the others are shared, read-only
    offers = Offers(copy, pods)
    preferred = Preferred(copy, offers.pods)
    index = {n["name"]: i for i, n in enumerate(copy)}
    chosen: dict[str, int] = {}
    taken: dict[str, str] = {}   # "namespace/claim" -> the node the member that takes it first is placed on
    for m in members:
        m = sharing(m, taken)   # kept to the node an earlier member gave a claim they share
        offered = offers.fitting(m)
        reserved = offers.reserved_for(m)
        target = reserved["name"] if reserved else place(preferred.request(m, offered), [copy[i] for i in offered])
        i = index.get(target) if target else None
        if i is None or not offers.fits(i):   # an answer it does not fit is refused, as for a single pod
            why = unschedulable(offers.reasons(), m, len(offered))
            return {}, f"pod group {m['group']}: member {m['name']} fits nowhere with the others: {why}"
        if copy[i] is view[i]:
            copy[i] = dict(view[i], extended_free=dict(view[i]["extended_free"]),
                           reservations=dict(view[i]["reservations"]))
        take(copy[i], m)
        offers.update(i, m)
        chosen[m["name"]] = i
        taken.update({key: copy[i]["name"] for key in selects(m) if key not in taken})
    return chosen, None


def sharers(members: Sequence[Json]) -> list[list[Json]]:
    """`members` split into those that must run on one node: members sharing an unbound WaitForFirstConsumer
    claim (`k8s_volumes.selects`), directly or through other members, are one part (the claim is given the node of
    the first one bound, `trial`); a member sharing none is a part of its own. In the members' order."""
    part = list(range(len(members)))   # union-find over member indices

    def root(k: int) -> int:
        while part[k] != k:
            part[k] = part[part[k]]
            k = part[k]
        return k

    first: dict[str, int] = {}   # claim -> the first member that gives it its node
    for k, m in enumerate(members):
        for key in selects(m):
            part[root(k)] = root(first.setdefault(key, k))
    out: dict[int, list[Json]] = {}
    for k, m in enumerate(members):
        out.setdefault(root(k), []).append(m)
    return list(out.values())


def together(members: Sequence[Json]) -> Json:
    """One request for `members` that must run on one node (`sharers`), to weigh nodes for all of them at once
    (`k8s_preempt.closest_to_fitting`): the first's, asking what they ask together (GPUs, CPU, memory and each
    extended resource, pod slots included: the first's alone weighed a node lacking the RDMA device another asks as
    big enough), owning what each owns (their own holds are not held against them), at the lowest priority among
    them (what is held against any of them is held against the whole), and listing them (`members`)."""
    priorities = [m.get("priority") for m in members]
    ints = all(isinstance(p, int) and not isinstance(p, bool) for p in priorities)
    extended: dict[str, float] = {}
    for m in members:
        for k, v in m["extended"].items():
            extended[k] = extended.get(k, 0) + v
    return dict(members[0], members=list(members), num_gpu=sum(m["num_gpu"] for m in members),
                cpu_milli=sum(m["cpu_milli"] for m in members), memory_mib=sum(m["memory_mib"] for m in members),
                extended=extended, owned=frozenset().union(*(m["owned"] for m in members)),
                priority=min(priorities) if ints else None)


def groups(pending: Sequence[Json]) -> Mapping[str, list[Json]]:
    """The pending pods of each group, in the pass's order."""
    out: dict[str, list[Json]] = {}
    for r in pending:
        if r.get("group"):
            out.setdefault(r["group"], []).append(r)
    return out


def deferred_message(scheduler: str, why: str, req: Json, members: Sequence[Json] | None,
                     results: Mapping[str, str | None]) -> str:
    """What a pod a stopped pass left unbound is told: why the pass stopped, and for a pod group's member how many
    of the group's pending members the pass bound before it stopped (`results`: {pod: node or None})."""
    group = ""
    if members:
        bound = sum(bool(results.get(m["name"])) for m in members)
        group = f" while binding pod group {req['group']} ({bound} of its {len(members)} pending members bound)"
    return (f"Not bound: scheduler {scheduler} stopped its pass ({why}){group}; this pod stays pending for the "
            "scheduler's next pass (by the replica holding the Lease).")
