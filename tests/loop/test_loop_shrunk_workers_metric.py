"""`gputide_shrunk_workers{cause}`: the workers gputide took from training jobs and still owes back, by the planner
that took them. A shrink that is never given back (a node that never cools, a service that never gets slack) was
visible only in the audit log; the gauge (and the `GputideTrainingShrunkTooLong` alert on it) shows it."""

from __future__ import annotations

from loop_helpers import make_fleet, snapshot, workload
from prometheus_client import CollectorRegistry

from balancer import fleet as fleet_mod
from balancer.actuate.sim import SimActuator
from balancer.fleet_usage import shrunk_workers
from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics
from balancer.model import Node, WorkloadClass
from balancer.sim import ServiceSpec, SimCluster, TrainingJobSpec
from balancer.telemetry.sim import SimTelemetrySource

TRAIN = WorkloadClass.TRAINING


def test_owed_workers_are_the_workers_before_less_the_pods_the_job_has_now():
    fl = make_fleet(2, 4)
    pods = [(workload(f"hot-{i}", TRAIN, owner="hot"), (i,)) for i in range(3)]
    pods += [(workload(f"co-{i}", TRAIN, owner="co"), (4 + i,)) for i in range(2)]
    pods += [(workload("co-pending", TRAIN, owner="co"), ())]   # pending pods count: the job asks for them
    pods += [(workload(f"both-{i}", TRAIN, owner="both"), (7,)) for i in range(1)]
    snap = snapshot(fl, workloads=pods)
    owed = shrunk_workers(snap, {"hot": 4, "both": 3, "grown": 2}, {"co": (5, "svc"), "both": (2, "svc")})
    # hot: 4 - 3; co: 5 - 3; both: co-location's 2 - 1, the hotspot's 3 - 2 beyond it; grown (no pod left): 2
    assert owed == {"hotspot": 1 + 1 + 2, "colocation": 2 + 1}


def test_owed_workers_are_at_most_what_the_job_can_run():
    fl = make_fleet(2, 4)
    pods = [(workload(f"co-{i}", TRAIN, owner="co", elastic_max=3), (i,)) for i in range(2)]
    assert shrunk_workers(snapshot(fl, workloads=pods), {}, {"co": (5, "svc")}) == {"hotspot": 0, "colocation": 1}


def gauge(registry: CollectorRegistry, cause: str) -> float | None:
    return registry.get_sample_value("gputide_shrunk_workers", {"cause": cause})


def test_the_loop_reports_a_hotspot_shrink_until_its_workers_are_given_back():
    fl = fleet_mod.build("t", [Node(name=f"n{i}", gpu_model="A100-SXM4-80GB", gpu_count=4) for i in range(2)])
    sim = SimCluster(fl, seed=0, step_s=60.0)
    sim.add_training_job(TrainingJobSpec(name="job", workers=4, elastic_max=4))
    sim.add_service(ServiceSpec(name="svc", replicas=4))   # fills n1: no migration target, the job is shrunk
    node = fl.gpus[sim.placements["training/job-w0"][0]].node
    sim.degrade_cooling(node, inlet_rise_c=30, resistance_factor=2.0)
    registry = CollectorRegistry()
    rec = Reconciler(source=SimTelemetrySource(sim), actuator=SimActuator(sim), clock=lambda: sim.time,
                     metrics=ControllerMetrics(registry))
    assert gauge(registry, "hotspot") == 0 and gauge(registry, "colocation") == 0   # both series from the start
    seen = []
    for _ in range(8):
        sim.step()
        rec.run_once()
        seen.append(gauge(registry, "hotspot"))
    assert sim.workers("job") == 3 and seen[-1] == 1, seen   # reported from the cycle after the shrink
    sim.restore_cooling(node)
    for _ in range(30):
        sim.step()
        rec.run_once()
        if sim.workers("job") == 4:
            break
    sim.step()
    rec.run_once()
    assert sim.workers("job") == 4 and gauge(registry, "hotspot") == 0
    rec.metrics.standby()
    assert gauge(registry, "hotspot") == 0
