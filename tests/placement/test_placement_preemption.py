"""Preemption as kube-scheduler decides it: the fewest and least important victims, budgets respected where
possible, never a pod of equal or higher priority."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from balancer.plan.preemption import Running, choose, fits, victims_on

NEED = {"gpus": 4}


def run(key, priority, gpus, started=0.0, budgets=()):
    return Running(key, priority, {"gpus": gpus}, started, budgets)


def test_only_lower_priority_pods_are_victims_and_the_rest_are_reprieved():
    pods = [run("hi", 100, 4), run("low-a", 1, 2), run("low-b", 5, 2), run("low-c", 3, 2)]
    victims, bad = victims_on(NEED, {"gpus": 0}, pods, priority=10, allowed={})
    # two 2-GPU pods must go; the most important of the lower ones (low-b, 5) is reprieved first
    assert sorted(v.key for v in victims) == ["low-a", "low-c"] and bad == 0
    assert victims_on(NEED, {"gpus": 0}, pods, priority=2, allowed={}) is None   # only low-a is lower: not enough


def test_the_node_with_the_least_important_victims_wins_then_the_fewest():
    nodes = {
        "n1": ({"gpus": 0}, [run("a", 50, 4)]),                      # one victim of priority 50
        "n2": ({"gpus": 0}, [run("b", 10, 2), run("c", 10, 2)]),     # two victims of priority 10
        "n3": ({"gpus": 2}, [run("d", 10, 2), run("e", 90, 2)]),     # one victim of priority 10
    }
    best = choose(NEED, 100, nodes)
    assert best.node == "n3" and [v.key for v in best.victims] == ["d"]
    del nodes["n3"]
    assert choose(NEED, 100, nodes).node == "n2"                      # lower top priority beats fewer victims


def test_a_budget_that_allows_no_disruption_steers_preemption_elsewhere():
    nodes = {"n1": ({"gpus": 0}, [run("guarded", 1, 4, budgets=("db",))]),
             "n2": ({"gpus": 0}, [run("free", 5, 4)])}
    best = choose(NEED, 100, nodes, allowed={"db": 0})
    assert best.node == "n2" and best.budget_violations == 0
    only = choose(NEED, 100, {"n1": nodes["n1"]}, allowed={"db": 0})
    assert only.node == "n1" and only.budget_violations == 1          # still possible, as in kube-scheduler
    assert choose(NEED, 100, {"n1": nodes["n1"]}, allowed={"db": 0}, respect_budgets=True) is None


def test_ties_go_to_the_node_whose_victims_started_last():
    nodes = {"old": ({"gpus": 0}, [run("a", 1, 4, started=100.0)]),
             "new": ({"gpus": 0}, [run("b", 1, 4, started=900.0)])}
    assert choose(NEED, 100, nodes).node == "new"                     # the least work lost


def test_with_negative_priorities_more_victims_still_weigh_more():
    """kube-scheduler sums victims' priorities each offset by MaxInt32 + 1: a plain sum made two victims of
    priority -10 (-20) lighter than one (-10), so preemption evicted two pods where one made room."""
    for priority in (-10, 10, -(1 << 31)):
        nodes = {"a": ({"gpus": 0}, [run("a1", priority, 2), run("a2", priority, 2)]),
                 "b": ({"gpus": 0}, [run("b1", priority, 4)])}
        best = choose(NEED, 100, nodes)
        assert best.node == "b" and [v.key for v in best.victims] == ["b1"]


def test_a_node_that_needs_no_victim_comes_first_whatever_the_priorities():
    nodes = {"a": ({"gpus": 0}, [run("a1", -10, 4)]),
             "b": ({"gpus": 4}, [run("b1", -20, 2)])}                 # fits already: b1 is reprieved
    best = choose(NEED, 100, nodes)
    assert best.node == "b" and best.victims == ()


def test_no_node_no_preemption():
    assert choose(NEED, 100, {"n1": ({"gpus": 0}, [run("a", 100, 4)])}) is None   # equal priority is never a victim
    assert choose(NEED, 100, {}) is None


pods = st.lists(st.tuples(st.integers(0, 20), st.integers(1, 4)), max_size=6)


@settings(max_examples=200, deadline=None)
@given(pods, st.integers(0, 4), st.integers(1, 8), st.integers(0, 20))
def test_victims_are_a_minimal_set_of_lower_priority_pods_that_makes_room(spec, free, need, priority):
    """Against brute force: the victims make room, are all of lower priority, and no victim could be spared."""
    running = [run(f"p{i}", pr, g) for i, (pr, g) in enumerate(spec)]
    found = victims_on({"gpus": need}, {"gpus": free}, running, priority, {})
    lower = [p for p in running if p.priority < priority]
    possible = any(free + sum(p.requests["gpus"] for p in combo) >= need
                   for r in range(len(lower) + 1) for combo in itertools.combinations(lower, r))
    assert (found is not None) == (possible and bool(lower))
    if found is None:
        return
    victims, _ = found
    room = free + sum(v.requests["gpus"] for v in victims)
    assert fits({"gpus": need}, {"gpus": room}) and all(v.priority < priority for v in victims)
    for v in victims:   # minimal: sparing any one victim leaves no room
        assert room - v.requests["gpus"] < need
