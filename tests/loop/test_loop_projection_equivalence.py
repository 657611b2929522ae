"""The undo-log projection decides exactly what the clone-per-action projection decided.

`simulate_plan` applies each proposal in place and rolls it back when it does not fit or does not help, with the
objective kept as running totals; `simulate_cloning` below is the original path (a full copy of the projection
per proposal, the objective recomputed from the arrays, services found by scanning every workload).
On random fleets, workloads, services and action sequences (valid and invalid ones, in any order) both keep the
same actions with the same gains, drop the same actions for the same reasons, and leave a projection passed in
as it came.
"""

from __future__ import annotations

from dataclasses import replace
from types import MethodType

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from loop_helpers import make_fleet, snapshot, workload

from balancer.config import BalancerPolicy
from balancer.model import Migrate, ScaleTraining, ServiceStatus, SetPowerLimit, TaintNode, WorkloadClass
from balancer.plan.simulate import Projection, SimulationResult, simulate_plan

MODELS = ["A100-SXM4-80GB", "H100-SXM", "L40S"]
POLICY = BalancerPolicy()


def scan_sharing(self: Projection, members) -> set[str]:
    """The original lookup: scan every workload for inference on the members' GPUs (O(workloads) per shrink)."""
    gpus = {g for w in members for g in self.placements[w.name]}
    return {w.owner for w in self.snapshot.workloads
            if w.workload_class == WorkloadClass.INFERENCE and w.owner in self.slo_ratio
            and gpus.intersection(self.placements.get(w.name, ()))}


def scanning(p: Projection) -> Projection:
    p._services_sharing = MethodType(scan_sharing, p)
    return p


def simulate_cloning(proj: Projection, actions) -> SimulationResult:
    """The original simulate_plan: every action on a fresh clone, the objective recomputed from the arrays."""
    before = current = proj.objective()
    kept, dropped = [], []
    for action in actions:
        trial = scanning(proj.clone())
        why = trial.apply(action)
        if why is not None:
            dropped.append((action, why))
            continue
        after = trial.objective()
        if after >= current - 1e-9:
            dropped.append((action, f"does not improve the objective ({current:.3g} -> {after:.3g})"))
            continue
        kept.append(replace(action, expected_gain=round(current - after, 6)))
        proj, current = trial, after
    return SimulationResult(tuple(kept), tuple(dropped), before, current)


@st.composite
def cases(draw):
    nodes, per = draw(st.integers(2, 4)), draw(st.integers(1, 4))
    fl = make_fleet(nodes, per, models=[draw(st.sampled_from(MODELS)) for _ in range(nodes)])
    n = fl.n_gpus
    placed, milli = [], np.zeros(n, int)
    for i in range(draw(st.integers(1, 2 * n))):
        g = draw(st.integers(0, n - 1))
        m = draw(st.sampled_from([250, 500]))
        if milli[g] + m > 1000:
            continue
        milli[g] += m
        cls = draw(st.sampled_from([WorkloadClass.INFERENCE, WorkloadClass.TRAINING]))
        owner = f"svc{i % 3}" if cls is WorkloadClass.INFERENCE else f"job{i % 3}"
        placed.append((workload(f"w{i}-0", cls, owner=owner, milli=m, mem=4096, elastic_min=1), (g,)))
    services = {f"svc{k}": ServiceStatus(name=f"svc{k}", demand_rps=10.0, p99_latency_s=draw(st.floats(0.05, 0.3)),
                                         slo_latency_s=0.2, replicas=2) for k in range(3)}
    temps = {g: draw(st.floats(60, 95)) for g in range(n) if draw(st.booleans())}
    snap = snapshot(fl, workloads=placed, temps=temps, services=services)
    actions = []
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["migrate", "power", "taint", "scale"]))
        if kind == "migrate" and placed:
            w, src = draw(st.sampled_from(placed))
            dst = draw(st.integers(0, n - 1))
            actions.append(Migrate(workload=w.name, source_gpus=src, target_gpus=(dst,),
                                   target_node=fl.gpus[dst].node, reason="test"))
        elif kind == "power":
            g = draw(st.integers(0, n - 1))
            actions.append(SetPowerLimit(gpu=g, uuid=fl.gpus[g].uuid, node=fl.gpus[g].node,
                                         watts=draw(st.floats(50, 800)), previous_watts=700.0, reason="test"))
        elif kind == "taint":
            actions.append(TaintNode(node=f"n{draw(st.integers(0, nodes - 1))}", remove=draw(st.booleans()),
                                     reason="test"))
        else:
            actions.append(ScaleTraining(job=f"job{draw(st.integers(0, 2))}", workers=draw(st.integers(0, 4)),
                                         previous_workers=2, reason="test"))
    hot = {f"n{k}" for k in range(nodes) if draw(st.booleans())}
    return snap, actions, hot


def _state(p: Projection) -> tuple:
    return (p.temp.copy(), p.power.copy(), p.limit.copy(), p.milli.copy(), p.mem.copy(), dict(p.placements),
            dict(p.workers), set(p.tainted), dict(p.slo_ratio), p.migrations, p.shrunk_workers, p.objective())


def _compare(snap, actions, hot):
    proj = Projection(snap, POLICY, hot_nodes=hot)
    before = _state(proj)
    new = simulate_plan(snap, actions, POLICY, projection=proj)
    after = _state(proj)
    ref = simulate_cloning(Projection(snap, POLICY, hot_nodes=hot), actions)
    assert [a.__class__(**{**a.__dict__, "expected_gain": 0.0}) for a in new.kept] == \
        [a.__class__(**{**a.__dict__, "expected_gain": 0.0}) for a in ref.kept]
    assert [a.expected_gain for a in new.kept] == pytest.approx([a.expected_gain for a in ref.kept], abs=2e-6)
    assert [(a, why.split(" (")[0]) for a, why in new.dropped] == [(a, why.split(" (")[0]) for a, why in ref.dropped]
    assert new.objective_before == pytest.approx(ref.objective_before, abs=1e-6)
    assert new.objective_after == pytest.approx(ref.objective_after, abs=1e-6)
    for x, y in zip(before, after, strict=True):   # the projection passed in is left as it came
        assert np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y
    return ref


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_the_undo_log_projection_decides_what_cloning_decided(case):
    ref = _compare(*case)
    event(f"kept {min(len(ref.kept), 3)} action(s), dropped {min(len(ref.dropped), 3)} (capped at 3)")


def _shared_case(migrate_first: bool):
    fl = make_fleet(2, 2)
    inf = workload("api-0", owner="svc0", milli=500, mem=4096)
    job = workload("train-0", WorkloadClass.TRAINING, owner="job0", milli=500, mem=4096, elastic_min=1)
    job2 = workload("train-1", WorkloadClass.TRAINING, owner="job0", milli=500, mem=4096, elastic_min=1)
    slow = {"svc0": ServiceStatus(name="svc0", demand_rps=1.0, p99_latency_s=0.3, slo_latency_s=0.2, replicas=1)}
    snap = snapshot(fl, workloads=[(inf, (0,)), (job, (1,)), (job2, (2,))], services=slow, temps={0: 90.0})
    move = Migrate(workload=inf.name, source_gpus=(0,), target_gpus=(1,), target_node="n0", reason="test")
    shrink = ScaleTraining(job="job0", workers=1, previous_workers=2, reason="test")
    return snap, ([move, shrink] if migrate_first else [shrink, move])


@pytest.mark.parametrize("migrate_first", [True, False],
                         ids=["a service migrated onto a training GPU is relieved by the shrink that follows",
                              "a shrink before the service moves relieves nobody"])
def test_services_sharing_follows_migrations_inside_the_plan(migrate_first):
    snap, actions = _shared_case(migrate_first)
    proj = Projection(snap, POLICY)
    for a in actions:
        assert proj.apply(a) is None
    ref = scanning(Projection(snap, POLICY))
    for a in actions:
        ref.apply(a)
    assert proj.slo_ratio == ref.slo_ratio
    assert (proj.slo_ratio["svc0"] < 0.9 * snap.services["svc0"].p99_latency_s / 0.2) is migrate_first
    _compare(snap, actions, set())


def test_running_objective_matches_the_full_recomputation_after_rollbacks():
    snap, actions = _shared_case(True)
    proj = Projection(snap, POLICY, hot_nodes={"n0"})
    mark = proj.checkpoint()
    for a in [*actions, TaintNode(node="n0", reason="t"), TaintNode(node="n1", reason="t")]:
        proj.apply(a)
        assert proj.running_objective() == pytest.approx(proj.objective(), abs=1e-9)
    proj.rollback(mark)
    assert proj.running_objective() == pytest.approx(Projection(snap, POLICY, hot_nodes={"n0"}).objective())
    assert proj.placements == dict(snap.placements) and proj.migrations == 0


def usage_by_placements(s):
    """The original per-GPU usage: walk the placements of known workloads."""
    used, mem, workers = np.zeros(s.n_gpus), np.zeros(s.n_gpus), {}
    for name, gpus in s.placements.items():
        w = s.workload_by_name.get(name)
        if w is None:
            continue
        for g in gpus:
            used[g] += w.gpu_milli
            mem[g] += w.gpu_memory_mib
        if w.workload_class == WorkloadClass.TRAINING:
            workers[w.owner] = workers.get(w.owner, 0) + 1
    return used, mem, workers


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.booleans())
def test_usage_from_the_cached_columns_matches_the_placements(case, unplaced):
    from balancer.plan.columns import gpu_usage

    snap = case[0]
    if unplaced:   # workloads without a placement, and a placement whose workload is unknown
        extra = workload("ghost-0", WorkloadClass.TRAINING, owner="job9", milli=250, mem=1)
        snap = snap.replace(workloads=(*snap.workloads, extra), placements={**snap.placements, "nobody": (0,)})
    used, mem, workers = gpu_usage(snap)
    ref_used, ref_mem, ref_workers = usage_by_placements(snap)
    assert np.array_equal(used, ref_used) and np.allclose(mem, ref_mem) and workers == ref_workers
