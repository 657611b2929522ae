"""The reconcile loop against the simulator: fail-static, crash recovery, leader election, dry-run, records."""

from __future__ import annotations

import io
import json

import pytest
from loop_helpers import make_fleet
from prometheus_client import CollectorRegistry

from balancer.actuate.base import Outcome
from balancer.actuate.dryrun import DryRunActuator
from balancer.actuate.sim import ControllerCrash, SimActuator
from balancer.loop import InMemoryLeaderElector, InMemoryLease, JsonlAudit, Reconciler
from balancer.metrics import ControllerMetrics
from balancer.sim import ServiceSpec, SimCluster, TrainingJobSpec
from balancer.telemetry.sim import SimTelemetrySource


def hot_sim() -> SimCluster:
    sim = SimCluster(make_fleet(3, 4), seed=1, step_s=60.0)
    sim.add_service(ServiceSpec(name="svc", replicas=4, demand=lambda t: 80.0, gpu_memory_mib=16384))
    sim.add_training_job(TrainingJobSpec(name="job", workers=4, elastic_min=2, gpu_memory_mib=20480))
    sim.schedule()
    sim.degrade_cooling("n0", inlet_rise_c=20.0, resistance_factor=2.0)
    return sim


class Recording:
    """Wraps an actuator and remembers every call (a test spy)."""

    def __init__(self, inner) -> None:
        self.inner, self.name, self.calls = inner, inner.name, []

    def apply(self, action, snapshot):
        self.calls.append(action)
        return self.inner.apply(action, snapshot)


def loop_for(sim, source=None, actuator=None, **kw):
    registry = CollectorRegistry()
    rec = Reconciler(source=source or SimTelemetrySource(sim), actuator=actuator or SimActuator(sim),
                     clock=lambda: sim.time, metrics=ControllerMetrics(registry), **kw)
    return rec, registry


def cycles(sim, rec, n):
    reports = []
    for _ in range(n):
        sim.step()
        reports.append(rec.run_once())
    return reports


def placed(sim):
    return {name for name, gpus in sim.placements.items() if gpus}


def test_prometheus_down_mid_run_the_loop_holds_still_and_says_so():
    sim = hot_sim()
    source = SimTelemetrySource(sim)
    actuator = Recording(SimActuator(sim))
    out = io.StringIO()
    rec, reg = loop_for(sim, source, actuator, audit=JsonlAudit(out))
    cycles(sim, rec, 2)
    source.down = True
    before = len(actuator.calls)
    reports = cycles(sim, rec, 5)
    assert {r.status for r in reports} == {"fail_static"}
    assert len(actuator.calls) == before
    assert reg.get_sample_value("gputide_fail_static") == 1
    assert reg.get_sample_value("gputide_fail_static_info", {"reason": "telemetry_unavailable"}) == 1
    assert reg.get_sample_value("gputide_reconcile_total", {"result": "fail_static"}) == 5
    holds = [json.loads(line) for line in out.getvalue().splitlines() if '"hold"' in line]
    assert len(holds) == 5 and holds[0]["outcome"] == "fail_static:telemetry_unavailable"
    source.down = False
    assert cycles(sim, rec, 1)[0].status == "ok"
    assert reg.get_sample_value("gputide_fail_static") == 0
    assert reg.get_sample_value("gputide_fail_static_info", {"reason": "telemetry_unavailable"}) == 0


@pytest.mark.parametrize("fault,reason", [
    ({"sample_age_s": 900.0}, "stale_telemetry"),
    ({"nan_gpus": {2}}, "invalid_telemetry"),
    ({"missing": True}, "missing_telemetry"),
], ids=["old samples", "a NaN temperature", "vanished series"])
def test_bad_telemetry_means_no_action_at_all(fault, reason):
    sim = hot_sim()
    source = SimTelemetrySource(sim, **fault)
    actuator = Recording(SimActuator(sim))
    rec, reg = loop_for(sim, source, actuator)
    reports = cycles(sim, rec, 6)
    assert all(r.status == "fail_static" and r.reason == reason for r in reports)
    assert actuator.calls == []
    assert reg.get_sample_value("gputide_fail_static_info", {"reason": reason}) == 1


def test_a_hot_node_is_drained_by_migration_without_losing_any_workload():
    sim = hot_sim()
    before = placed(sim)
    rec, reg = loop_for(sim)
    reports = cycles(sim, rec, 15)
    kinds = [r.action.kind for rep in reports for r in rep.results if r.outcome == Outcome.APPLIED]
    assert "migrate" in kinds and "taint_node" in kinds
    assert placed(sim) == before
    n0 = [g for g in range(4)]
    assert not any(set(g) & set(n0) for g in sim.placements.values())
    assert reg.get_sample_value("gputide_actions_total", {"type": "migrate", "reason": "hotspot"}) >= 1


def test_killed_mid_migration_then_restarted_it_converges_and_loses_nothing():
    sim = hot_sim()
    before = placed(sim)
    journal: dict = {}
    crashing, _ = loop_for(sim, actuator=SimActuator(sim, journal=journal, crash_after_reserve=True))
    with pytest.raises(ControllerCrash):
        for _ in range(10):
            sim.step()
            crashing.run_once()
    (name,) = journal
    assert sim.placements[name] == tuple(journal[name]["source"])  # reserved, not yet moved: still running
    restarted, _ = loop_for(sim, actuator=SimActuator(sim, journal=journal))
    cycles(sim, restarted, 15)
    assert journal == {}
    assert placed(sim) == before
    assert not any(set(g) & {0, 1, 2, 3} for g in sim.placements.values())


def test_two_replicas_sharing_a_lease_only_the_leader_acts():
    sim = hot_sim()
    lease = InMemoryLease(duration_s=90.0)
    act_a, act_b = Recording(SimActuator(sim)), Recording(SimActuator(sim))
    a, reg_a = loop_for(sim, actuator=act_a, elector=InMemoryLeaderElector(lease, "a"))
    b, reg_b = loop_for(sim, actuator=act_b, elector=InMemoryLeaderElector(lease, "b"))
    for _ in range(8):
        sim.step()
        assert a.run_once().status == "ok"
        assert b.run_once().status == "standby"
    assert act_a.calls and not act_b.calls
    assert (reg_a.get_sample_value("gputide_leader", {"lease": ""}) == 1
            and reg_b.get_sample_value("gputide_leader", {"lease": ""}) == 0)
    # the leader dies without releasing: the standby takes over once the lease expires
    sim.step()  # 60 s after the leader's last renewal: its 90 s lease still holds
    assert b.run_once().status == "standby"
    sim.step()
    assert b.run_once().status == "ok" and lease.holder == "b"


def test_dry_run_plans_and_records_but_changes_nothing():
    sim = hot_sim()
    dry = DryRunActuator()
    out = io.StringIO()
    rec, reg = loop_for(sim, actuator=dry, audit=JsonlAudit(out))
    for _ in range(6):
        before = dict(sim.placements), sim.power_limit_w.copy()
        sim.step()
        mid = dict(sim.placements), sim.power_limit_w.copy()
        rec.run_once()
        assert dict(sim.placements) == mid[0] and (sim.power_limit_w == mid[1]).all()
        del before
    assert dry.actions
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert lines and all({"time", "action", "target", "reason", "expected_gain", "outcome"} <= set(x) for x in lines)
    assert any(x["outcome"] == "dry_run" for x in lines)


def test_the_emergency_stop_file_holds_the_loop(tmp_path):
    from balancer.config import BalancerPolicy
    from balancer.safety import SafetyGuard

    sim = hot_sim()
    flag = tmp_path / "stop"
    flag.touch()
    actuator = Recording(SimActuator(sim))
    policy = BalancerPolicy()
    rec, reg = loop_for(sim, actuator=actuator, policy=policy,
                        guard=SafetyGuard(policy.safety, emergency_stop_file=flag))
    assert {r.reason for r in cycles(sim, rec, 4)} == {"emergency_stop"}
    assert not actuator.calls
    flag.unlink()
    cycles(sim, rec, 4)
    assert actuator.calls


def test_controller_metrics_follow_the_contract():
    sim = hot_sim()
    rec, reg = loop_for(sim)
    cycles(sim, rec, 5)
    names = {m.name for m in reg.collect()}
    for name in ("gputide_reconcile_duration_seconds", "gputide_reconcile", "gputide_last_reconcile_timestamp_seconds",
                 "gputide_actions", "gputide_actions_rejected", "gputide_fail_static", "gputide_fail_static_info",
                 "gputide_telemetry_staleness_seconds", "gputide_leader", "gputide_eviction_budget_remaining"):
        assert name in names
    assert reg.get_sample_value("gputide_reconcile_duration_seconds_count") == 5
    assert reg.get_sample_value("gputide_last_reconcile_timestamp_seconds") == sim.time


def test_forecasts_reach_the_metrics_and_a_failing_forecaster_does_not_stop_the_loop():
    import numpy as np

    from balancer.model import Forecast

    sim = hot_sim()
    calls = []

    def forecaster(snap):
        calls.append(snap.time)
        if len(calls) == 2:
            raise RuntimeError("model blew up")
        return {"svc": Forecast(service="svc", issued_at=snap.time, step_s=300.0,
                                quantiles={0.5: np.full(12, 70.0), 0.9: np.linspace(80, 95, 12)})}

    rec, reg = loop_for(sim, forecaster=forecaster)
    reports = cycles(sim, rec, 3)
    assert [r.status for r in reports] == ["ok", "ok", "ok"] and len(calls) == 3
    assert reg.get_sample_value("gputide_forecast_demand", {"service": "svc", "quantile": "0.9", "horizon": "1h"}) == 95


def test_a_demoted_replica_stops_reporting_the_fleet_it_saw_as_leader():
    sim = hot_sim()
    lease = InMemoryLease(duration_s=90.0)
    a, reg_a = loop_for(sim, elector=InMemoryLeaderElector(lease, "a"))
    b, _ = loop_for(sim, elector=InMemoryLeaderElector(lease, "b"))
    for _ in range(3):
        sim.step()
        assert a.run_once().status == "ok"
    busy = reg_a.get_sample_value("gputide_capacity_gpus", {"class": "inference"})
    assert busy and busy > 0
    assert any(m.name == "gputide_fragmentation_ratio" and m.samples for m in reg_a.collect())
    sim.step()
    sim.step()   # a missed its renewals: b takes over
    assert b.run_once().status == "ok"
    assert a.run_once().status == "standby"
    assert reg_a.get_sample_value("gputide_capacity_gpus", {"class": "inference"}) == 0
    assert not any(m.name == "gputide_fragmentation_ratio" and m.samples for m in reg_a.collect())
    assert (reg_a.get_sample_value("gputide_fail_static") == 0
            and reg_a.get_sample_value("gputide_leader", {"lease": ""}) == 0)
