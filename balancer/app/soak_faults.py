"""The soak's fault classes and the alert tracker that checks each one is seen and then clears.

A fault is injected at the start of its window and undone at the end (`begin` / `end`); the soak runs ordinary
reconcile cycles in between. Each class names the Prometheus alert(s) from rules/gputide-alerts.yaml that must
fire while it lasts (matched on the labels that identify the faulty thing: instance, hostname, UUID) and
resolve after it. The alert rules are loaded with `for: 0s`, so the soak waits only a scrape and a rule
evaluation, not the production `for` windows.

    class                 what is done                                      alert that must fire and clear
    exporter_restart      the exporter's HTTP server stops, later restarts  GpuExporterDown{instance}
    prometheus_restart    Prometheus stops (controller cycles without it)   GputideFailStaticTooLong
    telemetry_gap         the exporter answers HTTP 500                     GpuTelemetryAbsent
    nan_burst             8 GPUs read NaN (their series vanish)             GpuMissingFromTelemetry{UUID}
    node_lost             every GPU of a busy node falls off the bus        GpuXidErrorFatal{hostname}
    cooling_failure       a busy air-cooled node's cooling degrades         GpuTemperatureHigh | GpuNearSlowdown-
                          (as far as takes its hottest GPU past slowdown)   Temperature | GpuThermalThrottling
    k8s_429 / 409 / 500   the Kubernetes API answers 429 / 409 / 500        none in the rules: the check is that the
                          (with a cooling fault so the controller acts)     injected answers were met and nothing lost
    controller_restart    the leader dies between reserve and evict         GputideControllerDown{instance}
    leader_change         the leader dies; the standby must take over       GputideControllerDown{instance}
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from balancer.telemetry.promserver import PrometheusServerError

if TYPE_CHECKING:
    from balancer.app.soak import Soak

COOLING_ALERTS = ("GpuTemperatureHigh", "GpuNearSlowdownTemperature", "GpuThermalThrottling")


@dataclass
class FaultRecord:
    """One injected fault: when, which alert is expected on which labels, and what was seen."""

    fault: str
    begin_cycle: int
    expected: tuple[str, ...] = ()
    match: Mapping[str, frozenset[str]] = field(default_factory=dict)
    end_cycle: int | None = None
    fired_cycle: int | None = None
    resolved_cycle: int | None = None
    check_ok: bool = True                  # the class's own extra check (consumed API faults, takeover, ...)
    began_at: float | None = None          # when it was injected (`AlertTracker.clock`): no alert before counts
    notes: dict[str, Any] = field(default_factory=dict)

    def matches(self, alert: Mapping[str, Any]) -> bool:
        labels = alert.get("labels", {})
        return (labels.get("alertname") in self.expected
                and all(labels.get(k) in allowed for k, allowed in self.match.items()))

    @property
    def ok(self) -> bool:
        alert_ok = not self.expected or (self.fired_cycle is not None and self.resolved_cycle is not None)
        return alert_ok and self.check_ok

    def row(self) -> dict[str, Any]:
        return {"fault": self.fault, "begin_cycle": self.begin_cycle, "end_cycle": self.end_cycle,
                "expected_alerts": list(self.expected), "fired_cycle": self.fired_cycle,
                "resolved_cycle": self.resolved_cycle, "ok": self.ok, "notes": self.notes}


class AlertTracker:
    """Marks each fault record fired, then resolved once it ends. Fired: the alert fired at any rule evaluation
    since the last poll, as Prometheus's `ALERTS` series records it; polling only what fires now missed an alert
    that fired and cleared within a cycle (the 7-day soak found 2 of 4 cooling faults so: the GPU read 89 C at
    its 89 C slowdown, the controller moved the work one reconcile later, and the alert had cleared by the cycle's
    end). Resolved: no longer firing now (/api/v1/alerts) after the fault ended. `seen`: per alert name, the firing
    alerts (one per label set) the cycles' polls found, summed over the polls (the summary's `alerts_seen`)."""

    def __init__(self, clock=time.monotonic, sleep=time.sleep) -> None:
        self.records: list[FaultRecord] = []
        self.seen: dict[str, int] = {}
        self.clock, self.sleep = clock, sleep
        self._polled: float | None = None

    def firing(self, soak: Soak) -> list[dict[str, Any]] | None:
        try:
            return [a for a in soak.prom.alerts() if a.get("state") == "firing"]
        except PrometheusServerError:
            return None

    def fired_within(self, soak: Soak, seconds: float) -> list[dict[str, Any]]:
        """The alerts that fired at any evaluation in the last `seconds` (wall), labels as /api/v1/alerts gives."""
        try:
            rows = soak.prom.query(f'last_over_time(ALERTS{{alertstate="firing"}}[{math.ceil(seconds)}s])')
        except PrometheusServerError:
            return []
        return [{"labels": r["metric"], "state": "firing"} for r in rows]

    def update(self, soak: Soak, cycle: int, *, count: bool = True) -> None:
        """Poll the alerts for `cycle`; `count`: add what fires to `seen` (a cycle's poll, not the drain's)."""
        now = self.clock()
        alerts = self.firing(soak)
        if alerts is None:
            return
        since, self._polled = self._polled, now
        for a in alerts if count else ():
            name = a["labels"].get("alertname", "")
            self.seen[name] = self.seen.get(name, 0) + 1
        for rec in self.records:
            if not rec.expected or rec.resolved_cycle is not None:
                continue
            if rec.fired_cycle is None and rec.end_cycle is not None and cycle > rec.end_cycle:
                continue   # not fired by its end (which waited for it): a later fault's alert is not its
            if rec.fired_cycle is None and self._fired(soak, rec, alerts, since, now):
                rec.fired_cycle = cycle
            elif rec.fired_cycle is not None and rec.end_cycle is not None and not any(rec.matches(a) for a in alerts):
                rec.resolved_cycle = cycle

    def drain(self, soak: Soak, cycle: int, timeout_s: float = 150.0) -> None:
        """After the last cycle: poll until every fault whose alert fired and whose window ended is seen resolved
        (at most `timeout_s` wall seconds). An alert over a wall-clock window (GpuThermalThrottling reads
        `max_over_time(...[2m])`) clears 2 minutes after the fault, however few seconds the cycles after it took.
        Its polls, one a second, are not counted in `seen`, which counts cycles: they made the alerts of the last
        faults read as seen more often than the cycles they fired in."""
        deadline = self.clock() + timeout_s
        while self.clock() < deadline and any(
                r.expected and r.fired_cycle is not None and r.end_cycle is not None and r.resolved_cycle is None
                for r in self.records):
            self.sleep(1.0)
            self.update(soak, cycle, count=False)

    def _fired(self, soak: Soak, rec: FaultRecord, alerts: list[dict[str, Any]], since: float | None,
               now: float) -> bool:
        """`rec`'s alert fires now, or fired at an evaluation since `since` (the last poll; a minute if none) and
        not before the fault was injected."""
        if any(rec.matches(a) for a in alerts):
            return True
        start = now - 60.0 if since is None else since
        if rec.began_at is not None:
            start = max(start, rec.began_at)
        return any(rec.matches(a) for a in self.fired_within(soak, max(now - start, 1.0)))

    def await_fired(self, soak: Soak, rec: FaultRecord, timeout_s: float = 12.0) -> None:
        """Block (at most `timeout_s` wall seconds) until `rec`'s alert fires, or finds it fired since the last
        poll: a scrape plus a rule evaluation."""
        deadline = time.monotonic() + timeout_s
        while rec.expected and rec.fired_cycle is None and time.monotonic() < deadline:
            if self._fired(soak, rec, self.firing(soak) or [], self._polled, self.clock()):
                rec.fired_cycle = soak.cycle
                return
            time.sleep(0.25)


class Fault:
    name = "fault"
    cycles = 2                 # window length in reconcile cycles
    expected: tuple[str, ...] = ()
    needs_kube = False

    def begin(self, soak: Soak, rec: FaultRecord) -> None: ...

    def end(self, soak: Soak, rec: FaultRecord) -> None: ...


class ExporterRestart(Fault):
    name, cycles, expected = "exporter_restart", 2, ("GpuExporterDown",)

    def begin(self, soak, rec):
        rec.match = {"instance": frozenset({f"127.0.0.1:{soak.exporter.port}"})}
        soak.exporter.stop()

    def end(self, soak, rec):
        soak.alerts.await_fired(soak, rec)
        soak.exporter.start()


class PrometheusRestart(Fault):
    name, cycles, expected = "prometheus_restart", 1, ("GputideFailStaticTooLong",)

    def begin(self, soak, rec):
        soak.prom.stop()

    def end(self, soak, rec):
        soak.prom.start()
        soak.alerts.await_fired(soak, rec, timeout_s=20.0)   # the controller held still while it was away


class TelemetryGap(Fault):
    name, cycles, expected = "telemetry_gap", 2, ("GpuTelemetryAbsent",)

    def begin(self, soak, rec):
        soak.exporter.failing = True

    def end(self, soak, rec):
        soak.alerts.await_fired(soak, rec)
        soak.exporter.failing = False


class NanBurst(Fault):
    name, cycles, expected = "nan_burst", 2, ("GpuMissingFromTelemetry",)

    def begin(self, soak, rec):
        gpus = soak.rng.choice(soak.sim.n_gpus, size=min(8, soak.sim.n_gpus), replace=False)
        rec.match = {"UUID": frozenset(soak.sim.fleet.gpus[int(g)].uuid for g in gpus)}
        rec.notes["gpus"] = sorted(int(g) for g in gpus)
        soak.backend.nan_gpus = frozenset(int(g) for g in gpus)

    def end(self, soak, rec):
        soak.alerts.await_fired(soak, rec)
        soak.backend.nan_gpus = frozenset()


class NodeLost(Fault):
    name, cycles, expected = "node_lost", 3, ("GpuXidErrorFatal",)

    def begin(self, soak, rec):
        node = soak.busy_node(air_only=False)
        rec.match, rec.notes["node"] = {"hostname": frozenset({node})}, node
        with soak.lock:
            idx = [g.index for g in soak.sim.fleet.gpus if g.node == node]
            rec.notes["workloads_requeued"] = sum(1 for p in soak.sim.placements.values() if set(p) & set(idx))
            for g in idx:
                soak.sim.fail_gpu(g, xid=79)
        soak.ledger.resync()

    def end(self, soak, rec):
        soak.alerts.await_fired(soak, rec)
        with soak.lock:
            for g in (g.index for g in soak.sim.fleet.gpus if g.node == rec.notes["node"]):
                soak.sim.repair_gpu(g)


COOLING_RISE_C, COOLING_RESISTANCE = 15.0, 1.6
OVER_SLOWDOWN_C = 2.0   # a cooling fault takes the node's hottest GPU this far past slowdown at the power it draws


def degrade(soak: Soak, rec: FaultRecord) -> str:
    """The busiest air-cooled node's cooling fails: inlet +15 °C and thermal resistance x1.6, or as much more inlet
    warming as takes its hottest GPU past slowdown at the power it draws now. Days into a soak the busiest node
    may draw too little for the fixed fault to reach any alert threshold, and the fault would test nothing."""
    node = soak.busy_node(air_only=True)
    with soak.lock:
        rise = max(COOLING_RISE_C, soak.sim.inlet_rise_for(node, resistance_factor=COOLING_RESISTANCE,
                                                           over_slowdown_c=OVER_SLOWDOWN_C))
        soak.sim.degrade_cooling(node, inlet_rise_c=rise, resistance_factor=COOLING_RESISTANCE)
    rec.notes["cooling_node"], rec.notes["inlet_rise_c"] = node, round(rise, 1)
    return node


def restore(soak: Soak, rec: FaultRecord) -> None:
    with soak.lock:
        soak.sim.restore_cooling(rec.notes["cooling_node"])


class CoolingFailure(Fault):
    name, cycles, expected = "cooling_failure", 4, COOLING_ALERTS

    def begin(self, soak, rec):
        rec.match = {"hostname": frozenset({degrade(soak, rec)})}

    def end(self, soak, rec):
        soak.alerts.await_fired(soak, rec)
        restore(soak, rec)


class KubeFault(Fault):
    """The in-test API answers `code` to matching requests while a cooling fault makes the controller act."""

    needs_kube, cycles = True, 4
    paths = {429: r"/eviction$|/leases/", 409: r"/nodes/|/leases/", 500: r"/nodes/|/eviction$|/leases/"}

    def __init__(self, code: int) -> None:
        self.code = code
        self.name = f"k8s_{code}"

    def begin(self, soak, rec):
        degrade(soak, rec)
        rec.notes["requests_before"] = soak.kube_requests
        self._fault = soak.kube.inject(None, self.paths[self.code], self.code, count=6)

    def end(self, soak, rec):
        consumed = 6 - self._fault.remaining
        self._fault.remaining = 0
        rec.notes["injected_answers_met"] = consumed
        rec.check_ok = consumed > 0
        restore(soak, rec)


class ControllerRestart(Fault):
    """The leader is armed to crash after reserving a migration target, before it moves the workload."""

    name, cycles, expected = "controller_restart", 4, ("GputideControllerDown",)

    def begin(self, soak, rec):
        degrade(soak, rec)
        leader = soak.leader()
        rec.notes.update(identity=leader.identity, mid_migration=False)
        rec.match = {"instance": frozenset({f"127.0.0.1:{leader.port}"})}
        leader.actuator.inner.crash_after_reserve = True

    def on_crash(self, soak, rec, replica) -> None:
        rec.notes.update(mid_migration=True, journal_at_crash=len(soak.journal), crash_cycle=soak.cycle)
        replica.kill()

    def end(self, soak, rec):
        victim = next((r for r in soak.replicas if r.identity == rec.notes["identity"]), None)
        if victim is not None:
            victim.actuator.inner.crash_after_reserve = False
            if victim.alive:   # no migration was planned in the window: crash between cycles instead
                victim.kill()
        soak.alerts.await_fired(soak, rec)
        soak.restart_replica(rec.notes["identity"])
        restore(soak, rec)
        rec.check_ok = bool(rec.notes["mid_migration"]) or not soak.require_mid_migration


class LeaderChange(Fault):
    name, cycles, expected = "leader_change", 4, ("GputideControllerDown",)

    def begin(self, soak, rec):
        leader = soak.leader()
        rec.notes.update(old_leader=leader.identity, new_leader=None)
        rec.match = {"instance": frozenset({f"127.0.0.1:{leader.port}"})}
        leader.kill()

    def during(self, soak, rec):
        new = soak.leader(required=False)
        if new is not None and rec.notes["new_leader"] is None:
            rec.notes.update(new_leader=new.identity, takeover_cycle=soak.cycle)

    def end(self, soak, rec):
        self.during(soak, rec)
        soak.alerts.await_fired(soak, rec)
        soak.restart_replica(rec.notes["old_leader"])
        rec.check_ok = rec.notes["new_leader"] is not None


def fault_classes(with_kube: bool) -> list[Fault]:
    """Every class, in the order the soak cycles through them."""
    faults: list[Fault] = [ExporterRestart(), CoolingFailure(), TelemetryGap(), KubeFault(429), NanBurst(),
                           ControllerRestart(), PrometheusRestart(), KubeFault(409), NodeLost(), LeaderChange(),
                           KubeFault(500)]
    return [f for f in faults if with_kube or not f.needs_kube]


def busiest(sim, nodes: list[str]) -> str:
    load = {}
    for n in nodes:
        idx = [g.index for g in sim.fleet.gpus if g.node == n]
        load[n] = float(np.mean(sim.power_w[idx]) / np.mean(sim.tdp_w[idx]))
    return max(load, key=load.get)
