"""Which training jobs a hotspot shrank are still owed their workers: the records the planner gives back from.

gputide records a hotspot shrink on the job it resized (`ScaleTraining.shrunk_from`; a Kubernetes Job's
`gputide.io/shrunk`, the simulator's `shrink_records`), read back into the job's pods (`Workload.shrunk_from`), and
remembers the shrinks it acknowledged (`PlannerState.shrunk`). `shrunk_jobs` merges the two each cycle and keeps only
what is still owed:

* a job with no pod in the snapshot is gone (finished, deleted, stopped) and forgotten;
* a job whose record is void (`Workload.shrink_overridden`: resized since by someone else) is the operator's
  (co-location's resizes of an owed job keep its record valid: they write its new size as the record's "to");
* a job that already runs as many workers as it had before the shrink, or more (grown back by the capacity planner's
  tide or co-location), is done: no give-back is proposed, and the hotspot planner may shrink it again. "As many
  as it had" is capped at what the job can run now (`runnable`: its pods' `elastic_max`, which the Kubernetes
  reader caps at a Job's `completions - succeeded`): a give-back beyond it is refused, every cycle.

The actuators remove a record once it is done with (`k8s_jobs.shrink_patch`, `SimActuator`), so the last two are
what a lagging read, or a record whose removal failed, still shows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from itertools import compress
from operator import attrgetter

import numpy as np

from balancer.model import ClusterSnapshot, WorkloadClass
from balancer.plan.columns import _CLASS_CODE, workload_columns


def shrunk_jobs(snapshot: ClusterSnapshot, remembered: Mapping[str, int]) -> dict[str, int]:
    """{job: workers before gputide's hotspot shrink} still to give back: what the snapshot's jobs record and what
    this planner remembers (`remembered`, acknowledged shrinks the job's record may not show yet), less the jobs that
    are gone, the operator's and the ones already back at that size (the module docstring). Runs every cycle over
    every workload: C-level maps, Python only for the few pods that carry a record."""
    ws = snapshot.workloads
    froms = np.fromiter(map(attrgetter("shrunk_from"), ws), dtype=np.int64, count=len(ws))
    voids = np.fromiter(map(attrgetter("shrink_overridden"), ws), dtype=bool, count=len(ws))
    recorded: dict[str, int] = {}
    for i in np.flatnonzero(froms > 0).tolist():
        recorded[ws[i].owner] = max(recorded.get(ws[i].owner, 0), int(froms[i]))
    overridden = {ws[i].owner for i in np.flatnonzero(voids & (froms <= 0)).tolist()}
    if not recorded and not remembered:
        return {}
    c = workload_columns(snapshot)
    training = c.cls == _CLASS_CODE[WorkloadClass.TRAINING]
    workers = Counter(compress(c.owners, training.tolist()))   # training pods per job, placed or not
    owed = {**{j: n for j, n in remembered.items() if j not in overridden}, **recorded}
    owed = {j: runnable(snapshot, j, n) for j, n in owed.items()}
    return {j: n for j, n in owed.items() if 0 < workers[j] < n}


def runnable(snapshot: ClusterSnapshot, job: str, before: int) -> int:
    """The workers a give-back of `job` asks for: the `before` it had, at most the `elastic_max` its pods say it can
    run now (0, not elastic: no cap)."""
    cap = max((w.elastic_max for w in snapshot.workloads_by_owner.get(job, ())), default=0)
    return min(before, cap) if cap > 0 else before
