"""The one rule, for both actuators, of when a training shrink writes nothing: it would raise the job's size.

A plan's shrink is from the workers it saw run (`previous`) to `workers`; its view can lag the job's owner, who
shrank it as far or further since, or gputide stopped it since. Written, such a shrink would grow the job it means to
shrink and move quota no job asks for, so neither actuator writes it (the action is applied, "(already)"). The
Kubernetes actuator asks it of a Job (`balancer.actuate.k8s_jobs.raises`), the simulator of its job
(`balancer.sim.ops`); here, with no import, so that the simulator, below the actuators' layer and without the
kubernetes client, calls the same rule rather than a copy of it.
"""

from __future__ import annotations


def raises(size: int, workers: int, previous: int, stopped: bool = False) -> bool:
    """Whether the plan's shrink (`workers` > 0 below the `previous` it saw run) would raise a job asking for `size`
    workers now: it asks for `workers` or fewer, or it is stopped (`stopped`: a Kubernetes Job stopped keeps its
    size but runs none; a simulated one asks for 0). A stop (0 workers) never raises."""
    return 0 < workers < previous and (stopped or size <= workers)
