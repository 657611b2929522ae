"""Quota lent to training that no training Job holds: the per-cycle check of a Kueue cohort's loans (pure decisions
on the ClusterQueues, Workloads and Jobs the actuator read).

Each quota move is durable (`k8s_transfer`), but a move and the Job resize it is for are still two things: a
controller that dies after both quota writes and before the Job's patch, a resize that then fails and whose
give-back fails too, someone resizing the Job back by hand, or a grown Job that runs to its end leave quota lent to
training that no Job holds. Nothing gave it back: the next grow lent again, and inference's quota drifted into
training a little more each time. So once a cycle (`KueueQuota.reconcile`, from the actuator's housekeeping):

* **lent** (per GPU flavor): what gputide's moves brought into training, as both queues record it
  (`k8s_transfer.loans`: the smaller of training's and of what inference sent out, so a record lost or hand-edited
  on either side never makes a loan bigger);
* **held**: what training must keep: the GPUs of every Workload Kueue admitted (or reserved quota for) in the
  training ClusterQueue, plus, for each queued Job of training's, what its own size asks for beyond what it is
  admitted for (a grow Kueue has not admitted yet: per-worker GPUs x `k8s_jobs.workers_asked`, 0 for a Job gputide
  stopped or one that has finished); never less than the queue's own status says it reserves. A Job not admitted
  anywhere counts as training's unless its LocalQueue is seen feeding another ClusterQueue, and counts in every
  flavor when it is not admitted in one: the check errs towards keeping quota;
* **spare**: training's nominalQuota beyond `held` (and beyond what its status reserves, while it does): `spare`,
  the one reckoning of "training's excess", also what an owed give-back takes from (`KueueQuota._pay`);
* **excess** = min(lent, spare): the part of the loan beyond what training's Jobs hold, given back to inference
  (`Excess`). The part of training's own quota the Jobs do not use is not the loan's and stays. A queue over its
  nominal quota (borrowing from the cohort) gives nothing back.

Giving it back is an ordinary move (`KueueQuota.shift`, recorded and settled like any other), made only if the
training queue, read again in the patch that lowers it, still keeps `held` and what its status reserves.

Only an excess that lasts is given back (`Sightings`). A grow is a quota move, then the Job's resize: until the
resize lands, the loan is held by nothing, and a check in between sees it all as excess. Another controller on the
cohort (a shard with `--kueue-queues`: its own leader, the same queues) runs its check any time, and one that gave the
loan back there voided the grow (the Job resized with no quota lent for it). So an excess is given back only once
it has been seen on consecutive checks for at least `min_age_s` (the action deadline, `ACTION_DEADLINE_S` unless set:
within it the mover's resize lands, or fails and the mover gives the quota back itself), and then only the least of
what those checks saw; a flavor with no excess at one check starts again. The memory is the controller's own, not
the cluster's, and its term's as leader (`Sightings.forget`): a restarted controller, or one leading again, gives
nothing back at its first check, and may from a later one.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace

from balancer.actuate.k8s_budget import ACTION_DEADLINE_S
from balancer.actuate.k8s_jobs import workers_asked
from balancer.actuate.k8s_kueue import JOB_UID_LABEL, quota_flavors
from balancer.actuate.k8s_requests import pod_requests, quantity
from balancer.actuate.k8s_transfer import loans
from balancer.actuate.kubernetes import GPU_RESOURCE, KUEUE_QUEUE_LABEL, SUSPENDED_LABEL, Json

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Excess:
    """`gpus` of `flavor` quota lent to training beyond what its Jobs hold: to go back to inference."""

    flavor: str
    gpus: int
    lent: int      # gputide's recorded loan to training in the flavor
    nominal: int   # training's nominalQuota in it
    held: int      # what training's Workloads and Jobs hold or ask for in it

    def note(self, training: str, inference: str) -> str:
        return (f"kueue quota correction: {training} held {self.held} of its {self.nominal} {GPU_RESOURCE} "
                f"({self.flavor}), {self.lent} of them lent by {inference}: {self.gpus} given back to {inference}")


def nominal(cq: Json, flavor: str) -> int | None:
    """The queue's GPU nominalQuota in `flavor`, None where it has none."""
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for fl in group.get("flavors") or []:
            for res in fl.get("resources") or []:
                if fl.get("name") == flavor and res.get("name") == GPU_RESOURCE:
                    return int(quantity(res.get("nominalQuota", 0)))
    return None


def reserved(cq: Json, flavor: str) -> int:
    """The GPUs of `flavor` the queue's status says its Workloads hold (quota reserved, or in use): 0 without it."""
    status = cq.get("status") or {}
    return max((int(quantity(res.get("total", 0)))
                for key in ("flavorsReservation", "flavorsUsage") for fl in status.get(key) or []
                if fl.get("name") == flavor for res in fl.get("resources") or [] if res.get("name") == GPU_RESOURCE),
               default=0)


def lent(inference: Json, training: Json, flavor: str) -> int:
    """The GPUs of `flavor` gputide's moves lent to training, as both queues record them (0 when either says none)."""
    return max(min(loans(training).get(flavor, 0), -loans(inference).get(flavor, 0)), 0)


def worth_reading(inference: Json, training: Json) -> list[str]:
    """The flavors where a loan is out and training's status leaves part of its quota unreserved: the only ones that
    can have an excess (so the Workloads and Jobs are listed only then)."""
    return [fl for fl in quota_flavors(training, GPU_RESOURCE)
            if lent(inference, training, fl) and (nominal(training, fl) or 0) > reserved(training, fl)]


def _true(obj: Json, *kinds: str) -> bool:
    return any(c.get("type") in kinds and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def admitted_gpus(wl: Json) -> dict[str, int]:
    """The GPUs by flavor a Workload's admission holds ({} when it has none, or has finished): each pod set's
    `resourceUsage`, else its count times its template's GPUs."""
    admission = (wl.get("status") or {}).get("admission") or {}
    if not admission or _true(wl, "Finished"):
        return {}
    templates = {ps.get("name"): ps.get("template") or {} for ps in (wl.get("spec") or {}).get("podSets") or []}
    out: dict[str, int] = defaultdict(int)
    for ps in admission.get("podSetAssignments") or []:
        flavor = (ps.get("flavors") or {}).get(GPU_RESOURCE)
        if not flavor:
            continue
        usage = (ps.get("resourceUsage") or {}).get(GPU_RESOURCE)
        out[flavor] += int(quantity(usage)) if usage is not None else (
            int(ps.get("count") or 0) * pod_requests(templates.get(ps.get("name")) or {})[0])
    return dict(out)


def _owners(wl: Json) -> set[str]:
    meta = wl.get("metadata") or {}
    return {u for u in [(meta.get("labels") or {}).get(JOB_UID_LABEL),
                        *(ref.get("uid") for ref in meta.get("ownerReferences") or [])] if u}


def _asked_gpus(job: Json) -> int:
    """The GPUs the Job's own size asks for: 0 once gputide stopped it or it has finished."""
    if (job["metadata"].get("labels") or {}).get(SUSPENDED_LABEL) == "true" or _true(job, "Complete", "Failed"):
        return 0
    return workers_asked(job) * pod_requests((job.get("spec") or {}).get("template") or {})[0]


def held(training: str, flavors: list[str], workloads: Iterable[Json], jobs: Iterable[Json]) -> dict[str, int]:
    """The GPUs by flavor the ClusterQueue `training` must keep (the module docstring): its Workloads' admissions,
    plus what each of its queued Jobs asks for beyond its admission."""
    out = dict.fromkeys(flavors, 0)
    by_job: dict[str, list[tuple[str, dict[str, int]]]] = defaultdict(list)
    feeds: dict[tuple[str, str], set[str]] = defaultdict(set)   # (namespace, LocalQueue) -> ClusterQueues admitting
    for wl in workloads:
        cq = ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue") or ""
        gpus = admitted_gpus(wl)
        if cq == training:
            for fl, n in gpus.items():
                if fl in out:
                    out[fl] += n
        if cq:
            feeds[(wl["metadata"].get("namespace") or "", (wl.get("spec") or {}).get("queueName") or "")].add(cq)
            for uid in _owners(wl):
                by_job[uid].append((cq, gpus))
    for job in jobs:
        meta = job["metadata"]
        queue = (meta.get("labels") or {}).get(KUEUE_QUEUE_LABEL)
        admitted = by_job.get(meta.get("uid") or "", [])
        where = {cq for cq, _ in admitted} or feeds.get((meta.get("namespace") or "", queue or ""), {training})
        if not queue or training not in where:
            continue
        got: dict[str, int] = defaultdict(int)
        for fl, n in (item for cq, gpus in admitted if cq == training for item in gpus.items()):
            got[fl] += n
        waiting = max(_asked_gpus(job) - sum(got.values()), 0)
        for fl in [fl for fl in got if fl in out] if got else flavors:   # not admitted: in any flavor it may get
            out[fl] += waiting
    return out


@dataclass(frozen=True)
class Spare:
    """What the training queue holds in one flavor beyond its Jobs' needs (`spare`)."""

    held: int   # what its Workloads and Jobs hold or ask for (`held`): never taken
    keep: int   # that, or what its status says its Workloads reserve where more: kept now
    now: int    # its nominalQuota beyond `keep`: may go now
    most: int   # beyond `held` only: may go once Kueue's status no longer reserves it


def spare(training: Json, flavors: list[str], workloads: Iterable[Json], jobs: Iterable[Json]) -> dict[str, Spare]:
    """Per flavor, the quota the ClusterQueue `training` holds beyond what its Jobs need (the module docstring): what
    the check's `excess` takes the loan's part of, and the most an owed give-back (`KueueQuota._pay`) takes, whatever
    it owes, so that one another controller's check has given back in part (which knows nothing of the debt) is not
    given back twice. Where a loan and quota unused beside it were out before the shrink that owes (a correction
    still deferred, `Sightings`), the check's give-back and the payment together come to what they would have had
    the correction come before the shrink: nothing goes back twice, only the order differs."""
    need = held(training["metadata"]["name"], flavors, workloads, jobs)
    out = {}
    for fl in flavors:
        have, keep = nominal(training, fl) or 0, max(need[fl], reserved(training, fl))
        out[fl] = Spare(need[fl], keep, max(have - keep, 0), max(have - need[fl], 0))
    return out


def excess(inference: Json, training: Json, workloads: Iterable[Json], jobs: Iterable[Json]) -> list[Excess]:
    """The quota to give back to inference, one `Excess` per flavor that has some (the module docstring)."""
    flavors = worth_reading(inference, training)
    room = spare(training, flavors, workloads, jobs) if flavors else {}
    out = []
    for fl in flavors:
        loan = lent(inference, training, fl)
        if (gpus := min(loan, room[fl].now)) > 0:
            out.append(Excess(fl, gpus, loan, nominal(training, fl) or 0, room[fl].keep))
    return out


@dataclass(frozen=True)
class _Seen:
    since: float   # when the excess was first seen, on the consecutive checks that saw it since
    gpus: int      # the least of what they saw


class Sightings:
    """The excess of each (inference, training, flavor) seen at the last check: what `lasting` lets through is the
    excess seen on consecutive checks for at least `min_age_s` (the module docstring)."""

    def __init__(self, min_age_s: float = ACTION_DEADLINE_S) -> None:
        if not min_age_s >= 0:
            raise ValueError(f"min_age_s must be >= 0, got {min_age_s}")
        self.min_age_s = min_age_s
        self._seen: dict[tuple[str, str], dict[str, _Seen]] = {}

    def lasting(self, inference: Json, training: Json, found: list[Excess], now: float) -> list[Excess]:
        """Of `found` (this check's `excess` of the queues, [] when none), the part to give back now: per flavor, the
        least excess of the consecutive checks since it was first seen, once that is at least `min_age_s` before
        `now`; forgotten then (what is left counts as seen anew). The rest is remembered, its deferral logged; a
        flavor not in `found` is forgotten."""
        pair = (inference["metadata"]["name"], training["metadata"]["name"])
        before, kept, due = self._seen.pop(pair, {}), {}, []
        for cut in found:
            seen = before.get(cut.flavor)
            gpus = cut.gpus if seen is None else min(seen.gpus, cut.gpus)
            if seen is not None and now - seen.since >= self.min_age_s:
                due.append(replace(cut, gpus=gpus))
                continue
            kept[cut.flavor] = _Seen(now if seen is None else seen.since, gpus)
            log.info("kueue quota excess deferred: %s holds %d of its %d %s (%s), %d of them lent by %s: %d beyond "
                     "what its Jobs hold, seen for %.0fs; given back once seen on consecutive checks for %.0fs (a "
                     "grow's Job resize may be under way)", pair[1], cut.held, cut.nominal, GPU_RESOURCE,
                     cut.flavor, cut.lent, pair[0], gpus, now - kept[cut.flavor].since, self.min_age_s)
        if kept:
            self._seen[pair] = kept
        return due

    def forget(self) -> None:
        """Everything seen, at a new term as leader: the checks of a term ago were not consecutive with the next
        (none ran while another leader did, which may have given that loan back and lent anew for a grow whose
        resize is under way), so what they saw says nothing of how long an excess has lasted now."""
        self._seen.clear()
