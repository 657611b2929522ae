"""The soak: days of simulated fleet life through a real Prometheus, with a fault every few simulated hours.

Everything on the production path runs for real except the cluster: the simulated fleet is published by the
exporter (sim backend) on loopback, a real Prometheus scrapes it and the controllers' metrics endpoints and
evaluates rules/ (alerts with `for: 0s`), and two controller replicas read through `PrometheusTelemetrySource`,
elect a leader on a Lease (the in-test Kubernetes API when the source checkout has it, an in-memory Lease
otherwise) and act on the simulator, mirrored through `KubernetesActuator` against that API.

Simulated time runs `minutes_per_cycle` per cycle, in as many controller intervals as keep each one shorter than
the hot taint's renewal window (`RENEW_WITHIN_S`, half its TTL; 3 of 6.7 min at 20 min per cycle), so a node that
stays hot keeps its taint as on a cluster: each interval advances the simulator, waits until Prometheus holds a
scrape taken after the advance (one scrape and one rule evaluation) and runs every live replica's `run_once()`;
the cycle then polls the alerts. The simulator plays the Kubernetes node list (`sim_node_meta`: taints and their
expiry, moved onto the wall clock that stamps the Prometheus snapshot, whose sample ages and vanished-GPU timers
must stay on Prometheus's clock). Faults (see `soak_faults`) cycle through their classes every
`fault_every_hours`; the invariants (see `soak_checks`) are checked throughout and printed as one table, also
written with a summary to OUT/soak-summary.json and OUT/soak-invariants.md.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import math
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from balancer import fleet as fleet_mod
from balancer.actuate.sim import ControllerCrash, SimActuator
from balancer.app.soak_checks import (
    BudgetCheck,
    Check,
    MemoryTrend,
    StaleGuard,
    WorkloadLedger,
    markdown_table,
)
from balancer.app.soak_faults import (
    AlertTracker,
    ControllerRestart,
    Fault,
    FaultRecord,
    busiest,
    fault_classes,
)
from balancer.app.soak_harness import (
    ActionLog,
    CheckedActuator,
    Exporter,
    FaultyBackend,
    KubeMirror,
    LeaseAdapter,
    Replica,
    TaintWatch,
    sim_node_meta,
)
from balancer.config import BalancerPolicy
from balancer.loop import InMemoryLeaderElector, InMemoryLease, JsonlAudit, Reconciler
from balancer.plan.planner import RENEW_WITHIN_S
from balancer.sim import SimCluster, default_mix
from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource
from balancer.telemetry.promserver import (
    PrometheusServer,
    PrometheusServerError,
    Target,
    default_rule_files,
    free_port,
    parse_duration,
)
from exporters.backends.sim import SimBackend

FAKE_KUBE = Path(__file__).resolve().parents[2] / "tests" / "k8s" / "fakeapi.py"
FRESH_WAIT_S = 3.0   # the most a reconcile waits for a scrape taken after the simulator moved (`Soak._wait_fresh`)
# The controller refuses readings older than its scrape interval and this. With nothing stale a reading is up to the
# wait above (it reads anyway once that is over), a scrape interval and a rule evaluation old, plus their durations
# and the other replica's reconcile before it, which do not shrink with the short soak's 500 ms scrapes: on 2 loaded
# cores Prometheus served samples 2-4 s old, past the 2 s (4 scrape intervals) the source allows by default, and the
# controller held still for stale telemetry with nothing stale (one run lost its mid-migration restart so). The live
# demo leaves 30 s, as `gputide run --stale-after` does; the soak stays well inside its telemetry faults' windows: a
# 2-cycle fault is 6 reconciles, 18 s of waits were Prometheus to keep serving the series it failed to scrape, so
# even then the window's later reconciles would hold for stale telemetry (Prometheus drops them at the failed
# scrape: the controller holds for missing telemetry from the next reconcile on, whatever this margin)
STALE_MARGIN_S = 10.0


def reconciles_per_cycle(minutes_per_cycle: float) -> int:
    """Controller intervals per cycle: each one well inside the hot taint's renewal window."""
    return max(1, math.ceil(minutes_per_cycle * 60.0 / (0.9 * RENEW_WITHIN_S)))


def telemetry_options(url: str, scrape_interval: str) -> PrometheusOptions:
    """How each replica reads the soak's Prometheus: readings refused past the scrape interval + `STALE_MARGIN_S`."""
    interval = parse_duration(scrape_interval)
    return PrometheusOptions(url=url, scrape_interval_s=interval, stale_after_s=interval + STALE_MARGIN_S, retries=1,
                             backoff_s=0.1, timeout_s=3.0)


@dataclass(frozen=True)
class SoakConfig:
    days: float = 7.0
    gpus: int = 512
    seed: int = 0
    fault_every_hours: float = 4.0
    minutes_per_cycle: float = 20.0
    scrape_interval: str = "1s"
    short: bool = False
    kube: bool = True                 # use the in-test Kubernetes API when the source checkout has it
    tail_cycles: int = 4              # quiet cycles at the end so the last fault's alerts can clear

    @classmethod
    def short_run(cls, seed: int = 0) -> SoakConfig:
        return cls(days=1.0, gpus=128, seed=seed, fault_every_hours=2.0, minutes_per_cycle=20.0,
                   scrape_interval="500ms", short=True)


def load_fake_kube() -> Any | None:
    """tests/k8s/fakeapi.py by path (source checkouts only); None when it is not there."""
    if not FAKE_KUBE.exists():
        return None
    spec = importlib.util.spec_from_file_location("gputide_soak_fakeapi", FAKE_KUBE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.FakeKube


class Soak:
    def __init__(self, cfg: SoakConfig, out: Path, say: Callable[[str], None] = print) -> None:
        self.cfg, self.out, self.say = cfg, out, say
        self.cycle = 0
        self.rng = np.random.default_rng(cfg.seed)
        self.policy = BalancerPolicy()
        self.cycle_s = cfg.minutes_per_cycle * 60.0
        self.steps = reconciles_per_cycle(cfg.minutes_per_cycle)
        self.reconciles = 0
        fleet = fleet_mod.scaled_fleet(cfg.gpus, name=f"soak-{cfg.gpus}")
        self.sim = SimCluster(fleet, seed=cfg.seed, step_s=60.0, start_time=time.time())
        default_mix(self.sim, inference_share=0.45, training_share=0.45)
        for _ in range(90):
            self.sim.step()
        self.lock = threading.Lock()
        self.backend = FaultyBackend(SimBackend(self.sim, lock=self.lock))
        self.ledger = WorkloadLedger(self.sim)
        self.stale = StaleGuard(self.policy.safety)
        self.budget = BudgetCheck(self.policy.safety)
        self.taints = TaintWatch(self.sim)
        # settled RSS (soak_checks.settled_rss_mib), harness included: the short soak measures 4-5 MiB per simulated
        # day with 3 reconciles per cycle, in steps of about 1 MiB around faults (the 7-day run was flat after warm-up)
        self.memory = MemoryTrend(max_mib_per_day=8.0)
        self.leaders = Check("one leader at a time", "at most one replica acts in any cycle")
        self.alerts = AlertTracker()
        self.log = ActionLog()
        self.journal: dict[str, dict] = {}
        self.require_mid_migration = True
        self.holds: dict[str, int] = {}
        self.kube = None
        self.mirror = None
        fake = load_fake_kube() if cfg.kube else None
        if fake is not None:
            from balancer.actuate.k8s_actuator import KubernetesActuator

            self.kube = fake()
            self.mirror = KubeMirror(self.kube, KubernetesActuator(
                self.kube.client(), max_retries=2, sleep=lambda s: None, clock=lambda: self.sim.time), self.sim)
        self.kube_requests = 0
        self.replicas: list[Replica] = []
        self._restarts = 0

    # ---- parts ------------------------------------------------------------------------------------------------
    def _elector(self, identity: str):
        duration = int(2.5 * self.cycle_s)
        if self.kube is None:
            if not hasattr(self, "_lease"):
                self._lease = InMemoryLease(duration_s=duration)
            return InMemoryLeaderElector(self._lease, identity)
        from balancer.actuate.k8s_leader import LeaseLeaderElector

        return LeaseAdapter(LeaseLeaderElector(self.kube.client(), "gputide-controller", "gputide-system", identity,
                                               lease_duration_s=duration, renew_deadline_s=duration * 2 / 3,
                                               clock=lambda: self.sim.time, sleep=lambda s: None))

    def _replica(self, identity: str, port: int) -> Replica:
        actuator = CheckedActuator(SimActuator(self.sim, journal=self.journal), self.lock, ledger=self.ledger,
                                   stale=self.stale, budget=self.budget, log=self.log, cycle=lambda: self.cycle,
                                   mirror=self.mirror, taints=self.taints, reconcile=lambda: self.reconciles)
        elector = self._elector(identity)

        def build(metrics, act) -> Reconciler:
            source = PrometheusTelemetrySource(
                telemetry_options(self.prom.url, self.cfg.scrape_interval), fleet=self.sim.fleet,
                workload_overrides=self._owners,
                node_overrides=sim_node_meta(self.sim, self.lock, time.time))
            return Reconciler(source=source, actuator=act, policy=self.policy, metrics=metrics, audit=self.audit,
                              clock=lambda: self.sim.time, elector=elector)

        return Replica.start(identity, port, build, actuator)

    def _owners(self) -> dict:
        # Owner, priority and movability come from the Kubernetes API (ownerReferences) in production; the
        # metrics join table only names the pod. The simulator plays that API here.
        with self.lock:
            return dict(self.sim.workloads)

    def restart_replica(self, identity: str) -> None:
        """The Deployment brings a dead replica back: same port, a new pod name (identity)."""
        k = next(i for i, r in enumerate(self.replicas) if r.identity == identity)
        self._restarts += 1
        base = identity.split("~")[0]
        self.replicas[k] = self._replica(f"{base}~{self._restarts}", self.replicas[k].port)

    def leader(self, required: bool = True) -> Replica | None:
        found = next((r for r in self.replicas if r.is_leader), None)
        if found is None and required:
            return next(r for r in self.replicas if r.alive)
        return found

    def busy_node(self, air_only: bool) -> str:
        busy_elsewhere = {n for rec in self.alerts.records if rec.end_cycle is None
                          for n in (rec.notes.get("node"), rec.notes.get("cooling_node")) if n}
        online = {n.name for n in self.sim.fleet.nodes} - {self.sim.fleet.gpus[i].node
                                                           for i in np.flatnonzero(~self.sim.online)}
        nodes = [n.name for n in self.sim.fleet.nodes if n.gpu_count and n.name in online
                 and n.name not in busy_elsewhere and (n.cooling == "air" or not air_only)]
        if not nodes and air_only:
            return self.busy_node(air_only=False)
        return busiest(self.sim, nodes)

    # ---- one cycle -----------------------------------------------------------------------------------------------
    def _wait_fresh(self, since: float, cap_s: float) -> bool:
        """Until Prometheus holds a GPU sample scraped after `since` (True), at most `cap_s` wall seconds. While no
        fresh sample can come it returns False at once: Prometheus stopped (the controller's queries are refused),
        or the exporter down or answering 500 once Prometheus has dropped the GPU series (a failed scrape marks
        them stale and the rules record none): the controller then sees the telemetry gone, as it would after the
        cap, without waiting it out (3 s for each such reconcile, about a seventh of the short soak's wall time)."""
        deadline = time.monotonic() + cap_s
        while time.monotonic() < deadline and self.prom.running:
            try:
                r = self.prom.query("min(gpu:last_sample:timestamp_seconds)")
                if r and float(r[0]["value"][1]) >= since:
                    return True
                if not r and (self.exporter.failing or not self.exporter.running):
                    return False
            except PrometheusServerError:
                pass
            time.sleep(0.05)
        return False

    def _reconcile(self, active: tuple[Fault, FaultRecord] | None) -> None:
        acting = 0
        for replica in list(self.replicas):
            if not replica.alive:
                continue
            try:
                replica.last = replica.reconciler.run_once()
            except ControllerCrash:
                self.say(f"  [cycle {self.cycle}] {replica.identity} crashed between reserve and evict "
                         f"({len(self.journal)} journalled migration(s))")
                if active and isinstance(active[0], ControllerRestart):
                    active[0].on_crash(self, active[1], replica)
                else:
                    replica.kill()
                continue
            if replica.last.status == "fail_static":
                self.holds[replica.last.reason] = self.holds.get(replica.last.reason, 0) + 1
            acting += replica.last.status != "standby"
        self.leaders.checked += 1
        if acting > 1:
            self.leaders.breach(self.cycle, f"{acting} replicas acted")
        led = any(r.alive and r.last is not None and r.last.status == "ok" for r in self.replicas)
        self.taints.after_reconcile(self.reconciles, led, self.cycle)
        self.reconciles += 1

    def run(self) -> dict[str, Any]:
        cfg = self.cfg
        n_cycles = int(round(cfg.days * 1440 / cfg.minutes_per_cycle)) + cfg.tail_cycles
        classes = fault_classes(self.kube is not None)
        every = max(3, int(round(cfg.fault_every_hours * 60 / cfg.minutes_per_cycle)))
        if cfg.short:
            every = max(3, min(every, (n_cycles - cfg.tail_cycles - 2) // len(classes)))
        first = max(2, every // 2)
        self.exporter = Exporter(self.backend)
        ports = [free_port(), free_port()]
        self.prom = PrometheusServer(
            [Target("gputide-exporter", f"127.0.0.1:{self.exporter.port}")]
            + [Target("gputide-controller", f"127.0.0.1:{p}") for p in ports],
            rule_files=default_rule_files(), scrape_interval=cfg.scrape_interval, alert_for="0s")
        self.out.mkdir(parents=True, exist_ok=True)
        self.audit = JsonlAudit(self.out / "soak-audit.jsonl")
        wall0 = time.time()
        self.prom.start()
        try:
            self.prom.wait_for("count(gpu:last_sample:timestamp_seconds)",
                               lambda r: bool(r) and float(r[0]["value"][1]) == self.sim.n_gpus, timeout=60)
            self.replicas = [self._replica("gputide-a", ports[0]), self._replica("gputide-b", ports[1])]
            self.say(f"soak: {cfg.days:g} simulated day(s), {self.sim.n_gpus} GPUs on {len(self.sim.fleet.nodes)} "
                     f"nodes, {n_cycles} cycles of {cfg.minutes_per_cycle:g} min, a fault every {every} cycles "
                     f"({len(classes)} classes, Kubernetes API: {'in-test' if self.kube else 'not available'}), "
                     f"Prometheus {self.prom.url} scraping every {cfg.scrape_interval}")
            self._loop(n_cycles, classes, every, first)
        finally:
            self._close()
        return self._summary(time.time() - wall0, n_cycles, every)

    def _loop(self, n_cycles: int, classes: list[Fault], every: int, first: int) -> None:
        """The cycles, then the wait for fired alerts to resolve (`AlertTracker.drain`). What is alive before them
        (the harness, the replicas, the imported modules, pytest's own: some 200k objects) is kept out of the
        automatic collections' sight meanwhile (gc.freeze; each memory sample unfreezes it for its full collection,
        `_sample_memory`): a collection of the oldest generation walked all of it, 0.25 s with the GIL held, in the
        exporter's and metrics endpoints' threads too (late scrapes)."""
        gc.collect()
        gc.freeze()
        try:
            self._cycles(n_cycles, classes, every, first)
            self.alerts.drain(self, n_cycles)
        finally:
            gc.unfreeze()

    def _sample_memory(self) -> None:
        """One memory sample; its full collection walks every object, the frozen ones too, as without the freeze."""
        gc.unfreeze()
        try:
            self.memory.sample((self.sim.time - self.sim.start_time) / 86400)
        finally:
            gc.freeze()

    def _cycles(self, n_cycles: int, classes: list[Fault], every: int, first: int) -> None:
        active: tuple[Fault, FaultRecord] | None = None
        k = 0
        last_fault_start = n_cycles - self.cfg.tail_cycles - 2
        for cycle in range(n_cycles):
            self.cycle = cycle
            if active and cycle >= active[1].begin_cycle + min(active[0].cycles, every - 2):
                active[0].end(self, active[1])
                active[1].end_cycle = cycle
                active = None
            if active is None and cycle >= first and (cycle - first) % every == 0 and cycle <= last_fault_start:
                fault = classes[k % len(classes)]
                k += 1
                rec = FaultRecord(fault.name, cycle, expected=fault.expected, began_at=self.alerts.clock())
                self.alerts.records.append(rec)
                fault.begin(self, rec)
                active = (fault, rec)
                self.say(f"  [cycle {cycle}] fault: {fault.name} {rec.notes or ''}".rstrip())
            for step in range(self.steps):
                with self.lock:
                    self.sim.advance_to(self.sim.time + self.cycle_s / self.steps)
                if step == 0:
                    self.ledger.after_cycle(cycle)
                self._wait_fresh(time.time(), cap_s=FRESH_WAIT_S)
                self._reconcile(active)
            if active and hasattr(active[0], "during"):
                active[0].during(self, active[1])
            self.alerts.update(self, cycle)
            if self.kube is not None:
                self.kube_requests += len(self.kube.requests)
                self.kube.requests.clear()
                self.mirror.settle()
            self._sample_memory()
            if cycle % 50 == 0:
                self.say(f"  [cycle {cycle}/{n_cycles}] day {(self.sim.time - self.sim.start_time) / 86400:.2f}, "
                         f"{self.log.applied} actions applied, RSS {self.memory.samples[-1][1]:.0f} MiB")
        if active:
            active[0].end(self, active[1])
            active[1].end_cycle = n_cycles

    def _close(self) -> None:
        for r in self.replicas:
            r.kill()
        self.exporter.stop()
        self.prom.stop()
        self.prom.cleanup()
        self.audit.close()
        if self.kube is not None:
            self.kube.close()

    # ---- report --------------------------------------------------------------------------------------------
    def _summary(self, wall_s: float, n_cycles: int, every: int) -> dict[str, Any]:
        self.memory.finish(n_cycles)
        self.ledger.finish(n_cycles, self.journal)
        self.taints.finish()
        faults = Check("alerts fire and resolve per fault class",
                       "each fault's alert fires while it lasts and clears after; its class check passes")
        for rec in self.alerts.records:
            faults.checked += 1
            if not rec.ok:
                faults.breach(rec.begin_cycle, f"{rec.fault}: fired {rec.fired_cycle}, resolved "
                                               f"{rec.resolved_cycle}, notes {rec.notes}")
        by_class: dict[str, dict[str, Any]] = {}
        for rec in self.alerts.records:
            row = by_class.setdefault(rec.fault, {"fault": rec.fault, "injected": 0, "alerts": "/".join(rec.expected)
                                                  or "(none in rules)", "fired": 0, "resolved": 0, "ok": 0})
            row["injected"] += 1
            row["fired"] += rec.fired_cycle is not None
            row["resolved"] += rec.resolved_cycle is not None
            row["ok"] += rec.ok
        faults.detail = ", ".join(f"{r['fault']} {r['ok']}/{r['injected']}" for r in by_class.values())
        checks = [self.ledger.check, self.stale.check, self.budget.check, self.memory.check, faults, self.leaders,
                  self.taints.check]
        rows = [c.row() for c in checks]
        return {"config": asdict(self.cfg), "wall_s": round(wall_s, 1), "cycles": n_cycles,
                "fault_every_cycles": every, "gpus": self.sim.n_gpus, "simulated_days": round(
                    (self.sim.time - self.sim.start_time) / 86400, 3), "all_held": all(r["held"] for r in rows),
                "invariants": rows, "fault_classes": list(by_class.values()),
                "faults": [r.row() for r in self.alerts.records], "actions": self.log.outcomes,
                "kubernetes_outcomes": self.log.kube_outcomes, "kubernetes_requests": self.kube_requests,
                "fail_static_cycles": self.holds, "alerts_seen": self.alerts.seen,
                "memory_mib": [round(m, 1) for _, m in self.memory.samples[:: max(1, len(self.memory.samples) // 50)]]}


def fault_table(summary: dict[str, Any]) -> str:
    lines = ["| fault class | injected | expected alert | fired | resolved | ok |", "|---|---|---|---|---|---|"]
    for r in summary["fault_classes"]:
        lines.append(f"| {r['fault']} | {r['injected']} | {r['alerts']} | {r['fired']} | {r['resolved']} | "
                     f"{r['ok']}/{r['injected']} |")
    return "\n".join(lines)


def run_soak(cfg: SoakConfig, out: Path, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the soak; write OUT/soak-summary.json and OUT/soak-invariants.md; return the summary."""
    summary = Soak(cfg, out, say).run()
    text = (f"## Soak: {summary['simulated_days']:g} simulated days, {summary['gpus']} GPUs, {summary['cycles']} "
            f"cycles in {summary['wall_s']:.0f} s wall\n\n{markdown_table(summary['invariants'])}\n\n"
            f"{fault_table(summary)}\n")
    (out / "soak-invariants.md").write_text(text)
    (out / "soak-summary.json").write_text(json.dumps(summary, indent=2, default=str))
    say(text)
    return summary
