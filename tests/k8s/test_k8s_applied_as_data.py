"""What the Kubernetes actuator's result carries as data (`ActionResult.unchanged`, `capped_to`) comes from its
handlers as data (`k8s_training.Applied`), not from the words of their detail: before, `apply` parsed the detail
for "left as it is (already)" and "clamped to the HPA's maxReplicas N", so a reworded message would have silently
lost a shrink's "nothing written" (the planner then remembers a shrink gputide never took) or a floor's cap (the
planner keeps asking for replicas that never start). The detail for people is the same words as before."""

from __future__ import annotations

import pytest
from fakeapi import FakeKube, deployment, hpa, job

from balancer.actuate import k8s_training
from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_training import Applied
from balancer.model import ScaleInference, ScaleTraining
from tests.k8s.test_k8s_shrink_record import SNAP


def shrink(workers: int = 3, previous: int = 4) -> ScaleTraining:
    return ScaleTraining(reason="test", job="ml/train", workers=workers, previous_workers=previous,
                         shrunk_from=previous)


def floor(replicas: int) -> ScaleInference:
    return ScaleInference(reason="tide", service="serve/web", replicas=replicas, previous_replicas=10)


@pytest.fixture
def actuator(kube: FakeKube, api, clock, sleeps) -> KubernetesActuator:
    kube.add(job("train", "ml", parallelism=2))   # its owner shrank it 4 -> 2 since the plan saw 4 run
    kube.add(deployment("web", "serve", replicas=10))
    kube.add(hpa("web", "web", "serve", lo=3, hi=10))
    return KubernetesActuator(api, sleep=sleeps.append, clock=clock)


def test_the_handlers_say_it_as_data_in_the_same_words(actuator) -> None:
    left = actuator._scale_training(shrink(3, 4), SNAP)
    assert left == Applied("job ml/train left as it is (already): the plan's shrink from 4 to 3 workers would raise "
                           "it: it asks for 2 (resized since the plan's view); nothing written", unchanged=True)
    written = actuator._scale_training(shrink(1, 2), SNAP)
    assert written == Applied(written.detail) and written.detail.startswith("job ml/train parallelism = 1; ")
    capped = actuator._scale_inference(floor(12), SNAP)
    assert capped == Applied("hpa serve/web minReplicas = 10 (asked 12, clamped to the HPA's maxReplicas 10: 2 "
                             "replicas will not start)", capped_to=10)
    assert actuator._scale_inference(floor(6), SNAP) == Applied("hpa serve/web minReplicas = 6")


def test_a_reworded_detail_loses_nothing(monkeypatch, actuator) -> None:
    monkeypatch.setattr(k8s_training, "LEFT_AS_IS", "not touched")
    result = actuator.apply(shrink(3, 4), SNAP)
    assert result.outcome is Outcome.APPLIED and result.unchanged, result
    assert result.detail.startswith("job ml/train not touched: ")


def test_words_alone_carry_nothing(actuator) -> None:
    """A handler's plain detail that reads like the old phrases is a detail only: no data is read back from it."""
    actuator._handlers[ScaleTraining] = lambda action, snap: "job ml/train left as it is (already): for a test"
    actuator._handlers[ScaleInference] = lambda action, snap: ("hpa serve/web minReplicas = 10 (asked 12, clamped to "
                                                               "the HPA's maxReplicas 10: 2 replicas will not start)")
    trained, scaled = actuator.apply(shrink(3, 4), SNAP), actuator.apply(floor(12), SNAP)
    assert trained.outcome is Outcome.APPLIED and not trained.unchanged, trained
    assert scaled.outcome is Outcome.APPLIED and scaled.capped_to is None, scaled
