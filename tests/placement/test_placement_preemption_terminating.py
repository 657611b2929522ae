"""A pod terminating already (`Running.terminating`) is never a victim: its room is counted as coming, and a node
where it makes enough room needs no victim (the pod waits there, `Preemption.awaiting` saying for whom), as
kube-scheduler's DefaultPreemption does not preempt again while a pod of lower priority terminates on the nominated
node. Each case says what was chosen before."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from balancer.plan.preemption import Running, choose, fits, victims_on

NEED = {"gpus": 4}


def run(key, priority, gpus, *, terminating=False, cpu=0.0):
    return Running(key, priority, {"gpus": gpus, "cpu_milli": cpu}, 0.0, (), terminating)


def test_a_node_whose_terminating_pod_frees_enough_is_waited_on_and_nothing_is_evicted_anywhere():
    """Before: `going` (priority 50) weighed as a victim on a, so b's victim of priority 10 won and `busy` was
    evicted there, while a's room was coming anyway."""
    nodes = {"a": ({"gpus": 0}, [run("going", 50, 4, terminating=True)]),
             "b": ({"gpus": 0}, [run("busy", 10, 4)])}
    best = choose(NEED, 100, nodes)
    assert best.node == "a" and best.victims == ()
    assert [p.key for p in best.awaiting] == ["going"]                # what it waits for


def test_a_terminating_pod_is_never_a_victim_and_its_room_spares_one():
    """Before: `going` (priority 50, terminating) was reprieved first as the most important, and both pods of
    priority 10 evicted; one is enough with its 2 GPUs coming."""
    pods = [run("going", 50, 2, terminating=True), run("low-a", 10, 2), run("low-b", 10, 2)]
    victims, bad = victims_on(NEED, {"gpus": 0}, pods, priority=100, allowed={})
    assert len(victims) == 1 and not victims[0].terminating and bad == 0
    best = choose(NEED, 100, {"n": ({"gpus": 0}, pods)})
    assert len(best.victims) == 1 and [p.key for p in best.awaiting] == ["going"]


def test_a_terminating_pod_of_higher_priority_frees_its_room_too():
    """Before: `going` (priority 200) was no victim and its room not counted: no node could make room (None), or
    the pod preempted `low` elsewhere."""
    waiting = {"a": ({"gpus": 0}, [run("going", 200, 4, terminating=True)])}
    best = choose(NEED, 100, waiting)
    assert best is not None and best.node == "a" and best.victims == ()
    best = choose(NEED, 100, waiting | {"b": ({"gpus": 0}, [run("low", 1, 4)])})
    assert best.node == "a" and best.victims == ()


def test_it_waits_only_for_the_terminating_pods_whose_room_it_needs():
    """Before: `gpu-going` was its victim (the eviction code then found it terminating and only waited for it);
    now it is none, and `awaiting` names it alone: `cpu-going` releases CPU the pod has already."""
    pods = [run("gpu-going", 50, 4, terminating=True), run("cpu-going", 50, 0, terminating=True, cpu=500)]
    best = choose({"gpus": 4, "cpu_milli": 500}, 100, {"n": ({"gpus": 0, "cpu_milli": 1000}, pods)})
    assert best.victims == () and [p.key for p in best.awaiting] == ["gpu-going"]


def test_of_two_nodes_needing_no_victim_the_one_waiting_for_none_comes_first():
    """Both need no victim once `going` is no victim: by name alone the tie went to a, where the pod would wait
    for `going` though b has room now (before, `going` was a's victim and b came first by that)."""
    nodes = {"a": ({"gpus": 0}, [run("going", 5, 4, terminating=True)]),
             "b": ({"gpus": 4}, [run("low", 5, 4)])}
    best = choose(NEED, 100, nodes)
    assert best.node == "b" and best.victims == () and best.awaiting == ()


specs = st.lists(st.tuples(st.integers(0, 20), st.integers(1, 4), st.booleans()), max_size=6)


@settings(max_examples=200, deadline=None)
@given(specs, st.integers(0, 4), st.integers(1, 8), st.integers(0, 20))
def test_victims_are_never_terminating_and_with_what_is_coming_make_room(spec, free, need, priority):
    """Against brute force: no victim is terminating; the victims with the room of the terminating pods make room;
    none could be spared; and preemption is possible exactly when all of them together would make room."""
    running = [run(f"p{i}", pr, g, terminating=t) for i, (pr, g, t) in enumerate(spec)]
    coming = free + sum(p.requests["gpus"] for p in running if p.terminating)
    lower = [p for p in running if p.priority < priority and not p.terminating]
    found = victims_on({"gpus": need}, {"gpus": free}, running, priority, {})
    possible = coming + sum(p.requests["gpus"] for p in lower) >= need
    assert (found is not None) == (possible and bool(lower or coming > free))
    if found is None:
        return
    victims, _ = found
    assert not any(v.terminating for v in victims) and all(v.priority < priority for v in victims)
    room = coming + sum(v.requests["gpus"] for v in victims)
    assert fits({"gpus": need}, {"gpus": room})
    for v in victims:
        assert room - v.requests["gpus"] < need
