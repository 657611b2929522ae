"""Pod bookkeeping for the simulator: one record per pod, and the flat "slot" table the step runs on.

A pod placed on k GPUs occupies k *slots* (pod, GPU, share). Each step reduces per-slot quantities onto GPUs,
pods, services and jobs with ``np.bincount``; the table is rebuilt only when placements change, so steady-state
steps do no Python work per pod.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from balancer.model import Workload

INFERENCE, TRAINING, GENERIC = 0, 1, 2


@dataclass(slots=True)
class Pod:
    workload: Workload
    kind: int                      # INFERENCE | TRAINING | GENERIC
    owner: int                     # service / job index, -1 for generic pods
    submitted_at: float
    gpus: tuple[int, ...] | None = None
    ready_at: float = 0.0          # inference: serves from this time on
    duration_s: float = math.inf   # generic pods: work (s at full clock) until done
    remaining_s: float = math.inf
    shown: Workload | None = None  # training: the workload the snapshot shows (checkpoint, shrink records), cached
    shown_key: tuple = ()


@dataclass(frozen=True, slots=True, eq=False)
class SlotTable:
    pods: tuple[Pod, ...]          # placed pods, table order
    pod_kind: np.ndarray
    pod_owner: np.ndarray
    pod_ready_at: np.ndarray
    pod_remaining: np.ndarray      # mutable: the step counts generic work down here
    slot_pod: np.ndarray
    slot_gpu: np.ndarray
    slot_share: np.ndarray         # gpu_milli / 1000
    slot_kind: np.ndarray
    slot_owner: np.ndarray

    @classmethod
    def build(cls, placed: list[Pod]) -> SlotTable:
        counts = np.array([len(p.gpus or ()) for p in placed], dtype=np.int64)
        slot_pod = np.repeat(np.arange(len(placed), dtype=np.int64), counts)
        gpus = [g for p in placed for g in (p.gpus or ())]
        pod_kind = np.array([p.kind for p in placed], dtype=np.int64)
        pod_owner = np.array([p.owner for p in placed], dtype=np.int64)
        share = np.array([p.workload.gpu_milli / 1000.0 for p in placed], dtype=float)
        return cls(
            pods=tuple(placed), pod_kind=pod_kind, pod_owner=pod_owner,
            pod_ready_at=np.array([p.ready_at for p in placed], dtype=float),
            pod_remaining=np.array([p.remaining_s for p in placed], dtype=float),
            slot_pod=slot_pod, slot_gpu=np.array(gpus, dtype=np.int64), slot_share=share[slot_pod],
            slot_kind=pod_kind[slot_pod], slot_owner=pod_owner[slot_pod],
        )

    def flush(self) -> None:
        """Write the array state the step mutates back into the pod records."""
        for p, r in zip(self.pods, self.pod_remaining.tolist()):
            p.remaining_s = r


EMPTY = SlotTable.build([])
