"""Attribution rows -> workloads and their placements: the pure half of the source's attribution read.

Which pod holds which GPU comes from gputide's exporter's join table `gputide_gpu_workload_info` and, where
dcgm-exporter attributes pods instead, from the recording rule `gpu_pod:dcgm_attribution:info` (`attribution_query`).
A pod's row repeated (two scrapes of one exporter, an HA pair read without deduplication, one row per MIG instance
the pod holds on a GPU) is one placement on that GPU.

How much of a GPU a pod holds: a whole GPU is split evenly between the pods on it (time-slicing, MPS); a MIG
instance is its fraction of the GPU, which the query hands over as the row's value (`gpu_instance:gpu_share:ratio`:
compute slices of its profile over the GPU's, 1/7 for a 1g.10gb on an A100), split evenly between the pods on that
instance and summed over the instances of the GPU a pod holds. A row of value 1 (a whole GPU, a 7g instance, an
instance whose profile is not known) is counted as a whole GPU's. An instance given two fractions (rows of two
scrapes) is the larger, whatever the rows' order. A pod the API says has finished (Succeeded or Failed) holds
nothing, whatever its rows say (old kubelets still list its devices). No I/O here.

A pod's whole-GPU row (no GPU_I_ID) on a GPU where the same pod has rows of instances is left out: it is the coarser
view of the same device (dcgm-exporter labelling a MIG GPU's own series with the pods of its instances; one replica
of an undeduplicated HA pair that could not resolve the MIG device while the other named the instance), and a GPU in
MIG mode is never handed out whole beside its instances. Counted as well, the pod held a whole GPU and an A100 split
4g + 3g read 1,571 milli. Nothing else is trimmed to the GPU's whole: a pod known on a GPU by a whole row alone holds
it whole (split with the other such pods) beside instances other pods hold, and instances claiming more than the GPU
(rows left from before a repartition) keep their fractions. Either reads a GPU fuller than it is, never emptier; a
pod's share is the least over its GPUs, so one read too low would make every GPU it holds read free.

The recording rule `gpu_pod:attribution:share` (chargeback) decides a pod's share of a GPU the same way (it too
leaves out a pod's whole-GPU row beside the same pod's instance rows) but for: a pod's rows counted as a whole GPU's
on one GPU (instances of no known profile), which it bills once each where here they are one slot; a 7g instance
(fraction 1), whose pods it splits apart from the GPU's whole-GPU pods where here they share one slot; and a pod's
share of one GPU, which it does not cap at 1 (here 1000 milli). It has one fraction per instance, so the
larger-of-two never applies.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace

from balancer.errors import InvalidTelemetry
from balancer.model import Workload, WorkloadClass
from balancer.telemetry.gpu_frame import sample

_SHARE = "gpu_instance:gpu_share:ratio"


def attribution_query(selector: str) -> str:
    """Which pod holds which GPU: gputide's exporter's join table, and where dcgm-exporter attributes pods instead,
    the pairs the recording rule `gpu_pod:dcgm_attribution:info` derives from its labels (the same pod reported
    by both counts once, with gputide's labels). A row on a MIG instance whose fraction of the GPU is known has that
    fraction as its value, every other row 1."""
    on = "on (UUID, GPU_I_ID, namespace, pod)"
    join, dcgm = f"gputide_gpu_workload_info{{{selector}}}", f"gpu_pod:dcgm_attribution:info{{{selector}}}"
    share = f"on (UUID, GPU_I_ID) group_left () {_SHARE}{{{selector}}}"
    return f"{join} * {share} or {on} {join} == 1 or {on} {dcgm} * {share} or {on} {dcgm}"


def _fraction(m: Mapping[str, str], value: float, name: str) -> float:
    """The fraction of its GPU a row's MIG instance is, or 1 for a row counted as a whole GPU's."""
    if not 0.0 < value <= 1.0:
        raise InvalidTelemetry(f"attribution row for {name} on {m.get('UUID')}: instance share {value!r} is not in "
                               f"(0, 1] ({_SHARE})", subjects=(name,))
    return value if m.get("GPU_I_ID") and value < 1.0 else 1.0


def _milli(slots: Collection[tuple[int, str]], fractions: Mapping[tuple[int, str], float],
           holders: Mapping[tuple[int, str], int]) -> int:
    """Milli-GPUs a pod holds on the GPU where it holds least: per GPU, the sum over its slots there (a whole GPU
    is slot "", a MIG instance its GPU_I_ID) of the slot's fraction / the pods on that slot."""
    per_gpu: dict[int, float] = {}
    for slot in slots:
        per_gpu[slot[0]] = per_gpu.get(slot[0], 0.0) + fractions[slot] / holders[slot]
    return max(0, min(1000, int(1000 * min(per_gpu.values()) + 1e-9)))


def _rows(rows: list[dict], index: Mapping[str, int], finished: Collection[str],
          ) -> list[tuple[str, int, str, float, Mapping[str, str]]]:
    """Rows of `index`'s GPUs and of pods not finished as (pod, GPU, slot, fraction, labels), slot "" for a row
    counted as a whole GPU's; a pod's rows without GPU_I_ID left out on a GPU where it has rows with one (the
    module docstring says why)."""
    out: list[tuple[str, int, str, float, Mapping[str, str]]] = []
    for r in rows:
        m, value = sample(r)
        gpu = index.get(m.get("UUID", ""))
        if gpu is None:
            continue
        name = f"{m.get('namespace', 'default')}/{m.get('pod', '?')}"
        if name in finished:
            continue
        fraction = _fraction(m, value, name)
        out.append((name, gpu, m.get("GPU_I_ID", "") if fraction < 1.0 else "", fraction, m))
    on_instances = {(name, gpu) for name, gpu, _, _, m in out if m.get("GPU_I_ID")}
    return [row for row in out if row[4].get("GPU_I_ID") or (row[0], row[1]) not in on_instances]


def _workload(name: str, m: Mapping[str, str], gpus: int, milli: int) -> Workload:
    try:
        klass = WorkloadClass(m.get("workload_class", "batch"))
    except ValueError:
        klass = WorkloadClass.BATCH
    try:
        priority = int(m.get("priority", "0") or 0)
    except ValueError as exc:
        raise InvalidTelemetry(f"gputide_gpu_workload_info for {name}: priority label {m.get('priority')!r} "
                               "is not an integer", subjects=(name,)) from exc
    return Workload(
        name=name, workload_class=klass, namespace=m.get("namespace", "default"), owner=m.get("owner", ""),
        priority=priority, gpus=gpus, gpu_milli=milli,
        movable=m.get("movable", "true") != "false", protected=m.get("protected", "false") == "true",
    )


def attributed(rows: list[dict], index: Mapping[str, int], overrides: Mapping[str, Workload],
               finished: Collection[str] = frozenset()) -> tuple[tuple[Workload, ...], dict[str, tuple[int, ...]]]:
    """Rows of `attribution_query` -> (workloads, placements) on the GPUs of `index` (UUID -> snapshot index;
    rows of other GPUs are left out). `overrides` replaces a pod's workload as read from its labels, but for a
    share of 1000 (the API's for any pod not annotated with one): a pod's share of a GPU is decided as the module
    docstring says (1000 / the pods on a whole GPU). A pod in `finished` ("namespace/pod": Succeeded or Failed, as
    the API says) holds nothing: kubelets before 1.34 still list a finished pod's devices (kubernetes#119423)."""
    gpus_of: dict[str, list[int]] = {}
    meta: dict[str, Mapping[str, str]] = {}
    held: dict[str, set[tuple[int, str]]] = {}
    holders: dict[tuple[int, str], int] = {}
    fractions: dict[tuple[int, str], float] = {}
    for name, gpu, gi, fraction, m in _rows(rows, index, finished):
        slot = (gpu, gi)
        fractions[slot] = max(fraction, fractions.get(slot, 0.0))  # the larger of two, whatever the rows' order
        if slot in held.setdefault(name, set()):
            continue  # a repeated row (two scrapes, an HA pair) is one holder of its slot, not two
        held[name].add(slot)
        holders[slot] = holders.get(slot, 0) + 1
        if gpu not in gpus_of.setdefault(name, []):
            gpus_of[name].append(gpu)  # a pod on two MIG instances of one GPU is one placement on it
        meta[name] = m
    workloads = [_overridden(overrides[name], _milli(held[name], fractions, holders)) if name in overrides
                 else _workload(name, meta[name], len(idx), _milli(held[name], fractions, holders))
                 for name, idx in gpus_of.items()]
    return tuple(workloads), {k: tuple(sorted(v)) for k, v in gpus_of.items()}


def _overridden(w: Workload, milli: int) -> Workload:
    """The API's workload, holding no more of a GPU than its slot: the API says 1000 for every pod without a
    `gputide.io/gpu-milli` annotation, a time-sliced replica or a MIG device handed out as `nvidia.com/gpu` included
    (an annotated share is the pod's own)."""
    return replace(w, gpu_milli=milli) if w.gpu_milli == 1000 and milli < 1000 else w
