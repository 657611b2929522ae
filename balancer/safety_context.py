"""What one safety review looks up per action, indexed once (`ReviewContext`), and the nodes an action touches
(`touched_nodes`): the guard's lookups (balancer/safety.py), kept apart from its rules.
"""

from __future__ import annotations

from itertools import chain, repeat
from operator import attrgetter

import numpy as np

from balancer.actions import Action, Migrate, ScaleInference, ScaleTraining, SetPowerLimit, TaintNode
from balancer.inventory import Workload, WorkloadClass
from balancer.model import ClusterSnapshot


class ReviewContext:
    """What one review looks up per action, indexed once: nodes by name, and the workloads on the GPUs that the
    review's power-limit actions touch (one vectorised pass over the placements, not an index of every GPU); and
    the migrations accepted so far (`moved`: workload -> target node position), which later ones' pod affinity
    counts where they are going; and the targets acted on so far (`acted`), which no second action may touch; and
    the disruptive actions accepted so far by owner, with the plan's reclaims from the start (`disrupted`), which a
    resize of that owner may not join."""

    def __init__(self, s: ClusterSnapshot, actions: list[Action]) -> None:
        self.snapshot = s
        self.moved: dict[str, int] = {}
        self.acted: set[str] = set()   # the cooldown keys of the actions accepted so far (one action per target)
        self.disrupted: dict[str, list[Action]] = {}   # owner -> its disruptions so far (`safety`)
        self._nodes: dict[str, object] | None = None
        wanted = sorted({a.gpu for a in actions if isinstance(a, SetPowerLimit)})
        self._on_gpu: dict[int, list] = {g: [] for g in wanted}
        if wanted:
            ws = s.workloads
            gpus = list(map(s.placements.get, map(attrgetter("name"), ws), repeat(())))
            counts = np.fromiter(map(len, gpus), dtype=np.int64, count=len(ws))
            idx = np.fromiter(chain.from_iterable(gpus), dtype=np.int64, count=int(counts.sum()))
            owner = np.repeat(np.arange(len(ws)), counts)
            hit = np.isin(idx, wanted)
            # in the order of `workloads`, each workload once per GPU (as ClusterSnapshot.workloads_on answers)
            for g, i in dict.fromkeys(zip(idx[hit].tolist(), owner[hit].tolist(), strict=True)):
                self._on_gpu[g].append(ws[i])

    def node(self, name: str):
        if self._nodes is None:
            self._nodes = {}
            for n in self.snapshot.nodes:   # the first node of a name wins, as a scan would find it
                self._nodes.setdefault(n.name, n)
        return self._nodes.get(name)

    def touched(self, a: Action) -> list:
        s = self.snapshot
        if isinstance(a, Migrate):
            w = s.workload_by_name.get(a.workload)
            return [w] if w else []
        if isinstance(a, ScaleTraining):
            return list(s.workloads_by_owner.get(a.job, ())) or _suspended(s, a.job)
        if isinstance(a, ScaleInference):
            return list(s.workloads_by_owner.get(a.service, ()))
        if isinstance(a, SetPowerLimit):
            return list(self._on_gpu.get(a.gpu, ()))
        return []


def _suspended(s: ClusterSnapshot, job: str) -> list[Workload]:
    """A job suspended to 0 workers (`ClusterSnapshot.suspended_jobs`) as the one worker its resume brings back:
    it has no pods, so without it the guard found no namespace for a resume, and a stopped or protected namespace
    let it through. Its name is the job's; nothing is placed under it (`ClusterSnapshot.suspended_by_name`)."""
    j = s.suspended_by_name.get(job)
    return [] if j is None else [Workload(name=j.name, workload_class=WorkloadClass.TRAINING, namespace=j.namespace,
                                          owner=j.name, priority=j.priority, gpus=j.gpus_per_worker,
                                          allowed_models=j.allowed_models, elastic_min=j.elastic_min,
                                          elastic_max=j.elastic_max)]


def touched_nodes(a: Action, s: ClusterSnapshot) -> set[str]:
    if isinstance(a, Migrate):
        return {s.gpus[a.source_gpus[0]].node, a.target_node}
    if isinstance(a, SetPowerLimit | TaintNode):
        return {a.node}
    return set()
