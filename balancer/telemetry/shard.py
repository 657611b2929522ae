"""Sharding: one controller per node pool (or cluster), each seeing and acting on its own nodes only.

A fleet too big, or too political, for one controller is split by a node selector: `ShardSelector` matches
nodes by pool, site, GPU model, node labels (`key=value`, equality only, as a Kubernetes label selector's
simplest form) or an explicit name list. `ShardedSource` wraps any `TelemetrySource` (Prometheus, the simulator)
and restricts every snapshot to the shard's nodes: GPUs are renumbered 0..n-1 in fleet order, workloads and
placements kept only when they sit entirely on the shard's GPUs (the pending pods of a job or service whose placed
pods all sit on them too), services only when every placed replica is inside (a service spread over two shards is
scaled by neither: no double scaling). A training job with a placed
worker outside is shown as not elastic, without shrink records (`_owner_sized`): resized by neither shard. Suspended
jobs sit on no node, so a shard's snapshot cannot list them (`suspended_jobs=None`) and a sharded controller never
suspends one. The cluster's PodDisruptionBudgets are kept whole (`disruption_budgets`): a shard's evictions count
against them. The planner, the safety guard and the Kubernetes actuator work unchanged on such a snapshot: they use node
names and per-node slots.

Fail-static is per shard: the inner source's checks (stale, vanished, NaN or impossible values, frozen counters) refuse
a reading for the shard's own nodes only (`ShardedSource.owns`, handed to a `base.ScopedSource`), so a dark exporter on
one shard's node holds that shard still and no other. A node missing from the reading altogether stays with the shard
that last held it (`ShardedSource.nodes`): its dark exporter holds its own shard, until the node list labels it out of
the shard or has lacked it for `forget_vanished_after_s` (`ShardedSource.listed_out`: a node deleted and registered
again under its name is held for meanwhile). Those are of the current term as leader: a replica that takes the lead
again knows none from before (`ShardedSource.new_term`). Before each reading, the GPU nodes the node list labels for the
shard are its own too (`ShardedSource.listed`), mid-term as at its start: a dark node labelled for the shard, or
relabelled into it while dark, holds it still (else, dropped by its old shard and shown by no reading, it was no shard's
and its power caps lapsed), and with Prometheus down the shard's GPU nodes are still its own in the gauges and for its
power caps' renewal. A dark node's GPU model, for a selector on model or pool, is the fleet file's, else the one a
reading showed, else the one its GPU feature discovery label names (`labelled_model`). A reading that shows a node in
another shard takes it out again. One GPU reported fresh under two hosts holds the shards of both. A service with no
finite demand holds the capacity plan (not the shard: thermal relief goes on) of the shards with a replica of it on
their nodes (`ClusterSnapshot.demand_unknown`; one with none placed is no shard's, and in no shard's snapshot); so does
a profiled one with no serving series at all (`capacity_loop.unseen_services`): the snapshot names the services whose
status it leaves out for being spread (`ClusterSnapshot.spread_services`), so a shard tells them apart (before, it held
for neither). Several clusters in one Prometheus and a partial answer still hold every shard
(`balancer.telemetry.prometheus` says why).

An action planned on a node that is no longer the shard's when it is carried out (relabelled into another shard), or on
GPUs renumbered since (a node left or joined the shard), is refused: `ShardedSource.refusal` says why, `refused` turns
that into a failed result with code `refused` and a warning. Both shard actuators refuse so: `ShardActuator` (the
simulator's) and `balancer.cmd._run_parts.ShardBound` (`gputide run --shard`, around the Kubernetes actuator), so a
simulated shard behaves as a real one. (That result is a `balancer.action_results.ActionResult`, from a layer below
this one: the telemetry layer imports nothing of the actuate layer beside it.)
Actuators that address GPUs by fleet index (the simulator) get actions translated back with `globalize`; the
`ShardActuator` wrapper does that and hands them the full snapshot the shard was cut from. Each shard elects
its own leader on its own Lease (`lease_name`), so shards fail over independently; with Prometheus, each shard's
source may also be pointed at that shard's Prometheus (see docs/readme/scale-out.md).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from balancer import catalog
from balancer.action_results import ActionResult, Outcome
from balancer.errors import InputError, MissingTelemetry, items
from balancer.model import (
    GPU_ARRAYS,
    Action,
    ClusterSnapshot,
    Migrate,
    Node,
    SetPowerLimit,
    TaintNode,
    Workload,
)
from balancer.telemetry.base import ScopedSource, TelemetrySource
from balancer.telemetry.vanished import gpu_node

log = logging.getLogger("balancer.telemetry.shard")

# how long a node of the shard may be missing from the node list before it leaves the shard, where the inner source
# has no `opts.forget_vanished_after_s` of its own (`ShardedSource.listed_out`): that option's default
UNLISTED_AFTER_S = 600.0


@dataclass(frozen=True)
class ShardSelector:
    """Which nodes belong to a shard; every given criterion must hold (an empty selector matches all)."""

    name: str
    pools: frozenset[str] = frozenset()
    sites: frozenset[str] = frozenset()
    models: frozenset[str] = frozenset()
    labels: Mapping[str, str] = field(default_factory=dict)
    nodes: frozenset[str] = frozenset()

    def matches(self, node: Node) -> bool:
        pool = node.pool or node.gpu_model
        return ((not self.pools or pool in self.pools) and (not self.sites or node.site in self.sites)
                and (not self.models or node.gpu_model in self.models)
                and self.labelled(node.labels) and (not self.nodes or node.name in self.nodes))

    def labelled(self, labels: Mapping[str, str]) -> bool:
        """Whether node labels `labels` give a node to this shard (its label criteria; the rest are not labels)."""
        return all(labels.get(k) == v for k, v in self.labels.items())

    def lease_name(self, base: str = "gputide-controller") -> str:
        """The Lease this shard's replicas elect their leader on."""
        return f"{base}-{self.name}"


def parse_selector(name: str, text: str) -> ShardSelector:
    """`pool=h100,site=eu-1,gputide.io/shard=a` -> ShardSelector. `pool`, `site`, `model` and `node` may repeat
    (any of them); every other key is a node label that must equal its value. An empty text is refused: a shard
    whose selector matches every node would act on every other shard's nodes too."""
    sets: dict[str, set[str]] = {"pool": set(), "site": set(), "model": set(), "node": set()}
    labels: dict[str, str] = {}
    for part in items(text, f"shard {name} selector (--selector)", "key=value pairs separated by commas"):
        key, eq, value = part.partition("=")
        if not eq or not key.strip() or not value.strip():
            raise InputError(None, f"shard {name} selector", part, "key=value pairs separated by commas")
        key, value = key.strip(), value.strip()
        if key in sets:
            sets[key].add(value)
        elif key in labels and labels[key] != value:
            raise InputError(None, f"shard {name} selector", part, f"one value per label (already {labels[key]})")
        else:
            labels[key] = value
    if not labels and not any(sets.values()):
        raise InputError(None, f"shard {name} selector (--selector)", text, "at least one key=value pair: an empty "
                         "selector matches every node, every other shard's too")
    return ShardSelector(name, frozenset(sets["pool"]), frozenset(sets["site"]), frozenset(sets["model"]), labels,
                         frozenset(sets["node"]))


_GFD_SUFFIX = re.compile(r"-(SHARED|MIG-.*)$")


def labelled_model(labels: Mapping[str, str]) -> str:
    """The catalogue key of the GPU model node labels `labels` name (GPU feature discovery's `PRODUCT_LABEL`, as the
    scheduler reads it: `catalog.key_of`), or "" where there is none or the catalogue does not know it. A reading's
    model is the catalogue key of the exporter's modelName (`topology.Topology.build`); an unknown product string
    could not be told equal to an unknown modelName, so it names no model, as when the label is absent.

    GPU feature discovery suffixes the board's name on a time-sliced node (`-SHARED`, its default `renameByDefault:
    false`) and under the single MIG strategy (`-MIG-1g.5gb`, `-MIG-INVALID`); a reading's modelName is the board's
    own, so the suffix is dropped here. Not in `catalog.key_of`: the scheduler matches pods' product selectors with
    it, and a pod pinned to `...-SHARED` nodes must not match unshared ones."""
    key = catalog.key_of(_GFD_SUFFIX.sub("", labels.get(catalog.PRODUCT_LABEL, "")))
    return key if key in catalog.CATALOGUE else ""


def restrict(snapshot: ClusterSnapshot, selector: ShardSelector) -> tuple[ClusterSnapshot, np.ndarray]:
    """The shard's part of `snapshot`, and for each of its GPUs the index in the full snapshot."""
    nodes = tuple(n for n in snapshot.nodes if selector.matches(n))
    names = {n.name for n in nodes}
    index = np.array([g.index for g in snapshot.gpus if g.node in names], dtype=np.int64)
    local = {int(g): k for k, g in enumerate(index)}
    gpus = tuple(replace(snapshot.gpus[int(g)], index=k) for k, g in enumerate(index))
    placements = {w: tuple(local[g] for g in idx) for w, idx in snapshot.placements.items()
                  if idx and all(g in local for g in idx)}
    outside = {w.owner for w in snapshot.workloads if w.owner and w.name in snapshot.placements
               and w.name not in placements}
    # a job or service with a placed pod here and none elsewhere is this shard's, its pending pods too: a planner
    # sizes a Job by the pods it asks for, placed or not, as the unsharded one does
    own = {w.owner for w in snapshot.workloads if w.owner and w.name in placements} - outside
    workloads = tuple(_owner_sized(w) if w.owner in outside else w for w in snapshot.workloads
                      if w.name in placements or (w.owner in own and not snapshot.placements.get(w.name)))
    services = {k: s for k, s in snapshot.services.items() if k not in outside}
    # a service whose demand is unknown holds the capacity plan of a shard with a replica of it here, spread over two
    # shards or not (as its `MissingTelemetry` held each such shard before): its GPUs here must not be lent as idle
    here = {w.owner for w in workloads if w.owner and w.name in placements}
    # (a namespace-qualified key, `serving.read_services`: where the bare name's pods are here, so `no_series_why`
    # finds the name's series in the shard as in the fleet)
    unknown = {k: why for k, why in snapshot.demand_unknown.items() if k in here or k.partition("/")[2] in here}
    # ... and one with no series at all holds it too (`capacity_loop.unseen_services`): told apart from one whose status
    # is left out here for being spread (known, `spread_services`), which a shard could not do before
    spread = frozenset(k for k in snapshot.services if k in outside and k in here)
    arrays = {name: np.asarray(getattr(snapshot, name))[index] for name in GPU_ARRAYS}
    # the PodDisruptionBudgets are the cluster's, whichever shard evicts: without them a shard's guard and planner
    # would read "this source cannot see budgets" and evict past every budget
    # ... and so are the forgotten nodes: a service placed here may run replicas on another shard's dark node
    part = ClusterSnapshot(time=snapshot.time, nodes=nodes, gpus=gpus, workloads=workloads, placements=placements,
                           services=services, demand_unknown=unknown, disruption_budgets=snapshot.disruption_budgets,
                           forgotten_nodes=snapshot.forgotten_nodes, spread_services=spread, **arrays)
    return part, index


def _owner_sized(w: Workload) -> Workload:
    """A worker of a job with a placed worker on another shard's nodes, as its shard must see it: not elastic (the
    size its owner set) and without a shrink record to give back. A resize sets the Job's whole size from the workers
    the planner counts, and this shard counts only its own: it would set a 4-worker Job to 1 to shed "one" of its 2,
    and the other shard could resize the same Job in the same cycle. Like a service spread over two shards, such a job
    is resized by neither; its workers still hold their GPUs, and may be migrated or throttled where they run."""
    if not (w.elastic_max or w.elastic_min or w.shrunk_from or w.colocation_from):
        return w
    return replace(w, elastic_min=0, elastic_max=0, shrunk_from=0, colocation_from=0, colocation_service="")


def globalize(action: Action, index: np.ndarray) -> Action:
    """An action planned on a shard snapshot, with its GPU indices mapped back to the full snapshot's."""
    if isinstance(action, Migrate):
        return replace(action, source_gpus=tuple(int(index[g]) for g in action.source_gpus),
                       target_gpus=tuple(int(index[g]) for g in action.target_gpus))
    if isinstance(action, SetPowerLimit):
        return replace(action, gpu=int(index[action.gpu]))
    return action


class ShardedSource:
    """A TelemetrySource that shows one shard of another source's snapshots.

    The inner source's fail-static checks apply to the shard's nodes only when it can take a scope
    (`base.ScopedSource`, the Prometheus source): a stale, vanished or broken GPU holds still the shard whose node it
    is on (`owns`), not every shard of the fleet. A source without one refuses a reading for any node's fault."""

    def __init__(self, inner: TelemetrySource, selector: ShardSelector) -> None:
        self.inner, self.selector = inner, selector
        self.last_full: ClusterSnapshot | None = None
        self.index = np.zeros(0, dtype=np.int64)
        # the nodes this shard owns: those of the last snapshot, or shown ours by a reading refused for our own nodes'
        # telemetry (`snapshot`), and those a snapshot of this shard held that no reading shows since (its forgotten
        # GPUs' nodes among them) until the node list labels them out or lacks them long enough (`listed_out`), and the
        # node list's (`listed`, added before each reading); `shard_nodes` reports them, and the power caps renewed are
        # theirs, during a hold too. Of this term as leader only (`new_term`)
        self.nodes: set[str] = set()
        self.held: frozenset[str] = frozenset()   # the nodes of the last snapshot: those this shard may act on
        self._shown: dict[str, bool] = {}   # the nodes the reading under way showed the scope: whether each is ours
        self._read = False   # a reading of this term has shown the scope (else `nodes` are the node list's: `listed`)
        # (GPU model, pool, site) of every node a reading showed, as it showed them, across terms: what `listed` judges
        # a node the fleet file does not list by (before its product label: `labelled_model`). Not of a term: a node's
        # model, pool and site are not relabelled, and a new term's dark node needs them as much. Kept only where the
        # inner source has a node list (`_remember`: without one `listed` never reads them), and only for the nodes of
        # the node list's last answer, of the shard (`nodes`) and those the last answer has lacked for less than
        # `forget_vanished_after_s` (`_absent`; `_node_list`, before each reading), so bounded by the fleet's nodes and
        # the nodes read in that long, while the node list fails too (three strings each)
        self._seen: dict[str, tuple[str, str, str]] = {}
        self._answered: Mapping[str, object] = {}   # the node list's last answer with nodes (`_node_list`)
        self._absent: dict[str, float] = {}   # nodes of `_seen` the last answer lacks -> since when (`_node_list`)
        self._unlisted: dict[str, float] = {}   # nodes among `nodes` the node list's answers lack -> since when
        # Both time a node missing from the node list, but not from the same start, so they are two maps. `_absent`
        # starts at the first pruning that finds the last answer with nodes lacking it, at every ask, a failed one too:
        # a node read while the list never answers is still forgotten in time (`_seen` bounded). `_unlisted` starts at
        # the first answer that lacks it, never while the list fails or answers no node (fail-static): a dark node of
        # the shard first read while the list failed is not dropped at the first answer after, none having lacked it
        # for the bound (with a blip then, dropped and its model forgotten, it was no shard's when listed again:
        # test_shard_seen_node_list_fails.py, the node first read while the node list failed). And `_unlisted` is of
        # the term (`new_term` empties it with `nodes`), `_absent` is not (`_seen` outlives terms)

    def new_term(self) -> None:
        """This replica has just taken its shard's lead (`balancer.loop.Reconciler._take_office`): it starts with no
        reading (`last_full`, `held`) and no node known (`nodes`) but those the node list tells (`listed`, asked before
        each reading: `snapshot`). What its readings showed in an earlier term says nothing of which nodes are its own
        now: another replica led meanwhile, and nodes were relabelled into other shards, went dark or came back unseen.
        Kept, they were reported as this shard's (gputide_shard_node_info: a node of another shard's owned twice) and
        their power caps renewed while this term held still before any reading reached the scope check, keeping alive
        the caps of a node another shard now owns, or of a shard no longer running: what `run.power_cap_scope` is there
        to prevent.

        None known is fail-static for the caps: an empty scope renews none (`keep_power_caps`) and drops none. A cap is
        given back only by its node's agent once its expiry (`gputide.io/power-caps-until`, the longer of 15 minutes
        and three intervals after its last renewal) passes, so the caps the previous leader kept stay while this one
        reads its first scope; those of the nodes the node list says are this shard's (`listed`) are renewed from the
        first refused reading on. Only a hold that outlasts their expiry with neither a reading nor the node list
        lets them lapse, as a restarted controller's would: renewing a scope nobody can vouch for would keep another
        shard's caps alive.

        Kept, unlike a new process, is each node's GPU model, pool and site as a reading showed them (`_seen`): a
        selector on model or pool needs a dark node's model, which the fleet file tells, else a reading, else (a new
        process's only way) the node's product label (`listed`), and they are not relabelled. Which node is the
        shard's is still the node list's labels to decide (`listed`), as for a new process."""
        self.last_full, self.index, self.held = None, np.zeros(0, dtype=np.int64), frozenset()
        self.nodes, self._read, self._unlisted = set(), False, {}

    def listed(self) -> frozenset[str]:
        """The GPU nodes this shard's selector matches as the inner source's node list has them, no telemetry read: the
        Kubernetes API's nodes (`node_overrides`) that the exporter runs on (`vanished.gpu_node`) or that the fleet file
        lists with GPUs, with their API labels and, where the fleet file lists them, its pool, site and model, else
        those a reading of this process showed (`_seen`), else the model GPU feature discovery's product label names
        (`labelled_model`; the pool that model, no site): a dark node relabelled into this shard, dropped by its old
        shard (`listed_out` judges the node list's labels and names, never a model or pool), would otherwise fail a
        selector on model or pool here and be no shard's, its power caps lapsing; so would a dark node no reading of
        this process showed (a new process's, or one registered again more than `forget_vanished_after_s` after its
        deletion, its model forgotten: `_forget_absent`), while the unsharded controller holds still for it. The labels
        are always the node list's, so a remembered or labelled model never claims a node labelled for another shard. A
        node re-imaged with another GPU model while dark is judged by the model a reading last showed until a reading
        shows the new one, whatever its product label says: the safe side, fail-static, as the shard that held it goes
        on holding still for it and renewing its power caps (forgetting the model would leave it to no shard, its caps
        lapsing), and the shard whose selector names the new model takes it at the reading that shows it (a process of
        that shard that read no model of it meanwhile goes by a label already relabelled: both hold still for it until
        then, and neither acts on it, as neither reading holds it). A node the fleet file does not list, no reading
        showed and no product label the catalogue knows names has no model, so a selector on model or pool leaves it to
        a reading; without `node_overrides`, the fleet file's GPU nodes. None while the API's nodes are not listed yet,
        or where the inner source keeps no node list (the simulator's): which node is the shard's is then the reading's
        alone to tell."""
        fleet = getattr(self.inner, "fleet", None)
        spec = {n.name: n for n in fleet.nodes if n.gpu_count} if fleet is not None else {}
        api = getattr(self.inner, "node_overrides", None)
        if callable(api):
            meta = self._node_list(api)
            if meta is None:
                return frozenset()
            spec = {name: replace(spec.get(name) or self._remembered(name, m.labels), labels=m.labels)
                    for name, m in meta.items() if name in spec or gpu_node(m)}
        return frozenset(name for name, n in spec.items() if self.selector.matches(n))

    def _node_list(self, api) -> Mapping[str, object] | None:
        """The node list's answer (`api()`: None while not listed yet; its error is raised on), with `_seen` pruned
        (`_forget_absent`) by the last answer with nodes: this one, or where it does not answer or answers with no node
        (unknown, as for `listed_out`), the one before (none before any)."""
        meta = None
        try:
            meta = api()
        finally:
            if meta:
                self._answered = meta
            self._forget_absent()
        return meta

    def _forget_absent(self) -> None:
        """Forget the model of a node the node list's last answer with nodes (`_answered`) has lacked for
        `forget_vanished_after_s` (`_unlisted_after_s`, on `listed_out`'s clock: `_now`) unless the shard still holds
        it (`nodes`), its time missing with it; one listed again is missing no more. Bounded by time, not by this
        replica's own nodes: a node deleted and registered again under its name (a watch's DELETED then ADDED) is
        missing from an answer or two, and its model is needed once listed again by a replica that does not hold it:
        another shard's, to which it is relabelled while dark, or this one after a new term (`new_term`) emptied
        `nodes` during the blip. Forgotten at the first answer that lacked it there, the dark node no longer matched a
        selector on model or pool and was no shard's, its power caps lapsing. Bounded still where the node list never
        answers again, under readings that go on (a source whose reading needs no node list; the Prometheus source
        refuses its reading then): a node a reading showed that the last answer lacks is forgotten that long after
        the first pruning that found it missing, unless the shard holds it. A node the last answer had, dark since and
        relabelled into this shard while the node list fails, is still judged by the model a reading showed once the
        node list answers again."""
        now, bound = self._now(), self._unlisted_after_s()
        self._absent = {n: self._absent.get(n, now) for n in self._seen.keys() - self._answered.keys()}
        for gone in [n for n, since in self._absent.items() if now - since >= bound and n not in self.nodes]:
            del self._seen[gone], self._absent[gone]

    def _remembered(self, name: str, labels: Mapping[str, str]) -> Node:
        """Node `name` with the GPU model, pool and site a reading last showed (`_seen`), else with the model its node
        labels `labels` name (`labelled_model`: "" for none the catalogue knows), no pool (the model) and no site."""
        if name not in self._seen:
            return Node(name=name, gpu_model=labelled_model(labels), gpu_count=0)
        model, pool, site = self._seen[name]
        return Node(name=name, gpu_model=model, gpu_count=0, pool=pool, site=site)

    def _remember(self, nodes: tuple[Node, ...]) -> None:
        """Keep `nodes`' GPU model, pool and site for `listed`, where the inner source has a node list to prune them
        by (none: `listed` never reads them, and nothing would forget a node gone from the fleet)."""
        if callable(getattr(self.inner, "node_overrides", None)):
            self._seen.update((n.name, (n.gpu_model, n.pool, n.site)) for n in nodes)

    def owns(self, name: str, node: Node | None) -> bool:
        """Whether node `name` is this shard's (`base.NodeScope`): one the reading shows (`node`) by the selector; one
        it lacks altogether (its exporter dark) if this shard held it last or the node list labels it for this shard
        (`nodes`), so the dark node holds its own shard."""
        if node is None:
            return name in self.nodes
        self._remember((node,))
        self._shown[name] = mine = self.selector.matches(node)
        return mine

    def snapshot(self) -> ClusterSnapshot:
        """The shard's part of the inner source's reading, refused for its own nodes' faults (`owns`). Until a reading
        of this term has shown the scope, the shard's nodes are first the node list's (`listed`), asked before the
        reading and not only once it is refused: whether it is refused depends on them. A node the reading lacks
        altogether (its exporter dark) is the shard's only if it is among `nodes` (`owns`), and a new term knows none:
        a dark node still labelled for the shard would be no shard's, and the term's first reading would go through
        without it (status ok, planned without it and its pods, reported without it, its power caps no longer renewed,
        to lapse on GPUs nobody sees) where the term before held still for it. A node list that fails leaves none
        known (`_listed_or_none`): the reading's own error, or its outcome, is what the loop sees. Once a reading of
        the term has shown the scope, the node list counts both ways before each reading: a node it labels out of the
        shard, or has lacked for `forget_vanished_after_s` (deleted from the cluster), is dropped (`listed_out`) and
        one it labels for the shard added (`listed`), so a dark node relabelled from one shard into another mid-term
        moves with its label, to be held still for by its new shard; a node the reading shows is then the reading's to
        judge, and an unknown node list adds and drops none."""
        self._shown = {}
        if not self._read:
            self.nodes = set(self._listed_or_none())
        else:
            # the node list both ways: one relabelled into the shard while dark is no other shard's (its old one
            # dropped it) and no reading shows it here; a node shown in another shard is taken out again below. Dropped
            # first, so that `listed` (`_node_list`) forgets a node dropped for good at this reading, not the next
            self.nodes = self.nodes - self.listed_out()
            self.nodes |= self._listed_or_none()
        try:
            full = self.inner.snapshot_for(self.owns) if isinstance(self.inner, ScopedSource) else self.inner.snapshot()
        except Exception:
            # a reading refused for our own nodes' telemetry (stale, NaN) still showed which nodes are ours: they are
            # the shard's whether their telemetry is fresh or not (`shard_nodes`; a new leader held from its first
            # reading reported none, and GputideGpuNodeInNoShard named every node of its shard)
            # (refused before the scope check, Prometheus down: the node list's, as asked above, or the term's)
            if self._shown:
                self.nodes = (self.nodes - set(self._shown)) | {n for n, mine in self._shown.items() if mine}
                self._read = True
            raise
        # again for the nodes `owns` was shown, not redundant: a source that is no `ScopedSource` never calls `owns`,
        # and one that is promises only to refuse for the scope's nodes, not to ask it of every node it shows
        self._remember(full.nodes)
        part, index = restrict(full, self.selector)
        # a node the reading shows in another shard (relabelled) is that shard's now; one the reading lacks altogether
        # (its exporter dark) stays with the shard that last held it. So even when none is left here: a shard whose
        # last node was relabelled out claimed it for good (`shard_nodes`: no alert said it was no shard's)
        self.nodes = (self.nodes - {n.name for n in full.nodes}) | {n.name for n in part.nodes}
        self.held, self._read = frozenset(n.name for n in part.nodes), True
        if part.n_gpus == 0:
            raise MissingTelemetry(f"shard {self.selector.name}: no GPU of the snapshot matches its selector")
        self.last_full, self.index = full, index
        return part

    def listed_out(self) -> frozenset[str]:
        """The nodes among `nodes` that the inner source's node list (`node_overrides`) labels out of the shard now (a
        label of the selector gone or another value), or has lacked for `forget_vanished_after_s` (deleted from the
        cluster; `_unlisted_after_s`), asked before each reading once one of the term showed the scope. A node the
        reading shows is judged by the reading; one it lacks (its exporter dark) stayed the shard's for the whole term,
        however it was relabelled: the shard held still for it until it came back, reported it as its own and renewed
        its power caps, all of which are the shard's it is labelled for now (its `listed`, which that shard's
        `snapshot` adds before each of its readings, mid-term too). The node list's labels and names are judged, never
        pool, site or model (the fleet file's or telemetry's, not relabelled).

        A node the node list stops listing stays for `forget_vanished_after_s` after the first answer that lacks it, on
        the inner source's clock, however often it is asked (a cycle that plans reads twice): a node deleted and
        registered again under its name (a watch's DELETED then ADDED) is missing from an answer or two. Dropped at
        once, a dark one was no shard's when listed again under a selector on model or pool (its model forgotten with
        it: `_node_list`), the shard reading ok without it and its power caps no longer renewed. Kept meanwhile, it
        holds nothing: its GPUs are forgotten at once (`vanished.Absences`: no longer a Kubernetes node), and no power
        cap or hot taint is kept on a node the Kubernetes API does not list; it is reported as the shard's
        (gputide_shard_node_info) for that long, as for the whole term before. The bound is the time the unsharded
        controller holds still for a dark GPU: missing that long, the node is gone. Shown by a reading (an exporter
        still reporting), the reading adds it back. No node while the node list is unknown (not listed yet, failing,
        none kept, or empty): the nodes held stay, and a node's time missing goes on from the answer that first
        lacked it, fail-static."""
        api = getattr(self.inner, "node_overrides", None)
        try:
            meta = api() if callable(api) else None
        except Exception:  # the reading asks the node list too, and reports its failure
            log.debug("shard %s: node list unreadable", self.selector.name, exc_info=True)
            return frozenset()
        if not meta:
            return frozenset()
        now, bound = self._now(), self._unlisted_after_s()
        self._unlisted = {n: self._unlisted.get(n, now) for n in self.nodes if n not in meta}
        gone = {n for n, since in self._unlisted.items() if now - since >= bound}
        return frozenset(gone | {n for n in self.nodes if n in meta and not self.selector.labelled(meta[n].labels)})

    def _now(self) -> float:
        """The inner source's clock (the one its vanished-GPU timer runs on), else the wall clock."""
        clock = getattr(self.inner, "clock", None)
        return float(clock()) if callable(clock) else time.time()

    def _unlisted_after_s(self) -> float:
        """How long a node of the shard may be missing from the node list (`listed_out`): the inner source's
        `forget_vanished_after_s`, else `UNLISTED_AFTER_S`."""
        return float(getattr(getattr(self.inner, "opts", None), "forget_vanished_after_s", UNLISTED_AFTER_S))

    def _listed_or_none(self) -> frozenset[str]:
        """`listed`, or none where the node list itself fails: the reading's refusal is what the loop reports."""
        try:
            return self.listed()
        except Exception:  # the reading's own error is the one raised (and the node list is the reading's too)
            log.debug("shard %s: node list unreadable", self.selector.name, exc_info=True)
            return frozenset()

    @property
    def shard_nodes(self) -> tuple[str, frozenset[str]]:
        """(the shard's name, the nodes it owns: `nodes`), for the controller's gputide_shard_node_info: a GPU node
        that no shard's controller reports owning is left alone by all (GputideGpuNodeInNoShard)."""
        return self.selector.name, frozenset(self.nodes)

    def globalize(self, action: Action) -> Action:
        return globalize(action, self.index)

    def refusal(self, action: Action) -> str | None:
        """Why this shard must not carry out `action` (planned on one of its snapshots) now, or None: a node it
        names (a taint's, a power limit's, a migration's target) is not among the shard's nodes of the latest reading
        or, where the inner source follows the nodes' labels (`node_overrides`: the Kubernetes API's watch), no longer
        matches the selector with the labels it has now: relabelled into another shard since, it is that shard's to
        act on. A power limit whose GPU index holds another GPU in the latest reading, or a migration whose target GPU
        indices are not on its target node there, is refused too (the shard's GPUs were renumbered: a node left or
        came; carried out, it would land on another GPU, and an actuator by fleet index would read past the end)."""
        shard = self.selector.name
        if isinstance(action, Migrate) and not all(0 <= g < len(self.index) for g in action.source_gpus):
            return (f"source GPUs {list(action.source_gpus)} of {action.workload} are not all shard {shard}'s in the "
                    "latest reading (a node left the shard)")
        for node in self._touched(action):
            if node not in self.held:
                return (f"node {node} is not in shard {shard} in the latest reading (relabelled into another shard, "
                        "or gone): its actions are that shard's")
            if not self._matches_now(node):
                return (f"node {node} no longer matches shard {shard}'s selector (relabelled since the "
                        "latest reading): its actions are another shard's")
        if isinstance(action, SetPowerLimit) and self.last_full is not None:
            gpu = int(self.index[action.gpu]) if 0 <= action.gpu < len(self.index) else -1
            if gpu < 0 or self.last_full.gpus[gpu].uuid != action.uuid:
                return (f"GPU {action.uuid} is not GPU {action.gpu} of shard {shard} in the latest reading "
                        "(its GPUs were renumbered: a node left or joined the shard)")
        if isinstance(action, Migrate) and self.last_full is not None and not all(
                0 <= g < len(self.index) and self.last_full.gpus[int(self.index[g])].node == action.target_node
                for g in action.target_gpus):
            return (f"target GPUs {list(action.target_gpus)} of {action.workload} are not on {action.target_node} in "
                    f"shard {shard}'s latest reading (its GPUs were renumbered: a node left or joined the shard)")
        return None

    def _touched(self, action: Action) -> tuple[str, ...]:
        """The nodes `action` acts on: a taint's, a power limit's, a migration's target and the nodes its source GPUs
        sit on in the latest reading."""
        if isinstance(action, TaintNode | SetPowerLimit):
            return (action.node,)
        if isinstance(action, Migrate):
            gpus = self.last_full.gpus if self.last_full is not None else ()
            sources = (gpus[int(self.index[g])].node for g in action.source_gpus)
            return tuple(dict.fromkeys((action.target_node, *sources)))
        return ()

    def _matches_now(self, name: str) -> bool:
        """Whether node `name` of the latest reading matches the selector with the labels the inner source's
        `node_overrides` has for it now (True where it has none: the reading's are all there is)."""
        listed = getattr(self.inner, "node_overrides", None)
        meta = listed() if callable(listed) else None
        node = next((n for n in self.last_full.nodes if n.name == name), None) if self.last_full else None
        now = meta.get(name) if meta else None
        return node is None or now is None or self.selector.matches(replace(node, labels=now.labels))

    def demand_history(self, promql: str, start: float, end: float, step_s: float):
        """The inner source's range query (a service's demand history for the forecaster and the burst tracker): a
        service's series are not a node's, so the shard reads them as they are."""
        return self.inner.demand_history(promql, start, end, step_s)

    @property
    def health_unknown(self) -> frozenset[str] | None:
        """The inner source's GPUs of unknown health on this shard (None: the inner source cannot tell)."""
        unknown = getattr(self.inner, "health_unknown", None)
        if unknown is None or self.last_full is None:
            return unknown
        return frozenset(self.last_full.gpus[i].uuid for i in self.index) & frozenset(unknown)

    @property
    def forgotten(self) -> Mapping[str, str] | None:
        """The inner source's forgotten GPUs (-> node) on this shard's nodes (`nodes`: those its readings held, and
        those the node list labels for it, a node known by name only included), unless a later reading showed it in
        another shard (None: the inner source cannot tell)."""
        forgotten = getattr(self.inner, "forgotten", None)
        return None if forgotten is None else {u: n for u, n in forgotten.items() if n in self.nodes}

    @property
    def oldest_sample_age_s(self) -> float:
        """The age the inner source last measured (a refused reading included; the loop's staleness gauge)."""
        return float(getattr(self.inner, "oldest_sample_age_s", float("nan")))


def refused(action: Action, source: ShardedSource, warn: logging.Logger = log) -> ActionResult | None:
    """The result of `action` where `source`'s shard must not carry it out now (`ShardedSource.refusal`: a node it
    names left the shard since the snapshot it was planned on, or the shard's GPUs were renumbered), logged on `warn`
    as a warning: failed with code `refused` (counted in gputide_actuation_errors_total, audited, and not offered
    again for a while). None: it may go out. The one refusal of both shard actuators, `ShardActuator` and
    `balancer.cmd._run_parts.ShardBound`: the other shard plans for that node, and both acting on it is what sharding
    is there to prevent."""
    why = source.refusal(action)
    if why is None:
        return None
    shard = source.selector.name
    warn.warning("shard %s refuses %s: %s", shard, action.describe(), why)
    return ActionResult(action, Outcome.FAILED, f"refused by shard {shard}: {why}", code="refused")


class ShardActuator:
    """Wraps an actuator that addresses GPUs by fleet index (the simulator's): an action the shard must not carry
    out now is refused (`refused`), as `gputide run --shard` refuses it, and never reaches `inner`; any other is
    translated, then applied against the full snapshot. Its hooks (`housekeeping`, `recover`) keep the shard's own
    nodes only (`own_nodes`)."""

    def __init__(self, inner, source: ShardedSource) -> None:
        self.inner, self.source = inner, source
        self.name = getattr(inner, "name", "shard")

    def apply(self, action: Action, snapshot: ClusterSnapshot) -> ActionResult:
        no = refused(action, self.source)
        if no is not None:
            return no
        full = self.source.last_full if self.source.last_full is not None else snapshot
        result = self.inner.apply(self.source.globalize(action), full)
        return replace(result, action=action)   # the loop books results against the shard's snapshot

    def own_nodes(self) -> frozenset[str]:
        """The nodes this shard's hooks keep: `ShardedSource.nodes` (those of its latest reading and a dark one it held
        last, the nodes whose power caps a Kubernetes shard renews, `gputide run --shard`). Before the shard's first
        reading (the loop calls `recover` only after a good reading, so only for a caller of its own), the simulated
        cluster's nodes its selector matches, with the labels the inner source's `node_overrides` gives them where it
        has some. A shard never acts on another shard's nodes: their expired taints and journalled migrations are
        that shard's."""
        if self.source.last_full is not None:
            return frozenset(self.source.nodes)
        sim = getattr(self.inner, "sim", None)
        if sim is None:
            return frozenset()
        listed = getattr(self.source.inner, "node_overrides", None)
        meta = (listed() if callable(listed) else None) or {}
        return frozenset(n.name for n in sim.fleet.nodes if self.source.selector.matches(
            replace(n, labels=meta[n.name].labels) if n.name in meta else n))

    def housekeeping(self) -> list[str]:
        """The loop's per-cycle hook, `inner`'s on this shard's nodes only (`own_nodes`): the simulator actuator's
        removes their hot taints past their expiry (`SimActuator.housekeeping`), another shard's left to that shard."""
        hook = getattr(self.inner, "housekeeping", None)
        return [] if hook is None else list(hook(nodes=self.own_nodes()))

    def recover(self) -> list[str]:
        """The loop's first cycle as leader, `inner`'s on this shard's nodes only (`own_nodes`): the simulator
        actuator's releases their expired hot taints and finishes or abandons the journalled migrations whose target is
        on one of them (`SimActuator.recover`); another shard's are left to that shard's own recovery."""
        hook = getattr(self.inner, "recover", None)
        return [] if hook is None else list(hook(nodes=self.own_nodes()))
