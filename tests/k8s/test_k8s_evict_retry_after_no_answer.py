"""A write whose try got no answer may have landed; its retry, answered 404 or 409, is then what the landed try left
(the evicted pod gone; terminating, or made again under its name), which `_Api.writes` takes for a definite answer.
The gateway's error says so (`after_unanswered`), and the Migrate's eviction judges by it: a 404 after no answer is
the pod evicted (the migration happened, said as one, not "already gone"); a 409 after no answer is of unknown
outcome until one read of the pod tells, and where the read cannot tell, the failed result says it may have been
carried out (`maybe_applied`: the loop counts the eviction against its budgets). It was a plain RETRY: the eviction
budget unspent and no migration in the ledger, while the pod may have gone down. Against the fake API server, the
first try of the eviction carried out and then timed out."""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest
import test_k8s_action_deadline
from fakeapi import FakeKube
from test_k8s_action_deadline import migrating_loop
from test_k8s_actuator import SNAP, migrate
from test_k8s_unknown_outcome import LANDED, Script, gateway, reserved, timeout

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.errors import ActuationError

cluster = test_k8s_action_deadline.cluster   # the fixture: nodes n1 and n2, pod web-1 (of Deployment web) on n1


# ---- the gateway: what its error says ----------------------------------------------------------------------------


@pytest.mark.parametrize(("answers", "after"), [
    (("timeout", 404), True),        # the retry finds the pod the first try evicted gone
    (("timeout", 409), True),        # ... or terminating, or made again under its name
    (("timeout", 503, 409), True),   # an answered try between: the first may still have landed
    (("timeout", "timeout"), True),  # the last try's own timeout comes after the first's
    ((404,), False),                 # the only try answered: a definite refusal
    ((503, 409), False),             # every try answered
    (("timeout",), False),           # one try (no retries): none before it
])
def test_the_error_says_whether_a_try_before_it_got_no_answer(answers, after):
    api, call = gateway(max_retries=len(answers) - 1), Script("create_namespaced_pod_eviction", *answers)
    with api.writes(), pytest.raises(ActuationError) as raised:
        api("evict pod default/web-1", call)
    assert call.tries == len(answers)
    assert raised.value.after_unanswered is after


def test_a_read_that_got_no_answer_is_no_earlier_write():
    # a GET timed out then answered 404 said `after_unanswered` too: "may have landed" means nothing for a read
    api, call = gateway(max_retries=1), Script("read_namespaced_pod", "timeout", 404)
    with pytest.raises(ActuationError) as raised:
        api("read pod default/web-1", call)
    assert call.tries == 2
    assert raised.value.status == 404 and raised.value.after_unanswered is False


# ---- the Migrate's eviction --------------------------------------------------------------------------------------


@pytest.fixture
def actuator(api, clock, sleeps) -> KubernetesActuator:
    return KubernetesActuator(api, clock=clock, sleep=sleeps.append, max_retries=1)


def first_unanswered(actuator: KubernetesActuator, effect: Callable[[FakeKube], object], kube: FakeKube) -> None:
    """The eviction's first try is carried out (`effect(kube)`: what the API server did) and its answer lost (a read
    timeout); its retry reaches the fake API server."""
    core, tried = actuator.api.core, []
    real = core.create_namespaced_pod_eviction

    @functools.wraps(real)   # keeps its name: create_... is how the gateway knows a write
    def evict(*args, **kwargs):
        if tried:
            return real(*args, **kwargs)
        tried.append(True)
        effect(kube)
        raise timeout()

    core.create_namespaced_pod_eviction = evict


def test_a_retry_answered_404_after_no_answer_is_the_pod_evicted(cluster, actuator):
    """It said "default/web-1 was already gone", as for a pod deleted by another between the read and the eviction:
    the migration this eviction made, said as none."""
    first_unanswered(actuator, LANDED["is gone"], cluster)
    result = actuator.apply(migrate(), SNAP)
    assert result.outcome is Outcome.APPLIED and not result.maybe_applied, result.detail
    assert "evicted default/web-1 from n1 (confirmed after no answer: the pod is gone" in result.detail
    assert "HTTP 404" in result.detail and "already gone" not in result.detail
    assert reserved(cluster), "the reservation is the replacement's: kept"
    assert len(cluster.calls("POST", r"/eviction$")) == 1   # the retry; the first try never reached it
    assert len(cluster.calls("GET", r"/pods/web-1$")) == 1   # the Migrate's own read: a 404 needs no other


@pytest.mark.parametrize("shows", ["is being deleted", "was replaced"])
def test_a_retry_answered_409_after_no_answer_is_confirmed_as_the_eviction_landed(cluster, actuator, shows):
    """The read after the 409 finds what the first try left: the pod evicted by this migration (it said
    "default/web-1 was replaced", as for a pod made again after dying on its own)."""
    first_unanswered(actuator, LANDED[shows], cluster)
    cluster.inject("POST", r"/eviction$", 409)
    result = actuator.apply(migrate(), SNAP)
    assert result.outcome is Outcome.APPLIED and not result.maybe_applied, result.detail
    assert f"evicted default/web-1 from n1 (confirmed after no answer: the pod {shows}; " in result.detail
    assert reserved(cluster)


def test_a_retry_answered_409_after_no_answer_and_no_read_may_have_landed_and_the_loop_counts_it(cluster,
                                                                                                  actuator):
    """The read after the 409 gets no answer either: the first try may have evicted the pod. It was a plain RETRY,
    the 409 taken for a definite refusal: no eviction spent, no migration in the ledger. Now `maybe_applied`,
    counted against the budgets as any eviction of unknown outcome."""
    first_unanswered(actuator, LANDED["was replaced"], cluster)
    cluster.inject("POST", r"/eviction$", 409)
    core, read = actuator.api.core, actuator.api.core.read_namespaced_pod

    @functools.wraps(read)
    def reading(*args, **kwargs):   # every read after the eviction's retry gets no answer
        if cluster.calls("POST", r"/eviction$"):
            raise timeout()
        return read(*args, **kwargs)

    core.read_namespaced_pod = reading
    rec, audit, registry = migrating_loop(actuator)
    budget = rec.guard.remaining_evictions(rec.ledger, SNAP.time)
    (result,) = rec.run_once().results
    assert (result.outcome, result.code, result.maybe_applied) == (Outcome.RETRY, "409", True), result.detail
    assert "outcome unknown: no answer to evict pod default/web-1" in result.detail
    assert rec.guard.remaining_evictions(rec.ledger, SNAP.time) == budget - 1
    assert "default/web-1" in rec.ledger.last_action and len(rec.ledger.migrations) == 1
    assert registry.get_sample_value("gputide_actuation_unknown_outcomes_total", {"type": "migrate"}) == 1.0
