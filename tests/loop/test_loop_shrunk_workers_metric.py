"""`gputide_shrunk_workers{cause}`: the workers gputide took from training jobs and still owes back, by the planner
that took them. A shrink that is never given back (a node that never cools, a service that never gets slack) was
visible only in the audit log; the gauge shows it, and `gputide_shrunk_longest_seconds{cause}` (the alert
`GputideTrainingShrunkTooLong` on it) how long one job has owed."""

from __future__ import annotations

from types import SimpleNamespace

from loop_helpers import make_fleet, snapshot, workload
from prometheus_client import CollectorRegistry

from balancer import fleet as fleet_mod
from balancer.actuate.sim import SimActuator
from balancer.fleet_record import FleetRecorder
from balancer.fleet_usage import owed_workers
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
    pods += [(workload(f"full-{i}", TRAIN, owner="full"), (3,)) for i in range(3)]   # given back: owes nothing
    snap = snapshot(fl, workloads=pods)
    owed = owed_workers(snap, {"hot": 4, "both": 3, "grown": 2, "full": 3},
                        {"co": (5, "svc"), "both": (2, "svc")})
    # hot: 4 - 3; co: 5 - 3; both: co-location's 2 - 1, the hotspot's 3 - 2 beyond it; grown (no pod left): 2;
    # full has its 3 back: left out
    assert owed == {"hotspot": {"hot": 1, "both": 1, "grown": 2}, "colocation": {"co": 2, "both": 1}}


def test_owed_workers_are_at_most_what_the_job_can_run():
    fl = make_fleet(2, 4)
    pods = [(workload(f"co-{i}", TRAIN, owner="co", elastic_max=3), (i,)) for i in range(2)]
    assert owed_workers(snapshot(fl, workloads=pods), {}, {"co": (5, "svc")}) == {
        "hotspot": {}, "colocation": {"co": 1}}


def gauge(registry: CollectorRegistry, cause: str, name: str = "gputide_shrunk_workers") -> float | None:
    return registry.get_sample_value(name, {"cause": cause})


def longest(registry: CollectorRegistry, cause: str) -> float | None:
    return gauge(registry, cause, "gputide_shrunk_longest_seconds")


def test_the_longest_debt_is_timed_per_job_so_consecutive_shrinks_of_different_jobs_do_not_add_up():
    fl = make_fleet(2, 4)
    registry = CollectorRegistry()
    recorder = FleetRecorder(ControllerMetrics(registry))

    def cycle(now: float, a: int, b: int, shrunk: dict, co: dict) -> None:
        pods = [(workload(f"a-{i}", TRAIN, owner="a"), (i,)) for i in range(a)]
        pods += [(workload(f"b-{i}", TRAIN, owner="b"), (4 + i,)) for i in range(b)]
        state = SimpleNamespace(shrunk=shrunk, colocation=SimpleNamespace(shrunk=co))
        recorder.record(snapshot(fl, workloads=pods), state, None, None, 3600.0, now)

    cycle(0.0, 3, 4, {"a": 4}, {})
    assert gauge(registry, "hotspot") == 1 and longest(registry, "hotspot") == 0.0
    cycle(3 * 3600.0, 3, 3, {"a": 4, "b": 4}, {})   # a still owed, b shrunk now
    assert gauge(registry, "hotspot") == 2 and longest(registry, "hotspot") == 3 * 3600.0
    cycle(5 * 3600.0, 4, 3, {"b": 4}, {"a": (5, "svc")})   # a's hotspot debt paid; co-location now owes it 1
    assert gauge(registry, "hotspot") == 1 and longest(registry, "hotspot") == 2 * 3600.0   # b's, not a's 5 h
    assert gauge(registry, "colocation") == 1 and longest(registry, "colocation") == 0.0
    cycle(6 * 3600.0, 4, 4, {}, {})
    assert longest(registry, "hotspot") == 0.0 and longest(registry, "colocation") == 0.0
    cycle(7 * 3600.0, 4, 3, {"b": 4}, {})
    recorder.restart()   # a new term as leader: the clocks start again
    cycle(8 * 3600.0, 4, 3, {"b": 4}, {})
    assert longest(registry, "hotspot") == 0.0
    recorder.metrics.standby()
    assert gauge(registry, "hotspot") == 0 and longest(registry, "hotspot") == 0


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
    assert longest(registry, "hotspot") == 60.0 * (len(seen) - seen.index(1) - 1)   # since the first cycle owed
    sim.restore_cooling(node)
    for _ in range(30):
        sim.step()
        rec.run_once()
        if sim.workers("job") == 4:
            break
    sim.step()
    rec.run_once()
    assert sim.workers("job") == 4 and gauge(registry, "hotspot") == 0 and longest(registry, "hotspot") == 0
    rec.metrics.standby()
    assert gauge(registry, "hotspot") == 0
