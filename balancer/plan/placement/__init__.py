"""Placement engine: array-based cluster state, filter/score plugins, named policies, the FGD replay.

Public surface: `ClusterState`, `PodRequest`, `Placement`, `parse_gpu_spec`, `WorkloadMix`, `MixWindow`,
`FragCache`, `Scheduler`, `Policy`, `POLICIES`, `get_policy`, and the replay helpers in
`balancer.plan.placement.replay`.
See `scheduler.py` for the scheduling cycle and `fragmentation.py` for FGD's measure.
"""

from balancer.plan.placement.fragmentation import FragCache, MixWindow, WorkloadMix, node_fragmentation
from balancer.plan.placement.scheduler import POLICIES, Policy, Scheduler, get_policy
from balancer.plan.placement.state import ClusterState, Placement, PodRequest, parse_gpu_spec, resolve_models

__all__ = [
    "POLICIES",
    "ClusterState",
    "FragCache",
    "MixWindow",
    "Placement",
    "PodRequest",
    "Policy",
    "Scheduler",
    "WorkloadMix",
    "get_policy",
    "node_fragmentation",
    "parse_gpu_spec",
    "resolve_models",
]
