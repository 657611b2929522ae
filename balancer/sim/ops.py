"""Workload operations of `SimCluster`: services, training jobs, generic pods, scheduling, place/evict/migrate.

Semantics (what the reconcile loop can rely on):

* A pod is pending until a scheduler places it; `evict` puts a placed pod back into the pending queue (its
  controller recreates it, as Kubernetes does) and returns False if it was not placed.
* `migrate` is make-room-first: it checks that the target GPUs fit the pod (the pod's own share on GPUs it
  already holds counts as free), and only then moves it; if the target does not fit nothing changes.
  A migrated inference replica warms up again at the target; a generic pod restarts.
* A training worker stopped by an eviction, a migration or a scale-down gets SIGTERM, as on Kubernetes; whichever
  path stops it, `_stop_worker` alone decides the cost: a job that checkpoints on SIGTERM
  (`TrainingJobSpec.checkpoint_on_sigterm`) loses nothing, any other rolls back to its last checkpoint (the whole
  job, as a distributed job's workers restart from it). A crash (a failed GPU, an XID, in `faults`) gives no
  SIGTERM: every job rolls back.
* `scale_service` / `scale_training` set the replica / worker count. New pods are pending; scale-down removes
  pending pods first, then the newest placed ones. ``checkpoint_first=True`` checkpoints the job before (an
  operator who saves, then resizes): nothing lost. A hotspot shrink's record (``shrunk_from``, as the
  Kubernetes actuator writes `gputide.io/shrunk` on the Job) is kept in `shrink_records` and shown on the job's
  workloads in the snapshot (`Workload.shrunk_from`), void (`shrink_overridden`) once the job was resized since.
  `scale_training` is the raw verb (an operator's resize keeps the record, as `kubectl scale` keeps the
  annotation); `shrink_record_done` is the rule gputide's own resizes follow (`SimActuator`, as
  `k8s_jobs.shrink_patch` on a Job): the record goes once the job is back at its size before the shrink or the
  record is void. Co-location's shrink is kept alike in `colocation_records` (``colocation``: the resize whose
  record `balancer.colocation_record.after` decides, as the Kubernetes actuator's `gputide.io/colocation-shrunk`)
  and shown as `Workload.colocation_from` / `colocation_service`, void (`colocation_overridden`) once the job was
  resized since. Like the Kubernetes actuator's, a record's "from" is what the job asked for (or a valid record's),
  never the plan's running count, and gputide's give-back (``colocation``: its action) grows the job no further than
  its valid record's "from", writing nothing without one, and its shrink never raises a job its owner shrank as far
  since the plan's view (nothing written, `balancer.shrink_rule`, the rule `k8s_jobs.raises` follows): the raw verb
  (an operator's) has no such limits.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from balancer import colocation_record, shrink_rule
from balancer.model import ScaleTraining, Workload, WorkloadClass
from balancer.sim.pods import EMPTY, GENERIC, INFERENCE, TRAINING, Pod
from balancer.sim.workloads import ServiceSpec, TrainingJobSpec

if TYPE_CHECKING:
    from balancer.sim.cluster import Scheduler, SimCluster


class WorkloadOps:
    # ---- adding work -------------------------------------------------------------------------------------------
    def add_service(self: SimCluster, spec: ServiceSpec, *, warm: bool = True) -> None:
        """Add an inference service; its initial replicas are scheduled now and, with `warm`, serve at once."""
        if spec.name in self._svc_pos:
            raise ValueError(f"service {spec.name} exists")
        self._svc_pos[spec.name] = len(self._svc)
        self._svc.append(spec)
        self._svc_target.append(0)
        self._svc_next.append(0)
        rates = np.array([[spec.rate_on(m) for m in self._models]])
        self._svc_rate = np.vstack([self._svc_rate, rates])
        self._svc_slo = np.append(self._svc_slo, spec.slo_latency_s)
        self._svc_base = np.append(self._svc_base, spec.base_latency_s)
        self._svc_demand = np.append(self._svc_demand, max(float(spec.demand(self.time)), 0.0))
        self._svc_p99 = np.append(self._svc_p99, spec.base_latency_s)
        self.acct.add_service()
        self.scale_service(spec.name, spec.replicas)
        self.schedule()
        if warm:
            for p in self._pods.values():
                if p.kind == INFERENCE and p.workload.owner == spec.name and p.gpus is not None:
                    p.ready_at = self.time

    def add_training_job(self: SimCluster, spec: TrainingJobSpec) -> None:
        if spec.name in self._job_pos:
            raise ValueError(f"training job {spec.name} exists")
        self._job_pos[spec.name] = len(self._jobs)
        self._jobs.append(spec)
        self._job_target.append(0)
        self._job_next.append(0)
        self.acct.add_job(spec)
        self.scale_training(spec.name, spec.workers)
        self.schedule()

    def submit(self: SimCluster, workload: Workload, *, duration_s: float | None = None) -> None:
        """Queue a generic pod; with `duration_s` it completes after that much work at full clock."""
        if workload.name in self._pods:
            raise ValueError(f"workload {workload.name} exists")
        d = math.inf if duration_s is None else float(duration_s)
        self._add_pod(Pod(workload=workload, kind=GENERIC, owner=-1, submitted_at=self.time, duration_s=d,
                          remaining_s=d))

    def _add_pod(self: SimCluster, pod: Pod) -> None:
        self._pods[pod.workload.name] = pod
        self._pending[pod.workload.name] = None
        self._sched_dirty = True

    # ---- scheduling --------------------------------------------------------------------------------------------
    def set_scheduler(self: SimCluster, fn: Scheduler) -> None:
        self._scheduler = fn
        self._sched_dirty = True

    def schedule(self: SimCluster) -> int:
        """Run the scheduler on the pending queue now; returns how many pods it placed."""
        self._sched_dirty = False
        if not self._pending:
            return 0
        pending = [self._pods[k].workload for k in self._pending]
        placed = 0
        for name, gpus in self._scheduler(self.scheduler_view(), pending):
            if name in self._pending and self.place(name, gpus):
                placed += 1
        self._sched_dirty = False
        return placed

    def fits(self: SimCluster, name: str, gpus: Sequence[int]) -> bool:
        """Whether pod `name` could run on `gpus` now (its own current share counts as free)."""
        pod = self._pods.get(name)
        if pod is None:
            return False
        w = pod.workload
        idx = np.asarray(tuple(gpus), dtype=np.int64)
        if len(idx) != w.gpus or len(set(idx.tolist())) != len(idx):
            return False
        if len(idx) == 0:
            return True
        if idx.min() < 0 or idx.max() >= self.n_gpus or len(set(self.node_index[idx].tolist())) != 1:
            return False
        own = np.isin(idx, pod.gpus or ())
        free_milli = 1000 - self.used_milli[idx] + np.where(own, w.gpu_milli, 0)
        free_mem = self.mem_total_mib[idx] - self.mem_used_mib[idx] + np.where(own, w.gpu_memory_mib, 0)
        ok = (self.online[idx] & self.healthy[idx] & ~self.node_tainted[self.node_index[idx]]
              & (free_milli >= w.gpu_milli) & (free_mem >= w.gpu_memory_mib))
        if w.allowed_models is not None:
            ok &= np.isin(self.gpu_model[idx], list(w.allowed_models))
        return bool(ok.all())

    def place(self: SimCluster, name: str, gpu_indices: Sequence[int]) -> bool:
        """Bind a pending pod to `gpu_indices`; False (and no change) if it is not pending or does not fit."""
        if name not in self._pending or not self.fits(name, gpu_indices):
            return False
        pod = self._pods[name]
        self._bind(pod, tuple(int(g) for g in gpu_indices))
        del self._pending[name]
        self.acct.note_wait(name, self.time - pod.submitted_at)
        return True

    def _bind(self: SimCluster, pod: Pod, gpus: tuple[int, ...]) -> None:
        idx = np.asarray(gpus, dtype=np.int64)
        self.used_milli[idx] += pod.workload.gpu_milli
        self.mem_used_mib[idx] += pod.workload.gpu_memory_mib
        pod.gpus = gpus
        self.placement_version += 1
        if pod.kind == INFERENCE:
            pod.ready_at = self.time + self._svc[pod.owner].warmup_s
        self._dirty = True

    def _unbind(self: SimCluster, pod: Pod) -> None:
        if pod.gpus is None:
            return
        # the work counted down so far goes back into the records, and the table is dropped: flushed again at the
        # next step's rebuild, it would write back the work of a generic pod that restarts here
        self._table.flush()
        self._table = EMPTY
        idx = np.asarray(pod.gpus, dtype=np.int64)
        self.used_milli[idx] -= pod.workload.gpu_milli
        self.mem_used_mib[idx] = np.maximum(self.mem_used_mib[idx] - pod.workload.gpu_memory_mib, 0.0)
        pod.gpus = None
        self.placement_version += 1
        if pod.kind == GENERIC:
            pod.remaining_s = pod.duration_s
        self._dirty = True
        self._sched_dirty = True

    def evict(self: SimCluster, name: str) -> bool:
        """Evict a placed pod through the API (a drain, a preemption): it gets SIGTERM and is requeued."""
        return self._requeue(name, sigterm=True)

    def _requeue(self: SimCluster, name: str, *, sigterm: bool) -> bool:
        """Stop a placed pod (`sigterm`: gracefully; else it crashed, as on a failed GPU) and requeue it."""
        pod = self._pods.get(name)
        if pod is None or pod.gpus is None:
            return False
        self._stop_worker(pod, sigterm=sigterm)
        self._unbind(pod)
        pod.submitted_at = self.time
        self._pending[name] = None
        return True

    def migrate(self: SimCluster, name: str, target_gpus: Sequence[int]) -> bool:
        pod = self._pods.get(name)
        if pod is None or pod.gpus is None or not self.fits(name, target_gpus):
            return False
        self._stop_worker(pod, sigterm=True)   # a move is a delete and a recreate: the worker gets SIGTERM
        self._unbind(pod)
        self._bind(pod, tuple(int(g) for g in target_gpus))
        return True

    def _stop_worker(self: SimCluster, pod: Pod, *, sigterm: bool) -> None:
        """What stopping a placed pod costs its training job, the one place every path decides it (a shrink, an
        eviction, a migration, a crash). A worker stopped by SIGTERM of a job that checkpoints on SIGTERM
        (`TrainingJobSpec.checkpoint_on_sigterm`) saves first: nothing lost. Any other stop (a crash, or a trainer
        that does not save on SIGTERM) rolls the whole job back to its last checkpoint, as a distributed job's
        surviving workers restart from it: the work since is lost, a preemption."""
        if pod.kind != TRAINING or pod.gpus is None:
            return
        if sigterm and self._jobs[pod.owner].checkpoint_on_sigterm:
            self.acct.checkpoint(pod.owner)
        else:
            self.acct.preempt(pod.owner, self.time)

    def _remove_pod(self: SimCluster, name: str) -> None:
        pod = self._pods.pop(name)
        self._pending.pop(name, None)
        self._unbind(pod)

    # ---- scaling -----------------------------------------------------------------------------------------------
    def scale_service(self: SimCluster, name: str, replicas: int) -> None:
        i = self._svc_index(name)
        spec = self._svc[i]
        self._scale(INFERENCE, i, name, max(int(replicas), 0), lambda k: Workload(
            name=f"{spec.namespace}/{spec.name}-{k}", workload_class=WorkloadClass.INFERENCE,
            namespace=spec.namespace, owner=spec.name, priority=spec.priority, gpus=spec.gpus_per_replica,
            gpu_milli=spec.gpu_milli, gpu_memory_mib=spec.gpu_memory_mib, allowed_models=spec.allowed_models))
        self._svc_target[i] = max(int(replicas), 0)

    def scale_training(self: SimCluster, job: str, workers: int, *, checkpoint_first: bool = False,
                       shrunk_from: int | None = None, colocation: ScaleTraining | None = None) -> bool:
        """Resize `job` to `workers` (module docstring); False when gputide's resize (`colocation`) wrote nothing."""
        i = self._job_index(job)
        spec = self._jobs[i]
        workers, size = max(int(workers), 0), self._job_target[i]   # the size it asks for before this resize
        if colocation is not None:   # gputide's resize, sized as the Kubernetes actuator sizes a Job
            written = self._gputide_size(i, size, workers, colocation)
            if written is None:
                return False   # nothing written, as on Kubernetes ("(already)"): size and records left as they are
            if written != workers:   # the cut written, its records from it (as `k8s_training` cuts the action)
                colocation = replace(colocation, workers=written,
                                     previous_workers=colocation.previous_workers + written - workers)
                workers = written
            # its co-location record: decided on the size before this resize, written with it
            record = colocation_record.after(self.colocation_records.get(i), size, colocation)
            if record is None:
                self.colocation_records.pop(i, None)
            else:
                self.colocation_records[i] = record
        if self.acct.job_done[i]:
            workers = 0
        if checkpoint_first:
            self.acct.checkpoint(i)
        self._scale(TRAINING, i, job, workers, lambda k: Workload(
            name=f"{spec.namespace}/{spec.name}-w{k}", workload_class=WorkloadClass.TRAINING,
            namespace=spec.namespace, owner=spec.name, priority=spec.priority, gpus=spec.gpus_per_worker,
            gpu_milli=spec.gpu_milli, gpu_memory_mib=spec.gpu_memory_mib, allowed_models=spec.allowed_models,
            elastic_min=spec.elastic_min, elastic_max=int(spec.elastic_max or spec.workers)), saved=checkpoint_first)
        self._job_target[i] = workers
        if shrunk_from is not None:   # written with the size, as on a Kubernetes Job; 0 (a give-back) removes it
            # the workers owed: its valid record's, else what the job asked for (pending workers count), never the
            # plan's running count, which a view older than the owner's own shrink puts above it (`k8s_jobs`)
            before = (self._valid_shrink(i, size) or size) if shrunk_from else 0
            if before > workers:
                self.shrink_records[i] = (before, workers)
            else:
                self.shrink_records.pop(i, None)
        return True

    def _valid_shrink(self: SimCluster, i: int, size: int) -> int:
        """The workers before gputide's hotspot shrink of job `i` (asking for `size`) as its valid record says; 0
        with none, or one void (the job resized since)."""
        record = self.shrink_records.get(i)
        return record[0] if record is not None and record[1] == size else 0

    def _gputide_size(self: SimCluster, i: int, size: int, workers: int, action: ScaleTraining) -> int | None:
        """The size gputide's `action` writes for job `i` (asking for `size`), `workers` asked; None: nothing. As
        the Kubernetes actuator's (`k8s_training`): a shrink that would not lower the job (its owner shrank it as far
        since the plan's view, `balancer.shrink_rule`, the rule `k8s_jobs.raises` follows; a job stopped asks for 0)
        writes nothing; a give-back grows it no further than its valid record says, nothing without one."""
        if shrink_rule.raises(size, workers, action.previous_workers):
            return None
        limit = self._give_back_limit(i, size, action) if workers > size else None
        if limit is None:
            return workers
        return min(workers, limit) or None

    def _give_back_limit(self: SimCluster, i: int, size: int, action: ScaleTraining) -> int | None:
        """The most workers gputide's give-back `action` may grow job `i` (asking for `size`) to, as
        `k8s_jobs.give_back_limit` on a Job: its valid record's before (the hotspot's, `shrunk_from` 0; co-location's,
        `colocation_slack`), 0 with none; None for any other resize."""
        if action.cause == "colocation_slack":
            return colocation_record.give_back_limit(self.colocation_records.get(i), size)
        return self._valid_shrink(i, size) if action.shrunk_from == 0 and action.cause is None else None

    def shrink_record_done(self: SimCluster, job: str, workers: int) -> bool:
        """Whether gputide's resize of `job` to `workers` ends its hotspot shrink record: it leaves the job at its
        workers before the shrink or more, or the record is void already (the job resized since)."""
        i = self._job_index(job)
        record = self.shrink_records.get(i)
        return record is not None and (workers >= record[0] or self._job_target[i] != record[1])

    def _recorded(self: SimCluster, pods: Iterable[Pod]) -> tuple[Workload, ...]:
        """The pods' workloads, a training job's with its last checkpoint (`Workload.checkpointed_at`, as its trainer
        annotates it on Kubernetes: what a resize would lose) and its shrink records (void once its size is not the
        one left). A pod's shown workload is kept while none of that changes."""
        marks: dict[int, dict] = {i: {"shrunk_from": before} if self._job_target[i] == left
                                  else {"shrink_overridden": True} for i, (before, left) in self.shrink_records.items()}
        for i, co in self.colocation_records.items():
            marks.setdefault(i, {}).update(colocation_from=co.before, colocation_service=co.service)
            if self._job_target[i] != co.left:
                marks[i].update(colocation_from=0, colocation_service="", colocation_overridden=True)
        # the running time since the checkpoint is the work a resize loses; a stalled job's clock stands still. A
        # job that checkpoints on SIGTERM loses nothing: +inf, as a Job's `gputide.io/checkpoint-on-sigterm` reads
        ckpt_at = np.where(self.saves_on_sigterm, np.inf, self.time - self.acct.job_since_ckpt).tolist()
        return tuple(self._shown(p, ckpt_at[p.owner], marks.get(p.owner)) if p.kind == TRAINING else p.workload
                     for p in pods)

    @staticmethod
    def _shown(pod: Pod, checkpointed_at: float, marks: dict | None) -> Workload:
        key = (checkpointed_at, tuple(sorted(marks.items())) if marks else ())
        if pod.shown is None or pod.shown_key != key:
            pod.shown, pod.shown_key = replace(pod.workload, checkpointed_at=checkpointed_at, **(marks or {})), key
        return pod.shown

    def _scale(self: SimCluster, kind: int, owner: int, name: str, target: int, make, saved: bool = False) -> None:
        mine = [p for p in self._pods.values() if p.kind == kind and p.owner == owner]
        counter = self._svc_next if kind == INFERENCE else self._job_next
        for _ in range(target - len(mine)):
            w = make(counter[owner])
            counter[owner] += 1
            self._add_pod(Pod(workload=w, kind=kind, owner=owner, submitted_at=self.time))
        if len(mine) > target:
            # pending first, then the newest placed pods
            ranked = sorted(enumerate(mine), key=lambda ip: (ip[1].gpus is not None, -ip[0]))
            for _, p in ranked[: len(mine) - target]:
                if not saved:   # a removed worker gets SIGTERM, as lowering a Job's parallelism sends it
                    self._stop_worker(p, sigterm=True)
                self._remove_pod(p.workload.name)

    def _finish_job(self: SimCluster, job: int) -> None:
        for p in [p for p in self._pods.values() if p.kind == TRAINING and p.owner == job]:
            self._remove_pod(p.workload.name)
        self._job_target[job] = 0

    def _svc_index(self: SimCluster, name: str) -> int:
        if name not in self._svc_pos:
            raise KeyError(f"unknown service {name!r}")
        return self._svc_pos[name]

    def _job_index(self: SimCluster, name: str) -> int:
        if name not in self._job_pos:
            raise KeyError(f"unknown training job {name!r}")
        return self._job_pos[name]
