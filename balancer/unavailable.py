"""An owner's replicas not running now, as a PodDisruptionBudget counts them unavailable: what the safety guard's
`maxUnavailablePerWorkload` counts before any migration (`balancer.safety`, with the owners it knows are moving),
and what the hotspot planner counts before it proposes one (`balancer.plan.hotspots.may_move`), so that it does not
propose a move the guard would refuse. One function for both: the planner cannot import the guard (they are sibling
layers), and a copy would drift. Pure functions of the snapshot. A service's pods count as its replicas whatever
their class: a vLLM StatefulSet's are BATCH unless labelled (`_Counts`).

The GPUs of the nodes telemetry has forgotten (`dark_per_node`) are here too: the capacity planner counts the replicas
that may run unseen there with them (`balancer.plan.capacity.view_from_snapshot`).
"""

from __future__ import annotations

import weakref
from collections.abc import Collection, Mapping
from types import MappingProxyType

import numpy as np

from balancer.model import ClusterSnapshot


def dark_per_node(snapshot: ClusterSnapshot, forgotten: Collection[str] | Mapping[str, int]) -> list[int]:
    """The GPUs of each of the `forgotten` nodes (node -> its GPUs forgotten; a node with 0, or a bare collection of
    names: unknown, counted as the most GPUs a node of the snapshot has, 8 with none: a fleet's GPU nodes are mostly
    alike). Their models are not known once forgotten: a bound for every service, whatever GPU models it may use. Node
    by node: a replica runs on one node, so whole replicas are counted per node (`short`, and the capacity planner's
    replicas that may run unseen: two forgotten 1-GPU boards hold no 2-GPU replica). [] at once with none forgotten
    (the guard asks every review: no pass over the GPUs for nothing)."""
    counts = forgotten if isinstance(forgotten, Mapping) else dict.fromkeys(forgotten, 0)
    if not counts:
        return []
    if all(int(n) > 0 for n in counts.values()):
        return [int(n) for n in counts.values()]
    # by position in `nodes` (`node_index`): a name listed twice is one position, as a count by name would be
    widest = int(np.bincount(np.asarray(snapshot.node_index, dtype=np.int64)).max()) if len(snapshot.gpus) else 8
    return [int(n) if n > 0 else widest for n in counts.values()]


class _Counts:
    """What `short` counts of a snapshot whatever the owners moving: per owner its pods unplaced, while a service is
    counted from its spec its pods placed, and, while a node is forgotten too, the most GPUs one of its pods asks
    (`gpus`, at least 1; none seen: 1). Its pods of any class (only the services' entries are read): a StatefulSet's
    pods are BATCH unless a --services profile names it or they carry the workload-class label (`k8s_workloads.served`),
    and its replicas asked come from `kube_statefulset_replicas` (`replicas_from_spec`): its inference pods only
    counted, its 2 replicas running read 2 not running (its hot pod throttled, not moved: the guard refused the move),
    and a 2-GPU replica was excused once per dark GPU. One pass over the workloads, only the counts a snapshot's
    services ask for: numpy columns built from the workloads (`np.fromiter` over a `map`) cost as much as the loop
    itself on CPython 3.11, so it stays a loop, cached per snapshot and shared with a snapshot derived from it
    (`_entry`) for the planner and the guard."""

    __slots__ = ("gpus", "running", "unplaced")

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        get = snapshot.placements.get
        unplaced: dict[str, int] = {}
        running: dict[str, int] = {}
        self.gpus: dict[str, int] = {}
        spec = any(st.replicas_from_spec for st in snapshot.services.values())
        if spec and snapshot.forgotten_nodes:   # a pass of its own: only while a node is forgotten
            for w in snapshot.workloads:
                owner = w.owner or w.name
                self.gpus[owner] = max(self.gpus.get(owner, 1), w.gpus)
        if spec:
            for w in snapshot.workloads:
                if not get(w.name):   # no entry, or an empty placement
                    owner = w.owner or w.name
                    unplaced[owner] = unplaced.get(owner, 0) + 1
                else:
                    owner = w.owner or w.name
                    running[owner] = running.get(owner, 0) + 1
        else:   # only a service counted from its spec reads its placed pods
            for w in snapshot.workloads:
                if not get(w.name):
                    owner = w.owner or w.name
                    unplaced[owner] = unplaced.get(owner, 0) + 1
        self.unplaced, self.running = unplaced, running


class _Entry:
    """What is kept of one snapshot's counts: its `_Counts`, and `short_now` once asked (None until then)."""

    __slots__ = ("counts", "now")

    def __init__(self, counts: _Counts) -> None:
        self.counts: _Counts = counts
        self.now: Mapping[str, int] | None = None


_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # snapshot -> its _Entry
# the basis (`_basis`) of the snapshot last counted afresh, and its entry, as one pair: strong references (tuples
# take no weak one), replaced whole at the next count afresh, so they keep at most one snapshot's workloads and
# mappings alive; read once (`_entry`), so a basis is never matched with another snapshot's entry
_last: list[tuple[tuple, _Entry] | None] = [None]


def _basis(snapshot: ClusterSnapshot) -> tuple:
    """All that `_Counts` and `short(snapshot)` read of a snapshot: its workloads, GPUs and nodes (`dark_per_node`
    reads the widest node), placements, services and forgotten nodes."""
    s = snapshot
    return s.workloads, s.gpus, s.nodes, s.placements, s.services, s.forgotten_nodes


def _same(a: tuple, b: tuple) -> bool:
    """Whether two bases count alike: the same tuples (by identity: comparing 20k workloads a fresh snapshot built
    anew costs more than counting them), equal mappings (a derived snapshot copies them, holding the same values: a
    C-level pass, each value the same object)."""
    return all(x is y for x, y in zip(a[:3], b[:3], strict=True)) and all(
        x is y or x == y for x, y in zip(a[3:], b[3:], strict=True))


def _entry(snapshot: ClusterSnapshot) -> _Entry:
    """The counts of `snapshot`, once per snapshot, and shared with the snapshot last counted when it reads the same
    (`_same`): the planner and the guard of one cycle both ask, the planner on the capacity loop's derived snapshot
    (`capacity_loop.with_unseen`: a new object, `demand_unknown` changed), the guard on the loop's own; each counted
    afresh, a cycle counted 20k spec-counted services' workloads twice (about 10 ms each). `_last` is read once: read
    again for the entry after its basis matched, a thread counting another snapshot afresh meanwhile gave this one
    that snapshot's counts."""
    e = _cache.get(snapshot)
    if e is None:
        basis, last = _basis(snapshot), _last[0]
        if last is not None and _same(basis, last[0]):
            e = last[1]
        else:
            e = _Entry(_Counts(snapshot))
            _last[0] = (basis, e)
        _cache[snapshot] = e
    return e


def _counts(snapshot: ClusterSnapshot) -> _Counts:
    """`_Counts` of `snapshot` (`_entry`)."""
    return _entry(snapshot).counts


def short(snapshot: ClusterSnapshot, moving: Collection[str] = (),
          owners: Collection[str] | None = None) -> dict[str, int]:
    """Per owner, its replicas not running, as a PodDisruptionBudget counts them unavailable: its pods the snapshot
    lists unplaced (Pending: the simulator's, a migrated pod's replacement not yet started), and a service's replicas
    asked by its spec (`ServiceStatus.replicas_from_spec`) beyond its placed pods of any class (the Kubernetes source
    lists running pods only, so a Pending replacement shows there as this shortfall; a StatefulSet's pods are BATCH
    unless labelled or named by a profile: `_Counts`). `migrationSettleS` alone forgot a migration whose replacement had
    not started yet. An owner short for reasons of its own (a replica Pending for want of room, a scale-up not yet
    placed) gets no migration meanwhile: it is already down that many replicas. A replacement still Pending within the
    settle window is both a migration settling and Pending: the guard counts it as both until the settle window passes
    (`balancer.safety`'s `_count_migration`).

    Replicas a node telemetry has forgotten may hold (`ClusterSnapshot.forgotten_nodes`: its pods are in neither
    `workloads` nor `placements`) are not short: as many as its GPUs hold (`dark_per_node`), else every service with a
    replica there would get no migration while it stays dark. As many whole replicas as they hold, node by node (a
    replica runs on one node: two forgotten 1-GPU boards hold no 2-GPU replica): each node's dark GPUs over
    the most GPUs one of the service's pods asks (`Workload.gpus`: its pods there are unseen, its others
    tell its template; 1 with none seen), so a 2-GPU replica is excused once per two dark GPUs, not twice; a
    fractional one once per GPU, the fewest a GPU may hold. The fewer excused, the safer: one excused too many lets a
    service's last running replica be moved, one too few holds back a move for as long as the node stays dark. The
    capacity planner bounds the same replicas from the other side (`capacity.view_from_snapshot`: its profile's
    `gpusPerReplica`, and as many fractional replicas as a GPU holds): it keeps room for replicas that may be
    running, this lets moves go only for those that may be. Not for an owner in `moving` (the guard's: one migrated
    within `cooldownS`): its missing replica is more likely the replacement not yet started than one on the dark
    node, and excused, its last running replica could be moved.

    `owners`: only those owners counted (the rest left out), the same count for each as with none given: the guard's
    recount of its full nodes (`SafetyGuard.full_nodes`) reads only the owners its ledger holds migrations of, and a
    pass over every service was ~93% of it (~9 ms at 20k services counted from their spec, ~0.5 ms so)."""
    c = _counts(snapshot)
    dark = dark_per_node(snapshot, snapshot.forgotten_nodes)
    if owners is None:
        out, services = dict(c.unplaced), snapshot.services.items()
    else:   # `unplaced` holds no 0
        out = {o: c.unplaced[o] for o in owners if o in c.unplaced}
        services = [(o, st) for o in owners if (st := snapshot.services.get(o)) is not None]
    for name, st in services:
        width = c.gpus.get(name, 1)   # a replica is on one node: two dark 1-GPU nodes hold no 2-GPU replica
        excused = 0 if name in moving or not dark else sum(k // width for k in dark)
        if st.replicas_from_spec and (n := st.replicas - c.running.get(name, 0) - excused) > 0:
            out[name] = max(out.get(name, 0), n)
    return out


def short_now(snapshot: ClusterSnapshot) -> Mapping[str, int]:
    """`short(snapshot)` with no owner taken as moving, once per snapshot and those it shares counts with (`_entry`;
    read-only): the hotspot planner's (`balancer.plan.hotspots.may_move`), which keeps no ledger of past
    migrations."""
    e = _entry(snapshot)
    if e.now is None:
        e.now = MappingProxyType(short(snapshot))
    return e.now
