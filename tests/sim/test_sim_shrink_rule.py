"""A plan's shrink that would raise a training job's size (its owner shrank it as far since the plan's view, or
gputide stopped it) writes nothing, on Kubernetes (`k8s_jobs.raises`) and in the simulator (`SimCluster
.scale_training`). The simulator had its own copy of that rule (it may not import the actuators' layer, nor the
kubernetes client): one rule now, `balancer.shrink_rule`, both call. Pinned two ways: on every case both paths agree
(fails if either stops following the rule), and changing the rule changes both (fails on a copy)."""

from __future__ import annotations

import itertools

import pytest
from conftest import small_fleet

from balancer import shrink_rule
from balancer.actuate import k8s_jobs
from balancer.model import ScaleTraining
from balancer.sim import SimCluster, TrainingJobSpec

SIZES, WORKERS, PREVIOUS = range(5), range(5), range(6)


def written_in_sim(size: int, workers: int, previous: int) -> bool:
    """Whether gputide's resize of a simulated job its owner set to `size` (0: stopped) writes anything."""
    sim = SimCluster(small_fleet(), seed=0)
    sim.add_training_job(TrainingJobSpec(name="job", workers=4, elastic_max=4))
    sim.scale_training("job", size)
    action = ScaleTraining(reason="test", job="job", workers=workers, previous_workers=previous)
    return sim.scale_training("job", workers, colocation=action)


def raises_on_kubernetes(size: int, workers: int, previous: int) -> bool:
    """`k8s_jobs.raises` of a Job asking for `size`; a simulated job stopped asks for 0, a Job gputide stopped keeps
    its size (4 here) and is told by `stopped`."""
    job = {"spec": {"parallelism": size or 4}}
    return k8s_jobs.raises(job, workers, previous, stopped=not size)


def test_the_simulator_writes_nothing_exactly_where_kubernetes_would_raise_the_job() -> None:
    cases = list(itertools.product(SIZES, WORKERS, PREVIOUS))
    sim = {case: not written_in_sim(*case) for case in cases}
    k8s = {case: raises_on_kubernetes(*case) for case in cases}
    assert sim == k8s
    assert sum(k8s.values()) == 30   # the rule bites on some cases (a lagging view, a job stopped since)
    assert k8s[(2, 3, 4)] and k8s[(0, 2, 4)] and not k8s[(4, 2, 4)] and not k8s[(1, 0, 4)]


@pytest.mark.parametrize("rule", [lambda *_: True, lambda *_: False], ids=["always raises", "never raises"])
def test_both_paths_follow_the_one_rule(monkeypatch, rule) -> None:
    """A shrink of 4 to 2 the plan saw from 4 (raises nothing), and of 2 to 2 (raises): what the rule says, both do."""
    monkeypatch.setattr(shrink_rule, "raises", rule)
    for size in (4, 2):
        assert raises_on_kubernetes(size, 2, 4) is rule()
        assert written_in_sim(size, 2, 4) is not rule()
