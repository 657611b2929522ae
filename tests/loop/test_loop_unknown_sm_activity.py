"""An unknown SM activity (NaN: the exporter declares the board has none, an A100/A30 in MIG mode) never drives an
action: the planner decides as it would on a GPU reading fully busy, never as on an idle one (0), and the loop's
telemetry guard holds still for a NaN temperature but not for an unknown SM activity."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from loop_helpers import make_fleet, snapshot, workload

from balancer import safety
from balancer.config import BalancerPolicy, SafetyPolicy
from balancer.errors import InvalidTelemetry
from balancer.model import ServiceStatus, WorkloadClass
from balancer.plan.planner import PlannerState, plan

FL = make_fleet(3, 4)  # n0: GPUs 0-3, n1: 4-7, n2: 8-11
T = WorkloadClass.TRAINING


def _colocated(p99: float):
    svc = workload("svc-0", milli=500)
    job = [workload(f"job-{i}", T, owner="job", milli=500, mem=20480, elastic_min=1, elastic_max=8,
                   priority=10) for i in range(3)]
    services = {"svc": ServiceStatus(name="svc", demand_rps=10, p99_latency_s=p99, slo_latency_s=0.5, replicas=1)}
    return snapshot(FL, workloads=[(svc, (0,)), (job[0], (0,)), (job[1], (4,)), (job[2], (8,))], services=services)


SCENES = {
    "a cool fleet with idle GPUs": snapshot(FL, workloads=[(workload("svc-0"), (0,))]),
    "a hot GPU with free GPUs elsewhere": snapshot(FL, workloads=[(workload("svc-0"), (0,))],
                                                   temps={0: 86, 8: 40, 4: 50}),
    "a hot GPU in a full fleet": snapshot(FL, workloads=[(workload(f"svc-{i}"), (i,)) for i in range(12)],
                                          temps={0: 86}),
    "inference near its SLO beside training": _colocated(0.45),
    "inference with slack beside training": _colocated(0.1),
}
UNKNOWN = {"every GPU": np.arange(FL.n_gpus), "the idle GPUs": np.arange(1, FL.n_gpus), "the hot GPU": np.array([0])}


def _with_sm(snap, gpus, value):
    sm = np.array(snap.sm_active, dtype=float)
    sm[gpus] = value
    return replace(snap, sm_active=sm)


def _actions(snap):
    state, out = PlannerState(), []
    for k in range(3):   # hotspots need consecutive readings
        p, state = plan(replace(snap, time=snap.time + 60 * k), None, BalancerPolicy(), state)
        out.append(p.actions)
    return out


@pytest.mark.parametrize("unknown", UNKNOWN.values(), ids=list(UNKNOWN))
@pytest.mark.parametrize("scene", SCENES.values(), ids=list(SCENES))
def test_an_unknown_sm_activity_plans_as_a_busy_gpu_never_as_an_idle_one(scene, unknown):
    assert _actions(_with_sm(scene, unknown, np.nan)) == _actions(_with_sm(scene, unknown, 1.0))


def test_the_scenes_are_ones_where_the_planner_acts():
    """Otherwise the comparison above would hold for a planner that does nothing at all."""
    acted = [name for name, scene in SCENES.items() if any(_actions(_with_sm(scene, UNKNOWN["every GPU"], np.nan)))]
    assert acted == ["a hot GPU with free GPUs elsewhere", "a hot GPU in a full fleet",
                     "inference near its SLO beside training"]


@pytest.mark.parametrize(("field", "value", "held"), [
    ("sm_active", np.nan, False),
    ("sm_active", np.inf, True),
    ("temperature_c", np.nan, True),
    ("power_w", np.nan, True),
], ids=["an unknown SM activity is acted on", "an infinite SM activity holds still",
        "a GPU without temperature holds still", "a GPU without power holds still"])
def test_the_telemetry_guard_lets_only_sm_activity_be_unknown(field, value, held):
    snap = snapshot(FL, workloads=[(workload("svc-0"), (0,))])
    arr = np.array(getattr(snap, field), dtype=float)
    arr[3] = value
    snap = replace(snap, **{field: arr})
    if held:
        with pytest.raises(InvalidTelemetry, match=field):
            safety.check_telemetry(snap, SafetyPolicy())
    else:
        assert safety.check_telemetry(snap, SafetyPolicy()) == pytest.approx(5.0)
