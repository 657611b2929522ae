"""Ready-made demand curves and workload mixes for demos, the exporter's sim backend and benchmarks.

`TidalDemand` is the day/night inference tide: a raised cosine between ``trough`` and ``peak`` req/s that peaks
at ``peak_hour`` (simulated time is epoch seconds, UTC), optionally with a weekend dip and seeded noise.
`default_mix(sim)` fills a fleet to about 60-70 % with inference services (sized to their peak) and elastic
training jobs, so every exported series is non-trivial.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from balancer.sim.cluster import SimCluster
from balancer.sim.workloads import ServiceSpec, TrainingJobSpec

DAY_S = 86400.0


@dataclass(frozen=True)
class TidalDemand:
    """Offered load (req/s) as a function of simulated time: a daily tide with an optional weekend dip."""

    peak: float
    trough: float
    peak_hour: float = 14.0
    weekend_factor: float = 1.0
    noise: float = 0.0
    seed: int = 0
    _table: list[float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # one seeded normal draw per minute of the week, repeating weekly: cheap and deterministic per time
        object.__setattr__(self, "_table", np.random.default_rng(self.seed).standard_normal(7 * 1440).tolist())

    def __call__(self, t: float) -> float:
        phase = 2 * math.pi * ((t / 3600.0 - self.peak_hour) / 24.0)
        value = self.trough + (self.peak - self.trough) * 0.5 * (1.0 + math.cos(phase))
        day = int(t // DAY_S + 3) % 7  # 1970-01-01 was a Thursday: day 5, 6 = Saturday, Sunday
        if day >= 5:
            value *= self.weekend_factor
        if self.noise:
            value *= 1.0 + self.noise * self._table[int(t // 60) % len(self._table)]
        return max(value, 0.0)


def default_mix(sim: SimCluster, *, inference_share: float = 0.4, training_share: float = 0.3) -> None:
    """Add a few services and training jobs sized to the fleet (about `inference_share` + `training_share`)."""
    n = sim.n_gpus
    models = sorted(set(sim.gpu_model.tolist()))
    n_services = max(1, min(4, n // 16 or 1))
    per_service = max(1, int(n * inference_share / n_services))
    for k in range(n_services):
        spec = ServiceSpec(name=f"llm-{k}", rps_a100=20.0, replicas=per_service, gpu_memory_mib=12288,
                           slo_latency_s=0.8)
        # a replica serves ~20 * inference_tput req/s; size the peak at ~55 % of that on an average GPU
        mean_rate = float(np.mean([spec.rate_on(m) for m in models]))
        peak = 0.55 * mean_rate * per_service
        sim.add_service(ServiceSpec(
            name=spec.name, rps_a100=20.0, replicas=per_service, gpu_memory_mib=12288, slo_latency_s=0.8,
            demand=TidalDemand(peak=peak, trough=0.25 * peak, peak_hour=12.0 + 2 * k, noise=0.03, seed=sim.seed + k),
        ))
    n_jobs = max(1, min(8, n // 32 or 1))
    per_job = max(1, int(n * training_share / n_jobs))
    for k in range(n_jobs):
        sim.add_training_job(TrainingJobSpec(name=f"train-{k}", workers=per_job, elastic_min=max(1, per_job // 4),
                                             gpu_memory_mib=40960 if k % 2 else 20480))
