"""Co-location QoS: protect inference latency on GPUs it shares with training, and give the room back later.

When a service's p99 latency passes `sloPressure` x its SLO, every elastic training job that has a worker on a
GPU also serving that service is shrunk by the number of such workers (never below its elastic minimum, never
a protected job). The original size is remembered in `ColocationState.shrunk`, with every pressured service the
job crowded; once each of those services' p99 has stayed under `sloSlack` x SLO for `slackReadings` consecutive
cycles the job is scaled back (once none of its workers runs on a hot node: the hotspot's give-back waits for that
too). State is immutable and passed in and out, like the hotspot streaks. The shrink is also recorded on the job
in the resize's own write (`balancer.colocation_record`: a Kubernetes Job's `gputide.io/colocation-shrunk`), and
`observe` adopts what the jobs record, so a restarted controller or a new leader still gives the workers back.

A job a hotspot shrank carries that shrink's record (`balancer.plan.shrink_records`: the workers it had before, on a
Kubernetes Job `gputide.io/shrunk` `{"from": N, "to": M}`), which is valid only while the job runs the "to" it
records. Co-location's shrink and give-back of such a job (`owed`) carry the record's "from"
(`ScaleTraining.shrunk_from`), so the same write moves its "to" to the job's new size: the record stays valid and the
hotspot planner still gives the job its N workers once its node is cool, after co-location has given its own back.
Without it the next read found the job resized by someone else, the record void, and the workers the hotspot took
were never given back.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from operator import attrgetter
from types import MappingProxyType

import numpy as np

from balancer.config import BalancerPolicy
from balancer.model import Action, ClusterSnapshot, ScaleTraining, WorkloadClass
from balancer.plan.columns import _CLASS_CODE, workload_columns
from balancer.plan.shrink_records import runnable
from balancer.plan.simulate import Projection

# between the services a shrink made room for, in its record's "service" (a service is named by its owner, a Kubernetes
# name: no comma in it)
SEPARATOR = ","

# how long a shrink just applied is kept though the reads do not show it yet (its job's pods still at the old size,
# its Job list without the record, or with an older void one): longer than the Kubernetes lists' cache (60 s) and
# a few cycles
FRESH_S = 300.0


@dataclass(frozen=True)
class ColocationState:
    slack_streak: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    # job -> (workers, services)
    shrunk: Mapping[str, tuple[int, str]] = field(default_factory=lambda: MappingProxyType({}))
    # jobs whose give-back was made, or taken over by the tide (`hand_over`): a record they still show (a read that
    # lags the write that removes it, or the tide's next resize) is not adopted again
    handed: frozenset[str] = frozenset()
    # job -> when its shrink was applied
    fresh: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))


def observe(snapshot: ClusterSnapshot, policy: BalancerPolicy, state: ColocationState) -> ColocationState:
    """The slack streaks with this snapshot's latencies, and the shrinks still owed. A shrink a job records that this
    memory lacks is adopted (a restarted controller's memory is empty). One is forgotten when its job is gone (no
    pod, placed or pending: it finished or was deleted: else its give-back would be proposed, and fail, every cycle
    for ever) and, while the job shows no valid record, when the job was resized by someone else (its record is void:
    the size is the operator's) or already has the workers it had before (grown back by the tide or by hand: else it
    is held "shrunk" with nothing owed; a record it still shows is then not adopted again). A shrink applied less
    than `FRESH_S` ago is not judged by a read that does not show it yet."""
    cp = policy.colocation
    # a p99 unknown (NaN: requests arrive, no latency series tells how long they waited) compares False: no slack,
    # the streak starts again; a service without serving series has none (unseen or gone: `_give_backs`)
    streak = {name: (state.slack_streak.get(name, 0) + 1 if s.p99_latency_s < cp.slo_slack * s.slo_latency_s else 0)
              for name, s in snapshot.services.items()}
    recorded, void = _records(snapshot)
    handed = state.handed & recorded.keys()
    fresh = {j: t for j, t in state.fresh.items() if snapshot.time - t < FRESH_S}
    shrunk = {**{j: v for j, v in recorded.items() if j not in handed}, **state.shrunk}
    for j, (before, svc) in state.shrunk.items():   # the record may know more: the job's pending workers
        if j in recorded and recorded[j][0] > before:
            shrunk[j] = (recorded[j][0], svc)
    # the owner index only when a shrink is held: built for nothing, it was the largest cost of a calm cycle
    gone = {j for j in shrunk if not snapshot.workloads_by_owner.get(j)}
    settled = {j for j, (before, _) in shrunk.items()
               if j not in fresh and _settled(snapshot, j, before, recorded, void)}
    state = replace(state, slack_streak=MappingProxyType(streak), shrunk=MappingProxyType(shrunk),
                    handed=handed | (settled & recorded.keys()), fresh=MappingProxyType(fresh))
    return _forget(state, gone | settled)


def _settled(s: ClusterSnapshot, job: str, before: int, recorded: Mapping[str, tuple[int, str]],
             void: set[str]) -> bool:
    """Whether a shrink of `job` (not fresh) is no longer co-location's to give back: its record is void, or the job
    has what it can run (`runnable`). A job whose valid record still shows is judged by its pods only once it cannot
    run `before` any more (a worker finished): until then pods that linger in their grace period could pass for it."""
    if job in void:
        return True
    cap = runnable(s, job, before)
    return len(s.workloads_by_owner.get(job, ())) >= cap and (job not in recorded or cap < before)


def _records(s: ClusterSnapshot) -> tuple[dict[str, tuple[int, str]], set[str]]:
    """({job: (workers before, service)} of the valid co-location records its pods carry, {jobs whose record is
    void}). Runs every cycle over every workload: C-level maps, Python only for the pods that carry one."""
    ws = s.workloads
    froms = np.fromiter(map(attrgetter("colocation_from"), ws), dtype=np.int64, count=len(ws))
    voids = np.fromiter(map(attrgetter("colocation_overridden"), ws), dtype=bool, count=len(ws))
    recorded = {ws[i].owner: (int(froms[i]), ws[i].colocation_service) for i in np.flatnonzero(froms > 0).tolist()}
    return recorded, {ws[i].owner for i in np.flatnonzero(voids).tolist()}


def _forget(state: ColocationState, jobs: set[str]) -> ColocationState:
    """`state` without its shrinks of `jobs` (gone, settled, or handed to the tide): no give-back of theirs follows."""
    if not jobs & state.shrunk.keys():
        return state
    return replace(state, shrunk=MappingProxyType({j: v for j, v in state.shrunk.items() if j not in jobs}))


def hand_over(state: ColocationState, jobs: set[str]) -> ColocationState:
    """`state` without its shrinks of `jobs`, whose give-back the tide took over (capacity mode sizes elastic
    training), and without adopting their records again: kept, it held the job "shrunk" for ever (no later
    co-location shrink of it). The record goes with the tide's next resize of the job (`colocation_record.after`)."""
    handed = jobs & state.shrunk.keys()
    return replace(_forget(state, handed), handed=state.handed | handed) if handed else state


def propose(snapshot: ClusterSnapshot, policy: BalancerPolicy, state: ColocationState, proj: Projection,
            owed: Mapping[str, int] = MappingProxyType({}), *, hot: frozenset[str] | None = None) -> list[Action]:
    """Shrinks for pressured services and give-backs for those with slack; `owed`: {job: workers before a hotspot
    shrink} still to give back, whose record each resize keeps (the module docstring). `hot`: every hot node, the one
    the taint leaves open too (`hotspot_detect.kept_open`, which `Projection.hot_nodes` leaves out: it is what the
    taint closes); None: `proj.hot_nodes`."""
    cp = policy.colocation
    if not cp.enabled or not snapshot.services:
        return []
    # an unknown p99 (NaN) compares False: no pressure either, no shrink decided on a latency nobody measured
    pressured = {n for n, st in snapshot.services.items() if st.p99_latency_s > cp.slo_pressure * st.slo_latency_s}
    actions = _shrinks(snapshot, policy, state, proj, pressured, owed) if pressured else []
    return actions + _give_backs(snapshot, policy, state, proj, owed, proj.hot_nodes if hot is None else hot)


def _crowding(s: ClusterSnapshot, policy: BalancerPolicy, pressured: set[str]) -> dict[str, list[str]]:
    """{training job: the pressured services it shares a GPU with, once per worker and service} (protected jobs and
    namespaces left out). Over the columns of every (workload, GPU) pair: Python only for the pressured services'
    GPUs and the training workers on them."""
    c = workload_columns(s)
    pair = np.repeat(np.arange(len(c.names)), c.counts)   # the workload of each (workload, placed GPU) pair
    code = c.cls[pair]
    serving = (code == _CLASS_CODE[WorkloadClass.INFERENCE]) & np.fromiter(
        map(pressured.__contains__, c.owners), dtype=bool, count=len(c.owners))[pair]
    gpu_services: dict[int, set[str]] = {}
    for w, g in zip(pair[serving].tolist(), c.idx[serving].tolist(), strict=True):
        gpu_services.setdefault(g, set()).add(c.owners[w])
    crowded = (code == _CLASS_CODE[WorkloadClass.TRAINING]) & np.isin(c.idx, list(gpu_services))
    start = np.cumsum(c.counts) - c.counts   # each workload's first pair
    shared: dict[str, list[str]] = {}
    for k in np.unique(pair[crowded]).tolist():
        w = s.workloads[k]
        if w.protected or w.namespace in policy.safety.protected_namespaces:
            continue
        gpus = c.idx[start[k]:start[k] + c.counts[k]].tolist()
        shared.setdefault(w.owner, []).extend(sorted(set().union(*(gpu_services.get(g, set()) for g in gpus))))
    return shared


def _shrinks(s: ClusterSnapshot, policy: BalancerPolicy, state: ColocationState, proj: Projection,
             pressured: set[str], owed: Mapping[str, int]) -> list[Action]:
    """Each crowding job shrunk by a worker per service it crowds, down to its elastic minimum."""
    actions: list[Action] = []
    for job, services in sorted(_crowding(s, policy, pressured).items()):
        members = [w for w in s.workloads_by_owner.get(job, ()) if w.name in s.placements]
        if not any(w.elastic_max > 0 for w in members):
            continue   # not elastic: it runs the size its owner set, or stops
        now = proj.workers.get(job, len(members))
        floor = max(max((w.elastic_min for w in members), default=0), 1)   # never a stop: nothing would resume it
        new = max(now - len(services), floor)
        if new < now and job not in state.shrunk:
            names = sorted(set(services))   # all of them recorded: the give-back waits for each one's slack
            st = s.services[names[0]]
            actions.append(ScaleTraining(
                job=job, workers=new, previous_workers=now, cause="colocation_slo", shrunk_from=owed.get(job),
                service=SEPARATOR.join(names),
                reason=f"{names[0]} p99 {st.p99_latency_s * 1000:.0f} ms near SLO {st.slo_latency_s * 1000:.0f} ms "
                       "on GPUs shared with this job" + (f" (also {', '.join(names[1:])})" if len(names) > 1 else "")))
    return actions


def _give_backs(s: ClusterSnapshot, policy: BalancerPolicy, state: ColocationState, proj: Projection,
                owed: Mapping[str, int], hot: frozenset[str] | set[str]) -> list[Action]:
    """Shrunk jobs scaled back once each service the shrink made room for has had `slackReadings` cycles of slack (or
    is gone: given back on the first one's slack alone, a job shrunk for two was grown back next to the other, still
    under pressure, and shrunk again the next cycle, over and over) and none of their workers runs on a hot node
    (`hot`, kept open too): as a hotspot's own give-back waits for its job's GPUs to cool, so does co-location's,
    which would otherwise also hand back, while the node is still hot, the workers a hotspot took from the job after
    co-location's shrink. The shrink stays held (and recorded) meanwhile. A service is gone only once no pod of it is
    left (`_gone`): one whose serving series vanished while its pods run is unseen, and holds the shrink (`notes`);
    so does one whose demand is unknown (`ClusterSnapshot.demand_unknown`), pods or none: it has no slack streak (not
    in `services`) and is never gone."""
    actions: list[Action] = []
    for job, (workers, svc) in sorted(state.shrunk.items()):
        if hot and _on_nodes(s, job, hot):
            continue
        names = svc.split(SEPARATOR)
        gone = [n for n in names if _gone(s, n)]
        slack = [n for n in names if state.slack_streak.get(n, 0) >= policy.colocation.slack_readings]
        if len(gone) + len(slack) == len(names):   # disjoint: a streak is kept only for a service with series
            now, workers = proj.workers.get(job, 0), runnable(s, job, workers)
            if now < workers:
                why = (f"{SEPARATOR.join(slack)} has latency slack again" if slack else "") + (
                    f"{' and ' if slack else ''}{', '.join(gone)} is gone (no pod left)" if gone else "")
                actions.append(ScaleTraining(job=job, workers=workers, previous_workers=now, cause="colocation_slack",
                                             shrunk_from=owed.get(job), reason=f"{why}: give the workers back"))
    return actions


def _gone(s: ClusterSnapshot, service: str) -> bool:
    """Whether `service` is gone: no serving series and no pod of it (placed or pending). Its series alone missing
    (a scrape down, a rule broken) leave it unseen, not gone: giving its shrink back would put training onto the GPUs
    of a service last seen under pressure. Nor is one whose demand is unknown (`demand_unknown`: its series are there,
    NaN), whether or not its pods are read: a stalled vLLM is not a service gone."""
    return service not in s.services and service not in s.demand_unknown and not s.workloads_by_owner.get(service)


def notes(snapshot: ClusterSnapshot, policy: BalancerPolicy, state: ColocationState) -> tuple[str, ...]:
    """Why co-location reads no latency where it would: a service it holds a shrink for is unseen (no serving series
    while its pods run) or its demand is unknown (`demand_unknown`: held, `_give_backs`), or a service's
    p99 is unknown while requests arrive (NaN: neither pressure nor slack). One line each, without readings in them
    (but the pod counts a demand is unknown by): the loop logs a note once while it lasts."""
    if not policy.colocation.enabled:
        return ()
    held: dict[str, list[str]] = {}
    for job, (_, svc) in sorted(state.shrunk.items()):
        for n in svc.split(SEPARATOR):
            held.setdefault(n, []).append(job)
    out = [f"co-location keeps {', '.join(jobs)} shrunk: {n} has no serving series while its pods run (unseen, not "
           "gone): no give-back until its series return or its pods are gone"
           for n, jobs in sorted(held.items()) if n not in snapshot.services and n not in snapshot.demand_unknown
           and snapshot.workloads_by_owner.get(n)]
    out += [f"co-location keeps {', '.join(held[n])} shrunk: {n}'s demand is unknown ({why}): no give-back until it "
            "is known again and has latency slack" for n, why in sorted(snapshot.demand_unknown.items()) if n in held]
    out += [f"co-location: {n}'s p99 latency is unknown while requests arrive (no latency series, or NaN): neither "
            "pressure nor slack is read from it" + (f"; {', '.join(held[n])} kept shrunk" if n in held else "")
            for n, st in sorted(snapshot.services.items()) if math.isnan(st.p99_latency_s)]
    return tuple(out)


def _on_nodes(s: ClusterSnapshot, job: str, nodes: set[str] | frozenset[str]) -> bool:
    """Whether a placed worker of `job` runs on one of `nodes`."""
    return any(s.gpus[g].node in nodes for w in s.workloads_by_owner.get(job, ()) for g in s.placements.get(w.name, ()))


def acknowledge(state: ColocationState, action: ScaleTraining, now: float) -> ColocationState:
    """Remember a shrink once it was applied at `now` (fresh: see `observe`), or forget it once its workers are back
    (and do not adopt its record again from a read that still shows it)."""
    shrunk, handed, fresh = dict(state.shrunk), state.handed, dict(state.fresh)
    if action.workers < action.previous_workers and action.job not in shrunk:
        shrunk[action.job] = (action.previous_workers, action.service)
        handed = handed - {action.job}   # a shrink of its own again: its new record is adopted
        fresh[action.job] = now
    elif action.job in shrunk and (action.cause == "colocation_slack" or action.workers >= shrunk[action.job][0]):
        del shrunk[action.job]
        handed = handed | {action.job}
        fresh.pop(action.job, None)
    return replace(state, shrunk=MappingProxyType(shrunk), handed=handed, fresh=MappingProxyType(fresh))
