"""A write that got no answer may have landed on the API server: the gateway lists it (`_Api.writes`), the actuator's
failed result says so (`maybe_applied`) and the loop counts it against the safety budgets. A Migrate first reads
the pod once to tell whether its unanswered eviction went through. Writes that get no answer are the generated
client's own functions wrapped to raise what urllib3 raises on a read timeout (`no_answer`), after the fake API
server carried the request out or not."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from types import SimpleNamespace

import pytest
import test_k8s_action_deadline
import urllib3
from fakeapi import FakeKube, deployment, pod
from kubernetes.client.exceptions import ApiException
from slow_api import Clock
from test_k8s_action_deadline import migrating_loop
from test_k8s_actuator import SNAP, migrate

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.kubernetes import RESERVATION_ANNOTATION, DeadlineExceeded, KubeTemporaryError, _Api
from balancer.model import ScaleInference, TaintNode


def timeout() -> urllib3.exceptions.ReadTimeoutError:
    return urllib3.exceptions.ReadTimeoutError(None, "/", "Read timed out. (read timeout=10.0)")


def no_answer(fn: Callable, effect: Callable[[], object] | None = None) -> Callable:
    """The generated-client function `fn` whose every try times out reading the answer; the first try's request
    carried out all the same when `effect` is given (`effect()`: what the API server did)."""
    done: list[bool] = []

    @functools.wraps(fn)   # keeps its name: create_/patch_... is how the gateway knows a write
    def call(*args, **kwargs):
        if effect is not None and not done:
            done.append(True)
            effect()
        raise timeout()

    return call


# ---- the gateway: which writes it lists ------------------------------------------------------------------------


class Script:
    """A generated-client function named `name` whose tries answer in turn: "ok", "timeout" (no answer) or an HTTP
    status; records each try."""

    def __init__(self, name: str, *answers: str | int) -> None:
        self.__name__, self.answers, self.tries = name, list(answers), 0

    def __call__(self, *args, _preload_content: bool, _request_timeout: float, **kwargs):
        answer = self.answers[min(self.tries, len(self.answers) - 1)]
        self.tries += 1
        if answer == "timeout":
            raise timeout()
        if answer != "ok":
            raise ApiException(status=int(answer), reason="x")
        return SimpleNamespace(data=b"{}")


def gateway(clock: Clock | None = None, max_retries: int = 3) -> _Api:
    clock = clock or Clock()
    return _Api(None, max_retries, 0.5, clock.advance, 10.0, clock)


@pytest.mark.parametrize(("name", "answers", "unknown"), [
    ("patch_node", ("timeout",), True),                       # every try unanswered
    ("create_namespaced_pod_eviction", (504,), True),         # the API server's own timeout: it may have landed
    ("patch_node", ("timeout", "ok"), False),                 # a later try answered: done
    ("patch_node", ("timeout", 409), False),                  # a definite answer (what a landed first try leaves)
    ("create_namespaced_pod_eviction", ("timeout", 404), False),
    ("patch_node", ("timeout", 503), True),                   # a 503 says the retry was not done, not the first try
    ("patch_node", ("timeout", 429), True),
    ("patch_node", (503,), False),                            # answered every time: not done
    ("read_node", ("timeout",), False),                       # a read changes nothing
    ("list_node", (504,), False),
])
def test_a_write_is_listed_while_no_try_of_it_has_had_a_definite_answer(name, answers, unknown):
    api, call = gateway(), Script(name, *answers)
    with api.writes() as listed:
        try:
            api("the call", call)
        except KubeTemporaryError:
            pass
        except Exception as err:   # a definite 4xx: permanent or a conflict
            assert getattr(err, "status", 0) in (404, 409), err
        assert listed == (["the call"] if unknown else []) and api.unknown_writes is listed


def test_a_write_whose_retries_the_deadline_stopped_after_no_answer_is_listed():
    clock = Clock()
    api = gateway(clock, max_retries=10)

    def slow(*args, _preload_content: bool, _request_timeout: float, **kwargs):
        clock.advance(_request_timeout)
        raise timeout()

    slow.__name__ = "patch_namespaced_deployment_scale"
    with api.deadline(25.0, reserve_s=0.0), api.writes() as listed, pytest.raises(DeadlineExceeded) as raised:
        api("deployment web scale", slow)
    assert listed == ["deployment web scale"]
    assert raised.value.after_unanswered, "the error says a try before it got no answer"


def test_writes_are_listed_only_inside_a_block_and_an_inner_block_keeps_its_own():
    api = gateway()
    with pytest.raises(KubeTemporaryError):
        api("outside", Script("patch_node", "timeout"))   # not tracked: nothing to hold it, nothing grows
    assert api.unknown_writes == []
    with api.writes() as outer:
        with api.writes() as inner, pytest.raises(KubeTemporaryError):
            api("inner", Script("patch_node", "timeout"))
        with pytest.raises(KubeTemporaryError):
            api("outer", Script("patch_node", "timeout"))
    assert (outer, inner) == (["outer"], ["inner"])


# ---- the actuator ------------------------------------------------------------------------------------------------

cluster = test_k8s_action_deadline.cluster   # the fixture: nodes n1 and n2, pod web-1 (of Deployment web) on n1


@pytest.fixture
def actuator(api, clock, sleeps) -> KubernetesActuator:
    return KubernetesActuator(api, clock=clock, sleep=sleeps.append, max_retries=1)


def reserved(kube: FakeKube) -> bool:
    return RESERVATION_ANNOTATION in (kube.get("nodes", "n2")["metadata"].get("annotations") or {})


def replace_pod(kube: FakeKube) -> None:
    kube.delete("pods", "web-1", "default")
    kube.add(pod("web-1", labels={"app": "web"}, node_name="n2", owner=("ReplicaSet", "web-5d8f")))


LANDED = {
    "is gone": lambda kube: kube.delete("pods", "web-1", "default"),
    "is being deleted": lambda kube: kube.mutate("pods", "web-1", "default",
                                                 {"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}),
    "was replaced": replace_pod,   # a StatefulSet's pod: its replacement has its name
}


@pytest.mark.parametrize("shows", LANDED)
def test_an_unanswered_eviction_that_landed_is_confirmed_by_one_read_and_applied(cluster, actuator, shows):
    core = actuator.api.core
    core.create_namespaced_pod_eviction = no_answer(core.create_namespaced_pod_eviction,
                                                    lambda: LANDED[shows](cluster))
    result = actuator.apply(migrate(), SNAP)
    assert result.outcome is Outcome.APPLIED and not result.maybe_applied, result.detail
    assert f"confirmed after no answer: the pod {shows}" in result.detail
    assert reserved(cluster), "the reservation is the replacement's: kept"
    assert len(cluster.calls("GET", r"/pods/web-1$")) == 2   # the Migrate's own read, then the one confirming
    assert [r.body["reason"] for r in cluster.calls("POST", r"/events$")] == ["GputideMigrated"]


def test_an_unanswered_eviction_that_did_not_land_is_a_plain_retry(cluster, actuator):
    core = actuator.api.core
    core.create_namespaced_pod_eviction = no_answer(core.create_namespaced_pod_eviction)
    result = actuator.apply(migrate(), SNAP)
    assert (result.outcome, result.code) == (Outcome.RETRY, "transport")
    assert not result.maybe_applied and "outcome unknown" not in result.detail, "known not to have landed"
    assert len(cluster.calls("GET", r"/pods/web-1$")) == 2 and not reserved(cluster)
    assert cluster.get("pods", "web-1", "default")["spec"]["nodeName"] == "n1"


def unreadable_after_eviction(actuator: KubernetesActuator) -> None:
    """The eviction gets no answer and did not land; every read of the pod after it gets none either."""
    core, tried = actuator.api.core, []
    core.create_namespaced_pod_eviction = no_answer(core.create_namespaced_pod_eviction, lambda: tried.append(1))
    read = core.read_namespaced_pod

    @functools.wraps(read)
    def reading(*args, **kwargs):
        if tried:
            raise timeout()
        return read(*args, **kwargs)

    core.read_namespaced_pod = reading


def test_a_pod_read_without_a_uid_is_not_taken_for_its_replacement(cluster, actuator):
    """The Migrate's read of the pod had no uid (an API that leaves it out): the confirming read cannot tell the pod
    from a replacement of its name. It said "was replaced" (APPLIED) for a pod still running; now the outcome stays
    unknown and counts against the budgets."""
    core = actuator.api.core
    core.create_namespaced_pod_eviction = no_answer(core.create_namespaced_pod_eviction)
    read, reads = core.read_namespaced_pod, []

    @functools.wraps(read)
    def first_without_uid(*args, **kwargs):
        resp = read(*args, **kwargs)
        reads.append(1)
        if len(reads) > 1:
            return resp
        body = json.loads(resp.data)
        body["metadata"].pop("uid", None)
        return SimpleNamespace(data=json.dumps(body).encode())

    core.read_namespaced_pod = first_without_uid
    result = actuator.apply(migrate(), SNAP)
    assert (result.outcome, result.maybe_applied) == (Outcome.RETRY, True), result.detail
    assert "was replaced" not in result.detail and not reserved(cluster)
    assert cluster.get("pods", "web-1", "default")["spec"]["nodeName"] == "n1"


def test_an_eviction_that_cannot_be_confirmed_may_have_landed_and_the_loop_counts_it(cluster, actuator, clock):
    """The pod read after the unanswered eviction fails: RETRY, `maybe_applied`; the reservation released as after
    any failed Migrate; the loop spends one eviction of the budget on it, starts the cooldowns, says so in the audit
    and counts it."""
    unreadable_after_eviction(actuator)
    rec, audit, registry = migrating_loop(actuator)
    budget = rec.guard.remaining_evictions(rec.ledger, SNAP.time)
    (result,) = rec.run_once().results
    assert (result.outcome, result.code, result.maybe_applied) == (Outcome.RETRY, "transport", True)
    assert "outcome unknown: no answer to evict pod default/web-1" in result.detail and not reserved(cluster)
    assert rec.guard.remaining_evictions(rec.ledger, SNAP.time) == budget - 1
    assert registry.get_sample_value("gputide_eviction_budget_remaining") == budget - 1
    assert "default/web-1" in rec.ledger.last_action and len(rec.ledger.migrations) == 1
    assert "outcome unknown: counted against the budgets" in audit.getvalue().splitlines()[-1]
    assert registry.get_sample_value("gputide_actuation_unknown_outcomes_total", {"type": "migrate"}) == 1.0


def test_a_scale_patch_that_got_no_answer_may_have_been_applied(kube, actuator):
    kube.add(deployment("web", replicas=2))
    apps = actuator.api.apps
    apps.patch_namespaced_deployment_scale = no_answer(
        apps.patch_namespaced_deployment_scale, lambda: kube.mutate("deployments", "web", "default",
                                                                    {"spec": {"replicas": 1}}))
    result = actuator.apply(ScaleInference(reason="tide", service="web", replicas=1, previous_replicas=2), SNAP)
    assert (result.outcome, result.code, result.maybe_applied) == (Outcome.RETRY, "transport", True)
    assert "outcome unknown: no answer to deployment default/web scale" in result.detail


@pytest.mark.parametrize(("action", "api_name", "fn"), [
    (ScaleInference(reason="tide", service="web", replicas=1, previous_replicas=2), "autoscaling",
     "list_namespaced_horizontal_pod_autoscaler"),
    (TaintNode(reason="hot", node="n1"), "core", "read_node"),
])
def test_a_read_that_got_no_answer_changed_nothing(cluster, actuator, action, api_name, fn):
    client = getattr(actuator.api, api_name)
    setattr(client, fn, no_answer(getattr(client, fn)))
    result = actuator.apply(action, SNAP)
    assert (result.outcome, result.code) == (Outcome.RETRY, "transport")
    assert not result.maybe_applied and "outcome unknown" not in result.detail
