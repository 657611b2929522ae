"""The soak's moving parts: a fault-injectable exporter, controller replicas, and the Kubernetes mirror.

* `FaultyBackend` wraps the simulator's exporter backend: `nan_gpus` makes those GPUs' readings NaN (the
  collector drops non-finite samples, so their series vanish, as with a broken sensor).
* `Exporter` serves it on a fixed loopback port; `stop()`/`start()` is an exporter restart, `failing = True`
  makes every scrape answer HTTP 500 (a telemetry gap) while the process stays up.
* `Replica` is one controller process: its own `Reconciler`, metrics registry and metrics endpoint (scraped by
  Prometheus, so a dead replica shows as `up == 0`), and its own leader elector. `kill()` drops it without
  releasing the lease, as a crash would; a restart is a new `Replica` with a new identity.
* `CheckedActuator` sits between a replica's reconciler and the world: it takes the simulator's lock, records
  the staleness of every snapshot it is handed, snapshots the workload state before and after, and feeds the
  invariant checkers (`soak_checks`).
* `KubeMirror` (when the in-test Kubernetes API is available) sends every migrate/taint/power-cap through the
  real `KubernetesActuator` first; only what the API accepted is applied to the simulator, so 429/409/500
  answers must leave the simulated workloads untouched. The in-test API keeps what an API server would drop
  (`KubeMirror.settle`): its watch history (nothing in the soak watches) and the Events gputide posts.
* `sim_node_meta` plays the Kubernetes node list for a Prometheus source (`node_overrides`): the simulated nodes'
  taints, power caps and hot-taint expiry, the expiry moved onto the source's clock.
* `TaintWatch` checks that a node kept hot for longer than the taint's TTL kept its hot taint without a gap.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry

from balancer.actions import HOT_TAINT_TTL_S
from balancer.actuate.base import ActionResult, Outcome
from balancer.actuate.sim import SimActuator
from balancer.app.soak_checks import BudgetCheck, Check, StaleGuard, WorkloadLedger
from balancer.loop import CycleReport, Reconciler
from balancer.metrics import ControllerMetrics
from balancer.model import Action, ClusterSnapshot, Migrate, NodeMeta, SetPowerLimit, TaintNode, WorkloadClass
from balancer.sim import SimCluster
from exporters.backends.sim import SimBackend
from exporters.collector import GpuCollector
from exporters.server import RunningServer, metrics_app, serve, serve_app


class FaultyBackend:
    """SimBackend with a NaN-burst switch: GPUs in `nan_gpus` (fleet indices) read NaN (XID still reported)."""

    def __init__(self, inner: SimBackend) -> None:
        self.inner = inner
        self.nan_gpus: frozenset[int] = frozenset()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def read(self):
        readings = self.inner.read()
        if not self.nan_gpus:
            return readings
        mask = np.zeros(len(readings.identity), dtype=bool)
        mask[sorted(self.nan_gpus)] = True
        values = {k: (v if k == "DCGM_FI_DEV_XID_ERRORS" else np.where(mask, np.nan, v))
                  for k, v in readings.values.items()}
        return dataclasses.replace(readings, values=values)


class Exporter:
    """The exporter process: fixed port, can be stopped, started again, or made to answer 500."""

    def __init__(self, backend: FaultyBackend, port: int = 0) -> None:
        self.collector = GpuCollector(backend)
        self.failing = False
        self._app = metrics_app(self.collector)
        self._server: RunningServer | None = None
        self.port = port
        self.start()

    def _wsgi(self, environ, start_response):
        if self.failing:
            start_response("500 Internal Server Error", [("Content-Type", "text/plain")])
            return [b"injected fault: exporter cannot read the GPUs\n"]
        return self._app(environ, start_response)

    def start(self) -> None:
        self._server = serve_app(self._wsgi, port=self.port, name="soak-exporter")
        self.port = self._server.port

    def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    @property
    def running(self) -> bool:
        return self._server is not None


@dataclass
class ActionLog:
    """Every action any replica attempted, with what happened (summary JSON / audit)."""

    outcomes: dict[str, int] = field(default_factory=dict)
    kube_outcomes: dict[str, int] = field(default_factory=dict)
    applied: int = 0

    def count(self, table: dict[str, int], key: str) -> None:
        table[key] = table.get(key, 0) + 1


class KubeMirror:
    """Send actions through `KubernetesActuator` against the in-test API before the simulator sees them."""

    def __init__(self, kube: Any, actuator: Any, sim: SimCluster) -> None:
        self.kube, self.actuator, self.sim = kube, actuator, sim
        for node in sim.fleet.nodes:
            kube.add({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node.name}})

    def settle(self, events_kept: int = 100, history_kept: int = 100) -> None:
        """Drop what the in-test API would keep for ever and an API server would not: Events beyond the newest
        `events_kept` (the API server deletes them after its --event-ttl, an hour by default) and the watch history
        beyond `history_kept` changes (etcd compacts it; nothing in the soak watches). Kept whole, with both versions
        of every changed object, it was 1.9 of the short soak's 5.7 MiB of growth per simulated day: the API server's
        memory, not the controller's."""
        kube = self.kube
        with kube._lock:
            kube.history_limit = history_kept
            dropped = kube._history[:max(len(kube._history) - history_kept, 0)]
            if dropped:   # as the API's own trimming: a watch from before what is left answers 410 Expired
                kube._expired_below = dropped[-1].rv
                del kube._history[:len(dropped)]
            events = sorted((int(o["metadata"]["resourceVersion"]), key) for key, o in kube.objects.items()
                            if key[0] == "events")
            for _, key in events[:max(len(events) - events_kept, 0)]:
                del kube.objects[key]

    def ensure_pod(self, workload: str, node: str) -> None:
        ns, _, pod = workload.rpartition("/")
        ns = ns or "default"
        current = self.kube.get("pods", pod, ns)
        if current is not None and (current.get("spec") or {}).get("nodeName") == node:
            return
        if current is not None:
            with self.kube._lock:
                self.kube.objects.pop(("pods", ns, pod), None)
        w = self.sim.workloads[workload]
        owner = w.owner or pod
        container = {"name": "main", "image": "registry.local/app"}
        kind = ("apps/v1", "ReplicaSet") if w.workload_class is WorkloadClass.INFERENCE else ("batch/v1", "Job")
        if kind[1] == "Job" and self.kube.get("jobs", owner, ns) is None:   # a migration reads its Job's limits
            self.kube.add({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": owner, "namespace": ns},
                           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}})
        controller = {"apiVersion": kind[0], "kind": kind[1], "name": owner, "uid": f"uid-{ns}-{owner}",
                      "controller": True}   # what recreates it once evicted: gputide moves no bare pod
        self.kube.add({"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": pod, "namespace": ns, "labels": {"app": owner},
                                    "ownerReferences": [controller]},
                       "spec": {"nodeName": node, "containers": [container]}})

    def apply(self, action: Action, snapshot: ClusterSnapshot) -> ActionResult | None:
        """The API's verdict, or None for actions the mirror does not model (scale: simulator only)."""
        if not isinstance(action, Migrate | SetPowerLimit | TaintNode):
            return None
        if isinstance(action, Migrate):
            placed = self.sim.placements.get(action.workload)
            if placed is None:
                return ActionResult(action, Outcome.FAILED, "workload is not running")
            self.ensure_pod(action.workload, self.sim.fleet.gpus[placed[0]].node)
        return self.actuator.apply(action, snapshot)


class CheckedActuator:
    """The replica's actuator: lock, checks, optional Kubernetes mirror, then the simulator."""

    name = "sim"

    def __init__(self, sim_actuator: SimActuator, lock: threading.Lock, *, ledger: WorkloadLedger,
                 stale: StaleGuard, budget: BudgetCheck, log: ActionLog, cycle: Callable[[], int],
                 mirror: KubeMirror | None = None, taints: TaintWatch | None = None,
                 reconcile: Callable[[], int] | None = None) -> None:
        self.inner, self.lock, self.mirror, self.taints = sim_actuator, lock, mirror, taints
        self.reconcile = reconcile or cycle   # the budgets are per reconcile
        self.ledger, self.stale, self.budget, self.log, self.cycle = ledger, stale, budget, log, cycle

    def apply(self, action: Action, snapshot: ClusterSnapshot) -> ActionResult:
        cycle = self.cycle()
        self.stale.on_action(cycle, action, snapshot)
        with self.lock:
            before = self.ledger.before_action()
            try:
                verdict = self.mirror.apply(action, snapshot) if self.mirror else None
                if verdict is not None:
                    self.log.count(self.log.kube_outcomes, f"{action.kind}:{verdict.outcome}")
                if verdict is not None and verdict.outcome != Outcome.APPLIED:
                    result = verdict
                else:
                    result = self.inner.apply(action, snapshot)
            finally:
                self.ledger.after_action(cycle, action, before)
            if result.outcome == Outcome.APPLIED:
                self.log.applied += 1
                if not (isinstance(action, TaintNode) and action.renew):   # outside the budgets, as the guard keeps it
                    self.budget.on_applied(self.reconcile(), self.inner.sim.time, action, snapshot)
        kind = "taint_node(renew)" if isinstance(action, TaintNode) and action.renew else action.kind
        self.log.count(self.log.outcomes, f"{kind}:{result.outcome}")
        return result

    def recover(self) -> list[str]:
        with self.lock:
            return self._noted(self.inner.recover())

    def housekeeping(self) -> list[str]:
        """The loop's per-cycle hook: the simulator's expired hot taints are removed (`SimActuator.housekeeping`)."""
        with self.lock:
            notes = self.inner.housekeeping()
            if self.mirror is not None:   # the API's copy of the taint expires too (its notes repeat the simulator's)
                self.mirror.actuator.housekeeping()
            return self._noted(notes)

    def _noted(self, notes: list[str]) -> list[str]:
        if self.taints is not None:
            self.taints.expired(notes)
        return notes


def sim_node_meta(sim: SimCluster, lock: threading.Lock,
                  clock: Callable[[], float]) -> Callable[[], dict[str, NodeMeta]]:
    """`node_overrides` for a Prometheus source reading a simulated fleet: what the Kubernetes node list would say
    (`SimCluster.node_meta`), each hot-taint expiry moved from the simulator's clock onto `clock` (the source's, which
    stamps the snapshot) by the time left: the planner compares `Node.hot_until` with `snapshot.time`."""

    def read() -> dict[str, NodeMeta]:
        with lock:
            meta, now = sim.node_meta(), clock()
            left = now - sim.time
        return {name: dataclasses.replace(m, hot_until=m.hot_until + left) if m.hot_until is not None else m
                for name, m in meta.items()}

    return read


class TaintWatch:
    """A node tainted hot for longer than the TTL keeps its taint without a gap: the leader renews it. A taint that
    expired (`housekeeping`) right after a normal leader cycle, and is written again by the next reconcile (the node
    was still hot), is a gap: that cycle had the taint within `RENEW_WITHIN_S` of its expiry and did not renew it. An
    expiry after a dead, standby or fail-static cycle is the TTL doing its job (a controller that cannot act lets
    the taint lapse). Checked: each taint that outlived the TTL (so was renewed at least once)."""

    def __init__(self, sim: SimCluster) -> None:
        self.sim = sim
        self.check = Check("hot taint renewed without a gap",
                           f"a node tainted for longer than the TTL ({HOT_TAINT_TTL_S:.0f} s) is never untainted "
                           "by expiry and tainted again while a leader was acting")
        self._since: dict[str, float] = {}      # tainted node -> since when (simulated)
        self._lapsed: dict[str, int] = {}       # node whose taint expired after a normal leader cycle -> reconcile
        self._reconcile, self._led = 0, False   # the last reconcile looked at; whether a leader ran it normally
        self.longest = 0.0

    def expired(self, notes: list[str]) -> None:
        for note in notes:
            if note.endswith(": hot taint expired") and self._led:
                self._lapsed[note.split(":")[0]] = self._reconcile + 1

    def after_reconcile(self, reconcile: int, led: bool, cycle: int) -> None:
        now = self.sim.time
        tainted = {n.name for n in self.sim.fleet.nodes if self.sim.has_taint(n.name)}
        for node in sorted(tainted & set(self._lapsed)):
            self.check.breach(cycle, f"{node}: hot taint expired (reconcile {self._lapsed[node]}) after a normal "
                                     "leader cycle and was written again: the node was still hot, not renewed")
        self._lapsed = {n: r for n, r in self._lapsed.items() if n not in tainted and r >= reconcile}
        self._reconcile, self._led = reconcile, led
        for node in set(self._since) - tainted:
            self._record(self._since.pop(node), now)
        for node in tainted:
            self._since.setdefault(node, now)

    def finish(self) -> None:
        for since in self._since.values():
            self._record(since, self.sim.time)
        self._since = {}
        self.check.detail = f"longest hot taint {self.longest / 60:.0f} min"

    def _record(self, since: float, until: float) -> None:
        self.longest = max(self.longest, until - since)
        self.check.checked += until - since > HOT_TAINT_TTL_S


class LeaseAdapter:
    """`LeaseLeaderElector` (Kubernetes) behind the loop's `try_acquire(now)` protocol."""

    def __init__(self, elector: Any) -> None:
        self.elector = elector

    def try_acquire(self, now: float) -> bool:
        return bool(self.elector.try_acquire_or_renew())

    def release(self) -> None:
        self.elector.release()

    # the safety ledger rides on the Lease (`balancer.ledger_handover`), as under `gputide run`: without these the
    # soak's failovers handed no cooldowns or evictions on, and a new leader's budget started from nothing
    def load_state(self) -> str | None:
        return self.elector.load_state()

    def save_state(self, text: str) -> int:
        return self.elector.save_state(text)


@dataclass
class Replica:
    """One controller process."""

    identity: str
    port: int
    reconciler: Reconciler
    actuator: CheckedActuator
    http: RunningServer | None
    last: CycleReport | None = None
    alive: bool = True

    @classmethod
    def start(cls, identity: str, port: int, build: Callable[[ControllerMetrics, CheckedActuator], Reconciler],
              actuator: CheckedActuator) -> Replica:
        metrics = ControllerMetrics(CollectorRegistry())
        http = serve(metrics.registry, port=port)
        return cls(identity, http.port, build(metrics, actuator), actuator, http)

    def kill(self) -> None:
        """The process dies: no lease release, its metrics endpoint goes away."""
        self.alive = False
        if self.http is not None:
            self.http.close()
            self.http = None

    @property
    def is_leader(self) -> bool:
        return self.alive and self.last is not None and self.last.status != "standby"

