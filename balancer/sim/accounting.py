"""Cumulative accounting of a simulation run: what `SimCluster.stats()` reports and the loop's summary reads.

Per inference service: requests offered, requests over the SLO, GPU-seconds held (warming replicas included).
Per training job: progress in A100-equivalent GPU-hours, GPU-seconds held, preemptions (disruptions that rolled
the job back to its last checkpoint; several workers hit at the same instant count once) and the work lost.
Fleet: energy (kWh, from the per-GPU energy counters), GPU-seconds spent at or above the slowdown temperature
(within ``AT_SLOWDOWN_MARGIN_C``, i.e. held there by the thermal regulator or hotter), the hottest temperature
seen, the time-averaged mean SM activity of online GPUs, and the time-averaged allocation ratio (milli-GPUs
requested by placed pods / online GPUs).

Pending work: ``max_wait_s`` is the longest time any pod waited (placed or still waiting) and ``waiting_over_4h``
counts the distinct pods that have waited more than four hours so far.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from balancer.sim.cluster import SimCluster
    from balancer.sim.workloads import InferenceResult, TrainingJobSpec

AT_SLOWDOWN_MARGIN_C = 0.5
LONG_WAIT_S = 4 * 3600.0


class Accounting:
    def __init__(self) -> None:
        z = np.zeros(0)
        self.svc_requests, self.svc_violations, self.svc_gpu_s = z.copy(), z.copy(), z.copy()
        self.job_progress, self.job_ckpt, self.job_since_ckpt = z.copy(), z.copy(), z.copy()
        self.job_lost, self.job_gpu_s, self.job_interval, self.job_total = z.copy(), z.copy(), z.copy(), z.copy()
        self.job_last_preempt = z.copy()
        self.job_preemptions = np.zeros(0, dtype=np.int64)
        self.job_min_workers = np.zeros(0, dtype=np.int64)
        self.job_done = np.zeros(0, dtype=bool)
        self.job_newly_done = np.zeros(0, dtype=bool)
        self.job_finished_at = z.copy()
        self.above_slowdown_s = 0.0
        self.max_temperature_c = -math.inf
        self.sm_active_integral = 0.0
        self.allocation_integral = 0.0
        self.elapsed_s = 0.0
        self.max_wait_s = 0.0
        self.long_waiters: set[str] = set()

    def add_service(self) -> None:
        for name in ("svc_requests", "svc_violations", "svc_gpu_s"):
            setattr(self, name, np.append(getattr(self, name), 0.0))

    def add_job(self, spec: TrainingJobSpec) -> None:
        for name in ("job_progress", "job_ckpt", "job_since_ckpt", "job_lost", "job_gpu_s", "job_finished_at"):
            setattr(self, name, np.append(getattr(self, name), 0.0 if name != "job_finished_at" else math.nan))
        self.job_last_preempt = np.append(self.job_last_preempt, -math.inf)
        self.job_interval = np.append(self.job_interval, spec.checkpoint_interval_s)
        self.job_total = np.append(self.job_total, math.inf if spec.total_work_gpu_hours is None
                                   else spec.total_work_gpu_hours)
        self.job_preemptions = np.append(self.job_preemptions, 0)
        self.job_min_workers = np.append(self.job_min_workers, max(spec.elastic_min, 1))
        self.job_done = np.append(self.job_done, False)
        self.job_newly_done = np.append(self.job_newly_done, False)

    def preempt(self, job: int, now: float) -> None:
        """Roll job `job` back to its last checkpoint."""
        lost = self.job_progress[job] - self.job_ckpt[job]
        self.job_lost[job] += lost
        self.job_progress[job] = self.job_ckpt[job]
        self.job_since_ckpt[job] = 0.0
        if self.job_last_preempt[job] != now:
            self.job_preemptions[job] += 1
            self.job_last_preempt[job] = now

    def checkpoint(self, job: int) -> None:
        self.job_ckpt[job] = self.job_progress[job]
        self.job_since_ckpt[job] = 0.0

    def note_wait(self, name: str, waited_s: float) -> None:
        self.max_wait_s = max(self.max_wait_s, waited_s)
        if waited_s > LONG_WAIT_S:
            self.long_waiters.add(name)

    def record_step(self, sim: SimCluster, *, dt: float, inference: InferenceResult, speed: np.ndarray,
                    running: np.ndarray, is_inf: np.ndarray, is_train: np.ndarray, slot_owner: np.ndarray,
                    slot_gpu_s: np.ndarray) -> None:
        n_svc, n_jobs = len(self.svc_requests), len(self.job_progress)
        self.svc_requests += inference.requests
        self.svc_violations += inference.violations
        self.svc_gpu_s += np.bincount(slot_owner[is_inf], weights=slot_gpu_s[is_inf], minlength=n_svc)
        self.job_gpu_s += np.bincount(slot_owner[is_train], weights=slot_gpu_s[is_train], minlength=n_jobs)
        self.job_progress += speed * dt / 3600.0
        self.job_since_ckpt += np.where(running, dt, 0.0)
        ckpt = self.job_since_ckpt >= self.job_interval
        self.job_ckpt = np.where(ckpt, self.job_progress, self.job_ckpt)
        self.job_since_ckpt = np.where(ckpt, 0.0, self.job_since_ckpt)
        finished = ~self.job_done & (self.job_progress >= self.job_total)
        self.job_newly_done = finished
        self.job_done = self.job_done | finished
        self.job_finished_at = np.where(finished, sim.time + dt, self.job_finished_at)
        self.job_progress = np.minimum(self.job_progress, self.job_total)

        online = sim.online
        n_on = int(online.sum())
        t = sim.temperature_c
        self.above_slowdown_s += dt * int(np.count_nonzero(online & (t >= sim.slowdown_temp_c - AT_SLOWDOWN_MARGIN_C)))
        if n_on:
            self.max_temperature_c = max(self.max_temperature_c, float(t[online].max()))
            self.sm_active_integral += dt * float(sim.sm_active[online].mean())
            self.allocation_integral += dt * float(sim.used_milli[online].sum()) / (1000.0 * n_on)
        self.elapsed_s += dt

    def summary(self, sim: SimCluster) -> dict[str, Any]:
        now = sim.time
        for name in sim.pending:
            self.note_wait(name, now - sim._pods[name].submitted_at)
        el = max(self.elapsed_s, 1e-9)
        return {
            "inference": {
                s.name: {"requests": float(self.svc_requests[i]), "slo_violations": float(self.svc_violations[i]),
                         "gpu_seconds": float(self.svc_gpu_s[i])}
                for i, s in enumerate(sim._svc)
            },
            "training": {
                j.name: {"progress_gpu_hours": float(self.job_progress[i]), "gpu_seconds": float(self.job_gpu_s[i]),
                         "preemptions": int(self.job_preemptions[i]), "lost_work_gpu_hours": float(self.job_lost[i]),
                         "done": bool(self.job_done[i])}
                for i, j in enumerate(sim._jobs)
            },
            "pending": {"max_wait_s": float(self.max_wait_s), "waiting_over_4h": len(self.long_waiters),
                        "count": len(sim.pending)},
            "energy_kwh": float(sim.energy_mj.sum()) / 3.6e9,
            "gpu_seconds_above_slowdown": float(self.above_slowdown_s),
            "max_temperature_c": float(self.max_temperature_c) if self.elapsed_s else float(sim.temperature_c.max()),
            "sm_active_mean": self.sm_active_integral / el,
            "allocation_ratio": self.allocation_integral / el,
            "simulated_s": float(self.elapsed_s),
        }
