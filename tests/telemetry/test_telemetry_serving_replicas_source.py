"""Which replicas a service's status has: its spec.replicas (`gputide_inference_replicas`), or a count of the pods it
owns. The capacity planner ends a capped scale's belief on spec.replicas above the cap (the HPA keeps them at most its
maxReplicas: a raise), never on a count of pods (a rolling update's surge pods are in it); before, the status did not
say which, and a raise the HPA scaled past was ignored while the cap was believed
(tests/loop/test_loop_capped_scales.py)."""

from __future__ import annotations

from balancer.model import WorkloadClass
from balancer.telemetry.serving import read_services
from tests.loop.loop_helpers import workload


def _row(name: str, value: str, service: str) -> dict:
    return {"metric": {"__name__": name, "service": service, "namespace": "ml"}, "value": [0, value]}


def test_a_status_says_whether_its_replicas_are_the_spec_or_a_count_of_pods() -> None:
    rows = [_row("gputide_inference_demand_rps", "10", "chat"), _row("gputide_inference_replicas", "2", "chat"),
            _row("gputide_inference_demand_rps", "10", "code")]
    pods = tuple(workload(f"code-{i}", WorkloadClass.INFERENCE, owner="code") for i in range(3))   # one surging
    got = read_services(rows, pods, {}, 0.5)[0]
    assert (got["chat"].replicas, got["chat"].replicas_from_spec) == (2, True)
    assert (got["code"].replicas, got["code"].replicas_from_spec) == (3, False)
