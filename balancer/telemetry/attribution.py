"""Attribution rows -> workloads and their placements: the pure half of the source's attribution read.

Which pod holds which GPU comes from gputide's exporter's join table `gputide_gpu_workload_info` and, where
dcgm-exporter attributes pods instead, from the recording rule `gpu_pod:dcgm_attribution:info` (`attribution_query`).
A pod's row repeated (two scrapes of one exporter, an HA pair read without deduplication, one row per MIG instance
the pod holds on a GPU) is one placement on that GPU. No I/O here.
"""

from __future__ import annotations

from collections.abc import Mapping

from balancer.errors import InvalidTelemetry
from balancer.model import Workload, WorkloadClass
from balancer.telemetry.gpu_frame import sample


def attribution_query(selector: str) -> str:
    """Which pod holds which GPU: gputide's exporter's join table, and where dcgm-exporter attributes pods instead,
    the pairs the recording rule `gpu_pod:dcgm_attribution:info` derives from its labels (the same pod reported
    by both counts once, with gputide's labels)."""
    return (f"gputide_gpu_workload_info{{{selector}}} == 1 "
            f"or on (UUID, namespace, pod) gpu_pod:dcgm_attribution:info{{{selector}}}")


def attributed(rows: list[dict], index: Mapping[str, int], overrides: Mapping[str, Workload]
               ) -> tuple[tuple[Workload, ...], dict[str, tuple[int, ...]]]:
    """Rows of `attribution_query` -> (workloads, placements) on the GPUs of `index` (UUID -> snapshot index;
    rows of other GPUs are left out). `overrides` replaces a pod's workload as read from its labels; a pod's
    share of a GPU is 1000 / the pods on it."""
    gpus_of: dict[str, list[int]] = {}
    meta: dict[str, Mapping[str, str]] = {}
    sharers: dict[int, int] = {}
    for r in rows:
        m, _ = sample(r)
        gpu = index.get(m.get("UUID", ""))
        if gpu is None:
            continue
        name = f"{m.get('namespace', 'default')}/{m.get('pod', '?')}"
        if gpu in gpus_of.get(name, ()):
            continue  # a repeated row (two scrapes, an HA pair, MIG instances) is one placement, not two
        gpus_of.setdefault(name, []).append(gpu)
        sharers[gpu] = sharers.get(gpu, 0) + 1
        meta[name] = m
    workloads = []
    for name, idx in gpus_of.items():
        if name in overrides:
            workloads.append(overrides[name])
            continue
        m = meta[name]
        try:
            klass = WorkloadClass(m.get("workload_class", "batch"))
        except ValueError:
            klass = WorkloadClass.BATCH
        share = max(sharers[g] for g in idx)
        try:
            priority = int(m.get("priority", "0") or 0)
        except ValueError as exc:
            raise InvalidTelemetry(f"gputide_gpu_workload_info for {name}: priority label {m.get('priority')!r} "
                                   "is not an integer", subjects=(name,)) from exc
        workloads.append(Workload(
            name=name, workload_class=klass, namespace=m.get("namespace", "default"), owner=m.get("owner", ""),
            priority=priority, gpus=len(idx), gpu_milli=1000 // share,
            movable=m.get("movable", "true") != "false", protected=m.get("protected", "false") == "true",
        ))
    return tuple(workloads), {k: tuple(sorted(v)) for k, v in gpus_of.items()}

