"""Planner decisions on hand-built fleets: one named case per behaviour."""

from __future__ import annotations

from dataclasses import replace

import pytest
from loop_helpers import make_fleet, snapshot, workload

from balancer.audit import reason_label
from balancer.config import BalancerPolicy
from balancer.model import Migrate, ScaleTraining, ServiceStatus, SetPowerLimit, TaintNode, WorkloadClass
from balancer.plan.planner import PlannerState, acknowledge, plan

T = WorkloadClass.TRAINING
FL = make_fleet(3, 4)  # n0: GPUs 0-3, n1: 4-7, n2: 8-11 (A100: slowdown 89 C)


def run(snaps, policy=None, state=None):
    state = state or PlannerState()
    out = None
    for s in snaps:
        out, state = plan(s, None, policy or BalancerPolicy(), state)
    return out, state


def kinds(p):
    return sorted(a.kind for a in p.actions)


def inf(i, **kw):
    return workload(f"svc-{i}", **kw)


CASES = {
    "a cool fleet needs nothing": dict(
        snaps=[snapshot(FL, workloads=[(inf(0), (0,))])] * 3, expect=[]),
    "one hot reading is not enough when N is 2": dict(
        snaps=[snapshot(FL, workloads=[(inf(0), (0,))], temps={0: 86})], expect=[]),
    "two hot readings move the workload to the coolest GPU on another node and taint the node": dict(
        snaps=[snapshot(FL, workloads=[(inf(0), (0,))], temps={0: 86, 8: 40, 4: 50})] * 2,
        expect=["migrate", "taint_node"], target=(8,)),
    "a protected workload is throttled, never moved": dict(
        snaps=[snapshot(FL, workloads=[(inf(0, protected=True), (0,))], temps={0: 86})] * 2,
        expect=["power_limit", "taint_node"]),
    "a non-movable workload is throttled, never moved": dict(
        snaps=[snapshot(FL, workloads=[(inf(0, movable=False), (0,))], temps={0: 86})] * 2,
        expect=["power_limit", "taint_node"]),
    "a workload in a protected namespace is throttled, never moved": dict(
        snaps=[snapshot(FL, workloads=[(inf(0, namespace="kube-system"), (0,))], temps={0: 86})] * 2,
        expect=["power_limit", "taint_node"]),
    "with no GPU free anywhere the hot GPU is throttled": dict(
        snaps=[snapshot(FL, workloads=[(inf(i), (i,)) for i in range(12)], temps={0: 86})] * 2,
        expect=["power_limit", "taint_node"]),
    "targets too warm to take the work leave throttling": dict(
        snaps=[snapshot(FL, workloads=[(inf(0), (0,))], temps={0: 86}, base_temp=80)] * 2,
        expect=["power_limit", "taint_node"]),
    "thermal slowdown bits make a reading hot": dict(
        snaps=[snapshot(FL, workloads=[(inf(0), (0,))], temps={0: 75}, reasons={0: 0x20})] * 2,
        expect=["migrate", "taint_node"]),
    # a real H200 under a bf16 load: 692 W at its 700 W default limit, software power cap set, 61 C (slowdown 89 C)
    "a GPU busy at its default power limit, far from slowdown, leaves its node open": dict(
        snaps=[snapshot(FL, workloads=[(inf(0), (0,))], reasons={0: 0x04}, temps={0: 61.0})] * 3, expect=[]),
    "the hardware power brake keeps new work off the node": dict(
        snaps=[snapshot(FL, workloads=[(inf(0), (0,))], reasons={0: 0x80}, temps={0: 61.0})] * 2,
        expect=["taint_node"]),
    "power capping on a GPU within the release margin of slowdown is heat: the node is tainted": dict(
        snaps=[snapshot(FL, workloads=[(inf(0), (0,))], reasons={0: 0x04}, temps={0: 82.0})] * 2,
        expect=["taint_node"]),
    "power capping under our own lower limit is not a hotspot": dict(
        snaps=[snapshot(FL, workloads=[(inf(0), (0,))], reasons={0: 0x04}, limits={0: 250.0})] * 2, expect=[]),
}


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
def test_planner_case(case):
    p, _ = run(case["snaps"])
    assert kinds(p) == case["expect"]
    if "target" in case:
        (m,) = [a for a in p.actions if isinstance(a, Migrate)]
        assert m.target_gpus == case["target"] and m.target_node == "n2"
    for a in p.actions:
        assert a.expected_gain > 0 and a.reason
        if isinstance(a, SetPowerLimit):
            assert 200 <= a.watts < 400  # A100: max(min limit 100 W, 0.5 x TDP) .. TDP


def test_allowed_models_restrict_the_target():
    fl = make_fleet(3, 2, models=["A100-SXM4-80GB", "H100-SXM", "L40S"])
    w = workload("svc-0", allowed_models=frozenset({"L40S"}))
    snaps = [snapshot(fl, workloads=[(w, (0,))], temps={0: 86, 2: 30, 3: 30, 4: 45, 5: 45})] * 2
    p, _ = run(snaps)
    (m,) = [a for a in p.actions if isinstance(a, Migrate)]
    assert fl.gpus[m.target_gpus[0]].model == "L40S"


def test_a_target_without_enough_memory_is_skipped():
    big = workload("batch-0", WorkloadClass.BATCH, milli=500, mem=70000)
    snaps = [snapshot(FL, workloads=[(inf(0, mem=20480), (0,)), (big, (8,))], temps={0: 86, 8: 30, 9: 45})] * 2
    p, _ = run(snaps)
    (m,) = [a for a in p.actions if isinstance(a, Migrate)]
    assert m.target_gpus == (9,)


def test_two_hot_gpus_never_get_the_same_free_gpu():
    ws = [(inf(i, owner=f"s{i}"), (i,)) for i in range(4)] + [(inf(10 + i), (4 + i,)) for i in range(4)]
    ws += [(inf(20), (8,))]
    snaps = [snapshot(FL, workloads=ws, temps={0: 86, 1: 86, 9: 40, 10: 45, 11: 50})] * 2
    p, _ = run(snaps)
    targets = [a.target_gpus for a in p.actions if isinstance(a, Migrate)]
    assert len(targets) == 2 and len(set(targets)) == 2


def test_throttled_gpu_is_given_back_after_m_cool_readings():
    full = [(inf(i), (i,)) for i in range(12)]
    hot = snapshot(FL, workloads=full, temps={0: 86})
    p, state = run([hot, hot])
    (cap,) = [a for a in p.actions if isinstance(a, SetPowerLimit)]
    state = acknowledge(state, p.actions, hot)
    tainted = [replace(FL.nodes[0], taints=("gputide.io/hot=true:NoSchedule",)), *FL.nodes[1:]]  # as n0 now reads
    cool = snapshot(FL, workloads=full, temps={0: 60}, limits={0: cap.watts}, nodes=tainted)
    for _ in range(BalancerPolicy().hotspots.cool_readings - 1):
        p, state = plan(cool, None, BalancerPolicy(), state)
        assert not p.actions
    p, state = plan(cool, None, BalancerPolicy(), state)
    assert kinds(p) == ["power_limit", "taint_node"]
    back = next(a for a in p.actions if isinstance(a, SetPowerLimit))
    assert back.watts == 400 and not back.is_throttle and back.give_back
    assert next(a for a in p.actions if isinstance(a, TaintNode)).remove
    assert cap.uuid not in acknowledge(state, p.actions, cool).throttled


def _recorded(caps_by_node: dict[int, dict[int, float]]):
    """FL's nodes, each recording the power caps gputide holds on its GPUs (its gputide.io/power-caps annotation)."""
    return [replace(n, power_caps={FL.gpus[g].uuid: w for g, w in caps_by_node.get(i, {}).items()})
            for i, n in enumerate(FL.nodes)]


def _gave_back(p):
    return [a.gpu for a in p.actions if isinstance(a, SetPowerLimit) and a.give_back]


def test_a_restarted_planner_gives_back_what_the_snapshot_records_it_throttled_once_it_has_cooled():
    full = [(inf(i), (i,)) for i in range(12)]
    # GPU 0 capped by gputide (recorded on n0), GPU 5 capped by someone else (not recorded): both cool now
    cool = snapshot(FL, workloads=full, temps={0: 60, 5: 60}, limits={0: 250.0, 5: 250.0},
                    nodes=_recorded({0: {0: 250.0}}))
    state = PlannerState()   # a new process, or a replica that has just become the leader: no memory
    for _ in range(BalancerPolicy().hotspots.cool_readings - 1):
        p, state = plan(cool, None, BalancerPolicy(), state)
        assert not _gave_back(p)   # the cool readings are counted first, as for a release
    assert state.throttled == {FL.gpus[0].uuid: 250.0}
    p, state = plan(cool, None, BalancerPolicy(), state)
    assert _gave_back(p) == [0]   # GPU 5's limit is not gputide's to give back


def test_a_restarted_planner_keeps_a_recorded_cap_on_a_gpu_still_hot():
    full = [(inf(i), (i,)) for i in range(12)]
    hot = snapshot(FL, workloads=full, temps={0: 86}, limits={0: 250.0}, nodes=_recorded({0: {0: 250.0}}))
    state = PlannerState()   # restarted: the streaks start from nothing, so GPU 0 is no hotspot for a cycle or two
    for _ in range(BalancerPolicy().hotspots.cool_readings + 2):
        p, state = plan(hot, None, BalancerPolicy(), state)
        assert not _gave_back(p) and FL.gpus[0].uuid in state.throttled


def test_a_recorded_cap_naming_a_gpu_of_another_node_is_not_given_back_there():
    cool = snapshot(FL, workloads=[(inf(0), (0,))], limits={0: 250.0}, nodes=_recorded({1: {0: 250.0}}))
    p, state = run([cool] * BalancerPolicy().hotspots.cool_readings)
    assert not _gave_back(p) and not state.throttled


def _colocated(p99, workers=3, before=None):
    svc = inf(0, milli=500)
    job = [workload(f"job-{i}", T, owner="job", milli=500, mem=20480, elastic_min=1, elastic_max=8,
                   priority=10) for i in range(3)]
    ws = [(svc, (0,)), (job[0], (0,)), (job[1], (4,)), (job[2], (8,))][: 1 + workers]
    services = {**(before or {}),
                "svc": ServiceStatus(name="svc", demand_rps=10, p99_latency_s=p99, slo_latency_s=0.5, replicas=1)}
    return snapshot(FL, workloads=ws, services=services)


def test_inference_near_its_slo_shrinks_colocated_training_and_gets_it_back_with_slack():
    p, state = run([_colocated(0.45)])
    (a,) = p.actions
    assert isinstance(a, ScaleTraining) and (a.job, a.workers, a.previous_workers) == ("job", 2, 3)
    assert reason_label(a) == "colocation_slo"
    state = acknowledge(state, p.actions, _colocated(0.45))
    for _ in range(BalancerPolicy().colocation.slack_readings - 1):
        p, state = plan(_colocated(0.1, workers=2), None, BalancerPolicy(), state)
        assert not p.actions
    p, state = plan(_colocated(0.1, workers=2), None, BalancerPolicy(), state)
    (back,) = p.actions
    assert isinstance(back, ScaleTraining) and back.workers == 3
    assert reason_label(back) == "colocation_slack", "a co-location give-back is not a hotspot's"


def test_a_colocation_shrink_waits_for_its_own_services_slack_not_that_of_one_named_within_its_reason():
    """The shrink's service was found as the first service named anywhere in its reason text: "sv" (listed first,
    idle) is in "svc p99 ...", so the job was given back once "sv" had slack while "svc" was still near its SLO. The
    shrink now carries its service (`ScaleTraining.service`)."""
    idle = {"sv": ServiceStatus(name="sv", demand_rps=1, p99_latency_s=0.01, slo_latency_s=0.5, replicas=1)}
    p, state = run([_colocated(0.45, before=idle)])
    (a,) = p.actions
    assert a.service == "svc"
    state = acknowledge(state, p.actions, _colocated(0.45, before=idle))
    for _ in range(BalancerPolicy().colocation.slack_readings + 2):
        p, state = plan(_colocated(0.45, workers=2, before=idle), None, BalancerPolicy(), state)
        assert not [x for x in p.actions if isinstance(x, ScaleTraining) and x.workers > x.previous_workers]


def test_a_shrunk_job_that_is_gone_is_forgotten_not_given_back_every_cycle():
    """Co-location remembered a shrunk job until its give-back was applied; a job that finished or was deleted
    never got one applied, so its give-back (a job with 0 workers, "below" its size) was proposed every cycle."""
    p, state = run([_colocated(0.45)])
    state = acknowledge(state, p.actions, _colocated(0.45))
    assert "job" in state.colocation.shrunk
    gone = _colocated(0.1, workers=0)
    for _ in range(BalancerPolicy().colocation.slack_readings + 2):
        p, state = plan(gone, None, BalancerPolicy(), state)
        assert not [a for a in p.actions if isinstance(a, ScaleTraining)]
    assert not state.colocation.shrunk


def test_latency_far_from_the_slo_leaves_training_alone():
    p, _ = run([_colocated(0.2)] * 3)
    assert not p.actions


def test_the_plan_is_pure_the_same_input_gives_the_same_plan():
    s = snapshot(FL, workloads=[(inf(0), (0,))], temps={0: 86, 8: 40})
    a, sa = run([s, s])
    b, sb = run([s, s])
    assert a.actions == b.actions and a.objective_after == b.objective_after
    assert a.objective_after < a.objective_before


# ---- detection: sustained power capping, with the same hysteresis as heat -------------------------------------
CAP, BRAKE, NONE = 0x04, 0x80, 0
TDP_A100 = 400.0


@pytest.mark.parametrize(("readings", "expected"), [
    ([CAP, CAP], [False, True]),
    ([CAP, NONE, CAP], [False, False, False]),
    ([BRAKE, BRAKE], [False, True]),
    ([(CAP, 300.0), (CAP, 300.0), (CAP, 300.0)], [False, False, False]),
    ([CAP, CAP] + [NONE] * 5, [False, True, True, True, True, True, False]),
    ([CAP, CAP] + [NONE] * 4 + [CAP] + [NONE] * 4, [False, True] + [True] * 9),
    ([(CAP, TDP_A100 - 0.5), (CAP, TDP_A100 - 0.5)], [False, True]),
    ([0x20 | CAP, 0x20 | CAP], [False, True]),
], ids=["N capped readings activate", "capping that is not sustained", "hardware power brake",
        "capped under a lowered limit", "released after M uncapped readings",
        "capping again restarts the release count", "a limit within a watt of TDP is the default",
        "thermal and power bits together"])
def test_power_capping_is_a_hot_signal_with_hysteresis(readings, expected):
    from balancer.plan import hotspots

    policy, state, seen = BalancerPolicy(), hotspots.HotspotState(), []
    for r in readings:
        bits, limit = r if isinstance(r, tuple) else (r, TDP_A100)
        s = snapshot(FL, workloads=[(inf(0), (0,))], reasons={0: bits}, limits={0: limit})
        state = hotspots.detect(s, policy, state)
        seen.append(bool(state.active[0]))
        assert not state.active[1:].any()
    assert seen == expected


def test_a_policy_can_switch_the_power_capping_signal_off():
    from dataclasses import replace

    from balancer.plan import hotspots

    base = BalancerPolicy()
    off = replace(base, hotspots=replace(base.hotspots, power_capping=False))
    on = replace(base, hotspots=replace(base.hotspots, power_capping=True))
    s = snapshot(FL, workloads=[(inf(0), (0,))], reasons={0: CAP})
    for policy, expected in ((off, False), (on, True)):
        state = hotspots.detect(s, policy, hotspots.detect(s, policy, hotspots.HotspotState()))
        assert bool(state.active[0]) is expected


# ---- a board the catalogue does not know --------------------------------------------------------------------
def test_an_uncatalogued_board_is_planned_with_figures_from_its_power_limit():
    from dataclasses import replace

    from balancer import catalog
    from balancer.plan.columns import model_arrays

    known = snapshot(FL, workloads=[(inf(0), (0,))], temps={0: 88}, limits={1: 350.0, 2: 300.0})
    gpus = tuple(replace(g, model="NVIDIA B300") if g.node == "n0" else g for g in known.gpus)
    s = replace(known, gpus=gpus)
    m = model_arrays(s)
    # n0's highest limit (400 W, GPU 0 and 3) is taken as its TDP; the rest follow catalog.generic's rules of thumb
    assert m["tdp"][:4].tolist() == [400.0] * 4 and m["pmin"][:4].tolist() == [120.0] * 4
    assert m["tdp"][4:].tolist() == [catalog.get("A100-SXM4-80GB").tdp_w] * 8
    assert catalog.generic("X", float("nan")).tdp_w == 300.0
    p, _ = run([s, s])
    assert kinds(p) == ["migrate", "taint_node"]
