"""Controller metrics of what the fleet looks like: capacity by class, fragmentation, waiting training jobs,
forecast error, and the capacity planner's loans and targets; plus the actuator's housekeeping hook."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from loop_helpers import make_fleet, snapshot, workload
from prometheus_client import CollectorRegistry

from balancer.actuate.dryrun import DryRunActuator
from balancer.errors import TelemetryUnavailable
from balancer.fleet_usage import fleet_usage, waiting_training_jobs, workload_mix
from balancer.forecast.service import ServiceForecaster, horizon_label
from balancer.forecast.traces import parse_step
from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics
from balancer.model import ServiceStatus, WorkloadClass
from balancer.plan import planner as planner_mod
from balancer.plan.defrag import fragmentation_by_model
from balancer.plan.placement.fragmentation import WorkloadMix
from balancer.plan.placement.state import ClusterState, PodRequest

INF, TRAIN, BATCH = WorkloadClass.INFERENCE, WorkloadClass.TRAINING, WorkloadClass.BATCH
A100 = "A100-SXM4-80GB"


# ---- capacity by class ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("placed", "expected"), [
    ([], {"inference": 0, "training": 0, "idle": 8}),
    ([("svc-0", INF, (0,)), ("svc-1", INF, (1,))], {"inference": 2, "training": 0, "idle": 6}),
    ([("job-0", TRAIN, (2, 3))], {"inference": 0, "training": 2, "idle": 6}),
    ([("svc-0", INF, (0,)), ("job-0", TRAIN, (0,))], {"inference": 1, "training": 0, "idle": 7}),
    ([("etl-0", BATCH, (5,))], {"inference": 0, "training": 1, "idle": 7}),
    ([("svc-0", INF, (0,)), ("job-0", TRAIN, (1,)), ("job-1", TRAIN, (1,))],
     {"inference": 1, "training": 1, "idle": 6}),
], ids=["empty fleet", "inference only", "multi-GPU training", "co-located GPU counts as inference",
        "batch counts as training", "two workers share a GPU"])
def test_capacity_split_counts_gpus_by_the_class_of_their_workloads(placed, expected):
    fl = make_fleet(2, 4)
    snap = snapshot(fl, workloads=[(workload(n, c, milli=500 if len(g) == 1 else 1000, gpus=len(g)), g)
                                   for n, c, g in placed])
    assert fleet_usage(snap).capacity == expected


# ---- fragmentation ---------------------------------------------------------------------------------------------
def _reference(snap):
    """The placement engine's own path: a ClusterState filled with `assign`, a mix from PodRequests."""
    nodes = snap.nodes
    state = ClusterState.from_nodes(np.array([n.cpu_milli for n in nodes]), np.array([n.memory_mib for n in nodes]),
                                    np.array([n.gpu_count for n in nodes]), [n.gpu_model for n in nodes])
    pods = []
    for w in snap.workloads:
        allowed = None if w.allowed_models is None else tuple(sorted(w.allowed_models))
        pods.append(PodRequest(cpu_milli=w.cpu_milli, memory_mib=w.memory_mib, num_gpu=w.gpus,
                               gpu_milli=w.gpu_milli if w.gpus else 0, allowed_models=allowed))
        gpus = snap.placements.get(w.name)
        if gpus:
            node = int(snap.node_index[gpus[0]])
            state.assign(node, tuple(snap.gpus[g].slot for g in gpus), w.gpu_milli, w.cpu_milli, w.memory_mib)
    return fragmentation_by_model(state, WorkloadMix.from_pods(pods))


@pytest.mark.parametrize("case", ["empty", "half GPUs under whole-GPU demand", "mixed models", "cpu exhausted"])
def test_fragmentation_matches_the_placement_engine(case):
    models = [A100, "H100-SXM"] if case == "mixed models" else None
    fl = make_fleet(2, 4, models=models)
    ws = []
    if case == "half GPUs under whole-GPU demand":
        ws = [(workload("half-0", milli=500), (0,)), (workload("half-1", milli=500), (5,)),
              (workload("whole-0"), (1,)), (workload("whole-1"), (6,)), (workload("whole-2"), ())]
    elif case == "mixed models":
        ws = [(workload("h-0", milli=300, allowed_models=frozenset({"H100-SXM"})), (4,)),
              (workload("a-0", milli=700), (0,)), (workload("pend-0", allowed_models=frozenset({A100})), ())]
    elif case == "cpu exhausted":
        ws = [(workload("cpu-0", cpu_milli=64000, memory_mib=1024), (0,)), (workload("w-1", cpu_milli=1000), (4,))]
    snap = snapshot(fl, workloads=ws)
    got = fleet_usage(snap).fragmentation
    want = _reference(snap)
    assert got.keys() == want.keys()
    for model in want:
        for key in ("fragmentation_ratio", "unallocatable_gpus", "idle_gpus"):
            assert got[model][key] == pytest.approx(want[model][key]), (model, key)
    if case == "half GPUs under whole-GPU demand":
        # two idle halves (1 GPU) that whole-GPU pods (3 of the 5 pods) cannot use: 3/5 x 1 GPU
        assert got[A100]["unallocatable_gpus"] == pytest.approx(0.6)


shapes = st.tuples(st.integers(0, 3), st.sampled_from([0, 1, 250, 500, 1000]), st.integers(0, 4000),
                   st.integers(0, 9000), st.sampled_from([None, frozenset({A100}), frozenset({A100, "H100-SXM"})]))


@settings(max_examples=60, deadline=None)
@given(st.lists(shapes, max_size=25))
def test_the_vectorised_mix_is_the_placement_engines_mix(rows):
    fl = make_fleet(1, 4)
    ws = [(workload(f"w-{i}", gpus=g, milli=m, cpu_milli=c, memory_mib=mem, allowed_models=a), ())
          for i, (g, m, c, mem, a) in enumerate(rows)]
    mix = workload_mix(snapshot(fl, workloads=ws))
    pods = [PodRequest(cpu_milli=c, memory_mib=mem, num_gpu=g, gpu_milli=max(m, 1) if g else 0,
                       allowed_models=None if a is None else tuple(sorted(a))) for g, m, c, mem, a in rows]
    ref = WorkloadMix.from_pods(pods)

    def table(m):
        return sorted(zip(m.num_gpu.tolist(), m.milli.tolist(), map(str, m.allowed), m.cpu.tolist(), m.mem.tolist(),
                          np.round(m.weight, 12).tolist()))

    assert table(mix) == table(ref)


# ---- waiting training jobs -------------------------------------------------------------------------------------
@pytest.mark.parametrize(("workers", "expected"), [
    ({"a-0": (), "a-1": ()}, {"a"}),
    ({"a-0": (0,), "a-1": ()}, set()),
    ({"g-0": (0,), "g-1": (), "g-2": ()}, {"g"}),
    ({"a-0": (0,), "a-1": (1,)}, set()),
], ids=["nothing placed", "elastic job running short", "gang below its minimum", "all placed"])
def test_a_training_job_waits_while_fewer_workers_run_than_it_needs(workers, expected):
    ws = [(workload(n, TRAIN, elastic_min=3 if n.startswith("g") else 1), g) for n, g in workers.items()]
    assert waiting_training_jobs(snapshot(make_fleet(1, 4), workloads=ws)) == expected


# ---- the loop publishes them -----------------------------------------------------------------------------------
class Source:
    """Hand-built snapshots, one per cycle; `down` makes the next cycle fail-static."""

    def __init__(self, snap) -> None:
        self.snap, self.down = snap, False

    def snapshot(self):
        if self.down:
            raise TelemetryUnavailable("down")
        return self.snap


class Housekeeper(DryRunActuator):
    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.calls, self.fail = 0, fail

    def housekeeping(self):
        self.calls += 1
        if self.fail:
            raise RuntimeError("api down")
        return [f"tidied {self.calls}"]


def loop(source, clock, **kw):
    reg = CollectorRegistry()
    return Reconciler(source=source, actuator=kw.pop("actuator", DryRunActuator()), clock=lambda: clock[0],
                      metrics=ControllerMetrics(reg), **kw), reg


def test_the_loop_publishes_capacity_fragmentation_and_waiting_jobs():
    fl = make_fleet(2, 4)
    snap = snapshot(fl, workloads=[(workload("svc-0"), (0,)), (workload("half-0", milli=500), (4,)),
                                   (workload("job-0", TRAIN), (1,)), (workload("job-1", TRAIN), ()),
                                   (workload("queued-0", TRAIN, elastic_min=1), ())], age=0.0)
    clock = [1000.0]
    rec, reg = loop(Source(snap), clock)
    assert rec.run_once().status == "ok"

    def value(name, **labels):
        return reg.get_sample_value(name, labels)

    assert value("gputide_capacity_gpus", **{"class": "inference"}) == 2
    assert value("gputide_capacity_gpus", **{"class": "training"}) == 1
    assert value("gputide_capacity_gpus", **{"class": "idle"}) == 5
    assert value("gputide_capacity_gpus", **{"class": "loaned"}) == 0
    # the idle half GPU is useless to the 4 whole-GPU workloads of 5: 4/5 x 0.5 GPU, of 5.5 idle GPUs
    # labelled with the exporters' modelName, which the dashboards' $model variable offers, not the catalogue key
    assert value("gputide_unallocatable_gpus", modelName="NVIDIA A100-SXM4-80GB") == pytest.approx(0.4)
    assert value("gputide_fragmentation_ratio", modelName="NVIDIA A100-SXM4-80GB") == pytest.approx(0.4 / 5.5)
    assert value("gputide_training_waiting_jobs", over="0h") == 1
    assert value("gputide_training_waiting_jobs", over="4h") == 0
    clock[0] += 4 * 3600 + 1
    rec.run_once()
    assert value("gputide_training_waiting_jobs", over="4h") == 1


def test_capacity_planner_loans_and_targets_are_published_and_vanished_services_removed():
    snap = snapshot(make_fleet(1, 4), workloads=[(workload("svc-0"), (0,))], age=0.0)
    decided = [{"svc": 3, "chat": 2}, {"svc": 1}]

    def planner(s, forecasts, policy, state):
        plan, state = planner_mod.plan(s, forecasts, policy, state)
        return plan, planner_mod.replace(state, loaned_gpus=2, capacity_targets=decided.pop(0))

    rec, reg = loop(Source(snap), [0.0], planner=planner)
    rec.run_once()
    assert reg.get_sample_value("gputide_capacity_gpus", {"class": "loaned"}) == 2
    assert reg.get_sample_value("gputide_capacity_target_gpus", {"service": "chat"}) == 2
    rec.run_once()
    assert reg.get_sample_value("gputide_capacity_target_gpus", {"service": "svc"}) == 1
    assert reg.get_sample_value("gputide_capacity_target_gpus", {"service": "chat"}) is None


def test_forecast_error_comes_from_the_forecasters_rolling_error():
    from balancer.forecast.online import DemandForecaster

    fl = make_fleet(1, 4)
    clock = [0.0]
    source = Source(None)
    online = DemandForecaster(model="persistence", step_s=60.0, min_history=3)
    from balancer.config import BalancerPolicy, ForecastPolicy

    policy = BalancerPolicy(forecast=ForecastPolicy(horizon_s=300.0))
    rec, reg = loop(source, clock, forecaster=ServiceForecaster(online, 300.0), policy=policy)
    for k in range(40):
        clock[0] = 60.0 * k + 30.0
        demand = 100.0 + 40.0 * math.sin(k / 3.0)
        source.snap = snapshot(fl, age=0.0, time=clock[0], services={
            "chat": ServiceStatus(name="chat", demand_rps=demand, p99_latency_s=0.1, slo_latency_s=1.0, replicas=1)})
        assert rec.run_once().status == "ok"
    label = horizon_label(300.0)
    got = reg.get_sample_value("gputide_forecast_error_ratio", {"service": "chat", "horizon": label})
    assert label == "5m"
    assert got is not None and got > 0
    assert got == pytest.approx(online.rolling_error("chat", "5m"))
    assert reg.get_sample_value("gputide_forecast_demand", {"service": "chat", "quantile": "0.9", "horizon": "5m"})
    # what was forecast for now 5 minutes ago: persistence issued at k = 35 held the last closed bucket, k = 34
    aligned = {q: reg.get_sample_value("gputide_forecast_for_now", {"service": "chat", "quantile": q, "horizon": "5m"})
               for q in ("0.5", "0.9")}
    assert aligned["0.5"] == pytest.approx(100.0 + 40.0 * math.sin(34 / 3.0))
    assert aligned["0.9"] >= aligned["0.5"]
    assert online.forecast_for("chat", clock[0], 41) == {}  # nothing was issued 41 buckets ago


@pytest.mark.parametrize(("seconds", "label"), [(3600, "1h"), (300, "5m"), (5400, "1h30m"), (86400, "24h"),
                                               (90, "1m30s"), (3605, "1h5s")],
                         ids=["hour", "minutes", "hours and minutes", "a day", "minutes and seconds",
                              "hour and seconds"])
def test_horizon_labels_are_prometheus_durations(seconds, label):
    assert horizon_label(seconds) == label
    assert parse_step(label).total_seconds() == seconds  # what rolling_error reads back


def test_housekeeping_runs_once_per_planning_cycle_never_while_holding_still():
    snap = snapshot(make_fleet(1, 4), age=0.0)
    source, actuator = Source(snap), Housekeeper()
    rec, _ = loop(source, [0.0], actuator=actuator)
    rec.run_once()
    rec.run_once()
    source.down = True
    assert rec.run_once().status == "fail_static"
    assert actuator.calls == 2


def test_a_failing_housekeeping_hook_does_not_stop_the_cycle():
    rec, reg = loop(Source(snapshot(make_fleet(1, 4), age=0.0)), [0.0], actuator=Housekeeper(fail=True))
    assert rec.run_once().status == "ok"
    assert reg.get_sample_value("gputide_capacity_gpus", {"class": "idle"}) == 4


@pytest.mark.parametrize("reason", ["max_actions_per_cycle", "cooldown", "pdb", "eviction_budget", "min_gain",
                                    "protected", "emergency_stop", "max_concurrent_migrations", "max_unavailable",
                                    "stale_plan"])
def test_every_rejection_reason_starts_at_zero(reason):
    reg = CollectorRegistry()
    ControllerMetrics(reg)
    assert reg.get_sample_value("gputide_actions_rejected_total", {"reason": reason}) == 0


def test_a_fresh_controller_reports_its_whole_eviction_budget_before_the_first_cycle():
    from prometheus_client import CollectorRegistry

    from balancer.actuate.dryrun import DryRunActuator
    from balancer.config import BalancerPolicy
    from balancer.loop import Reconciler
    from balancer.metrics import ControllerMetrics

    registry = CollectorRegistry()

    class NeverCalled:
        def snapshot(self):
            raise AssertionError("no cycle ran")

    Reconciler(source=NeverCalled(), actuator=DryRunActuator(), policy=BalancerPolicy(),
               metrics=ControllerMetrics(registry), clock=lambda: 1000.0)
    assert registry.get_sample_value("gputide_eviction_budget_remaining") > 0


class Refusing(DryRunActuator):
    """An actuator whose API keeps answering 429 then 403: every accepted action fails."""

    def __init__(self) -> None:
        super().__init__()
        self.answers = [("retry", "429"), ("failed", "403")]

    def apply(self, action, snapshot):
        from balancer.actuate.base import ActionResult, Outcome

        outcome, code = self.answers[0] if len(self.answers) == 1 else self.answers.pop(0)
        return ActionResult(action, Outcome(outcome), f"HTTP {code}", code)


def test_actuation_errors_are_counted_by_type_outcome_and_code_and_nothing_counts_as_done():
    from balancer.model import Plan, ScaleTraining

    snap = snapshot(make_fleet(1, 4), workloads=[(workload("job-0", TRAIN, owner="job", elastic_min=0), (0,))],
                    age=0.0)
    shrink = ScaleTraining(job="job", workers=0, previous_workers=1, reason="room", expected_gain=5.0)

    def planner(s, forecasts, policy, state):
        return Plan(actions=(shrink,)), state or planner_mod.PlannerState()

    clock = [0.0]
    rec, reg = loop(Source(snap), clock, planner=planner, actuator=Refusing())
    for t in (0.0, 1000.0, 2000.0):  # past the cooldown each time: the guard lets the retry through
        clock[0] = t
        report = rec.run_once()
        assert not report.rejected and len(report.results) == 1, report
    labels = {"type": "scale_training", "outcome": "retry", "code": "429"}
    assert reg.get_sample_value("gputide_actuation_errors_total", labels) == 1
    assert reg.get_sample_value("gputide_actuation_errors_total", {**labels, "outcome": "failed", "code": "403"}) == 2
    counted = [s for f in reg.collect() for s in f.samples if s.name == "gputide_actions_total" and s.value]
    assert not counted, "an action the actuator could not carry out is not counted as done"


def test_model_fits_are_spread_over_cycles_and_a_waiting_service_keeps_its_last_forecast():
    """Five services seeded at once: at most two fit per cycle; the others wait, then keep being served."""
    from balancer.forecast.online import DemandForecaster

    online = DemandForecaster(model="persistence", step_s=60.0, min_history=3, refit_every=1000)
    fitted: list[str] = []
    original = online.forecast

    def counting(service, now, steps):
        if online.fit_due(service, now):
            fitted.append(service)
        return original(service, now, steps)

    online.forecast = counting
    names = [f"svc-{i}" for i in range(5)]
    history = {n: pd.Series([10.0 + i] * 30, index=pd.date_range("2024-01-01", periods=30, freq="60s", tz="UTC"))
               for i, n in enumerate(names)}
    fc = ServiceForecaster(online, 300.0, history=lambda n, now: history[n], max_fits_per_cycle=2)
    t0 = history[names[0]].index[-1].timestamp() + 60
    seen = []
    for k in range(3):
        snap = snapshot(make_fleet(1, 4), age=0.0)
        snap = replace(snap, time=t0 + 60 * k, services={n: ServiceStatus(name=n, demand_rps=10.0, p99_latency_s=0.1,
                                                                           slo_latency_s=1.0, replicas=1)
                                                          for n in names})
        seen.append(sorted(fc(snap)))
    assert fitted == names  # two, two, then the last one: never more than two in a cycle
    assert seen == [names[:2], names[:4], names]


def test_the_planners_notes_are_logged_once_while_they_last(caplog):
    import logging

    from balancer.model import Plan

    fl = make_fleet(1, 4)
    clock = [1000.0]
    notes = [("capacity holds: chat owns no pod",), ("capacity holds: chat owns no pod",), (), ("capacity holds: "
                                                                                             "chat owns no pod",)]

    def planner(snap, forecasts, policy, state):
        return Plan(notes=notes.pop(0)), state

    rec, _ = loop(Source(snapshot(fl, age=0.0)), clock, planner=planner)
    caplog.set_level(logging.INFO, logger="balancer.loop")
    for _ in range(4):
        assert rec.run_once().status == "ok"
        clock[0] += 60.0
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("plan: ")]
    assert logged == ["plan: capacity holds: chat owns no pod"] * 2  # first seen, then again after it cleared


def test_a_forecast_model_that_fails_is_exported_while_persistence_serves_for_it(monkeypatch):
    """A failed model used to be visible only in a log line: `gputide_forecast_fallback{service, model}` is 1 while
    persistence forecasts in its place, and a replica that stops leading stops reporting it."""
    from balancer.config import BalancerPolicy, ForecastPolicy
    from balancer.forecast.naive import SeasonalNaive
    from balancer.forecast.online import DemandForecaster

    def broken(self, v):
        raise RuntimeError("singular matrix")

    monkeypatch.setattr(SeasonalNaive, "_fit", broken)
    fl, clock, source = make_fleet(1, 4), [0.0], Source(None)
    online = DemandForecaster(model="seasonal_naive_daily", step_s=60.0, min_history=3)
    policy = BalancerPolicy(forecast=ForecastPolicy(horizon_s=300.0))
    rec, reg = loop(source, clock, forecaster=ServiceForecaster(online, 300.0), policy=policy)
    for k in range(6):
        clock[0] = 60.0 * k + 30.0
        source.snap = snapshot(fl, age=0.0, time=clock[0], services={
            "chat": ServiceStatus(name="chat", demand_rps=100.0 + k, p99_latency_s=0.1, slo_latency_s=1.0, replicas=1)})
        assert rec.run_once().status == "ok"
    labels = {"service": "chat", "model": "seasonal_naive_daily"}
    assert reg.get_sample_value("gputide_forecast_fallback", labels) == 1
    rec.metrics.standby()
    assert reg.get_sample_value("gputide_forecast_fallback", labels) is None


def test_a_service_whose_history_cannot_be_read_is_exported_until_it_is():
    """A demand-history query that fails leaves the service without a forecast (the planner holds it) and is asked
    again each cycle; before, only a log line said so. `gputide_forecast_history_waiting{service}` is 1 meanwhile and
    goes once the history is read."""
    from balancer.config import BalancerPolicy, ForecastPolicy
    from balancer.errors import TelemetryUnavailable
    from balancer.forecast.online import DemandForecaster

    down = [True]

    def history(service, now):
        if down[0]:
            raise TelemetryUnavailable("prometheus: connection refused")
        return None   # answered: no data

    fl, clock, source = make_fleet(1, 4), [0.0], Source(None)
    online = DemandForecaster(model="seasonal_naive_daily", step_s=60.0, min_history=3)
    policy = BalancerPolicy(forecast=ForecastPolicy(horizon_s=300.0))
    rec, reg = loop(source, clock, forecaster=ServiceForecaster(online, 300.0, history=history), policy=policy)
    labels = {"service": "chat"}
    for k in range(4):
        if k == 2:
            down[0] = False
        clock[0] = 60.0 * k + 30.0
        source.snap = snapshot(fl, age=0.0, time=clock[0], services={
            "chat": ServiceStatus(name="chat", demand_rps=100.0, p99_latency_s=0.1, slo_latency_s=1.0, replicas=1)})
        assert rec.run_once().status == "ok"
        assert reg.get_sample_value("gputide_forecast_history_waiting", labels) == (1.0 if k < 2 else None), k
