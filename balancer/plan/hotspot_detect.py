"""Hotspot detection: which GPUs are hot, with hysteresis, and which nodes to keep tainted (split from hotspots.py).

Detection is one vectorised pass over the fleet. A reading is *hot* when a GPU is within `marginC` of its
slowdown temperature, reports thermal slowdown (clock event bits 0x20/0x40), sits `poolImbalanceC` above its
pool's mean, or is *power capped at its default limit*: it reports the software power cap or the hardware power
brake (bits 0x04/0x80) while its power limit is the GPU's default (TDP). Capping under a lower limit is somebody's
decision (ours when we throttle, or an operator's) and reads neither hot nor as a reason to stay hot, so our own
throttling never feeds back into detection. A reading is *cool* below slowdown - `releaseMarginC` with no
thermal bits and no such power capping. A GPU becomes an active hotspot after N consecutive hot readings (so
power capping must be *sustained* for N readings, like heat) and is released after M consecutive cool ones;
the streaks are immutable arrays in `HotspotState`, passed in and returned (the planner keeps no hidden state).
The power-capping signal follows the policy's `hotspots.powerCapping` switch when the policy has one (default on).

Power capping is not heat. A real H200 under a bf16 matrix-product load sat at its 700 W default limit with the
software power cap set the whole time, at 61 °C, 28 °C below slowdown (bench/device/h200-2026-12-04): that is what
a saturated Hopper GPU looks like. Such a hotspot is `power_only` while it is thermally cool (below the release
line, no thermal bits) and only the software cap (0x04) is set: its work may still be moved where the simulation
finds a gain, but its node is not tainted, so a fleet busy at full power is not closed to new work. The hardware
power brake (0x80) is the node's power delivery asking for less, and taints like heat.

`detect` updates the streaks, `hot_nodes` names the nodes to keep tainted (thermal hotspots and inherited hot taints
not yet cooled), `on_nodes` and `power_capped_at_default` are its per-GPU masks. What to do about the hotspots
(migrate, throttle, shrink, give back) is `balancer.plan.hotspots`, which re-exports these. Pure: no clock, no I/O.

The last open node. The hot taint steers new work to cooler nodes; in a heat wave where every node that takes GPU work
is hot it would steer it nowhere: a pod rescheduled after a node failure, a new replica, would stay Pending, and no
action may leave a workload without a place to run. So `kept_open` names one hot node the taint leaves open when it
would otherwise close them all: the coolest (its hottest GPU's margin to slowdown), the one already open preferred (not
hot-tainted now), so the choice holds cycle to cycle rather than flapping between two nodes as work lands on the open
one and heats it; the planner remembers the node it kept (`PlannerState.kept_open`) and keeps it while it still takes
work, so a node list that lags its taint's removal a cycle (showing it closed still) does not move the choice to
another. A node others closed (a cordon's `node.kubernetes.io/unschedulable`, whatever tolerates it; `NoSchedule` /
`NoExecute` taints but gputide's that no placed GPU workload tolerates all of: GKE's `nvidia.com/gpu=present:NoSchedule`
that every GPU pod tolerates closes nothing, nor a dedicated pool's taint its own pods tolerate; a key-less `Exists`
toleration, which tolerates every taint, is not read: a pod that has one, a DaemonSet-style GPU agent, says nothing
about where ordinary work may go, and one such pod placed counted every tainted node open; a fleet whose pods reach
tainted nodes only through such a toleration therefore keeps no node open, harmlessly: those pods tolerate the hot
taint as well) or with no healthy GPU
takes no work and does not count as open; where others closed every node, gputide closes nothing and keeps nothing
open. The rule is per cluster (per snapshot: a shard keeps one of its own nodes open), not per GPU model pool: a pool
rule would keep every single-node pool's hot node open, so a fleet of one node per model would never taint at all, and
the taint is there to send work to another pool's cooler node where the pod allows it. A pod pinned to a model whose
nodes are all hot waits, as it did; so does one of a dedicated pool whose nodes are all hot while another pool's node
is the one kept open. The node kept open is no free capacity for training: the tide lends none of its idle GPUs to
a job while it is hot, and leaves them to the services' scale-ups and pending replicas (`capacity_loop.claims`).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

import numpy as np

from balancer.config import BalancerPolicy
from balancer.model import ClusterSnapshot
from balancer.noderules import Taint
from balancer.plan.simulate import HOT_TAINT, THERMAL_BITS, hot_tainted, model_arrays

HW_POWER_BRAKE = 0x80
POWER_CAP_BITS = 0x04 | HW_POWER_BRAKE  # NVML SW power cap / HW power brake slowdown
DEFAULT_LIMIT_TOLERANCE_W = 1.0
CORDON = "node.kubernetes.io/unschedulable"   # a cordon's taint: closes a node whatever tolerates it


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.array(a, copy=True)
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class HotspotState:
    """Hysteresis streaks per GPU (by UUID, so a reordered fleet keeps its history)."""

    uuids: tuple[str, ...] = ()
    hot_streak: np.ndarray = field(default_factory=lambda: _frozen(np.zeros(0, dtype=np.int64)))
    cool_streak: np.ndarray = field(default_factory=lambda: _frozen(np.zeros(0, dtype=np.int64)))
    active: np.ndarray = field(default_factory=lambda: _frozen(np.zeros(0, dtype=bool)))
    # hotspots (active or inherited) held by power capping alone, thermally cool now (recomputed by every `detect`)
    power_only: np.ndarray = field(default_factory=lambda: _frozen(np.zeros(0, dtype=bool)))
    # readings counted since this state started (a process's first): before `hotReadings` of them no GPU can be an
    # active hotspot, so a hot taint seen then is a predecessor's (a restarted controller's, a former leader's)
    readings: int = 0
    # GPUs on a node whose hot taint this state inherited: each holds the taint like an active hotspot until it has had
    # `coolReadings` cool readings, as the hotspot that set it would have (which of them it was is not recorded)
    inherited: np.ndarray = field(default_factory=lambda: _frozen(np.zeros(0, dtype=bool)))

    def aligned(self, uuids: tuple[str, ...]) -> tuple[np.ndarray, ...]:
        """(hot_streak, cool_streak, active, inherited) for `uuids`; a GPU this state has not seen starts from
        nothing."""
        own = (self.hot_streak, self.cool_streak, self.active, self.inherited)
        if uuids == self.uuids:
            return tuple(a.copy() for a in own)
        pos = {u: i for i, u in enumerate(self.uuids)}
        idx = np.array([pos.get(u, -1) for u in uuids], dtype=np.int64)
        known = idx >= 0
        out = []
        for a in own:
            b = np.zeros(len(uuids), a.dtype)
            b[known] = a[idx[known]]
            out.append(b)
        return tuple(out)


def detect(snapshot: ClusterSnapshot, policy: BalancerPolicy, state: HotspotState) -> HotspotState:
    """Update the streaks with this snapshot's readings; `active` marks the hotspots to act on."""
    hp = policy.hotspots
    uuids = tuple(g.uuid for g in snapshot.gpus)
    hot, cool, active, inherited = state.aligned(uuids)
    t, slow = snapshot.temperature_c, snapshot.slowdown_temp_c
    thermal = (snapshot.clock_event_reasons.astype(np.int64) & THERMAL_BITS) != 0
    hot_now = t >= slow - hp.margin_c
    if hp.thermal_bits:
        hot_now |= thermal
    if hp.pool_imbalance_c > 0 and snapshot.n_gpus:
        pools = [snapshot.nodes[i].pool_name for i in snapshot.node_index]
        _, code = np.unique(np.array(pools), return_inverse=True)
        mean = np.bincount(code, t) / np.bincount(code)
        hot_now |= t - mean[code] >= hp.pool_imbalance_c
    capped = power_capped_at_default(snapshot) if getattr(hp, "power_capping", True) else np.zeros_like(thermal)
    hot_now |= capped
    thermally_cool = (t < slow - hp.release_margin_c) & ~thermal
    cool_now = thermally_cool & ~capped
    hot = np.where(hot_now, hot + 1, 0)
    cool = np.where(cool_now, cool + 1, 0)
    released = cool >= hp.cool_readings
    active = (active | (hot >= hp.hot_readings)) & ~released
    if state.readings < hp.hot_readings:   # no taint of this controller's yet: any hot taint is inherited
        inherited |= on_nodes(snapshot, hot_tainted(snapshot))
    inherited &= ~released
    # the hardware power brake (0x80) is the node's power delivery asking for less: keep new work off, like heat
    braked = (snapshot.clock_event_reasons.astype(np.int64) & HW_POWER_BRAKE) != 0
    power_only = (active | inherited) & capped & thermally_cool & ~braked
    return HotspotState(uuids, _frozen(hot), _frozen(cool), _frozen(active), _frozen(power_only),
                        readings=state.readings + 1, inherited=_frozen(inherited))


def on_nodes(snapshot: ClusterSnapshot, names: set[str] | frozenset[str]) -> np.ndarray:
    """Per GPU: whether its node is one of `names`."""
    return np.array([n.name in names for n in snapshot.nodes], dtype=bool)[snapshot.node_index]


def power_capped_at_default(snapshot: ClusterSnapshot) -> np.ndarray:
    """Per GPU: power capping (0x04 / 0x80) while its power limit is its default (TDP), not a lowered one."""
    bits = (snapshot.clock_event_reasons.astype(np.int64) & POWER_CAP_BITS) != 0
    if not bits.any():  # the common case costs one pass over the reasons, no catalogue lookup
        return bits
    return bits & (snapshot.power_limit_w >= model_arrays(snapshot)["tdp"] - DEFAULT_LIMIT_TOLERANCE_W)


def hot_nodes(snapshot: ClusterSnapshot, state: HotspotState) -> frozenset[str]:
    """Nodes with a thermal hotspot (not one kept active by power capping alone), or an inherited hot taint not yet
    cooled: the nodes to keep tainted."""
    thermal = (state.active | state.inherited) & ~state.power_only
    idx = np.unique(snapshot.node_index[thermal]) if snapshot.n_gpus else []
    return frozenset(snapshot.nodes[i].name for i in idx)


def kept_open(snapshot: ClusterSnapshot, hot: frozenset[str], tainted: frozenset[str],
              kept: str | None = None) -> str | None:
    """The hot node the hot taint leaves open when tainting all of `hot` would close every node that takes GPU work
    (see "The last open node"); None when some such node stays open anyway, or none takes work whatever gputide does.
    `tainted`: the nodes carrying gputide's hot taint now; one of `hot` without it is already open and preferred.
    `kept`: the node kept open last cycle, kept while it still takes work (whatever the node list shows of its taint).
    A healthy node outside `hot` with no repelling taint but gputide's answers None before any workload's rules are
    read (the common case: reading 20,000 workloads' tolerations cost 10-20 ms a cycle with one hot node), and one
    whose taints some placed workload tolerates as soon as that workload is read (`_takes_work`'s `hot`).
    """
    if not hot:
        return None
    healthy = _healthy_nodes(snapshot)
    takes = _takes_work(snapshot, healthy, _Repelling(), hot)
    if takes is None:   # a node outside `hot` takes work
        return None
    takers = {n.name for n, t in zip(snapshot.nodes, takes, strict=True) if t}   # all of them hot
    if not takers or kept in takers:   # none: every node closed by others; `kept`: it holds while it takes work
        return kept if takers else None
    margin = node_margins(snapshot)
    return max(sorted(takers - tainted or takers), key=margin.__getitem__)


def node_margins(snapshot: ClusterSnapshot) -> dict[str, float]:
    """{node: its hottest GPU's margin to slowdown, in C} (-inf for a GPU with no reading: never the coolest)."""
    margin = np.nan_to_num(snapshot.slowdown_temp_c - snapshot.temperature_c, nan=-np.inf)
    worst = np.full(len(snapshot.nodes), np.inf)
    np.minimum.at(worst, snapshot.node_index, margin)
    out: dict[str, float] = {}
    for n, m in zip(snapshot.nodes, worst.tolist(), strict=True):
        out[n.name] = min(out.get(n.name, np.inf), m)
    return out


class _Repelling:
    """A node's `NoSchedule` / `NoExecute` taints but gputide's hot taint, parsed once per taint set (nodes share a
    few)."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, ...], tuple[Taint, ...]] = {}

    def __call__(self, taints: tuple[str, ...]) -> tuple[Taint, ...]:
        out = self._seen.get(taints)
        if out is None:
            out = self._seen[taints] = tuple(t for t in map(Taint.parse, taints) if t.repels and t.key != HOT_TAINT)
        return out


def _healthy_nodes(snapshot: ClusterSnapshot) -> list[bool]:
    """Per node position: whether it has a healthy GPU."""
    healthy = np.zeros(len(snapshot.nodes), dtype=bool)
    healthy[snapshot.node_index[snapshot.healthy]] = True
    return healthy.tolist()


def _takes_work(snapshot: ClusterSnapshot, healthy: list[bool], parsed: _Repelling,
                hot: Collection[str] | None = None) -> list[bool] | None:
    """Per node position: whether it takes new GPU work but for gputide's hot taint: a healthy GPU, no cordon
    (`node.kubernetes.io/unschedulable`, whatever tolerates it), and repelling taints (`parsed`) some placed GPU
    workload tolerates all of (with none placed, none at all). Some, not every: with two dedicated pools (n0, n1
    `dedicated=a`, n2 `dedicated=b`, each pool's pods tolerating their own) no node takes every pod, and requiring it
    (`capacity.schedulable`'s reading) counted none open and tainted the whole fleet. A key-less `Exists` toleration
    (every taint, or every taint of its effect) is not read: a pod that has one (a DaemonSet-style GPU agent) says
    nothing about where ordinary work may go, and one such pod placed counted every tainted node open, so a heat wave
    kept a node open that no ordinary pod could use, and tainted the one that was. The workloads are read until every
    taint set is answered: on GKE (`nvidia.com/gpu=present:NoSchedule` on every GPU node) the first GPU pod answers;
    each tolerations tuple is judged once (by identity first: pods mostly share them, or have none).

    `hot` (`kept_open`'s): the caller needs only whether a node outside it takes work, and the list only where none
    does: None as soon as one is found to, before any workload is read where one has no repelling taint, else once a
    workload that tolerates its taints is read. Before, a taint set no placed workload tolerates (a node of a pool
    others closed) kept the reading to the last of 20,000 workloads, 8-12 ms a cycle, though the first answered a
    cool node open."""
    open_: dict[tuple[Taint, ...], bool] = {}
    cool: set[tuple[Taint, ...]] = set()   # the taint sets of the healthy, uncordoned nodes outside `hot`
    for n, h in zip(snapshot.nodes, healthy, strict=True):
        taints = parsed(n.taints)
        if h and not any(t.key == CORDON for t in taints):
            open_.setdefault(taints, not taints)
            if hot is not None and n.name not in hot:
                cool.add(taints)
    if any(open_[k] for k in cool):
        return None
    unanswered = sorted((k for k, v in open_.items() if not v), key=lambda k: k not in cool)   # cool nodes' first
    placements, judged, seen = snapshot.placements, set[int](), set[tuple]()
    for w in snapshot.workloads if unanswered else ():
        if id(w.node_rules.tolerations) in judged or not placements.get(w.name):
            continue
        judged.add(id(w.node_rules.tolerations))
        tolerations = tuple(t for t in w.node_rules.tolerations if t.key)   # a key-less one: every taint (docstring)
        before = len(seen)
        seen.add(tolerations)
        if len(seen) == before or not tolerations:   # an equal tuple judged already (hashed once), or nothing read
            continue
        answered = [k for k in unanswered if all(any(t.matches(x) for t in tolerations) for x in k)]
        if not cool.isdisjoint(answered):
            return None
        for k in answered:
            open_[k] = True
            unanswered.remove(k)
        if not unanswered:
            break
    return [h and open_.get(parsed(n.taints), False) for n, h in zip(snapshot.nodes, healthy, strict=True)]
