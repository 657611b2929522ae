"""The demo's live part: the reconcile loop on a simulated fleet, observed through a real Prometheus.

Everything is the production path except the cluster itself: the simulated fleet is published by the real
exporter (sim backend) on loopback, a real Prometheus scrapes it every second and evaluates `rules/`, the
controller reads the normalised series with `PrometheusTelemetrySource` and serves its own `gputide_` metrics,
which Prometheus scrapes too. Simulated time runs `minutes_per_cycle` per reconcile cycle (about a second of
wall time), so an afternoon of fleet life fits in a minute or two.

The story: the fleet warms up; one busy air-cooled node's cooling degrades (inlet +10 °C, thermal resistance
x1.35); its GPUs cross their slowdown temperature and Prometheus fires `GpuTemperatureHigh`; the controller
migrates work off the node, taints it and throttles what it cannot move; later the exporter goes away for a few
cycles and the controller holds still (fail-static) until telemetry returns.

The fleet is the demo fleet with its liquid-cooled H100 nodes partitioned by MIG (`LIVE_MIG`; the exporter alone
sees it: it publishes SM activity per GPU instance, slice-weighted back to the GPU by the rules), so the GPU Fleet
dashboard's per-instance panel has data in the report's previews.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from prometheus_client import CollectorRegistry

from balancer import fleet as fleet_mod
from balancer.actuate.base import ActionResult
from balancer.actuate.sim import SimActuator
from balancer.app.soak_harness import sim_node_meta
from balancer.config import BalancerPolicy
from balancer.loop import CycleReport, JsonlAudit, Reconciler
from balancer.metrics import ControllerMetrics
from balancer.model import Action, ClusterSnapshot
from balancer.sim import SimCluster, default_mix
from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource
from balancer.telemetry.promserver import PrometheusServer, Target, default_rule_files, parse_duration
from exporters.backends.sim import SimBackend
from exporters.collector import GpuCollector
from exporters.server import serve


class _LockedActuator:
    """The exporter reads the simulator from its HTTP thread; actions mutate it under the same lock."""

    name = "sim"

    def __init__(self, inner: SimActuator, lock: threading.Lock) -> None:
        self.inner, self.lock = inner, lock

    def apply(self, action: Action, snapshot: ClusterSnapshot) -> ActionResult:
        with self.lock:
            return self.inner.apply(action, snapshot)

    def recover(self) -> list[str]:
        with self.lock:
            return self.inner.recover()

    def housekeeping(self) -> list[str]:
        """The loop's per-cycle hook: expired hot taints are removed, as on Kubernetes."""
        with self.lock:
            return self.inner.housekeeping()


@dataclass
class LiveResult:
    prometheus_url: str
    start_wall: float
    end_wall: float
    fault_wall: float
    fault_node: str
    outage_wall: tuple[float, float]
    actions: list[dict[str, Any]] = field(default_factory=list)
    holds: list[dict[str, Any]] = field(default_factory=list)
    alerts_seen: dict[str, float] = field(default_factory=dict)
    temperature_before: np.ndarray | None = None
    temperature_peak: np.ndarray | None = None
    temperature_after: np.ndarray | None = None
    hot_gpu_cycles: list[int] = field(default_factory=list)
    fleet: fleet_mod.Fleet | None = None


EXPORTER_JOB = "gputide-exporter"
CONTROLLER_JOB = "gputide-controller"
SCRAPE = "1s"   # the live Prometheus scrapes both targets and evaluates rules/ this often
# The controller refuses readings older than this. A reading's age when the controller reads it is up to a scrape
# interval (the scrape before the rule evaluation) and an evaluation interval (the evaluation before the read) plus
# the scrape's and the evaluation's own durations, which do not shrink with the demo's 1 s intervals: on 2 cores at
# a load of 8 the normalisation group took 1.2 s (Prometheus skips evaluations while one runs) and every GPU was read
# 4-7 s old, past the 4 s (4 scrape intervals) the source allows by default, so the controller held still for
# stale telemetry with nothing stale. `gputide run` leaves 30 s over its scrape interval for them (--stale-after:
# at least the scrape interval + 30 s, 45 s at the least); so does the demo
STALE_AFTER_S = parse_duration(SCRAPE) + 30.0
LIVE_MIG = ["4g.40gb", "2g.20gb", "1g.10gb"]   # 7 compute slices of each H100 of the demo fleet


def live_fleet() -> fleet_mod.Fleet:
    """The demo fleet with its H100 node group in MIG mode (`LIVE_MIG`)."""
    spec = yaml.safe_load(fleet_mod.DEMO_FLEET_YAML)
    group = next(g for g in spec["spec"]["nodeGroups"] if g["gpuModel"] == "H100-SXM")
    group["mig"] = list(LIVE_MIG)
    return fleet_mod.from_dict(spec, "<demo fleet, H100 nodes in MIG mode>")


def live_telemetry_options(url: str) -> PrometheusOptions:
    """How the live controller reads the live Prometheus: its 1 s scrapes, readings refused past `STALE_AFTER_S`."""
    return PrometheusOptions(url=url, scrape_interval_s=parse_duration(SCRAPE), stale_after_s=STALE_AFTER_S)


def _hottest_busy_air_node(sim: SimCluster) -> str:
    load: dict[str, float] = {}
    for node in sim.fleet.nodes:
        if node.cooling != "air" or node.gpu_count == 0:
            continue
        idx = [g.index for g in sim.fleet.gpus if g.node == node.name]
        load[node.name] = float(np.mean(sim.power_w[idx]) / np.mean(sim.tdp_w[idx]))
    return max(load, key=load.get)


def run_live(out: Path, *, cycles: int = 60, fault_cycle: int = 6, outage: tuple[int, int] = (44, 48),
             minutes_per_cycle: float = 2.0, seed: int = 7, say: Callable[[str], None] = print,
             prometheus_keepalive: bool = False) -> tuple[LiveResult, PrometheusServer | None]:
    """Run the story; returns what happened and (with `prometheus_keepalive`) the still-running Prometheus."""
    out.mkdir(parents=True, exist_ok=True)
    fleet = live_fleet()
    sim = SimCluster(fleet, seed=seed, step_s=60.0, start_time=time.time())
    default_mix(sim, inference_share=0.45, training_share=0.45)
    for _ in range(90):  # 1.5 simulated hours to warm the GPUs up
        sim.step()
    lock = threading.Lock()
    exporter = serve(GpuCollector(SimBackend(sim, lock=lock)), port=0)
    metrics = ControllerMetrics(CollectorRegistry())
    controller_http = serve(metrics.registry, port=0)
    prom = PrometheusServer([Target(EXPORTER_JOB, f"127.0.0.1:{exporter.port}"),
                             Target(CONTROLLER_JOB, f"127.0.0.1:{controller_http.port}")],
                            rule_files=default_rule_files(), scrape_interval=SCRAPE, alert_for="0s",
                            directory=out / "prometheus")
    prom.start()
    say(f"  real Prometheus {prom.url} scraping the simulated fleet ({fleet.n_gpus} GPUs on {len(fleet.nodes)} nodes)"
        f" and the controller, with rules/ loaded")
    prom.wait_for("count(gpu:last_sample:timestamp_seconds)",
                  lambda r: bool(r) and float(r[0]["value"][1]) == fleet.n_gpus, timeout=60)
    # the simulator plays the Kubernetes node list (taints, hot-taint expiry on the snapshot's clock), so the planner
    # renews the hot node's taint as it would on a cluster
    source = PrometheusTelemetrySource(live_telemetry_options(prom.url), fleet=fleet,
                                       node_overrides=sim_node_meta(sim, lock, time.time))
    audit = JsonlAudit(out / "audit.jsonl")
    reconciler = Reconciler(source=source, actuator=_LockedActuator(SimActuator(sim), lock), policy=BalancerPolicy(),
                            metrics=metrics, audit=audit, clock=lambda: sim.time)
    fault_node = _hottest_busy_air_node(sim)
    node_idx = np.array([g.index for g in fleet.gpus if g.node == fault_node])
    res = LiveResult(prometheus_url=prom.url, start_wall=time.time(), end_wall=0.0, fault_wall=0.0,
                     fault_node=fault_node, outage_wall=(0.0, 0.0), fleet=fleet)
    res.temperature_before = sim.temperature_c.copy()
    peak_hot, gate = -1.0, _CycleGate(prom, fleet.n_gpus, EXPORTER_JOB)
    try:
        for cycle in range(cycles):
            with lock:
                if cycle == fault_cycle:
                    sim.degrade_cooling(fault_node, inlet_rise_c=10.0, resistance_factor=1.35)
                    res.fault_wall = time.time()
                    say(f"  [cycle {cycle:2d}] FAULT: cooling of {fault_node} degrades (inlet +10 °C, "
                        f"thermal resistance x1.35)")
                sim.advance_to(sim.time + minutes_per_cycle * 60.0)
                hot = int(np.sum(sim.temperature_c >= sim.slowdown_temp_c))
                res.hot_gpu_cycles.append(hot)
                node_max = float(sim.temperature_c[node_idx].max())
                if node_max > peak_hot:
                    peak_hot, res.temperature_peak = node_max, sim.temperature_c.copy()
            if cycle == outage[0]:
                exporter.close()
                res.outage_wall = (time.time(), 0.0)
                say(f"  [cycle {cycle:2d}] FAULT: the exporter stops answering")
            if cycle == outage[1]:
                exporter = serve(GpuCollector(SimBackend(sim, lock=lock)), port=exporter.port)
                res.outage_wall = (res.outage_wall[0], time.time())
                say(f"  [cycle {cycle:2d}] the exporter is back")
            gate.wait(cycle, moved=time.time(), exporter_up=not outage[0] <= cycle < outage[1])
            _record_cycle(res, prom, reconciler.run_once(), cycle, say)
        res.temperature_after = sim.temperature_c.copy()
        # what the last cycle did, in the exporter's readings and the controller's metrics, scraped once more for the
        # report's timeline and dashboards, which end here (a fixed 1.5 s did on an idle machine)
        gate.wait(cycles, moved=time.time(), exporter_up=not outage[0] <= cycles - 1 < outage[1], also=CONTROLLER_JOB)
        res.end_wall = time.time()
    finally:
        audit.close()
        exporter.close()
        if not prometheus_keepalive:
            prom.stop()
        controller_http.close()
    return res, (prom if prometheus_keepalive else None)


class _CycleGate:
    """Holds each cycle until what the controller reads through Prometheus is the simulator as the cycle left it.

    A fixed wait fits one scrape plus one rule evaluation after the simulator moved only on an idle machine: on a
    loaded one the controller read the cycle before (late to taint the hot node, or holding still in the cycle the
    exporter came back, when the taint's renewal was due, so the taint lapsed). With the exporter up, the wait
    ends once every GPU's newest sample (`gpu:last_sample:timestamp_seconds`, the scrape's timestamp) is from a
    scrape after the move, and the rule group that records the per-GPU series has finished that evaluation: it
    commits rule by rule, so a read between two rules would take later series from the evaluation before. With
    the exporter down, it ends once Prometheus has failed a scrape of it since the cycle began and no per-GPU
    series is left. Either takes about a second, as the fixed wait did; TimeoutError if it has not come. What it
    lets through can still be a few seconds old on a loaded machine (`STALE_AFTER_S`)."""

    TIMEOUT_S = 60.0   # about 2 s at most on an idle machine, a few on a loaded one: only a broken setup takes this
    # Prometheus stamps a scrape with its scheduled time when it starts within 2 ms of it (scrape timestamp
    # alignment): a sample is from a scrape after the move only when stamped a margin later than the move
    STAMP_MARGIN_S = 0.01
    SAMPLED = "gpu:last_sample:timestamp_seconds"

    def __init__(self, prom: PrometheusServer, n_gpus: int, exporter_job: str) -> None:
        self.prom, self.n_gpus, self.job = prom, n_gpus, exporter_job
        self.last = _last_record_beside(self.SAMPLED)

    def wait(self, cycle: int, moved: float, exporter_up: bool, also: str | None = None) -> None:
        """`also`: a job that must have been scraped after `moved` too."""
        since = f"{moved + self.STAMP_MARGIN_S:.3f}"
        if exporter_up:
            promql = (f"count({self.SAMPLED} >= {since}) and on () "
                      f"(min(timestamp({self.last})) >= max(timestamp({self.SAMPLED})))")
            awaited = f"all {self.n_gpus} GPUs sampled after the simulator moved, through {self.last}"
            done = self._all_sampled
        else:
            up = f'up{{job="{self.job}"}}'
            promql = (f"({up} == 0 and on (instance) timestamp({up}) >= {since}) "
                      f"and on () absent({self.SAMPLED}) and on () absent({self.last})")
            awaited, done = "a failed scrape of the exporter and no GPU series left", bool
        if also is not None:
            promql += f' and on () (timestamp(up{{job="{also}"}}) >= {since})'
            awaited += f" and a scrape of {also}"
        try:
            self.prom.wait_for(promql, done, timeout=self.TIMEOUT_S, interval=0.05)
        except TimeoutError as exc:
            raise TimeoutError(f"cycle {cycle}: Prometheus {self.prom.url} did not show {awaited} within "
                               f"{self.TIMEOUT_S:.0f} s (1 s scrapes and rule evaluations): {exc}") from exc

    def _all_sampled(self, result: list[dict[str, Any]]) -> bool:
        return bool(result) and float(result[0]["value"][1]) == self.n_gpus


def _last_record_beside(record: str) -> str:
    """The series that the rule group recording `record` records last (in `default_rule_files`)."""
    for path in default_rule_files():
        for group in (yaml.safe_load(path.read_text()) or {}).get("groups", []):
            names = [r["record"] for r in group.get("rules", []) if "record" in r]
            if record in names:
                return names[-1]
    raise LookupError(f"no rule group in {default_rule_files()} records {record}")


def _record_cycle(res: LiveResult, prom: PrometheusServer, report: CycleReport, cycle: int,
                  say: Callable[[str], None]) -> None:
    """Note a cycle's news in `res` and say it: alerts firing for the first time, a hold, actions, rejections."""
    for alert in prom.alerts():
        name = alert["labels"]["alertname"]
        if alert["state"] == "firing" and name not in res.alerts_seen:
            res.alerts_seen[name] = time.time()
            # the summary names the node and GPU where the alert has them (a prefix of the hostname repeated it)
            say(f"  [cycle {cycle:2d}] Prometheus alert firing: {name} "
                f"({' '.join(alert['annotations'].get('summary', '').split())})")
    if report.status == "fail_static":
        res.holds.append({"cycle": cycle, "reason": report.reason})
        say(f"  [cycle {cycle:2d}] controller holds still (fail-static: {report.reason})")
    for r in report.results:
        a = r.action
        res.actions.append({"cycle": cycle, "wall": time.time(), "kind": a.kind, "target": a.target,
                            "reason": a.reason, "gain": a.expected_gain, "outcome": str(r.outcome)})
        say(f"  [cycle {cycle:2d}] {r.outcome}: {a.describe()}")
    for a, why in report.rejected:
        say(f"  [cycle {cycle:2d}] rejected by safety ({why}): {a.describe()}")
