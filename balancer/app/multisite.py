"""Beyond one site: a global view of spare GPUs, and inference overflow to a second site at its peak.

Two sites run their own controllers; what crosses sites is a small, pure decision taken on the global view:

* `spare_gpus(snapshot)`      per GPU model, the healthy GPUs with fresh readings nothing is placed on: what a
                              site could lend (a site whose readings stopped lends nothing).
* `local_capacity_rps(...)`   what a service's ready replicas at a site can serve (per-model rates).
* `overflow_rps(...)`         requests/s to send to the other site: the demand above `target_utilisation` of
                              local capacity, capped by the same fraction of the remote site's standing capacity.
* `effective_slo(slo, rtt)`   the latency budget left for a request served remotely: the SLO minus the round
                              trip. The remote replicas are held to that budget, so the added latency is counted
                              in every overflowed request's SLO verdict (a 30 ms RTT on a 800 ms SLO leaves 770 ms).

`run_multisite` plays a day on two simulated sites: site A's tidal service outgrows its GPUs at the peak; site
B keeps warm replicas of the same model on otherwise idle GPUs (`<service>-overflow`, held to the effective SLO).
Every `cycle_s` the controller observes total demand at A's gateway, computes the overflow and routes it; the
result reports the SLO attainment seen by A's users (requests served at A and at B together) during A's peak,
with and without overflow, and how much traffic crossed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from balancer import fleet as fleet_mod
from balancer.model import ClusterSnapshot
from balancer.sim import SimCluster
from balancer.sim.scenarios import TidalDemand
from balancer.sim.workloads import ServiceSpec

HOUR = 3600.0


# Readings older than this are not a GPU's state now (the controller's default --stale-after, 4 x a 30 s scrape)
SPARE_MAX_SAMPLE_AGE_S = 120.0


def spare_gpus(snapshot: ClusterSnapshot, max_sample_age_s: float = SPARE_MAX_SAMPLE_AGE_S) -> dict[str, int]:
    """Per GPU model: whole GPUs with nothing placed on them, no XID, healthy memory and a reading at most
    `max_sample_age_s` old (what the site could lend). A GPU whose readings stopped (its exporter, node or whole
    site down) is not idle capacity: its last readings say nothing of now, and an unknown age counts as old."""
    age = np.asarray(snapshot.sample_age_s, dtype=float)
    free = ((snapshot.gpu_milli_used == 0) & (snapshot.xid == 0) & ~snapshot.memory_unhealthy
            & (age <= max_sample_age_s))
    out: dict[str, int] = {}
    for g in np.flatnonzero(free):
        model = snapshot.gpus[int(g)].model
        out[model] = out.get(model, 0) + 1
    return out


def global_spare(snapshots: Mapping[str, ClusterSnapshot]) -> dict[str, dict[str, int]]:
    """Site -> model -> spare GPUs: the global view a federation query (or one call per site) provides."""
    return {site: spare_gpus(s) for site, s in snapshots.items()}


def local_capacity_rps(sim: SimCluster, service: str) -> float:
    """Requests/s the service's placed replicas at this site serve at full clock."""
    spec = sim.services[service]
    rates = [spec.rate_on(str(sim.gpu_model[g[0]])) * len(g) for name, g in sim.placements.items()
             if sim.workloads[name].owner == service]
    return float(sum(rates))


def effective_slo(slo_s: float, rtt_s: float, base_latency_s: float = 0.0) -> float:
    """The latency budget a remote replica has left after the round trip; ValueError when nothing is left."""
    budget = slo_s - rtt_s
    if rtt_s < 0 or budget <= base_latency_s:
        raise ValueError(f"a {rtt_s * 1000:.0f} ms round trip leaves no budget under a {slo_s * 1000:.0f} ms SLO "
                         f"(service base latency {base_latency_s * 1000:.0f} ms)")
    return budget


def overflow_rps(demand_rps: float, local_rps: float, remote_rps: float, target_utilisation: float = 0.85) -> float:
    """Requests/s to route to the other site: demand above `target_utilisation` x local capacity, capped by the
    same fraction of the remote capacity. Never negative, never more than the demand."""
    if not (math.isfinite(demand_rps) and math.isfinite(local_rps) and math.isfinite(remote_rps)):
        raise ValueError("demand and capacities must be finite")
    excess = max(demand_rps - target_utilisation * max(local_rps, 0.0), 0.0)
    return min(excess, target_utilisation * max(remote_rps, 0.0), max(demand_rps, 0.0))


class _Routed:
    """A demand function whose value the controller sets each cycle (the gateway's routing weight)."""

    def __init__(self, total: TidalDemand) -> None:
        self.total, self.remote = total, 0.0

    def local(self, t: float) -> float:
        return max(self.total(t) - self.remote, 0.0)

    def overflow(self, t: float) -> float:
        return self.remote


@dataclass
class MultisiteResult:
    overflow: bool
    rtt_s: float
    peak_attainment: float            # SLO attainment of A's users during A's peak hours
    day_attainment: float
    overflowed_requests: float
    total_requests: float
    remote_p99_s: list[float] = field(default_factory=list)   # B's p99 plus the RTT, per cycle with overflow

    @property
    def overflow_share(self) -> float:
        return self.overflowed_requests / self.total_requests if self.total_requests else 0.0


def run_multisite(*, overflow: bool = True, rtt_s: float = 0.03, hours: float = 24.0, cycle_s: float = 300.0,
                  peak_hour: float = 14.0, start_hour: float = 0.0, seed: int = 0,
                  remote_replicas: int = 12) -> MultisiteResult:
    """A day on two sites (see the module docstring); returns A's users' SLO attainment with or without overflow."""
    t0 = start_hour * HOUR
    site_a = SimCluster(fleet_mod.scaled_fleet(64, "site-a"), seed=seed, step_s=60.0, start_time=t0)
    site_b = SimCluster(fleet_mod.scaled_fleet(64, "site-b"), seed=seed + 1, step_s=60.0, start_time=t0)
    slo, base = 0.8, 0.1
    per_gpu = float(np.mean([ServiceSpec(name="x").rate_on(m) for m in site_a.gpu_model.tolist()]))
    replicas_a = 24
    demand = TidalDemand(peak=1.35 * per_gpu * replicas_a, trough=0.3 * per_gpu * replicas_a,
                         peak_hour=peak_hour, noise=0.02, seed=seed)
    routed = _Routed(demand)
    site_a.add_service(ServiceSpec(name="chat", slo_latency_s=slo, base_latency_s=base, replicas=replicas_a,
                                   demand=routed.local))
    site_b.add_service(ServiceSpec(name="chat-overflow", slo_latency_s=effective_slo(slo, rtt_s, base),
                                   base_latency_s=base, replicas=remote_replicas if overflow else 0,
                                   demand=routed.overflow))
    for sim in (site_a, site_b):
        sim.step()
    peak_req = peak_bad = 0.0
    remote_p99: list[float] = []
    t_end = t0 + hours * HOUR
    while site_a.time < t_end - 1e-9:
        if overflow:
            local = local_capacity_rps(site_a, "chat")
            remote = local_capacity_rps(site_b, "chat-overflow")
            routed.remote = overflow_rps(demand(site_a.time), local, remote)
        before = _counts(site_a, site_b)
        site_a.advance_to(site_a.time + cycle_s)
        site_b.advance_to(site_b.time + cycle_s)
        after = _counts(site_a, site_b)
        off = abs((site_a.time / HOUR) % 24 - peak_hour % 24)
        if min(off, 24 - off) <= 2.0:   # on the clock face: a peak at 0:00 has its window on both sides of midnight
            peak_req += after[0] - before[0]
            peak_bad += after[1] - before[1]
        if routed.remote > 0:
            remote_p99.append(site_b.service_status()["chat-overflow"].p99_latency_s + rtt_s)
    total_req, total_bad, remote_req = _counts(site_a, site_b)
    return MultisiteResult(overflow=overflow, rtt_s=rtt_s, peak_attainment=1 - peak_bad / max(peak_req, 1e-9),
                           day_attainment=1 - total_bad / max(total_req, 1e-9), overflowed_requests=remote_req,
                           total_requests=total_req, remote_p99_s=remote_p99)


def _counts(a: SimCluster, b: SimCluster) -> tuple[float, float, float]:
    """(requests, SLO violations) of A's users over both sites, and the requests B served."""
    ra, rb = float(a.acct.svc_requests.sum()), float(b.acct.svc_requests.sum())
    return ra + rb, float(a.acct.svc_violations.sum() + b.acct.svc_violations.sum()), rb
