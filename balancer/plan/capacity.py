"""The capacity planner's model: the services and jobs it weighs, its policy, state and decision, and the view
of them it takes from a `ClusterSnapshot`.

`ServiceCapacity` is what a service profile says (requests per second one replica sustains, warm-up, bounds,
GPU models); `view_from_snapshot` turns a snapshot into a `CapacityView` (each service's replicas, demand and
latency, each elastic job's workers and bounds, the idle GPUs per model: healthy ones the tide's pods can schedule
on that this cycle's hotspot plan does not claim, `schedulable`); `CapacityPolicy`,
`CapacityState` and `CapacityDecision` are the planner's inputs and outputs. The planning itself, reclaim ahead
of the rise and loans only of what stays idle, is `balancer.plan.capacity_plan.plan_capacity`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType

import numpy as np

from balancer import catalog
from balancer.model import Action, ClusterSnapshot, ServiceStatus, WorkloadClass
from balancer.noderules import NO_RULES, NodeRules, Taint
from balancer.plan.simulate import HOT_TAINT
from balancer.unavailable import dark_per_node  # the safety guard's count of them too


@dataclass(frozen=True, slots=True, kw_only=True)
class ServiceCapacity:
    """What the planner must know about one inference service besides its demand."""

    name: str
    rps_per_replica: float  # req/s one replica sustains within its SLO
    warmup_s: float = 300.0  # a new replica serves nothing for this long
    min_replicas: int = 1
    max_replicas: int = 1_000_000
    gpus_per_replica: int = 1
    models: frozenset[str] | None = None  # allowed GPU models; None: any
    home_replicas: int = 0  # what its own peak needs (the static allotment); below it, GPUs are on loan
    slo_latency_s: float = 0.5  # its p99 latency SLO: the telemetry's latency pressure is p99 over this


@dataclass(frozen=True, slots=True, kw_only=True)
class ServiceView:
    profile: ServiceCapacity
    demand_rps: float  # offered load now
    replicas: int  # current replica count (warming ones included)
    # the GPUs its replicas hold, weighted by their gpu_milli (two half-GPU replicas on one GPU hold one), rounded up
    gpus_by_model: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    # the GPUs only its pods occupy (what its scale-down can empty) that another tide pod could then take (healthy,
    # `schedulable`: a loan's growth onto a GPU of a cordoned node would only wait); None (a view built by hand): each
    # replica holds gpus_per_replica whole GPUs of its own
    sole_by_model: Mapping[str, int] | None = None
    burst: float = 0.0  # relative rise of demand within the warm-up lead to be ready for (`rise_allowance`)
    latency_pressure: float = 0.0  # p99 latency / SLO now
    desired: int | None = None  # the replica count already asked for (placed + pending); None: = replicas
    # what the HPA that scales it asks for on its own metrics now, after its scale-down stabilisation (the
    # recommendation before gputide's floor clamps it: status.desiredReplicas while that floor does not bind); a
    # loan lowers only that HPA's minReplicas, so it frees the replicas above both. None: no HPA scales it. From
    # `ServiceStatus.hpa_wants` (Kubernetes: `k8s_hpa_wants`, the HPA's algorithm on its status; the simulator: None)
    hpa_wants: int | None = None
    # of `replicas`, those asked that telemetry places nowhere, counted as running on a forgotten node's GPUs
    # (`view_from_snapshot`'s `forgotten`): they may be pending instead, so idle GPUs are kept for them, never lent
    unseen: int = 0

    @property
    def asked(self) -> int:
        """Replicas asked for: those holding GPUs plus those still pending."""
        return self.replicas if self.desired is None else self.desired


@dataclass(frozen=True, slots=True, kw_only=True)
class JobView:
    """An elastic training job: its size, bounds, and what shrinking it would cost."""

    name: str
    workers: int  # desired workers now
    elastic_max: int
    elastic_min: int = 1
    gpus_per_worker: int = 1
    priority: int = 0
    since_checkpoint_s: float = 0.0  # work since the last checkpoint is lost on a resize
    speed: float = 1.0  # A100-equivalent progress per GPU
    models: frozenset[str] | None = None
    gpus_by_model: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    # of `gpus_by_model`, those a new inference pod could take once the job lets them go (healthy, `schedulable`: not
    # on a cordoned or hot-tainted node): all a reclaim may count on. None (a view built by hand): all of them
    reclaimable_by_model: Mapping[str, int] | None = None
    restarts_on_resize: bool = False  # any resize restarts every worker (queued in Kueue, not elastic there; or
    #                                   its framework restarts the worker group: gputide.io/resize-restarts)
    protected: bool = False  # a worker protected, or in a protected namespace: the safety guard refuses any resize,
    #                          so it is never shrunk nor grown (its GPUs still count as training's)

    @property
    def placed_workers(self) -> int:
        return sum(self.gpus_by_model.values()) // max(self.gpus_per_worker, 1)

    @property
    def restart_cost_gpu_h(self) -> float:
        """A100-equivalent GPU-hours lost if the job is resized now."""
        return self.since_checkpoint_s / 3600.0 * sum(self.gpus_by_model.values()) * self.speed


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityView:
    time: float
    free: Mapping[str, int]  # idle, healthy GPUs per GPU model
    services: tuple[ServiceView, ...]
    jobs: tuple[JobView, ...]
    inference_gpus: int
    training_gpus: int
    total_gpus: int
    # while telemetry has forgotten a node: per service, the replicas it places nowhere that `replicas` counts as
    # running there unseen (`view_from_snapshot`'s `forgotten`); the caller says so
    unseen: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    # ... and the services counted from their pods left out of `services` meanwhile (`view_from_snapshot`); ditto
    uncounted: tuple[str, ...] = ()
    # the GPU models whose idle GPUs are lent to no job this cycle (None: any model): those the `uncounted` services
    # may run on, and those of the `unlent` GPUs (`view_from_snapshot`: the hot node kept open in a heat wave)
    uncounted_models: frozenset[str] | None = frozenset()


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityPolicy:
    quantile: float = 0.9             # loans: the forecast quantile that must leave GPUs idle over the loan horizon
    reclaim_quantile: float = 0.9     # reclaims: the quantile replicas must cover over the warm-up lead
    keep_quantile: float = 0.9        # loans: the quantile kept over the loan horizon (`plan_capacity`)
    reclaim_headroom: float = 0.15    # capacity above that quantile
    home_margin: float = 0.05         # share of the home allotment the spare rules may hold beyond it (`plan_capacity`)
    headroom: float = 0.15  # capacity above the forecast quantile
    reclaim_margin_s: float = 600.0  # reclaim this long before the rise on top of the warm-up time
    loan_horizon_s: float = 7200.0  # loan only if the forecast leaves GPUs idle this long
    dead_band_replicas: int = 1
    dead_band_frac: float = 0.1
    min_hold_s: float = 1800.0  # no scale-down sooner than this after a service's last change
    max_level_correction: float = 3.0  # cap on scaling the forecast up to match the demand observed now
    allow_suspend: bool = True  # may suspend a job (0 workers) when shrinking to minimum is not enough
    burst_window_s: float = 7 * 86400.0  # the trailing window `rise_allowance` learns bursts from
    max_burst: float = 3.0  # cap on the learned burst allowance (relative rise)
    emergency_pressure: float = 0.5  # p99 / SLO at which a service grows at once, whatever the forecast says
    emergency_step: float = 0.25  # ... by this share of its replicas (at least one)
    emergency_retry_s: float = 1800.0  # a step not honoured is asked again after this long (`CapacityState.emergency`)

    @classmethod
    def from_config(cls, section: object, base: CapacityPolicy | None = None) -> CapacityPolicy:
        """`base` (default: the defaults) with the fields of the policy file's `capacity` section that this
        planner also has. A field left at the file's own default keeps `base`'s value: the two defaults need
        not agree (the file's default `headroom` is the loop's, this planner's is the tidal scenario's)."""
        base = base or cls()
        mine = {f.name for f in fields(cls)}
        changes = {}
        for f in fields(section):  # type: ignore[arg-type]
            value = getattr(section, f.name)
            if f.name in mine and value != f.default:
                changes[f.name] = type(getattr(base, f.name))(value)
        return replace(base, **changes)


@dataclass(frozen=True, slots=True)
class CapacityState:
    """Hysteresis memory: when each service last changed size, and its last observed (time, demand, slope).

    The memory lives in the leader's process only: a new process, or a replica taking the lead, starts empty. A
    service whose last change this state does not know is held as if it changed when the state first saw it
    (`first_seen`), so a restart mid-hold does not count the hold as served (a loan the hand-over held back, never
    sent, is recorded there too, later than its last change: no loan until the ledger is saved, `planner.hold_back`);
    the emergency net reads only
    `last_change` (growth under pressure waits for no hold) and `emergency` (a step not honoured is not repeated).
    A restart forgets `emergency` and `pending_since`: one more emergency step, or a warm-up more of idle GPUs kept
    for pending replicas, at most."""

    last_change: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    last_demand: Mapping[str, tuple[float, float, float]] = field(default_factory=lambda: MappingProxyType({}))
    first_seen: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    # per job that loses work on a resize: (time of its last checkpoint, the period between its last two, 0 before
    # two were seen), learned from `JobView.since_checkpoint_s` cycle by cycle (`checkpoint_periods`)
    checkpoints: Mapping[str, tuple[float, float]] = field(default_factory=lambda: MappingProxyType({}))
    # per service whose last emergency step (the latency net) is not honoured yet: the replicas holding GPUs when it
    # was asked. While it still holds exactly that many (the ask capped by its HPA's maxReplicas, or its replicas
    # pending) the net does not step again: each step shrank training for replicas that never came, and the next
    # cycle lent the GPUs back (a restart of the job each warm-up, no relief). Until `emergency_retry_s` after the
    # step: what held it may have passed (a shrink the guard refused, a PDB, a cap raised, freed GPUs another
    # service's pending replicas took), and remembered for good the service was never stepped again
    emergency: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    # per service with replicas pending beside idle GPUs of its allowed models: since when (`plan_capacity` keeps
    # those GPUs for the pending replicas of a service on hold for a warm-up, then lends them)
    pending_since: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class CapacitySplit:
    inference: int
    training: int
    loaned: int
    idle: int

    def as_dict(self) -> dict[str, int]:
        return {
            "inference": self.inference,
            "training": self.training,
            "loaned": self.loaned,
            "idle": self.idle,
        }


@dataclass(frozen=True, slots=True)
class CapacityDecision:
    actions: tuple[Action, ...]
    split: CapacitySplit  # GPUs per class now (for gputide_capacity_gpus{class})
    targets: Mapping[str, int]  # GPUs each service should hold (gputide_capacity_target_gpus{service})
    state: CapacityState
    notes: tuple[str, ...] = ()


# ---- building the view ---------------------------------------------------------------------------------------


_MODEL_CODES: dict[int, tuple[tuple, np.ndarray, list[str], np.ndarray]] = {}


def _model_codes(gpus: tuple) -> tuple[np.ndarray, list[str], np.ndarray]:
    """Per GPU the index of its model in a sorted list of models, and each model's training speed (memoised
    per fleet: a snapshot's `gpus` tuple is the same object cycle after cycle)."""
    hit = _MODEL_CODES.get(id(gpus))
    if hit is not None and hit[0] is gpus:
        return hit[1], hit[2], hit[3]
    names = sorted({g.model for g in gpus})
    pos = {m: i for i, m in enumerate(names)}
    codes = np.fromiter((pos[g.model] for g in gpus), dtype=np.int64, count=len(gpus))
    speed = np.array([catalog.CATALOGUE[m].training_tput if m in catalog.CATALOGUE else 1.0 for m in names])
    _MODEL_CODES.clear()
    _MODEL_CODES[id(gpus)] = (gpus, codes, names, speed)
    return codes, names, speed


def _by_model(counts: np.ndarray, names: list[str]) -> Mapping[str, int]:
    return MappingProxyType({names[k]: int(counts[k]) for k in np.flatnonzero(counts)})


def _shares(n_gpus: int, placed_all: list[int], gpu_grp: list[int], gpu_idx: list[int], gpu_mil: list[int],
            codes: np.ndarray, n_groups: int, n_models: int, takes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per (group, model): the GPUs its pods hold weighted by their gpu_milli (whole GPUs, rounded up), and the
    GPUs no pod of another group shares that new pods can take (`takes`, per GPU): those its shrink can leave empty
    for another. Vectorised over the (group, GPU) pairs."""
    shape = (n_groups, n_models)
    if not gpu_grp:
        return np.zeros(shape, dtype=np.int64), np.zeros(shape, dtype=np.int64)
    g, i = np.asarray(gpu_grp, dtype=np.int64), np.asarray(gpu_idx, dtype=np.int64)
    cell = g * n_models + codes[i]
    weighted = np.bincount(cell, weights=np.asarray(gpu_mil, dtype=float) / 1000.0, minlength=n_groups * n_models)
    pairs, own = np.unique(g * n_gpus + i, return_counts=True)   # pods of a group per (group, GPU)
    pg, pi = pairs // n_gpus, pairs % n_gpus
    alone = (own == np.bincount(np.asarray(placed_all, dtype=np.int64), minlength=n_gpus)[pi]) & takes[pi]
    sole = np.bincount(pg * n_models + codes[pi], weights=alone, minlength=n_groups * n_models)
    return (np.ceil(weighted - 1e-9).astype(np.int64).reshape(shape),
            np.rint(sole).astype(np.int64).reshape(shape))


def _placed_replicas(held: np.ndarray, group: int | None, profile: ServiceCapacity) -> int:
    return 0 if group is None else int(held[group].sum()) // max(profile.gpus_per_replica, 1)


def _models_of(codes: np.ndarray, names: list[str], gpus: Collection[int], healthy: np.ndarray) -> frozenset[str]:
    """The models of the healthy GPUs among `gpus` (indices)."""
    idx = np.fromiter(gpus, dtype=np.int64, count=len(gpus))
    return frozenset(names[k] for k in np.unique(codes[idx[healthy[idx]]]).tolist())


def schedulable(snapshot: ClusterSnapshot, rules: Collection[NodeRules],
                tainting: Collection[str] = ()) -> np.ndarray:
    """Per GPU: whether its node takes new pods of every one of `rules` by their taints (a `NoSchedule` /
    `NoExecute` taint not tolerated keeps them off, as the scheduler would: gputide's hot taint, a cordon's
    `node.kubernetes.io/unschedulable`), the nodes in `tainting` counted with gputide's hot taint (this cycle's plan
    puts it there). Node selectors and affinity are not asked: the view's idle GPUs are one pool per model, which
    a service's `models` narrow; a taint that any tide pod cannot pass makes a GPU no pool's."""
    rules = tuple(rules) or (NO_RULES,)
    verdict: dict[tuple[tuple[str, ...], bool], bool] = {}   # nodes mostly share a few taint sets: ask once each

    def takes(key: tuple[tuple[str, ...], bool]) -> bool:
        if key not in verdict:
            taints = (*map(Taint.parse, key[0]), *((Taint(HOT_TAINT, "true"),) if key[1] else ()))
            verdict[key] = all(r.untolerated(taints) is None for r in rules)
        return verdict[key]

    ok = np.fromiter((takes((n.taints, n.name in tainting)) for n in snapshot.nodes), dtype=bool,
                     count=len(snapshot.nodes))
    return ok[snapshot.node_index]


def since_checkpoint(now: float, trainers: Sequence[tuple[int, float, float]], n_groups: int) -> np.ndarray:
    """Per group, the seconds of work a resize would lose: since the latest checkpoint any of its pods reports
    (often only rank 0 does), else since its earliest pod started (no checkpoint known: all of it), else 0 (nothing
    known, as in a simulation that passes its own figures). A job that saves a checkpoint on SIGTERM shows +inf
    (`gputide.io/checkpoint-on-sigterm`, `k8s_workloads.with_job`; the simulator's `checkpoint_on_sigterm`): 0."""
    ckpt, start = np.full(n_groups, np.nan), np.full(n_groups, np.nan)
    if trainers:
        g, c, s = (np.asarray(col) for col in zip(*trainers, strict=True))
        np.fmax.at(ckpt, g.astype(np.int64), c.astype(float))
        np.fmin.at(start, g.astype(np.int64), s.astype(float))
    since = now - np.where(np.isnan(ckpt), start, ckpt)
    return np.where(np.isnan(since), 0.0, np.maximum(since, 0.0))


def view_from_snapshot(
    snapshot: ClusterSnapshot,
    profiles: Mapping[str, ServiceCapacity],
    since_checkpoint_s: Mapping[str, float] | None = None,
    jobs: Sequence[JobView] | None = None,
    bursts: Mapping[str, float] | None = None,
    protected_namespaces: Collection[str] = (),
    claimed: Collection[int] = (),
    tainting: Collection[str] = (),
    sharded: bool = False,
    forgotten: Collection[str] | Mapping[str, int] = (),
    unlent: Collection[int] = (),
) -> CapacityView:
    """The planner's view of a snapshot: idle GPUs per model, services with a profile, elastic training jobs.

    An idle GPU is free only where the services' and jobs' pods can be scheduled (`schedulable`: not on a node
    whose taints they do not tolerate, nor on one of `tainting`, the nodes this cycle's hotspot plan taints) and
    when this cycle's plan does not already send work there (`claimed`: GPU indices, a migration's targets). The GPUs
    a job or a service lets go count for another only there too: a reclaim counts a job's GPUs only on nodes the new
    replicas could be scheduled on (`JobView.reclaimable_by_model`), a loan a service's only where the grown workers
    could (`ServiceView.sole_by_model`); elsewhere the shrink freed nothing the other could use, and it stayed pending.

    `unlent`: GPU indices no job may grow onto, while the services may (the hot node the taint keeps open in a heat
    wave: `capacity_loop.claims`). Their idle ones stay in `free`, so a scale-up takes them and a reclaim counts them
    before it shrinks training (a service's pending replicas land there anyway); their healthy GPUs' models join
    `uncounted_models`: no job grows onto an idle GPU of those models this cycle, nor onto one a loan frees. `free` is
    per model, not per node, so that holds back every idle GPU of those models; in the heat wave that keeps a node
    open, every other node that takes GPU work is hot and tainted, its idle GPUs in no pool, so those are mostly the
    kept node's; not all of them where the pods reach other nodes (cordoned, tainted by others) through a key-less
    `Exists` toleration, which `schedulable` honours and the kept-open reading does not: those nodes' idle GPUs of
    the kept node's models are held back too for the heat wave.

    `sharded`: the snapshot is one shard's cut (`telemetry.shard.restrict`), which keeps a service none of whose
    replicas is placed in every shard; such a service is left out, or each shard would reclaim GPUs for its whole
    demand from its own jobs. A service with a replica placed in the shard is that shard's alone.

    A job with a protected worker (`Workload.protected`) or in one of `protected_namespaces` (the safety policy's)
    is `JobView.protected`: the guard would refuse its resize, so the planner must pick another job. A service
    with a protected pod, or in a protected namespace, is left out of `services` for the same reason (the guard
    refuses scaling it up as well as down); its GPUs still count as inference's.

    `forgotten`: the nodes the Kubernetes API still lists whose GPUs telemetry has forgotten (gone from it for
    `forget_vanished_after_s`: `ClusterSnapshot.forgotten_nodes`, node -> its GPUs). Their pods have no placement, so
    a service's replicas there read as pending, and a reclaim shrank training every cycle to make room for replicas
    that were running. While a node is forgotten, a service's replicas asked beyond those placed count as running
    there, as many as the forgotten GPUs hold, node by node (`dark_per_node` x the replicas of its pods' gpu_milli one
    GPU holds / gpus_per_replica: two half-GPU replicas on one dark GPU are two, two dark 1-GPU nodes hold no 2-GPU
    replica; `ServiceView.unseen`, `CapacityView.unseen`): no
    room is made for them, idle GPUs are still kept for them (they may be pending), and the asks beyond that bound
    are pending as ever (a reclaim makes room for them; the latency net steps from the count with them). A bound
    only: the whole service was held once, and any node forgotten, even one GPU of a node whose others report, held
    every service with a replica pending, an urgent scale-up and its idle GPUs (lent to training) with them. A
    service counted from its pods (`ServiceStatus.replicas_from_spec` False) cannot see its pods there at all: its
    count may miss any number of them up to that bound, and a scale to a count read so may add replicas or remove
    live ones (counted with the whole bound, 2 pods none of which ran there were scaled to 11). It is left out of
    `services` while any node is forgotten (`CapacityView.uncounted`), as a protected one is: neither scaled nor
    lent, nor room made for it, its GPUs still inference's, and the idle GPUs of the models it may use are lent to
    no job meanwhile (`CapacityView.uncounted_models`: it may need them). A service with every replica it asks for
    placed has none there.

    One pass over the workloads collects (group, GPU) pairs; the per-model counts are then one bincount."""
    codes, names, speed = _model_codes(snapshot.gpus)
    n_models = len(names)
    groups: dict[tuple[str, str], int] = {}  # ("inference" | "training", owner) -> group index
    first: list = []  # the first workload of each group (a job's bounds and priority)
    members: list[int] = []
    gpu_idx: list[int] = []
    gpu_grp: list[int] = []
    gpu_mil: list[int] = []
    milli: dict[int, int] = {}   # per group, the least gpu_milli of its pods (how many replicas one GPU may hold)
    placed_all: list[int] = []
    by_class = {WorkloadClass.INFERENCE: 0, WorkloadClass.TRAINING: 0, WorkloadClass.BATCH: 0}  # milli-GPUs
    trainers: list[tuple[int, float, float]] = []   # (group, checkpointed_at, started_at) of each training pod
    guarded: set[int] = set()   # groups with a protected workload (or one in a protected namespace)
    rules: set[NodeRules] = set()   # the node rules of the tide's pods (services', elastic jobs')
    for w in snapshot.workloads:
        placed = snapshot.placements.get(w.name, ())
        by_class[w.workload_class] += len(placed) * w.gpu_milli   # a shared GPU counts once, not once per pod
        placed_all.extend(placed)
        if w.workload_class is WorkloadClass.INFERENCE:
            key = ("inference", w.owner)
        elif w.workload_class is WorkloadClass.TRAINING and w.elastic_max > 0:
            key = ("training", w.owner or w.name)
        else:
            continue
        g = groups.get(key)
        if g is None:
            g = groups[key] = len(first)
            first.append(w)
            members.append(0)
        members[g] += 1
        milli[g] = min(milli.get(g, 1000), w.gpu_milli)
        rules.add(w.node_rules)
        if key[0] == "training":
            trainers.append((g, w.checkpointed_at, w.started_at))
        if w.protected or w.namespace in protected_namespaces:
            guarded.add(g)
        gpu_idx.extend(placed)
        gpu_grp.extend([g] * len(placed))
        gpu_mil.extend([w.gpu_milli] * len(placed))
    used = np.zeros(len(snapshot.gpus), dtype=bool)
    used[np.asarray(placed_all, dtype=np.int64)] = True
    used[np.asarray(list(claimed), dtype=np.int64)] = True
    healthy = snapshot.healthy   # neither lent nor counted
    takes = schedulable(snapshot, rules, tainting) & healthy   # where a GPU let go can take a tide pod
    used |= ~takes
    free_counts = np.bincount(codes[~used & healthy], minlength=n_models)
    free = {names[k]: int(free_counts[k]) for k in np.flatnonzero(free_counts)}
    cells = np.asarray(gpu_grp, dtype=np.int64) * n_models + codes[np.asarray(gpu_idx, dtype=np.int64)]
    shape = (len(first), n_models) if first else (0, 0)
    held = np.bincount(cells, minlength=len(first) * n_models).reshape(shape)
    # a job's GPUs a reclaim can hand to inference: not those on a node the new replicas cannot be scheduled on
    ours = np.rint(np.bincount(cells, weights=takes[np.asarray(gpu_idx, dtype=np.int64)],
                               minlength=len(first) * n_models)).astype(np.int64).reshape(shape)
    weighted, sole = _shares(len(snapshot.gpus), placed_all, gpu_grp, gpu_idx, gpu_mil, codes, len(first), n_models,
                             takes)
    empty: Mapping[str, int] = MappingProxyType({})

    def placed(name: str) -> int:
        return _placed_replicas(held, groups.get(("inference", name)), profiles[name])

    planned = [(name, st) for name, st in sorted(snapshot.services.items())
               # a protected service (a protected pod, or its namespace protected) is no tide's: the guard refuses to
               # scale it either way, so planning it would shrink training for a scale-up that never goes out
               if name in profiles and groups.get(("inference", name)) not in guarded
               and st.namespace not in protected_namespaces and not (sharded and ("inference", name) not in groups)]
    dark = dark_per_node(snapshot, forgotten)
    # counted from its pods, a service's count misses those on a forgotten node: no count to scale it to (`forgotten`)
    uncounted = tuple(name for name, st in planned if forgotten and not st.replicas_from_spec)
    planned = [(name, st) for name, st in planned if name not in uncounted]

    def unseen_of(name: str, st: ServiceStatus) -> int:
        """The replicas of `name` that may run unseen on the forgotten GPUs: its asks beyond those placed, at most
        what those GPUs hold (a fractional replica's pods share a GPU: 1000 // gpu_milli of them to one)."""
        g = groups.get(("inference", name))
        per_gpu = 1000 // m if g is not None and 0 < (m := milli[g]) < 1000 else 1
        gpr = max(profiles[name].gpus_per_replica, 1)
        room = sum(k * per_gpu // gpr for k in dark)   # node by node: a replica runs on one node
        return min(max(st.replicas - placed(name), 0), room)

    unseen = {name: n for name, st in planned if (n := unseen_of(name, st))}
    services = tuple(
        ServiceView(
            profile=profiles[name],
            demand_rps=st.demand_rps,
            # replicas that hold GPUs (warming ones included): a replica still pending for want of a GPU serves
            # nothing, and counting it would leave the planner content while training keeps the GPU it needs
            # (and those a forgotten node's GPUs may run unseen: `forgotten`)
            replicas=min(st.replicas, placed(name)) + unseen.get(name, 0),
            desired=st.replicas,
            unseen=unseen.get(name, 0),
            hpa_wants=st.hpa_wants,
            gpus_by_model=(_by_model(weighted[g], names) if (g := groups.get(("inference", name))) is not None
                           else empty),
            sole_by_model=_by_model(sole[g], names) if g is not None else empty,
            burst=float((bursts or {}).get(name, 0.0)),
            latency_pressure=st.p99_latency_s / st.slo_latency_s if st.slo_latency_s > 0 else 0.0,
        )
        for name, st in planned
    )
    if jobs is None:
        ages = since_checkpoint(snapshot.time, trainers, len(first))
        since = since_checkpoint_s or {}
        built = []
        for (kind, name), g in sorted(groups.items()):
            if kind != "training":
                continue
            w0, counts = first[g], held[g]
            n_placed = int(counts.sum())
            built.append(
                JobView(
                    name=name,
                    workers=members[g],
                    elastic_min=w0.elastic_min,
                    elastic_max=w0.elastic_max,
                    gpus_per_worker=max(w0.gpus, 1),
                    priority=w0.priority,
                    since_checkpoint_s=float(since.get(name, ages[g])),
                    speed=float(counts @ speed / n_placed) if n_placed else 1.0,
                    models=w0.allowed_models,
                    gpus_by_model=_by_model(counts, names),
                    reclaimable_by_model=_by_model(ours[g], names),
                    restarts_on_resize=w0.restarts_on_resize,
                    protected=g in guarded,
                )
            )
        # a suspended job has no pods but still exists: list it, or the GPUs it gave up could never come back
        built += [JobView(name=j.name, workers=0, elastic_min=j.elastic_min, elastic_max=j.elastic_max,
                          gpus_per_worker=max(j.gpus_per_worker, 1), priority=j.priority, models=j.allowed_models,
                          protected=j.namespace in protected_namespaces)
                  for j in snapshot.suspended_jobs or () if j.elastic_max and ("training", j.name) not in groups]
        jobs = built
    return CapacityView(
        time=snapshot.time,
        free=MappingProxyType(free),
        services=services,
        jobs=tuple(jobs),
        inference_gpus=round(by_class[WorkloadClass.INFERENCE] / 1000),
        training_gpus=round(by_class[WorkloadClass.TRAINING] / 1000),
        total_gpus=int(healthy.sum()),
        unseen=MappingProxyType(unseen),
        uncounted=uncounted,
        uncounted_models=(None if any(profiles[n].models is None for n in uncounted)
                          else frozenset().union(*(profiles[n].models or () for n in uncounted))
                          | _models_of(codes, names, unlent, healthy)),
    )
