"""Shared pool bookkeeping of the capacity planners: from per-service replica targets to the GPU moves they imply.

The tidal planner (`balancer.plan.capacity_plan`, which re-exports these) and the static and reactive baselines
(`balancer.plan.baselines`) decide replica targets differently and share this: `apply_targets` frees the GPUs a
scale-up needs, first idle GPUs of the service's allowed models, then elastic training ranked by preemption cost
(lowest priority, least work lost since the last checkpoint, resized in place before restarted whole; elastic
minimum before suspension), gives the idle GPUs left to elastic training (less those kept for the pending replicas of
a service on hold, `Pools.keep_for_pending`; a growth into the GPUs a loan of the same pass frees names that loan's
service, so the loop sends it only with the loan, and without it only the workers GPUs idle already hold, where alone
they meet the guard's minimum gain and the job's elastic minimum: `Pools.training_actions`), and orders the actions
so that a per-cycle action cap leaves whole units. `Pools` is its mutable scratch accounting for one pass;
`grow_gain` prices a training growth net of the rollback the loan's reclaim costs a job that does not checkpoint on
SIGTERM and of the restart a Kueue-queued job pays for it (a growth worth nothing is not proposed); `capacity_split`
is the split for the gauges. Pure: no clock, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

from balancer.actions import Action, ScaleInference, ScaleTraining
from balancer.plan.capacity import CapacityPolicy, CapacitySplit, CapacityView, JobView, ServiceView


def _allowed(models: frozenset[str] | None, model: str) -> bool:
    return models is None or model in models


def foreign_models(service: ServiceView) -> list[str]:
    """The models of the GPUs `service`'s replicas hold that its profile's `models` leave out (a profile whose
    gpuModels does not name the model its pods run on). A loan of its replicas gives back the GPUs it holds
    (`Pools.release`), while a reclaim takes only GPUs of its allowed models (`Pools.take_free`, `Pools.shrink_for`):
    its loan would be one-way, so `plan_capacity` makes none."""
    return sorted(m for m, n in service.gpus_by_model.items() if n > 0 and not _allowed(service.profile.models, m))


def shrink_order(jobs: Iterable[JobView], usable: Callable[[JobView], int]) -> list[JobView]:
    """The jobs a reclaim may shrink, cheapest preemption first: lowest priority, then least work lost since the
    last checkpoint, then resized in place before restarted whole. `usable(j)`: the GPUs of the reclaim's models
    `j` holds; a job with none, or protected (the safety guard would refuse its shrink), is no candidate."""
    return sorted((j for j in jobs if usable(j) > 0 and not j.protected),
                  key=lambda j: (j.priority, j.restart_cost_gpu_h, j.restarts_on_resize, j.name))


class Pools:
    """Mutable scratch accounting for one planning pass: idle GPUs per model and the jobs' planned sizes."""

    def __init__(self, view: CapacityView) -> None:
        self.free = dict(view.free)
        self.jobs = {j.name: j for j in view.jobs}
        self.workers = {j.name: j.workers for j in view.jobs}
        # what each job holds that a reclaim can give inference (`JobView.reclaimable_by_model`)
        self.held = {j.name: dict(j.gpus_by_model if j.reclaimable_by_model is None else j.reclaimable_by_model)
                     for j in view.jobs}
        # ... and the GPUs it holds that no new pod can take (a cordoned or tainted node, unhealthy): a shrink may stop
        # the workers there first (an Indexed Job stops its highest indexes, wherever they run)
        self.stuck = {j.name: max(0, sum(j.gpus_by_model.values()) - sum(self.held[j.name].values()))
                      for j in view.jobs}
        # GPUs per model this pass's scale-downs free, by service (the loans), those not claimed yet (`released`), and
        # per job the loans whose GPUs it grows into (`_grow`)
        self.lent: dict[str, dict[str, int]] = {}
        self.lenders: dict[str, set[str]] = {}
        self.on_idle: dict[str, int] = {}   # per job grown, the workers the GPUs idle already hold (`_grow`)

    def take_free(self, models: frozenset[str] | None, gpus: int) -> int:
        """Claim up to `gpus` idle GPUs of the allowed models; returns how many were claimed."""
        got = 0
        for m in sorted(self.free, key=lambda k: -self.free[k]):
            if got >= gpus:
                break
            if _allowed(models, m):
                n = min(self.free[m], gpus - got)
                self.free[m] -= n
                got += n
        return got

    def keep_for_pending(self, services: Iterable[ServiceView]) -> None:
        """Keep idle GPUs of each service's allowed models for its replicas asked but not placed yet, at most one
        replica's GPUs per pending replica: the scheduler gives them those GPUs, so they are no GPUs to lend (a
        scale-up's pods read as pending beside idle GPUs while the placements the view is read from lag it)."""
        for s in services:
            self.take_free(s.profile.models, max(0, s.asked - s.replicas) * s.profile.gpus_per_replica)

    def keep_for_unseen(self, services: Iterable[ServiceView], granted: Mapping[str, int]) -> None:
        """Keep idle GPUs of each service's allowed models for the replicas it counts as running unseen on a forgotten
        node (`ServiceView.unseen`) and keeps (`granted`: a loan sheds pending replicas first): they may be pending
        instead, and lent, those GPUs would leave them waiting for as long as the node stays dark (the view counts
        them placed, so no reclaim makes room for them)."""
        for s in services:
            kept = min(s.unseen, max(0, granted.get(s.profile.name, s.replicas) - (s.replicas - s.unseen)))
            self.take_free(s.profile.models, kept * s.profile.gpus_per_replica)

    def release(self, service: ServiceView, replicas: int) -> None:
        """Return the GPUs a scale-down to `replicas` leaves empty to the idle pool, on the models the service holds
        most of. Replicas that share GPUs (gpu_milli < 1000) free one only once it is empty: the replicas left hold
        at most `replicas` x gpus_per_replica of the GPUs only the service occupies, whichever pods go; the rest
        is credited, never more than the replicas shed."""
        gpr = service.profile.gpus_per_replica
        gpus = (service.replicas - replicas) * gpr
        held = dict(service.gpus_by_model)
        if service.sole_by_model is not None:
            held = dict(service.sole_by_model)
            gpus = min(gpus, max(0, sum(held.values()) - replicas * gpr))
        for m in sorted(held, key=lambda k: -held[k]):
            n = min(held[m], gpus)
            self._credit(m, n, service.profile.name)
            gpus -= n
        if gpus > 0:  # unplaced (warming or pending) replicas: credit an allowed model
            self._credit(min(service.profile.models or self.free or {"any": 0}), gpus, service.profile.name)

    def released(self, model: str) -> int:
        """The GPUs of `model` this pass's scale-downs free, not claimed yet (`claim_pending`, `_grow`)."""
        return sum(self.lent.get(model, {}).values())

    def _credit(self, model: str, n: int, service: str) -> None:
        self.free[model] = self.free.get(model, 0) + n
        lent = self.lent.setdefault(model, {})
        lent[service] = lent.get(service, 0) + n

    def _draw(self, model: str, n: int) -> set[str]:
        """Take `n` (at most `released(model)`) of the GPUs of `model` this pass's scale-downs free; returns the
        services whose loans free them."""
        lent, by = self.lent.get(model, {}), set()
        for s in sorted(lent):
            if n <= 0:
                break
            k = min(lent[s], n)
            lent[s] -= k
            n -= k
            if k:   # a service that frees none of them (credited 0 of the model) lends none
                by.add(s)
        return by

    def shrink_for(self, models: frozenset[str] | None, gpus: int, allow_suspend: bool) -> int:
        """Free up to `gpus` GPUs of the allowed models from training, cheapest preemption first. A job's shrink by k
        workers counts only what it frees at worst: k x gpus_per_worker less the GPUs it holds that no new pod can
        take (`stuck`: the workers stopped may be those), as a loan counts a service's (`ServiceView.sole_by_model`);
        a job that frees none so (a worker's GPUs not all usable, or its usable ones fewer than the stuck ones its
        spare workers may be) is not shrunk. Counted as if every worker freed usable GPUs, a job across a cordoned
        node was shrunk a worker each cycle while its cordoned workers went, and the replicas stayed pending."""

        def usable(j: JobView) -> int:
            return sum(n for m, n in self.held[j.name].items() if _allowed(models, m))

        ranked = shrink_order(self.jobs.values(), usable)
        # without suspension a job keeps one worker even when its elastic minimum is 0
        floors = [lambda j: max(j.elastic_min, 0 if allow_suspend else 1)] + ([lambda j: 0] if allow_suspend else [])
        got = 0
        for floor in floors:
            for j in ranked:
                if got >= gpus:
                    return got
                gpw, stuck = max(j.gpus_per_worker, 1), self.stuck[j.name]
                spare = min(self.workers[j.name], j.placed_workers) - floor(j)
                k = min(spare, math.ceil((gpus - got + stuck) / gpw), (usable(j) + stuck) // gpw)
                if k <= 0 or k * gpw <= stuck:
                    continue
                # lowering a job's size removes its pending workers first (as a Job's controller deletes unscheduled
                # pods before running ones): they free no GPU, so the new size is k below the placed workers
                self.workers[j.name] = min(self.workers[j.name], j.placed_workers) - k
                freed, self.stuck[j.name] = k * gpw - stuck, 0   # at worst, the stuck workers went first
                for m in sorted(self.held[j.name]):
                    if freed <= 0:
                        break
                    if _allowed(models, m):
                        n = min(self.held[j.name][m], freed)
                        self.held[j.name][m] -= n
                        freed -= n
                        got += n
        return got

    def free_for(self, models: frozenset[str] | None, gpus: int, allow_suspend: bool,
                 per: int = 1) -> tuple[int, list[str], int]:
        """Free up to `gpus` GPUs of the allowed models for a scale-up, idle ones first, then from elastic training
        (`shrink_for`); returns how many, the jobs shrunk for them, and how many of them were idle. Shrinks that add
        no whole replica of `per` GPUs to the idle ones (what they free at worst) are undone: sent, a job across a
        hot-tainted node was shrunk 5 -> 1 for a 2-GPU replica that could only stay pending."""
        idle = self.take_free(models, gpus)
        if idle >= gpus:
            return idle, [], idle
        before = dict(self.workers)
        held, stuck = {j: dict(h) for j, h in self.held.items()}, dict(self.stuck)
        got = idle + self.shrink_for(models, gpus - idle, allow_suspend)
        if got // max(per, 1) <= idle // max(per, 1):
            self.workers, self.held, self.stuck = before, held, stuck
            return idle, [], idle
        return got, [j for j, w in self.workers.items() if w < before[j]], idle

    def grow_training(self, hours: float, keep: frozenset[str] | None = frozenset()) -> None:
        """Give the idle GPUs to elastic jobs (highest priority first, jobs resized in place before jobs a resize
        restarts) up to their elastic maximum, a job only when the `hours` of the added workers outweigh the work
        its restart and the loan's reclaim lose (`grow_gain`), and to at least its elastic minimum (a suspended job
        resumed below it runs no step). Not those of the models in `keep` (None: any model):
        a service left out while a node is forgotten may need them (`CapacityView.uncounted_models`). A job grows into
        the GPUs idle already first, then into those this pass's scale-downs free: `lenders` keeps the services whose
        loans those are, so its growth goes only with them (`training_actions`)."""
        self.claim_pending()
        kept = {m: n for m, n in self.free.items() if keep is None or m in keep}
        self.free.update(dict.fromkeys(kept, 0))
        self._grow(hours)
        for m, n in kept.items():
            self.free[m] += n

    def _grow(self, hours: float) -> None:
        for j in sorted(self.jobs.values(), key=lambda j: (-j.priority, j.restarts_on_resize, j.name)):
            gpw = max(j.gpus_per_worker, 1)
            if j.protected or self.workers[j.name] > j.placed_workers or self.workers[j.name] < j.workers:
                continue  # the guard refuses resizing it, already waiting for GPUs, or being shrunk this cycle
            room = j.elastic_max - self.workers[j.name]
            take: dict[str, int] = {}
            for m in sorted(self.free, key=lambda k: -self.free[k]):
                if room <= 0:
                    break
                if _allowed(j.models, m) and self.free[m] >= gpw:
                    take[m] = k = min(room, self.free[m] // gpw)
                    room -= k
            if not take or grow_gain(j, sum(take.values()), hours) <= 0:
                continue
            if self.workers[j.name] + sum(take.values()) < j.elastic_min:
                continue   # a job resumed below its elastic minimum runs no step: its GPUs would sit held, idle
            for m, k in take.items():   # the GPUs idle already first, then those a loan frees (`lenders`)
                idle = max(0, self.free[m] - self.released(m))
                loaned = max(0, k * gpw - idle)
                self.on_idle[j.name] = self.on_idle.get(j.name, 0) + min(k, idle // gpw)   # whole workers alone
                self.lenders.setdefault(j.name, set()).update(self._draw(m, loaned) if loaned else ())
                self.free[m] -= k * gpw
                self.workers[j.name] += k

    def claim_pending(self) -> None:
        """Take from the GPUs this pass's scale-downs free those the jobs' pending workers wait for: the scheduler gives
        them the next GPUs of their models that empty, so they are no GPUs to grow another job into (a growth onto
        GPUs a loan would free, sent out while the loan was held back, still waits; counting them again grew a second
        job into the same GPUs, and both waited). GPUs idle already are not claimed: pending workers beside them are
        pending for some other reason (a node selector, memory), and the GPUs may still go to another job. (A
        service's pending replicas are kept idle GPUs for a warm-up, `keep_for_pending`: a scale-up just asked reads
        as pending beside idle GPUs while the placements lag it.)"""
        for j in self.jobs.values():
            pending = (self.workers[j.name] - j.placed_workers) * max(j.gpus_per_worker, 1)
            for m in sorted(self.lent, key=lambda k: -self.released(k)):
                if pending <= 0:
                    break
                if _allowed(j.models, m):
                    n = min(self.free[m], self.released(m), pending)
                    self.free[m] -= n
                    self._draw(m, n)
                    pending -= n

    def training_actions(
        self, reason_up: str, reason_down: str, gain_down: Mapping[str, float], hours: float,
        serves: Mapping[str, Iterable[str]] | None = None,
    ) -> list[Action]:
        """The jobs' resizes; a shrink names the services it makes room for in `serves` ({job: services}: the
        latency net's steps, tied so to it; one served by replicas already asked sends no scale, only its shrinks); a
        growth names the services whose loans (scale-downs this pass) free GPUs it grows into (`lenders`): sent
        without them, held back or refused, its workers wait pending on GPUs the service keeps
        (`balancer.loop._on_loans`); it carries the workers of it that GPUs idle already hold, and their gain alone
        (`ScaleTraining.idle_workers`, `idle_gain`: 0 where alone they gain nothing), sent alone if the loans do not go.
        One onto idle GPUs alone names none."""
        out: list[Action] = []
        for name, j in sorted(self.jobs.items()):
            new = self.workers[name]
            if new == j.workers:
                continue
            if new < j.workers:
                out.append(
                    ScaleTraining(
                        job=name,
                        workers=new,
                        previous_workers=j.workers,
                        expected_gain=gain_down.get(name, 0.0),
                        reclaim=True,
                        cause="reclaim",
                        service=",".join((serves or {}).get(name, ())),
                        reason=f"{reason_down}; loses {j.restart_cost_gpu_h:.2f} GPU-h since checkpoint "
                        f"(priority {j.priority}, elastic min {j.elastic_min})"
                        f"{_RESTART if j.restarts_on_resize else ''}",
                    )
                )
            else:
                lost = (f"; loses {j.restart_cost_gpu_h:.2f} GPU-h since checkpoint{_RESTART}"
                        if j.restarts_on_resize else "")
                lenders = self.lenders.get(name, set())
                idle = self.on_idle.get(name, 0) if lenders else 0   # the idle part of a growth onto a loan's GPUs
                idle = idle if j.workers + idle >= j.elastic_min else 0   # alone below its minimum: never sent so
                idle_gain = grow_gain(j, idle, hours) if idle else 0.0
                out.append(
                    ScaleTraining(
                        job=name,
                        workers=new,
                        previous_workers=j.workers,
                        expected_gain=grow_gain(j, new - j.workers, hours),
                        cause="loan",
                        service=",".join(sorted(lenders)),
                        idle_workers=idle if idle_gain > 0 else 0,   # worth nothing alone: never sent so
                        idle_gain=max(idle_gain, 0.0),
                        reason=f"{reason_up}: +{new - j.workers} workers on idle GPUs{lost}",
                    )
                )
        return out


_RESTART = ("; a resize restarts the whole job (queued in Kueue and not elastic there, or its framework restarts "
            "every worker)")


def grow_gain(j: JobView, workers: int, hours: float) -> float:
    """A100-equivalent GPU-hours `workers` more workers give `j` over `hours`, less the rollback the loan's reclaim
    costs the grown job (its age since its checkpoint now, on all its GPUs then) and, for a job a resize restarts
    (`JobView.restarts_on_resize`), the work since its checkpoint it loses by growing."""
    added = workers * max(j.gpus_per_worker, 1)
    # the loan's reclaim shrinks the grown job, which (unless it checkpoints on SIGTERM: since_checkpoint_s 0) rolls
    # back to its checkpoint: priced at the age since its checkpoint it has now, on all the GPUs it will hold
    rollback = j.since_checkpoint_s / 3600.0 * (sum(j.gpus_by_model.values()) + added) * j.speed
    gain = added * j.speed * hours - rollback
    return gain - j.restart_cost_gpu_h if j.restarts_on_resize else gain


def capacity_split(view: CapacityView, targets: Mapping[str, int]) -> CapacitySplit:
    loaned = sum(
        max(0, s.profile.home_replicas - s.replicas) * s.profile.gpus_per_replica for s in view.services
    )
    return CapacitySplit(
        inference=view.inference_gpus,
        training=view.training_gpus,
        loaned=min(loaned, view.training_gpus),
        idle=int(sum(view.free.values())),
    )


def apply_targets(
    view: CapacityView,
    new: Mapping[str, int],
    policy: CapacityPolicy,
    reasons: Mapping[str, str],
    gains: Mapping[str, float],
    hold: frozenset[str] = frozenset(),
    keep_pending: frozenset[str] = frozenset(),
    need: Mapping[str, int] | None = None,
    named: frozenset[str] = frozenset(),
    granted: dict[str, int] | None = None,
) -> tuple[list[Action], list[str]]:
    """Turn per-service replica targets into ordered actions: each inference change right after the training
    shrinks that free its GPUs, then the remaining shrinks, then training growth (after the loans whose GPUs it takes:
    the loop sends it only once they came back applied, `balancer.loop.Reconciler._act`). Services in `hold` keep what
    they asked for but get no GPUs freed for replicas still pending; those also in `keep_pending` (pending only
    briefly: `plan_capacity`) keep the idle GPUs of their models those replicas will take (`Pools.keep_for_pending`),
    which are then not lent to training. A scale-up frees GPUs for at most `need` replicas (default: its target):
    the pending asks it keeps beyond (an HPA's or an operator's, `plan_capacity`) are held as on hold, so a reclaim
    for one more replica shrinks training by one replica's GPUs, not by all the asks. A shrink names the services in
    `named` it frees GPUs for and no idle GPU serves (`ScaleTraining.service`, comma-separated: the latency net's
    steps, whose memory `capacity_loop.unsent` forgets when none of their shrinks goes out; a replica asked takes an
    idle GPU whatever goes out, so such a step partly went out, where its replica needs one GPU: else
    `CapacityPolicy.emergency_retry_s` asks it again). `granted`, where passed, gets the replicas each
    service has GPUs for once they are done (`plan_capacity`: a step given none changed nothing). (The order alone did
    not keep a per-cycle action cap from cutting a unit between its shrinks and its scale-up; the guard never refuses
    either for that cap, `safety.action_limit`.)"""
    pools = Pools(view)
    pools.keep_for_pending(s for s in view.services if s.profile.name in hold & keep_pending)
    notes: list[str] = []
    shrink_gain: dict[str, float] = {}
    serves: dict[str, list[str]] = {}   # per job shrunk, the services in `named` it frees GPUs for
    inference: list[tuple[Action, int]] = []  # (action, jobs shrunk before it and for it)
    shrunk: list[str] = []  # jobs in the order a service first shrank them
    granted = {} if granted is None else granted   # per service, the replicas it has GPUs for
    # scale-ups first (the largest first), then the rest: a scale-up never counts on GPUs another service's loan frees
    # in the same cycle, since the guard may refuse that loan (eviction budget, cooldown) but never the reclaim and
    # its shrinks (`safety.action_limit`). The price, where two services on one model go opposite ways at once: a
    # training shrink the loan could have spared
    for s in sorted(view.services, key=lambda s: s.replicas - new[s.profile.name]):
        p = s.profile
        delta = new[p.name] - s.replicas
        if delta < 0:   # an HPA's floor lowered frees only what its metrics no longer ask for (`ServiceView.hpa_wants`)
            pools.release(s, min(max(new[p.name], s.hpa_wants or 0), s.replicas))
            granted[p.name] = new[p.name]
        elif delta > 0 and p.name in hold:
            granted[p.name] = s.replicas  # pending replicas the forecast does not need: no GPU freed for them
        elif delta > 0:
            short = max(0, new[p.name] - max((need or {}).get(p.name, new[p.name]), s.replicas))  # asks held
            want = (delta - short) * p.gpus_per_replica
            got, jobs, idle = pools.free_for(p.models, want, policy.allow_suspend, p.gpus_per_replica)
            for job in jobs:
                shrink_gain[job] = shrink_gain.get(job, 0.0) + gains.get(p.name, 0.0)
                if p.name in named and not idle:
                    serves.setdefault(job, []).append(p.name)
                if job not in shrunk:
                    shrunk.append(job)
            add = got // p.gpus_per_replica
            if add < delta - short:
                notes.append(f"{p.name}: wants {delta - short} more replicas, only {add} GPUs' worth can be freed"
                             + (f" (its replicas hold {', '.join(f)} GPUs, which its gpuModels leave out)"
                                if (f := foreign_models(s)) else ""))
            if short and p.name in keep_pending:  # the held asks keep idle GPUs for a warm-up, as on hold
                pools.take_free(p.models, short * p.gpus_per_replica)
            granted[p.name] = s.replicas + add
        else:
            granted[p.name] = s.replicas
        # replicas already asked for but pending for want of a GPU need GPUs (freed above), not a second request;
        # a scale-up that could free fewer GPUs than it wanted never lowers what was asked
        asked = s.asked
        if (granted[p.name] > asked) if delta > 0 else (granted[p.name] != asked):
            inference.append((
                ScaleInference(
                    service=p.name,
                    replicas=granted[p.name],
                    previous_replicas=asked,
                    reason=reasons[p.name],
                    expected_gain=gains.get(p.name, 0.0),
                ),
                len(shrunk),
            ))
    hours = policy.loan_horizon_s / 3600.0
    pools.keep_for_unseen(view.services, granted)   # after the scale-ups, which may take them: inference's anyway
    pools.grow_training(hours, keep=view.uncounted_models)
    training = pools.training_actions(
        "loan idle GPUs to training", "make room for inference", shrink_gain, hours, serves
    )
    shrinks = {a.job: a for a in training if a.workers < a.previous_workers}
    grows = [a for a in training if a.workers > a.previous_workers]
    ordered: list[Action] = []
    done = 0
    for action, needs in inference:
        ordered += [shrinks.pop(j) for j in shrunk[done:needs] if j in shrinks]
        done = max(done, needs)
        ordered.append(action)
    return ordered + list(shrinks.values()) + grows, notes
