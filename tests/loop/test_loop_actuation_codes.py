"""`gputide_actuation_errors_total{type, outcome, code}` has a fixed set of codes (balancer.actuation_codes), every
series of which exists at 0 before the first error: GputideActuationErrors (>= 3 in 15m) then fires at the 3rd error
of a code never seen before, where a series created at its first error started at 1 and needed a 4th."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from loop_helpers import make_fleet, snapshot, workload
from prometheus_client import CollectorRegistry, generate_latest
from test_loop_metrics import Refusing, Source, loop

from balancer.actuate.base import Outcome
from balancer.actuation_codes import CODES, FAILED, RETRY, error_code, error_label_triples
from balancer.metrics import ControllerMetrics
from balancer.model import Plan, ScaleTraining, WorkloadClass
from balancer.plan import planner as planner_mod
from balancer.telemetry.promserver import Target

ROOT = Path(__file__).resolve().parents[2]
HTTP = ("400", "403", "404", "409", "410", "422", "429", "500", "503", "504")


def counted(reg: CollectorRegistry) -> dict[tuple[str, str, str], float]:
    return {(s.labels["type"], s.labels["outcome"], s.labels["code"]): s.value for f in reg.collect()
            for s in f.samples if s.name == "gputide_actuation_errors_total"}


def test_every_series_the_controller_can_count_starts_at_0_and_they_stay_few():
    reg = CollectorRegistry()
    ControllerMetrics(reg)
    assert counted(reg) == dict.fromkeys(error_label_triples(), 0.0)
    assert ("migrate", "failed", "403") in counted(reg) and ("scale_training", "retry", "deadline") in counted(reg)
    assert len(counted(reg)) <= 100, "kinds x (outcome, code) pairs stays small"


def test_the_table_holds_the_kubernetes_statuses_and_the_outcome_values():
    assert set(HTTP) <= set(CODES)
    assert {RETRY, FAILED} == {str(Outcome.RETRY), str(Outcome.FAILED)}


def test_the_kubernetes_gateway_gives_each_status_the_outcome_the_table_lists():
    """_translate decides temporary (retry) or permanent (failed); a status counted under another outcome than
    the table's would be `other`."""
    from kubernetes.client.exceptions import ApiException

    from balancer.actuate.kubernetes import DeadlineExceeded, KubeTemporaryError, _code, _translate
    from balancer.errors import PermanentActuationError, TemporaryActuationError

    for status in HTTP:
        err = _translate(ApiException(status=int(status), reason="x"), "patch node n1")
        outcome = RETRY if isinstance(err, TemporaryActuationError) else FAILED
        assert error_code(outcome, _code(err)) == status, (status, outcome)
    assert error_code(RETRY, _code(KubeTemporaryError("connection reset"))) == "transport"
    assert error_code(RETRY, _code(DeadlineExceeded("out of time"))) == "deadline"
    assert error_code(FAILED, _code(PermanentActuationError("the plan is stale"))) == "refused"


@pytest.mark.parametrize(("outcome", "raw", "label"), [
    (RETRY, "404", "404"),        # a replaced Kueue Workload
    (FAILED, "404", "404"),
    (RETRY, "502", "other"),      # not in the table
    (FAILED, "401", "other"),
    (RETRY, "403", "other"),      # in the table, never with this outcome
    (FAILED, "", "unknown"),      # an actuator that gave no code
    (RETRY, "unknown", "unknown"),
    (FAILED, "refused", "refused"),   # the actuator's own refusal: a migration's target, a Deployment's owner
    (RETRY, "refused", "refused"),    # ... a target held for another pod, for now: no transport error (nor `other`)
])
def test_a_code_is_mapped_into_the_table(outcome, raw, label):
    assert error_code(outcome, raw) == label


def shrinking_loop(answers):
    snap = snapshot(make_fleet(1, 4), age=0.0,
                    workloads=[(workload("job-0", WorkloadClass.TRAINING, owner="job", elastic_min=0), (0,))])
    shrink = ScaleTraining(job="job", workers=0, previous_workers=1, reason="room", expected_gain=5.0)

    def planner(s, forecasts, policy, state):
        return Plan(actions=(shrink,)), state or planner_mod.PlannerState()

    class Audit:
        def __init__(self):
            self.records: list[dict] = []

        def write(self, record):
            self.records.append(record)

    actuator = Refusing()
    actuator.answers = answers
    clock = [0.0]
    audit = Audit()
    rec, reg = loop(Source(snap), clock, planner=planner, actuator=actuator, audit=audit)
    for t in (0.0, 1000.0):   # past the cooldown: the guard lets the retry through
        clock[0] = t
        assert len(rec.run_once().results) == 1
    return reg, audit.records


def test_the_loop_counts_an_unlisted_status_as_other_and_keeps_it_in_the_audit():
    reg, records = shrinking_loop([("retry", "502"), ("retry", "503")])
    after = counted(reg)
    assert after.pop(("scale_training", "retry", "other")) == 1
    assert after.pop(("scale_training", "retry", "503")) == 1, "a first 503 counts from 0"
    assert set(after.values()) == {0.0}
    assert [r["outcome"] for r in records] == ["retry", "retry"]
    assert "502" in str(records[0]), "the raw status stays in the audit record"


def alert_expr() -> str:
    groups = yaml.safe_load((ROOT / "rules" / "gputide-alerts.yaml").read_text())["groups"]
    (expr,) = [r["expr"] for g in groups for r in g["rules"] if r.get("alert") == "GputideActuationErrors"]
    return expr


@pytest.mark.integration
def test_the_alert_expression_holds_at_the_third_error_of_a_fresh_code_on_prometheus(prometheus_factory,
                                                                                      metrics_server):
    metrics = ControllerMetrics(CollectorRegistry())
    server = metrics_server(generate_latest(metrics.registry).decode())
    prom = prometheus_factory([Target("gputide", server.address)])
    series = 'gputide_actuation_errors_total{type="migrate", outcome="retry", code="503"}'
    prom.wait_for(f"{series} == 0", bool, timeout=30)
    for _ in range(3):   # as the loop counts them
        metrics.actuation_errors.labels(type="migrate", outcome="retry", code="503").inc()
    server.text = generate_latest(metrics.registry).decode()
    prom.wait_for(f"{series} == 3", bool, timeout=30)
    (row,) = prom.wait_for(f'({alert_expr()}) and on (type, code) {series}', bool, timeout=30)
    assert (row["metric"]["type"], row["metric"]["code"]) == ("migrate", "503")
    assert float(row["value"][1]) >= 3
