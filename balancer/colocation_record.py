"""The record of a co-location shrink kept on the job it resized, so a restarted controller still gives it back.

Co-location (`balancer.plan.colocation`) shrinks an elastic training job that shares GPUs with an inference service
near its latency SLO, and grows it back once the service has had slack for a while. What it owes used to live only
in the controller's memory: after a restart or a leader change the job stayed shrunk until its owner resized it.
The shrink is now written on the job in the same write as the size (a Kubernetes Job's annotation
`gputide.io/colocation-shrunk` `{"from": N, "to": M, "service": S}`, the simulator's `colocation_records`) and read
back into the job's pods (`Workload.colocation_from`, `colocation_service`); `colocation.observe` adopts a record
its memory lacks, and does not adopt it again from a lagging read once the give-back was made.

A record is valid while the job still asks for the M workers it names; once the job was resized by someone else it
is void (`Workload.colocation_overridden`): the size is the operator's and co-location forgets its shrink. gputide's
own resizes keep it honest (`after`): co-location's give-back removes it; the tide (`loan`, `reclaim`), which sizes
elastic training in capacity mode and takes over such give-backs, removes it; any other resize (a hotspot shrink or
its give-back) moves M to the new size while the job stays below N, and removes it once the job is back at N or more.
N is what the job asked for when co-location shrank it (or a valid record's N), never more: co-location's give-back
grows the job no further than its valid record's N, and not at all without one (`give_back_limit`, on Kubernetes
`k8s_jobs.give_back_limit`; the simulator's `scale_training`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from balancer.actions import ScaleTraining


@dataclass(frozen=True, slots=True)
class ColocationRecord:
    """Co-location's shrink of a job: the workers it had before (`before`), those it left (`left`), and the
    inference services it made room for, comma-separated (`colocation.SEPARATOR`; given back once each has slack)."""

    before: int
    left: int
    service: str

    def note(self) -> str:
        """The annotation's value."""
        return json.dumps({"from": self.before, "to": self.left, "service": self.service}, sort_keys=True)


def parse(note: str | None) -> ColocationRecord | None:
    """The record an annotation value holds; None for none, or for a value that is not `{"from": N, "to": M,
    "service": S}` with N > M > 0 and S a non-empty string (anything else is not gputide's)."""
    try:
        raw = json.loads(note) if note else None
    except ValueError:
        return None
    if not isinstance(raw, dict):
        return None
    before, left, service = raw.get("from"), raw.get("to"), raw.get("service")
    if not (type(before) is int and type(left) is int and isinstance(service, str) and service):
        return None
    return ColocationRecord(before, left, service) if before > left > 0 else None


def give_back_limit(record: ColocationRecord | None, size: int) -> int:
    """The most workers co-location's give-back may grow a job asking for `size` workers to: its valid `record`'s
    `before`, 0 with none (the shrink wrote nothing, or the job was resized since: nothing to give back)."""
    return record.before if record is not None and size == record.left else 0


def after(record: ColocationRecord | None, size: int, action: ScaleTraining) -> ColocationRecord | None:
    """The record the job keeps once gputide's `action` resized it; `record` is what it has now (valid or void)
    and `size` the workers it asks for now (see the module docstring)."""
    if record is not None and size != record.left:
        record = None   # void: the job was resized by someone else since
    if action.cause == "colocation_slo" and 0 < action.workers < action.previous_workers:
        # what the job asks for (pending workers count), never the plan's running count: a plan from a view older
        # than its owner's own shrink counts more, and the give-back would grow the job over the owner's size
        before = max(record.before if record else 0, size)
        return ColocationRecord(before, action.workers, action.service)
    if record is None or action.cause is not None or not 0 < action.workers < record.before:
        return None
    return ColocationRecord(record.before, action.workers, record.service)
