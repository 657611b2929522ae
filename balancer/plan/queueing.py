"""Anti-starvation for a pending queue: priority aging, backfill behind a reservation, wait reports.

Pure functions over numpy arrays of the pending jobs, so the simulator and the loop call them each cycle.

* Aging: effective priority = priority + aging_rate x hours waited, so a large job passed over by a stream of
  small ones eventually outranks them (`effective_priority`, `queue_order`).
* Backfill (EASY backfilling): the head job that cannot start gets a *reservation*, the earliest time at which
  enough GPUs will be free given the estimated end times of running jobs. A later, smaller job may start now
  only if it fits in the GPUs free now and either ends (by its estimated duration) before the reservation, or
  leaves enough GPUs for the head job at the reservation time (`backfill`).
* Report: the longest wait and how many jobs have waited over 4 hours (`wait_report`), the
  `gputide_training_waiting_jobs{over}` gauge of docs/metrics.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

HOUR = 3600.0
STARVATION_S = 4 * HOUR


def effective_priority(
    priority: np.ndarray, submitted_s: np.ndarray, now_s: float, aging_per_hour: float = 1.0
):
    """Priority that grows linearly with the time already spent waiting."""
    waited = np.clip(now_s - np.asarray(submitted_s, dtype=float), 0, None)
    return np.asarray(priority, dtype=float) + aging_per_hour * waited / HOUR


def queue_order(priority, submitted_s, now_s: float, aging_per_hour: float = 1.0) -> np.ndarray:
    """Indices of pending jobs, highest effective priority first; ties go to the earliest submission."""
    eff = effective_priority(priority, submitted_s, now_s, aging_per_hour)
    return np.lexsort((np.asarray(submitted_s, dtype=float), -eff))


def reservation_time(
    need_gpus: float, free_now: float, running_end_s: np.ndarray, running_gpus: np.ndarray, now_s: float
) -> tuple[float, float]:
    """(time, GPUs free at that time) at which `need_gpus` will be free; inf when never."""
    if free_now >= need_gpus:
        return now_s, free_now
    order = np.argsort(running_end_s, kind="stable")
    ends = np.asarray(running_end_s, dtype=float)[order]
    freed = free_now + np.cumsum(np.asarray(running_gpus, dtype=float)[order])
    hit = np.flatnonzero(freed >= need_gpus)
    if not len(hit):
        return float("inf"), float(freed[-1]) if len(freed) else free_now
    return max(float(ends[hit[0]]), now_s), float(freed[hit[0]])


@dataclass(frozen=True)
class BackfillDecision:
    start: tuple[int, ...]  # pending-job indices to start now, in order
    reserved: int | None  # index of the job holding the reservation
    reservation_s: float  # when it is expected to start (inf when never)


def backfill(
    need_gpus: np.ndarray,
    est_duration_s: np.ndarray,
    order: np.ndarray,
    free_now: float,
    running_end_s: np.ndarray,
    running_gpus: np.ndarray,
    now_s: float,
) -> BackfillDecision:
    """EASY backfilling over pending jobs taken in `order` (e.g. from `queue_order`)."""
    need = np.asarray(need_gpus, dtype=float)
    dur = np.asarray(est_duration_s, dtype=float)
    free = float(free_now)
    started: list[int] = []
    pos = 0
    while pos < len(order) and need[order[pos]] <= free:  # the head of the queue starts while it fits
        free -= need[order[pos]]
        started.append(int(order[pos]))
        pos += 1
    if pos == len(order):
        return BackfillDecision(tuple(started), None, now_s)
    head = int(order[pos])
    ends = np.append(np.asarray(running_end_s, dtype=float), [now_s + dur[j] for j in started])
    gpus = np.append(np.asarray(running_gpus, dtype=float), [need[j] for j in started])
    shadow, free_at_shadow = reservation_time(need[head], free, ends, gpus, now_s)
    spare = free_at_shadow - need[head]  # GPUs the head job will not need at its reservation
    for j in order[pos + 1 :]:
        j = int(j)
        if need[j] > free:
            continue
        if now_s + dur[j] <= shadow:
            free -= need[j]
            started.append(j)
        elif need[j] <= spare:
            free -= need[j]
            spare -= need[j]
            started.append(j)
    return BackfillDecision(tuple(started), head, shadow)


@dataclass(frozen=True)
class WaitReport:
    pending: int
    longest_wait_s: float
    over_4h: int

    def as_gauges(self) -> dict[str, int]:
        """Values for gputide_training_waiting_jobs{over="0h"|"4h"}."""
        return {"0h": self.pending, "4h": self.over_4h}


def wait_report(submitted_s: np.ndarray, now_s: float, threshold_s: float = STARVATION_S) -> WaitReport:
    waited = np.clip(now_s - np.asarray(submitted_s, dtype=float), 0, None)
    if not len(waited):
        return WaitReport(0, 0.0, 0)
    return WaitReport(len(waited), float(waited.max()), int((waited > threshold_s).sum()))
