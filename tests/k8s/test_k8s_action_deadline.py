"""Every action ends within its deadline, however slow the API server and however many retries its calls are allowed:
the gateway cuts each try's timeout to what is left and starts no call or retry that could not end in time
(`_Api.deadline`); what undoes a half-done action runs on the deadline's reserve; an action out of time is a failed
action (RETRY, code `deadline`) to the loop and the safety ledger. Time here is a fake monotonic clock that the
fake API server and the backoff advance (`slow_api`)."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace

import pytest
from fakeapi import FakeKube, clusterqueue, job, node, pod, workload
from kubernetes.client.exceptions import ApiException
from slow_api import Clock, SlowServer
from test_k8s_actuator import SNAP, migrate

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.kubernetes import (
    HOT_TAINT_KEY,
    RESERVATION_ANNOTATION,
    SUSPENDED_LABEL,
    DeadlineExceeded,
    KubeTemporaryError,
    _Api,
    _code,
)
from balancer.errors import TemporaryActuationError
from balancer.model import ScaleTraining

# ---- the gateway ------------------------------------------------------------------------------------------------


class Call:
    """A generated-client function that takes `seconds` of the clock (no more than the try's timeout: the client
    stops waiting then) and fails its first `failures` tries with a 503; records each try's timeout."""

    def __init__(self, clock: Clock, seconds: float, failures: int = 0) -> None:
        self.clock, self.seconds, self.failures = clock, seconds, failures
        self.timeouts: list[float] = []

    def __call__(self, *args, _preload_content: bool, _request_timeout: float, **kwargs):
        self.timeouts.append(_request_timeout)
        self.clock.advance(min(self.seconds, _request_timeout))
        if self.failures:
            self.failures -= 1
            raise ApiException(status=503, reason="Service Unavailable")
        return SimpleNamespace(data=b'{"ok": true}')


def gateway(clock: Clock, max_retries: int = 3) -> _Api:
    return _Api(None, max_retries, 0.5, clock.advance, 10.0, clock)


def test_outside_a_deadline_every_try_has_the_full_timeout_and_every_retry():
    clock = Clock()
    call = Call(clock, 10.0, failures=3)
    assert gateway(clock)("pod p", call) == {"ok": True}
    assert call.timeouts == [10.0] * 4 and clock.now == 43.5


def test_each_try_is_cut_to_what_is_left_and_none_starts_once_the_deadline_has_passed():
    clock = Clock()
    api, call = gateway(clock), Call(clock, 8.0)
    with api.deadline(30.0, reserve_s=0.0):
        for _ in range(4):
            api("pod p", call)
        with pytest.raises(DeadlineExceeded, match="^pod p: not tried: its deadline has passed$"):
            api("pod p", call)
    assert call.timeouts == [10.0, 10.0, 10.0, 6.0] and clock.now == 30.0


def test_a_retry_that_could_not_end_in_time_is_not_started():
    """Without the deadline the call would be tried four times (43.5 s); with 25 s it ends at 25 s, and says why."""
    clock = Clock()
    api, call = gateway(clock), Call(clock, 10.0, failures=10)
    with api.deadline(25.0, reserve_s=0.0), pytest.raises(DeadlineExceeded) as caught:
        api("pod p", call)
    assert call.timeouts == [10.0, 10.0, 3.5] and clock.now == 25.0
    assert str(caught.value) == "pod p: HTTP 503 Service Unavailable; not retried: its deadline has passed"
    assert _code(caught.value) == "deadline" and isinstance(caught.value, TemporaryActuationError)


def test_the_reserve_is_left_to_what_undoes_a_change():
    """A 30 s deadline: the work's own calls stop at 20 s, what runs under `reserve()` goes on to 30 s."""
    clock = Clock()
    api, call = gateway(clock), Call(clock, 8.0)
    with api.deadline(30.0):
        for _ in range(3):
            api("pod p", call)
        with pytest.raises(DeadlineExceeded, match="not tried: its deadline has passed"):
            api("pod p", call)
        with api.reserve():
            assert api.reserving
            api("undo", call)
            api("undo", call)
            with pytest.raises(DeadlineExceeded, match="not tried: its reserve has passed"):
                api("undo", call)
        assert not api.reserving
    assert call.timeouts == [10.0, 10.0, 4.0, 10.0, 2.0] and clock.now == 30.0


def test_a_nested_deadline_never_extends_the_outer_one():
    clock = Clock()
    api, call = gateway(clock), Call(clock, 10.0)
    with api.deadline(15.0, reserve_s=0.0):
        with api.deadline(100.0, reserve_s=0.0):
            api("pod p", call)
            api("pod p", call)
        with pytest.raises(DeadlineExceeded):
            api("pod p", call)
    api("pod p", call)   # the deadline is over: calls have their own timeouts again
    assert call.timeouts == [10.0, 5.0, 10.0]


def test_a_deadline_binds_only_the_thread_whose_work_it_is():
    """A scheduler's watch threads list through the same gateway as its passes."""
    clock = Clock()
    api, call = gateway(clock), Call(clock, 0.0)
    with api.deadline(10.0, reserve_s=0.0):
        clock.advance(20.0)
        with pytest.raises(DeadlineExceeded):
            api("pod p", call)
        other = threading.Thread(target=api, args=("list pods", call))
        other.start()
        other.join()
    assert call.timeouts == [10.0]


# ---- the actuator against a slow API server ------------------------------------------------------------------------


@pytest.fixture
def cluster(kube: FakeKube) -> FakeKube:
    kube.add(node("n1", 2))
    kube.add(node("n2", 2))
    kube.add(pod("web-1", labels={"app": "web"}, node_name="n1", owner=("ReplicaSet", "web-5d8f")))
    return kube


def test_a_migrate_whose_eviction_never_answers_ends_in_its_deadline_and_releases_its_reservation(
        cluster: FakeKube, api, clock) -> None:
    """Every call 5 s, the eviction never answering (10 retries allowed: 240 s of tries without a deadline). The
    evictions stop at the action's own 120 s; the last one unanswered, one read of the pod on the reserve finds it
    still running (the eviction did not land: not `maybe_applied`), and the reservation is released, after it; the
    pod stays where it runs, and the source's hot taint expires on its own (as after any failed Migrate)."""
    mono = Clock()
    actuator = KubernetesActuator(api, clock=clock, sleep=mono.advance, deadline_clock=mono, max_retries=10,
                                  backoff_s=0.1)
    cluster.inject("POST", r"/eviction$", 500, count=100)
    server = SlowServer(cluster, actuator.api, mono, 5.0, {("POST", r"/eviction$"): 60.0})
    result = actuator.apply(migrate(), SNAP)
    assert (result.outcome, result.code) == (Outcome.RETRY, "deadline")
    assert "evict pod default/web-1: HTTP 504" in result.detail and "not retried" in result.detail
    assert (len(cluster.calls("POST", r"/eviction$")) == 8
            and server.timeouts[6:] == [10.0] * 7 + [pytest.approx(7.3), 10.0, 10.0, 10.0])
    assert mono.now == pytest.approx(135.0)   # 120 s, the pod read, the release's two calls: within the 180 s deadline
    assert not result.maybe_applied and "outcome unknown" not in result.detail
    assert RESERVATION_ANNOTATION not in (cluster.get("nodes", "n2")["metadata"].get("annotations") or {})
    assert cluster.get("pods", "web-1", "default")["spec"]["nodeName"] == "n1"
    assert [t["key"] for t in cluster.get("nodes", "n1")["spec"]["taints"]] == [HOT_TAINT_KEY]
    assert not cluster.calls("POST", r"/events$")   # no Event for an action that did not happen


def test_a_queued_job_whose_workload_never_answers_keeps_running_unlabelled(kube: FakeKube, api, clock) -> None:
    """Stopping a Kueue-queued Job labels it, then deactivates its Workload; the Workload API never answering, the
    deactivation stops at the action's own 120 s and the label is taken off again on the reserve: the Job runs on,
    as it was, and is not listed as one gputide stopped."""
    kube.add(clusterqueue("inference", "tide", 16))
    kube.add(clusterqueue("training", "tide", 8))
    wl = kube.add(workload(kube.add(job("train", "ml", parallelism=4, gpus=2, queue="training-lq")), "h100"))
    mono = Clock()
    actuator = KubernetesActuator(api, clock=clock, sleep=mono.advance, deadline_clock=mono, max_retries=20,
                                  kueue_queues=("inference", "training"))
    kube.inject("PATCH", r"/workloads/", 500, count=100)
    SlowServer(kube, actuator.api, mono, 5.0, {("PATCH", r"/workloads/"): 60.0})
    result = actuator.apply(ScaleTraining(reason="tide", job="ml/train", workers=0, previous_workers=4), SNAP)
    assert (result.outcome, result.code) == (Outcome.RETRY, "deadline")
    assert 120.0 < mono.now <= actuator.action_deadline_s
    stored = kube.get("jobs", "train", "ml")
    assert SUSPENDED_LABEL not in stored["metadata"]["labels"] and not stored["spec"].get("suspend")
    assert kube.get("workloads", wl["metadata"]["name"], "ml")["spec"].get("active", True) is True


def test_housekeeping_on_a_slow_api_server_ends_in_the_deadline_and_leaves_the_rest_for_next_cycle(
        kube: FakeKube, api, clock) -> None:
    """Forty expired reservations at 5 s a call would take 405 s; housekeeping stops at the deadline and says so."""
    expired = json.dumps({"default/x": {"pod": "default/x", "gpus": [0], "count": 1,
                                        "expires": "2000-01-01T00:00:00Z"}})
    for i in range(40):
        spec = node(f"n{i}", 2)
        spec["metadata"]["annotations"] = {RESERVATION_ANNOTATION: expired}
        kube.add(spec)
    mono = Clock()
    actuator = KubernetesActuator(api, clock=clock, sleep=mono.advance, deadline_clock=mono)
    SlowServer(kube, actuator.api, mono, 5.0)
    notes = actuator.housekeeping()
    assert mono.now <= actuator.action_deadline_s
    assert notes[-1].startswith("housekeeping: could not release expired taints and reservations: ")
    assert "not tried" in notes[-1]
    released = [n for n in (kube.get("nodes", f"n{i}") for i in range(40))
                if RESERVATION_ANNOTATION not in (n["metadata"].get("annotations") or {})]
    assert 0 < len(released) < 40


def test_an_action_deadline_must_be_positive(api) -> None:
    with pytest.raises(ValueError, match="action_deadline_s"):
        KubernetesActuator(api, action_deadline_s=0.0)


# ---- the loop and the safety ledger ------------------------------------------------------------------------------


def migrating_loop(actuator: KubernetesActuator):
    """A Reconciler whose every cycle plans `migrate()` on SNAP, applied by `actuator`; its audit and registry."""
    import io

    from prometheus_client import CollectorRegistry

    from balancer.loop import JsonlAudit, Reconciler
    from balancer.metrics import ControllerMetrics
    from balancer.model import Plan

    class Snapshots:
        def snapshot(self):
            return SNAP.replace(sample_age_s=[0.0] * SNAP.n_gpus)

    def plan(snapshot, forecasts, policy, state):
        return Plan(actions=(migrate(),)), state

    audit, registry = io.StringIO(), CollectorRegistry()
    rec = Reconciler(source=Snapshots(), actuator=actuator, clock=lambda: SNAP.time, planner=plan,
                     metrics=ControllerMetrics(registry), audit=JsonlAudit(audit))
    return rec, audit, registry


def test_the_loop_treats_an_action_out_of_time_as_any_failed_action(cluster: FakeKube, api, clock) -> None:
    """Not in the safety ledger (no eviction spent, no cooldown), refused by the planner for a while, counted in
    gputide_actuation_errors_total{code="deadline"}, audited as retry."""
    from balancer.safety import SafetyLedger

    mono = Clock()
    actuator = KubernetesActuator(api, clock=clock, sleep=mono.advance, deadline_clock=mono, max_retries=10)
    cluster.inject("POST", r"/eviction$", 500, count=100)
    SlowServer(cluster, actuator.api, mono, 5.0, {("POST", r"/eviction$"): 60.0})
    rec, audit, registry = migrating_loop(actuator)
    budget = rec.guard.remaining_evictions(rec.ledger, SNAP.time)
    report = rec.run_once()
    assert [(r.outcome, r.code) for r in report.results] == [(Outcome.RETRY, "deadline")]
    assert rec.ledger == SafetyLedger() and rec.guard.remaining_evictions(rec.ledger, SNAP.time) == budget
    assert registry.get_sample_value("gputide_actuation_errors_total", {
        "type": "migrate", "outcome": "retry", "code": "deadline"}) == 1.0
    assert '"outcome": "retry"' in audit.getvalue().splitlines()[-1]
    assert dict(rec.state.refused_moves) == {"default/web-1": SNAP.time}   # not offered again for a while


def test_a_deadline_error_is_a_temporary_kubernetes_error():
    assert issubclass(DeadlineExceeded, KubeTemporaryError)
