"""The embedded GPU cluster simulator: time-stepped, vectorised over GPUs, deterministic by seed.

Every demo, scenario and benchmark runs on `SimCluster`; the exporter's sim backend publishes its arrays as
dcgm-exporter series and the reconcile loop drives it through the same verbs it uses on Kubernetes.

API::

    from balancer.sim import SimCluster, ServiceSpec, TrainingJobSpec
    sim = SimCluster(fleet, seed=0, step_s=60.0, start_time=0.0)
    sim.time, sim.fleet
    # per-GPU numpy arrays (fleet order): temperature_c, memory_temperature_c, power_w, power_limit_w, sm_active,
    # gpu_util, mem_used_mib, mem_total_mib, sm_clock_mhz, clock_event_reasons (NVML bits), energy_mj (monotonic),
    # xid (last XID, 0 none), online, healthy, slowdown_temp_c, shutdown_temp_c, tdp_w, min_power_limit_w,
    # clock_factor (throughput multiplier from power/thermal limits), used_milli
    sim.memory  # MemoryHealth: sbe_volatile, dbe_volatile, remapped_*, remap_pending, remap_failure, unhealthy
    sim.step(dt=None); sim.advance_to(t)
    sim.snapshot(sample_age_s=0.0) -> ClusterSnapshot        # includes workloads, placements, service status
    sim.add_service(ServiceSpec(...), warm=True); sim.add_training_job(TrainingJobSpec(...))
    sim.submit(workload, duration_s=None)                     # a generic (batch) pod into the pending queue
    sim.set_scheduler(fn); sim.schedule()                     # fn(SchedulerView, pending) -> [(name, gpus)]
    sim.place(name, gpus) / sim.evict(name) / sim.migrate(name, gpus) -> bool; sim.fits(name, gpus)
    sim.set_power_limit(gpu, watts) -> applied watts          # clamped to [min_power_limit_w, tdp_w]
    sim.cap_power(gpu, watts | None) -> limit now             # gputide's cap, kept in sim.power_caps and on its
                                                              # node (Node.power_caps); None gives it back
    sim.scale_service(name, replicas); sim.scale_training(job, workers, checkpoint_first=False, shrunk_from=None,
                      colocation=None)
    sim.shrink_records                                        # job -> (workers before a hotspot shrink, left): its
                                                              # workloads' shrunk_from (a Job's gputide.io/shrunk)
    sim.shrink_record_done(job, workers) -> bool              # gputide's resize to `workers` removes the record
    sim.colocation_records                                    # job -> ColocationRecord: co-location's shrink, its
                                                              # workloads' colocation_from (scale_training's
                                                              # colocation= writes it, colocation_record.after)
    sim.replicas(service), sim.workers(job)
    sim.add_taint(node, until=None) / sim.remove_taint(node); sim.has_taint(node)   # gputide's hot taint; `until`:
                                                              # its expiry (sim.hot_until, Node.hot_until), None never
    sim.expired_taints() -> [node]; sim.node_meta()           # what housekeeping removes; the node list as Kubernetes
                                                              # would give it (a telemetry source's node_overrides)
    sim.degrade_cooling(node, inlet_rise_c=0, resistance_factor=1, duration_s=None); sim.restore_cooling(node)
    sim.fail_gpu(gpu, xid=79); sim.ecc_error(gpu); sim.row_remap_failure(gpu); sim.repair_gpu(gpu)
    sim.memory.correctable(gpu, errors=1)                     # single-bit ECC: counted only
    sim.stats(); sim.service_status()
    sim.services, sim.training_jobs, sim.workloads, sim.placements, sim.pending   # read-only views

Models: `physics` (power, clocks, clock event reasons, first-order thermal model), `workloads` (M/M/1 latency and
SLO violations per replica; synchronous training progress in A100-equivalent GPU-hours with checkpoint loss),
`accounting` (what `stats()` reports), `scheduler` (the default vectorised first-fit), `scenarios` (tidal demand
curves, a default workload mix). Faults: a cooling fault raises a node's inlet and/or multiplies its thermal
resistance; `fail_gpu` takes a GPU off the bus (XID 79, 0 W, pods requeued); a GPU reaching its shutdown
temperature does the same (we report thermal shutdown as XID 79, since the board disappears from the bus);
`ecc_error` sets XID 48, counts a double-bit ECC error and (Ampere and newer) a pending row remap, requeues the
GPU's pods and keeps new work off it until `repair_gpu` (a reset); `row_remap_failure` (XID 64) does the same until
the board is replaced (`repair_gpu` again). `memory` models the ECC counters and the row remapper.
"""

from balancer.sim.cluster import TAINT, SimCluster
from balancer.sim.scenarios import TidalDemand, default_mix
from balancer.sim.scheduler import SchedulerView, first_fit
from balancer.sim.workloads import ServiceSpec, TrainingJobSpec

__all__ = [
    "TAINT", "SchedulerView", "ServiceSpec", "SimCluster", "TidalDemand", "TrainingJobSpec", "default_mix",
    "first_fit",
]
