"""Every dashboard panel returns data from a real Prometheus that scrapes the simulated fleet
(exporters.backends.sim over exporters.server), loads rules/*.yaml, and scrapes the controller: the real
`Reconciler` runs its loop (`Reconciler.run`, in a thread) on the same simulated fleet with its
`ControllerMetrics` registry served over HTTP. The PNG previews are rendered from it.

The controller runs as `gputide run` would, except for its ends: telemetry comes straight from the simulator
(`SimTelemetrySource`) and actions go to it (`SimActuator`), both under the lock the exporter holds while it
advances simulated time (120 x wall time). The hotspot scenario's cooling fault starts at once so the loop has
hot GPUs to act on. The forecaster is the online `DemandForecaster` (persistence model, one-minute buckets,
five-minute horizon, so its rolling error is scored within the run) behind `ServiceForecaster`, and the
capacity planner (`balancer.plan.capacity_plan.plan_capacity`) is wrapped around the planner so that the loans and
per-service targets it decides reach the loop's metrics; its actions are not applied (capacity shifting is not
part of the hotspot scenario). The pods' watch follows the fake Kubernetes API server (tests/k8s/fakeapi.py), as
`gputide run`'s does, for the controller dashboard's watch panel.

The hotspot scenario's H100 nodes are in MIG mode here (`mig:` in the fleet spec): only the exporter sees it, which
publishes their SM activity per GPU instance, for the fleet dashboard's per-instance panel.

The secondary scheduler runs as `gputide schedule --prometheus` would, on the same fake API server: its watches,
its `SchedulerMetrics` served over HTTP, per-GPU facts read from the test's Prometheus, and run()'s pass loop
(one replica, so it leads). The fake cluster has two nodes named after simulated hosts, pods that fit, one that
never fits (64 GPUs) and one created halfway through the warm-up, so the scheduler row has binds, a pending pod
and per-GPU facts to show.

Every dashboard annotation query runs too, over the whole run; the fleet and balancer dashboards' hotspot markers
must show the actions the controller carried out.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from balancer import dashboards_render as dr

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
WARMUP_S = 20  # wall seconds at least of scraping before rendering: rate() windows, heatmaps, forecast errors scored


def _shown(dashboard: dict) -> list[dict]:
    """The panels of `dashboard` the renderer queries and counts when empty, as it finds them (`dr.layout`: a
    collapsed row's panels too; `dr.shows_data`: not a library panel, not a text panel or another that never
    queries): each must have data."""
    return [panel for _, panel in dr.layout(dashboard["panels"])[0] if dr.shows_data(panel)]


def _panels() -> list[tuple[str, str, bool]]:
    """(dashboard, panel title, whether it reads the controller's series) of every panel that must have data."""
    return [(name, panel.get("title", ""), any("gputide_" in t["expr"] for t in dr.queries(panel)))
            for name, dashboard in dr.load_dashboards(ROOT / "dashboards") for panel in _shown(dashboard)]


PANELS = _panels()


def _annotations() -> list[tuple[str, str]]:
    return [(path.stem, ann["name"]) for path in sorted((ROOT / "dashboards").glob("*.json"))
            for ann in json.loads(path.read_text()).get("annotations", {}).get("list", []) if ann.get("expr")]


ANNOTATIONS = _annotations()
# the hotspot markers (dashboards.common.hotspot_annotations) by the action type they mark
HOTSPOT_MARKERS = {"migrate": "Pod migrations", "power_limit": "Power caps (throttle / give back)",
                   "taint_node": "Hot taints (taint / renew / untaint)",
                   "scale_training": "Training shrunk / regrown for heat"}


def _annotation_reasons(url: str, range_s: int, step: int) -> dict[tuple[str, str], set[str] | str]:
    """Each annotation query, interpolated as the renderer does, over the last `range_s`: the `reason` labels of
    the events Grafana would draw (a sample > 0), or the error Prometheus answered."""
    from balancer.errors import TelemetryUnavailable

    client, end = dr.PromClient(url), time.time()
    out: dict[tuple[str, str], set[str] | str] = {}
    for name, dashboard in dr.load_dashboards(ROOT / "dashboards"):
        variables = dr.selections(dashboard, client, (end, range_s, step))   # as the render selects them
        for ann in dashboard.get("annotations", {}).get("list", []):
            if ann.get("expr"):
                expr = dr.interpolate(ann["expr"], variables, step, range_s)
                try:
                    hits = client.query_range(expr, end - range_s, end, step)
                except TelemetryUnavailable as exc:
                    out[name, ann["name"]] = str(exc)
                    continue
                out[name, ann["name"]] = {s.labels.get("reason", "") for s in hits if (s.values > 0).any()}
    return out


def _actions(registry) -> set[tuple[str, str]]:
    """(type, reason) of the actions the controller carried out."""
    return {(s.labels["type"], s.labels["reason"]) for family in registry.collect() for s in family.samples
            if s.name == "gputide_actions_total" and s.value >= 1}


class Locked:
    """A telemetry source or actuator used under the lock the exporter holds while it steps the simulator."""

    def __init__(self, inner, lock: threading.Lock) -> None:
        self.inner, self.lock, self.name = inner, lock, getattr(inner, "name", "locked")

    def snapshot(self):
        with self.lock:
            return self.inner.snapshot()

    def apply(self, action, snapshot):
        with self.lock:
            return self.inner.apply(action, snapshot)

    def recover(self):
        with self.lock:
            return self.inner.recover()


def _controller(sim, lock, metrics):
    from balancer.actuate.sim import SimActuator
    from balancer.config import BalancerPolicy, ForecastPolicy
    from balancer.forecast.online import DemandForecaster
    from balancer.forecast.service import ServiceForecaster
    from balancer.loop import Reconciler
    from balancer.plan import capacity, capacity_plan
    from balancer.plan import planner as planner_mod
    from balancer.telemetry.sim import SimTelemetrySource

    policy = BalancerPolicy(forecast=ForecastPolicy(horizon_s=300.0, step_s=60.0))
    profiles = {name: capacity.ServiceCapacity(name=name, rps_per_replica=20.0, home_replicas=st.replicas)
                for name, st in sim.service_status().items()}
    cap_state = [capacity.CapacityState()]

    def plan_with_capacity(snapshot, forecasts, pol, state):
        plan, state = planner_mod.plan(snapshot, forecasts, pol, state)
        decision = capacity_plan.plan_capacity(capacity.view_from_snapshot(snapshot, profiles), forecasts or {},
                                          capacity.CapacityPolicy(), cap_state[0])
        cap_state[0] = decision.state
        return plan, replace(state, loaned_gpus=decision.split.loaned, capacity_targets=dict(decision.targets))

    forecaster = ServiceForecaster(DemandForecaster(model="persistence", step_s=60.0, min_history=3), 300.0)
    return Reconciler(source=Locked(SimTelemetrySource(sim), lock), actuator=Locked(SimActuator(sim), lock),
                      policy=policy, clock=lambda: sim.time, metrics=metrics, forecaster=forecaster,
                      planner=plan_with_capacity)


def _scheduler(kube, metrics, prom):
    """`gputide schedule --prometheus URL`'s scheduler, reporting to `metrics` (balancer/cmd/schedule.py run()).
    The facts are read from `prom.url` at each read, as its port is final only once it has started."""
    from balancer.actuate.k8s_scheduler import SecondaryScheduler
    from balancer.app.scheduling import EnginePlacer
    from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource

    def facts():
        # 1 s scrapes, but a loaded CI machine lags the rules' evaluation by seconds: the facts' staleness limit
        # (4 intervals by default) left every GPU out now and then, and facts_nodes read 0 (a flake, not a bug)
        return PrometheusTelemetrySource(PrometheusOptions(url=prom.url, scrape_interval_s=1.0,
                                                           stale_after_s=30.0)).gpu_facts()

    # facts read again every 2 s, not every 15: the first read may come before Prometheus has the first rules'
    # samples (0 nodes), and a 15 s TTL left that answer in place for most of the 20 s warm-up
    placer = EnginePlacer("gputide", gpu_facts=facts, facts_ttl_s=2.0)
    scheduler = SecondaryScheduler(kube.client(), "gputide", placer, watch=True, watch_s=5.0)
    for resource, w in scheduler.watches.items():
        metrics.watches.follow(resource, lambda w=w: w.synced, lambda w=w: w.failures)
    metrics.facts_nodes.set_function(lambda: float(placer.facts_nodes))
    return scheduler


def _created_now(pod: dict) -> dict:
    """A pod as the API server creates it, stamped now (the binding latency is measured from it)."""
    from balancer.actuate.kubernetes import rfc3339

    pod["metadata"]["creationTimestamp"] = rfc3339(time.time())
    return pod


def _schedule(scheduler, metrics, stop: threading.Event) -> None:
    """run()'s loop of one leading replica: a pass (`one_pass`), then wait for a pending pod or 0.5 s."""
    from balancer.cmd.schedule import one_pass

    metrics.leader.set(1)
    while not stop.is_set():
        one_pass(scheduler, metrics)
        scheduler.wait_for_work(0.5)


def _empty_panels(url: str, uids: list[str]) -> list[str]:
    """The panels of the dashboards `uids` with no data over the last two minutes, as `_render` would count them
    (the panels `_shown`, each answered and judged as the renderer does, `PanelAnswer.counted_empty`: a panel of
    hardware this Prometheus lacks is not empty), without drawing."""
    client, end = dr.PromClient(url), time.time()
    renderer = dr._Renderer(client, end - 120, end, 2)
    empty = []
    for name, dashboard in dr.load_dashboards(ROOT / "dashboards"):
        if dashboard.get("uid") in uids:
            variables = dr.selections(dashboard, client, (end, 120, 2))
            empty += [f"{name}: {p.get('title', '')}" for p in _shown(dashboard)
                      if renderer.answer(p, variables).counted_empty]
    return empty


def _warmed_up(url, reconciler, registry, scheduler_registry, kube, started):
    """What the assertions need before rendering, beside WARMUP_S of scraping (the previews' rate() windows and
    heatmaps): the loop's cycles and hotspot actions, the pods that fit bound, the scheduler's GPU facts read, and
    data in every panel but the chargeback ones (waited for apart). A fixed warm-up left a loaded CI machine's
    controller, scheduler or rule evaluations behind it."""
    def ready() -> bool:
        return (time.time() - started >= WARMUP_S and len(reconciler.reconcile_seconds) >= 10
                and {"migrate", "power_limit", "taint_node"} <= {t for t, _ in _actions(registry)}
                and all((kube.get("pods", p, "default") or {}).get("spec", {}).get("nodeName")
                        for p in ("infer-0", "infer-1", "infer-late"))
                and (scheduler_registry.get_sample_value("gputide_scheduler_gpu_facts_nodes") or 0) >= 2
                and not _empty_panels(url, [uid for uid in DASHBOARD_UIDS if uid != CHARGEBACK_UID]))
    return ready


def _until(ready, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ready() and time.monotonic() < deadline:
        time.sleep(1.0)


DASHBOARD_UIDS = [d["uid"] for _, d in dr.load_dashboards(ROOT / "dashboards")]
CHARGEBACK_UID = "gputide-chargeback"


def _merge(report: dr.RenderReport, more: dr.RenderReport) -> None:
    report.written += more.written
    for name in ("empty_panels", "not_applicable_why", "series", "markers"):
        getattr(report, name).update(getattr(more, name))


def _render(url: str, out: Path, uids: list[str]) -> dr.RenderReport:
    """`gputide dashboards render` of the dashboards `uids`, each over the last two minutes (as `dr.render` of them
    all would, one after the other)."""
    report = dr.RenderReport()
    for uid in uids:
        _merge(report, dr.render(url, out, uid=uid, range_s=120, step=2))
    return report


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    import yaml
    from prometheus_client import CollectorRegistry

    from balancer import fleet as fleet_mod
    from balancer.app import scenarios
    from balancer.cmd.schedule import SchedulerMetrics
    from balancer.metrics import ControllerMetrics
    from balancer.telemetry.promserver import PrometheusServer, Target, default_rule_files
    from exporters.backends.sim import SimBackend
    from exporters.collector import GpuCollector
    from exporters.server import serve
    from tests.conftest import require_binary

    require_binary("prometheus")
    # the hotspot fleet with its H100 nodes in MIG mode, for the per-instance panel (the exporter alone sees MIG)
    spec = yaml.safe_load(scenarios.HOTSPOT_FLEET_YAML)
    spec["spec"]["nodeGroups"][1]["mig"] = ["4g.40gb", "2g.20gb", "1g.10gb"]
    sim, events, _days = scenarios.build("hotspot", fleet=fleet_mod.from_dict(spec, "<hotspot with MIG>"), seed=1)
    for event in events:  # the cooling fault now, not on the first afternoon
        event.apply(sim)
    lock = threading.Lock()
    exporter = serve(GpuCollector(SimBackend(sim, speed=120.0, lock=lock)), port=0)
    metrics = ControllerMetrics(CollectorRegistry())
    # the pods' watch, as gputide run follows it, against the fake API server (its panel needs the series)
    from balancer.actuate.k8s_workloads import KubernetesWorkloads
    from tests.k8s.fakeapi import FakeKube, node, pod

    kube = FakeKube()
    kube.add(pod("trainer-0", gpus=1))
    for sim_node in sim.fleet.nodes[:2]:
        kube.add(node(sim_node.name, sim_node.gpu_count))
    for name, gpus in (("infer-0", 1), ("infer-1", 2), ("train-big", 64)):   # train-big never fits
        kube.add(_created_now(pod(name, gpus=gpus, scheduler="gputide", phase="Pending")))
    pods = KubernetesWorkloads(kube.client(), watch=True, watch_s=5.0)
    pods()
    metrics.follow_watch("pods", lambda: pods.watch.synced, lambda: pods.watch.failures)
    controller_http = serve(metrics.registry, port=0)
    scheduler_metrics = SchedulerMetrics()
    scheduler_http = serve(scheduler_metrics.registry, port=0)
    reconciler = _controller(sim, lock, metrics)
    stop = threading.Event()
    loop = threading.Thread(target=reconciler.run, args=(0.5, stop), daemon=True)
    prom = PrometheusServer([Target("gputide-exporter", f"127.0.0.1:{exporter.port}"),
                             Target("gputide-controller", f"127.0.0.1:{controller_http.port}"),
                             Target("gputide/gputide-scheduler", f"127.0.0.1:{scheduler_http.port}")],
                            rule_files=default_rule_files(), scrape_interval="1s")
    scheduler = _scheduler(kube, scheduler_metrics, prom).start()
    scheduling = threading.Thread(target=_schedule, args=(scheduler, scheduler_metrics, stop), daemon=True)
    began = time.time()
    try:
        prom.start()
        prom.wait_for("gpu:temperature:celsius", lambda r: len(r) > 0, timeout=30)
        loop.start()
        scheduling.start()
        started = time.time()
        time.sleep(WARMUP_S / 2)
        kube.add(_created_now(pod("infer-late", gpus=1, scheduler="gputide", phase="Pending")))   # binds later
        ready = _warmed_up(prom.url, reconciler, metrics.registry, scheduler_metrics.registry, kube, started)
        _until(ready, timeout=120)   # past it, the assertions name what is missing
        out = tmp_path_factory.mktemp("png")
        report = _render(prom.url, out, [uid for uid in DASHBOARD_UIDS if uid != CHARGEBACK_UID])
        # the chargeback panels integrate the per-namespace rules once a minute, and a subquery's steps fall on
        # whole minutes: they have a first point once a whole minute has passed since the rules' first samples.
        # Up to a minute of waiting: the other dashboards are rendered meanwhile, the chargeback one after it
        prom.wait_for("sum_over_time(namespace:gpu_energy:joules_rate1m[1d:1m])", bool, timeout=75)
        _merge(report, _render(prom.url, out, [CHARGEBACK_UID]))
        report.annotations = _annotation_reasons(prom.url, int(time.time() - began) + 60, 2)
        report.actions = _actions(metrics.registry)
        facts_nodes = scheduler_metrics.registry.get_sample_value("gputide_scheduler_gpu_facts_nodes")
        bound = {p: (kube.get("pods", p, "default") or {}).get("spec", {}).get("nodeName")
                 for p in ("infer-0", "infer-1", "train-big", "infer-late")}
    finally:
        stop.set()
        scheduler.wake()
        loop.join(timeout=30)
        if scheduling.ident is not None:
            scheduling.join(timeout=30)
        prom.stop()
        prom.cleanup()
        exporter.close()
        controller_http.close()
        scheduler_http.close()
        scheduler.close()
        pods.close()
        kube.close()
    report.cycles = len(reconciler.reconcile_seconds)
    report.scheduled, report.facts_nodes = bound, facts_nodes
    return report


@pytest.mark.parametrize(
    ("dashboard", "title", "controller"), PANELS, ids=[f"{d}: {t}" for d, t, _ in PANELS])
def test_panel_returns_data(rendered, dashboard, title, controller):
    assert title not in rendered.empty_panels[dashboard], f"{dashboard}: panel {title!r} had no data"


@pytest.mark.parametrize(("dashboard", "name"), ANNOTATIONS, ids=[f"{d}: {n}" for d, n in ANNOTATIONS])
def test_annotation_query_runs(rendered, dashboard, name):
    assert isinstance(rendered.annotations[dashboard, name], set), rendered.annotations[dashboard, name]


@pytest.mark.parametrize("dashboard", ["gpu-fleet", "balancer"])
def test_hotspot_actions_the_controller_carried_out_are_marked(rendered, dashboard):
    hotspot = {(t, r) for t, r in rendered.actions
               if t in HOTSPOT_MARKERS and (t != "scale_training" or r in ("hotspot", "give_back"))}
    # the hotspot scenario's cooling fault makes the controller migrate, cap power and taint within the run
    assert {"migrate", "power_limit", "taint_node"} <= {t for t, _ in hotspot}, rendered.actions
    for action_type, reason in hotspot:
        marked = rendered.annotations[dashboard, HOTSPOT_MARKERS[action_type]]
        assert reason in marked, f"{dashboard}: {action_type} {reason} not marked ({marked})"


def test_the_controller_really_ran_its_loop(rendered):
    assert rendered.cycles >= 10


def test_the_scheduler_bound_the_pods_that_fit_and_read_gpu_facts(rendered):
    assert rendered.scheduled["train-big"] is None
    assert all(rendered.scheduled[p] for p in ("infer-0", "infer-1", "infer-late")), rendered.scheduled
    assert rendered.facts_nodes >= 2   # the simulated fleet's hosts, from the test's Prometheus


def test_previews_are_written(rendered):
    assert len(rendered.written) == 5
    assert all(p.stat().st_size > 10_000 for p in rendered.written)
