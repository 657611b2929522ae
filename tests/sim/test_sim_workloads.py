"""Inference latency, training progress and checkpoints, placement verbs, scheduling and faults."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from balancer.sim import ServiceSpec, SimCluster, TrainingJobSpec
from balancer.sim.workloads import P99_CAP_S
from tests.sim.conftest import batch, small_fleet


def _service_sim(load_fraction: float, replicas: int = 2, **spec_kw) -> tuple[SimCluster, ServiceSpec]:
    sim = SimCluster(small_fleet(), seed=0)
    capacity = 20.0 * replicas  # A100: rps_a100 per GPU
    spec = ServiceSpec(name="chat", replicas=replicas, demand=lambda t: load_fraction * capacity, **spec_kw)
    sim.add_service(spec)
    return sim, spec


@pytest.mark.parametrize("load", [0.2, 0.5, 0.8], ids=["light load", "half load", "heavy load"])
def test_slo_violations_follow_the_mm1_tail_below_capacity(load):
    sim, spec = _service_sim(load)
    sim.advance_to(600)
    s = sim.stats()["inference"]["chat"]
    assert s["requests"] == pytest.approx(load * 40.0 * 600)
    mu = 20.0
    expected = math.exp(-mu * (1 - load) * (spec.slo_latency_s - spec.base_latency_s))
    assert s["slo_violations"] / s["requests"] == pytest.approx(expected, rel=1e-6)


def test_latency_rises_as_load_approaches_capacity():
    p99 = []
    for load in (0.2, 0.5, 0.8, 0.95):
        sim, _ = _service_sim(load)
        sim.step()
        p99.append(sim.service_status()["chat"].p99_latency_s)
    assert all(a < b for a, b in zip(p99, p99[1:]))
    assert p99[0] == pytest.approx(0.1 + math.log(100) / (40 * 0.8 / 2), rel=1e-6)


def test_overload_collapses_the_queue_every_request_violates_and_p99_hits_the_cap():
    sim, _ = _service_sim(1.3)
    sim.advance_to(300)
    s = sim.stats()["inference"]["chat"]
    assert s["slo_violations"] == pytest.approx(s["requests"])
    assert sim.service_status()["chat"].p99_latency_s == P99_CAP_S


def test_new_replicas_warm_up_before_they_serve():
    sim, _ = _service_sim(0.9, replicas=1, warmup_s=300.0)
    sim.scale_service("chat", 2)          # demand 18 rps; one replica serves 20 rps
    sim.step()
    assert len(sim.placements) == 2
    assert sim.service_status()["chat"].p99_latency_s > 2.0  # still one replica: rho = 0.9
    sim.advance_to(sim.time + 300)
    sim.step()
    assert sim.service_status()["chat"].p99_latency_s < 0.6  # two replicas: rho = 0.45


def test_sharing_a_gpu_with_training_cuts_inference_capacity():
    sim = SimCluster(small_fleet(nodes=1, gpus=1), seed=0)
    sim.add_service(ServiceSpec(name="s", replicas=1, gpu_milli=500, gpu_memory_mib=1000, demand=lambda t: 5.0))
    sim.step()
    alone = sim.service_status()["s"].p99_latency_s
    sim.add_training_job(TrainingJobSpec(name="j", workers=1, gpu_milli=500, gpu_memory_mib=1000))
    assert sim.placements["training/j-w0"] == (0,)
    sim.step()
    assert sim.service_status()["s"].p99_latency_s > alone


@pytest.mark.parametrize(("model", "gpu_hours_per_hour"), [("A100-SXM4-80GB", 1.0), ("H100-SXM", 2.5), ("T4", 0.1)])
def test_training_progress_is_counted_in_a100_equivalent_gpu_hours(model, gpu_hours_per_hour):
    sim = SimCluster(small_fleet(model, nodes=1, gpus=2), seed=0)
    sim.add_training_job(TrainingJobSpec(name="j", workers=2, gpu_memory_mib=1000))
    sim.advance_to(3600)
    assert sim.stats()["training"]["j"]["progress_gpu_hours"] == pytest.approx(2 * gpu_hours_per_hour, rel=0.02)
    assert sim.stats()["training"]["j"]["gpu_seconds"] == pytest.approx(2 * 3600)


def test_evicting_a_worker_rolls_the_job_back_to_its_last_checkpoint():
    sim = SimCluster(small_fleet(), seed=0)
    sim.add_training_job(TrainingJobSpec(name="j", workers=1, checkpoint_interval_s=1800, gpu_memory_mib=1000))
    sim.advance_to(2700)  # 45 minutes: checkpoint at 30
    assert sim.evict("training/j-w0") is True
    assert sim.evict("training/j-w0") is False
    s = sim.stats()["training"]["j"]
    assert s["progress_gpu_hours"] == pytest.approx(0.5, rel=0.02)
    assert s["lost_work_gpu_hours"] == pytest.approx(0.25, rel=0.05)
    assert s["preemptions"] == 1
    sim.step()
    assert "training/j-w0" in sim.placements  # requeued and rescheduled


def test_a_graceful_scale_down_checkpoints_first_and_loses_nothing():
    sim = SimCluster(small_fleet(), seed=0)
    sim.add_training_job(TrainingJobSpec(name="j", workers=4, elastic_min=2, gpu_memory_mib=1000))
    sim.advance_to(2700)
    sim.scale_training("j", 2, checkpoint_first=True)
    s = sim.stats()["training"]["j"]
    assert s["lost_work_gpu_hours"] == 0.0 and s["preemptions"] == 0
    assert sim.workers("j") == 2 and sum(1 for k in sim.placements if k.startswith("training/j-")) == 2


def test_a_job_below_its_elastic_minimum_makes_no_progress():
    sim = SimCluster(small_fleet(nodes=1, gpus=2), seed=0)
    sim.add_training_job(TrainingJobSpec(name="j", workers=3, elastic_min=3, gpu_memory_mib=1000))
    sim.advance_to(3600)
    assert sim.stats()["training"]["j"]["progress_gpu_hours"] == 0.0
    assert len(sim.pending) == 1


def test_a_finite_job_completes_and_frees_its_gpus():
    sim = SimCluster(small_fleet(), seed=0)
    sim.add_training_job(TrainingJobSpec(name="j", workers=2, gpu_memory_mib=1000, total_work_gpu_hours=1.0))
    sim.advance_to(3 * 3600)
    s = sim.stats()["training"]["j"]
    assert s["done"] and s["progress_gpu_hours"] == pytest.approx(1.0)
    assert not sim.placements and sim.used_milli.sum() == 0


def test_migrate_moves_the_workload_and_keeps_it_placed():
    sim = SimCluster(small_fleet(), seed=0)
    sim.submit(batch("a"))
    sim.schedule()
    src = sim.placements["batch/a"]
    assert sim.migrate("batch/a", (5,)) is True
    assert sim.placements["batch/a"] == (5,)
    assert sim.used_milli[src[0]] == 0 and sim.used_milli[5] == 1000


@pytest.mark.parametrize("target", [(1,), (1, 2), (99,), (4,)],
                         ids=["occupied GPU", "wrong GPU count", "no such GPU", "tainted node"])
def test_a_migration_whose_target_does_not_fit_fails_and_changes_nothing(target):
    sim = SimCluster(small_fleet(), seed=0)
    sim.submit(batch("a"))
    sim.submit(batch("b"))
    sim.schedule()
    sim.add_taint("n1")
    before = dict(sim.placements), sim.used_milli.copy()
    assert sim.migrate("batch/a", target) is False
    assert dict(sim.placements) == before[0] and np.array_equal(sim.used_milli, before[1])


@pytest.mark.parametrize(("workload", "allowed_gpus"), [
    (batch("h", models=frozenset({"H100-SXM"})), set()),
    (batch("big", mem=90_000), set()),
    (batch("pair", gpus=2), {0, 1, 2, 3}),
    (batch("fits"), {0, 1, 2, 3}),
], ids=["model not in fleet", "more memory than a GPU has", "multi-GPU pod on one untainted node",
        "tainted node avoided"])
def test_the_default_scheduler_honours_models_memory_nodes_and_taints(workload, allowed_gpus):
    sim = SimCluster(small_fleet(), seed=0)
    sim.add_taint("n1")
    sim.submit(workload)
    sim.schedule()
    got = set(sim.placements.get(workload.name, ()))
    assert got <= allowed_gpus and (bool(got) == bool(allowed_gpus))


def test_a_failed_gpu_goes_offline_and_its_pods_are_rescheduled_elsewhere():
    sim = SimCluster(small_fleet(), seed=0)
    sim.add_training_job(TrainingJobSpec(name="j", workers=2, gpu_memory_mib=1000))
    sim.advance_to(600)
    gpu = sim.placements["training/j-w0"][0]
    sim.fail_gpu(gpu)
    sim.step()
    assert not sim.online[gpu] and sim.xid[gpu] == 79 and sim.power_w[gpu] == 0.0
    assert gpu not in {g for gs in sim.placements.values() for g in gs}
    assert len(sim.placements) == 2
    assert sim.stats()["training"]["j"]["preemptions"] == 1


@pytest.mark.parametrize(("fault", "xid"), [("ecc_error", 48), ("row_remap_failure", 64)],
                         ids=["a double-bit ECC error", "a failed row remap"])
def test_a_memory_fault_sets_its_xid_and_keeps_new_work_off_the_gpu_until_repaired(fault, xid):
    sim = SimCluster(small_fleet(nodes=1, gpus=2), seed=0)
    sim.submit(batch("a"))
    sim.schedule()
    gpu = sim.placements["batch/a"][0]
    getattr(sim, fault)(gpu)
    sim.step()
    assert sim.xid[gpu] == xid and sim.online[gpu] and sim.snapshot().memory_unhealthy[gpu]
    assert sim.placements["batch/a"] != (gpu,)
    sim.repair_gpu(gpu)
    assert sim.xid[gpu] == 0 and not sim.snapshot().memory_unhealthy.any()


def test_a_timed_cooling_fault_heals_itself():
    sim = SimCluster(small_fleet(), seed=0)
    sim.degrade_cooling("n0", inlet_rise_c=10.0, duration_s=600)
    sim.advance_to(1200)
    assert sim.node_inlet_rise_c[0] == 0.0


def test_pending_waits_are_accounted():
    sim = SimCluster(small_fleet(nodes=1, gpus=1), seed=0)
    sim.submit(batch("a"))
    sim.submit(batch("b"))
    sim.advance_to(5 * 3600)
    p = sim.stats()["pending"]
    assert p["max_wait_s"] >= 5 * 3600 - 60 and p["waiting_over_4h"] == 1


def test_the_snapshot_carries_workloads_placements_services_and_taints():
    sim, _ = _service_sim(0.5)
    sim.add_taint("n1")
    sim.step()
    snap = sim.snapshot(sample_age_s=15.0)
    assert snap.n_gpus == sim.n_gpus and (snap.sample_age_s == 15.0).all()
    assert set(snap.placements) == set(sim.placements) and "chat" in snap.services
    assert snap.nodes[1].taints and not snap.nodes[0].taints
    assert snap.gpu_milli_used.sum() == 2000


_ops = st.lists(st.tuples(st.sampled_from(["submit", "evict", "migrate", "fail", "repair", "step", "scale"]),
                          st.integers(0, 7), st.sampled_from([250, 500, 1000])), max_size=30)


@settings(max_examples=40, deadline=None)
@given(_ops)
def test_any_sequence_of_operations_keeps_gpu_accounting_consistent(ops):
    sim = SimCluster(small_fleet(), seed=1, step_s=120)
    sim.add_training_job(TrainingJobSpec(name="j", workers=2, gpu_memory_mib=30000))
    for k, (op, gpu, milli) in enumerate(ops):
        names = sorted(sim.placements)
        if op == "submit":
            sim.submit(batch(f"p{k}", milli=milli, mem=10000), duration_s=300)
        elif op == "evict" and names:
            sim.evict(names[gpu % len(names)])
        elif op == "migrate" and names:
            sim.migrate(names[gpu % len(names)], (gpu,))
        elif op == "fail":
            sim.fail_gpu(gpu)
        elif op == "repair":
            sim.repair_gpu(gpu)
        elif op == "scale":
            sim.scale_training("j", gpu % 4)
        else:
            sim.step()
    used = np.zeros(sim.n_gpus)
    mem = np.zeros(sim.n_gpus)
    for name, gpus in sim.placements.items():
        w = sim.workloads[name]
        used[list(gpus)] += w.gpu_milli
        mem[list(gpus)] += w.gpu_memory_mib
        assert sim.online[list(gpus)].all()
    assert np.array_equal(used, sim.used_milli) and np.allclose(mem, sim.mem_used_mib)
    assert (sim.used_milli <= 1000).all() and (sim.mem_used_mib <= sim.mem_total_mib).all()
    assert set(sim.pending).isdisjoint(sim.placements)


def test_a_custom_scheduler_is_used_and_its_placements_are_checked_again():
    sim = SimCluster(small_fleet(), seed=0)
    calls = []

    def last_gpu_first(view, pending):
        calls.append(len(pending))
        return [(w.name, (sim.n_gpus - 1,)) for w in pending]  # optimistic: all on one GPU

    sim.set_scheduler(last_gpu_first)
    sim.submit(batch("a"))
    sim.submit(batch("b"))
    sim.step()
    assert calls == [2]
    assert sim.placements == {"batch/a": (sim.n_gpus - 1,)} and sim.pending == ("batch/b",)


def test_place_binds_a_pending_pod_only_where_it_fits():
    sim = SimCluster(small_fleet(), seed=0)
    sim.set_scheduler(lambda view, pending: [])
    sim.submit(batch("a", gpus=2))
    assert sim.place("batch/a", (3, 4)) is False  # two nodes
    assert sim.place("batch/a", (2, 3)) is True
    assert sim.place("batch/a", (0, 1)) is False  # no longer pending
    assert sim.placements["batch/a"] == (2, 3)


def test_scaling_a_service_down_removes_pending_replicas_before_running_ones():
    sim = SimCluster(small_fleet(nodes=1, gpus=2), seed=0)
    sim.add_service(ServiceSpec(name="s", replicas=3, gpu_memory_mib=1000, demand=lambda t: 1.0))
    assert len(sim.placements) == 2 and len(sim.pending) == 1
    sim.scale_service("s", 2)
    assert len(sim.placements) == 2 and not sim.pending and sim.replicas("s") == 2
    sim.scale_service("s", 1)
    assert list(sim.placements) == ["inference/s-0"]
