"""The scheduler's preemption reads a PodDisruptionBudget as the controller does, through one helper
(`k8s_workloads.disruption_budget`): policy/v1's rule that a null selector selects no pod while `{}` selects every
pod of its namespace was written twice (`k8s_preempt.Preemptor._budgets` and the controller's), and each copy was
found wrong on its own (7ea7e93, b917cca). The rule itself is pinned here once, for both readers;
test_k8s_preemption_null_budget.py and test_k8s_workloads.py pin what each does with it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from balancer.actuate.k8s_preempt import Preemptor
from balancer.actuate.k8s_workloads import disruption_budget
from balancer.noderules import Selector


def budget(name: str, selector: dict | None, allowed: object, namespace: str = "default") -> dict:
    spec = {} if selector is None else {"selector": selector}
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec,
            "status": {} if allowed is None else {"disruptionsAllowed": allowed}}


BUDGETS = [budget("null", None, 0), budget("empty", {}, 0), budget("labels", {"matchLabels": {"tier": "batch"}}, 2),
           budget("unsaid", {"matchLabels": {"tier": "web"}}, None), budget("below", {}, -1),
           budget("elsewhere", {}, 3, namespace="other")]


class ListOnly:
    """An API that only lists the budgets."""

    def __init__(self, items: list[dict]) -> None:
        self.policy = SimpleNamespace(list_pod_disruption_budget_for_all_namespaces=lambda: {"items": items})

    def __call__(self, _what: str, fn, *args, **kwargs):
        return fn(*args, **kwargs)


def test_a_null_selector_guards_no_pod_and_an_empty_one_every_pod_of_its_namespace() -> None:
    read = {b["metadata"]["name"]: disruption_budget(b) for b in BUDGETS}
    assert read["null"] is None
    assert read["empty"].selector.matches({}) and read["empty"].selector.matches({"any": "label"})
    assert read["labels"].selector.matches({"tier": "batch"}) and not read["labels"].selector.matches({})


@pytest.mark.parametrize("namespaces", [{"default"}, {"default", "other"}, set()])
def test_the_preemptor_reads_budgets_as_the_controller_does(namespaces: set[str]) -> None:
    allowed, selectors = Preemptor(ListOnly(BUDGETS), "gputide", "a", lambda: 0.0)._budgets(namespaces)
    expected = [b for b in map(disruption_budget, BUDGETS) if b is not None and b.namespace in namespaces]
    assert allowed == {b.key: b.disruptions_allowed for b in expected}
    assert [(k, ns) for k, ns, _ in selectors] == [(b.key, b.namespace) for b in expected]
    labels = ({}, {"tier": "batch"}, {"tier": "web"})
    assert [[s.matches(x) for x in labels] for _, _, s in selectors] == [
        [b.selector.matches(x) for x in labels] for b in expected]
    assert all(isinstance(s, Selector) for _, _, s in selectors)
