"""Tidal capacity shifting: loan inference GPUs to training at the ebb, reclaim them ahead of the flood.

Inference is sized for its daily peak, so most of the day part of its GPUs idle while training queues. From the
demand forecast of each service this planner decides, every cycle, how many replicas each service needs and
moves the rest of the GPUs to elastic training:

* **Reclaim ahead of the rise.** A service's replica floor covers the forecast quantile (p90 by default) over
  ``[now, now + warm-up + margin]``, so a replica started now is warm before the demand it is for arrives: the
  scale-up happens at least the warm-up lead time ahead of the rise. It also covers the demand observed now
  (a burst the forecast missed), so the predictive floor never sits below what a reactive HPA would ask for.
* **Loan only what stays idle.** A service gives replicas away only when the forecast over the whole loan horizon
  (default 2 h) leaves them idle: a loan that would be reclaimed minutes later costs a training restart and buys
  nothing. A loan is of replicas that hold GPUs: replicas asked but pending hold none, so they count neither towards
  its dead band nor in the GPU-hours it gives training (counted, a scale-down of pending replicas alone passed for a
  loan that freed no GPU). Pending replicas are never dropped on their own: gputide asks only for replicas it frees
  GPUs for, so those still pending a hold after its last change are an HPA's or an operator's ask, or wait on a
  placement it cannot see, and it cannot tell which. Dropped, an HPA's stayed (gputide writes only its minReplicas,
  which the drop raised past the operator's), the drop claimed their GPU-hours every hold, the idle GPUs they waited
  for went to training, and one below what the keep rule keeps was asked back within the horizon. They are held (no
  GPU freed for them, idle GPUs kept for them a warm-up); a reclaim frees GPUs only for the replicas demand needs
  beyond those holding GPUs (freed for every ask, a rise of one replica shrank training by all of them); a loan drops
  them with the replicas it sheds (a Deployment deletes pending pods first). Under an HPA a loan lowers only its
  minReplicas, and the HPA keeps what its own metrics ask for (`ServiceView.hpa_wants`): the loan frees, counts and
  lends only the replicas above both (counted from the new floor, training was grown onto GPUs the HPA kept, its
  workers pending, and the gain over-stated). A loan's reason names what set its
  target: the loan quantile, the keep quantile (with the reclaim headroom, or the burst floor), the demand now, the
  reclaim quantile, or the cap (where it cut a need, though another ties it).
* **Burst floor learned from the past.** The forecast misses bursts (a client's batch job, a retry storm): a
  service never sits below the demand now times ``1 + burst``, where ``burst`` is the largest relative rise the
  demand made within one warm-up lead over the trailing window (`rise_allowance`; with n exchangeable past
  rises the largest covers the next one with probability n/(n+1), a conformal bound). Replicas sized so can
  absorb any rise seen recently while new ones warm up. And it never loans while demand is rising.
* **Surge response.** A rise the forecast did not foresee (demand above the forecast median for now) whose latest
  one-cycle slope, projected over the reclaim lead (warm-up + margin, the lead forecast reclaims keep: a replica
  ordered now serves only after the actuation and the warm-up), goes past the burst floor is sized for that
  projection at once (`surge_rps`), not one cycle's growth at a time while each step warms up; capped like the
  ramp. Projected over the warm-up alone, each order was ready just as the demand it was sized for arrived, so
  the replicas ran at the edge of the SLO for the whole surge.
* **Reactive safety net.** When a service's p99 latency reaches ``emergency_pressure`` of its SLO (replicas
  slower than their profile says, or a burst beyond every bound), it grows by ``emergency_step`` at once, like
  an HPA under the predictive floor. A step not honoured (after the warm-up the service still holds the replicas it
  held then: capped by its HPA's maxReplicas, or pending) is not repeated until its replicas change, or for
  ``emergency_retry_s`` (`CapacityState.emergency`): each repeat shrank training for replicas that never came, and
  the next cycle lent the GPUs back.
* **Trust the forecast, check it against the present.** When demand runs above the forecast median for now,
  the whole forecast is scaled up by that ratio (a level correction).
* **A loan keeps what its reclaim would take back.** The service loans only what the reclaim rule would leave idle
  over the whole loan horizon if demand followed the keep quantile (default the p90): that quantile with the reclaim
  headroom, and the burst floor on it. A loan sized by today's floor alone was reclaimed as soon as demand rose along
  its forecast, since the floor scales with the demand (and one sized by the loan quantile, by a reclaim quantile
  set above it): capacity flapped, and every reclaim is a warm-up in which only the replicas already ready serve a
  rise the forecast missed. This holds whether or not the job loses work on a shrink: a job that checkpoints on
  SIGTERM loses no rollback to the reclaim, but the service is as exposed while it warms up (measured: checkpointed
  m-small lent one replica a pool more at night without it, and two unforecast night spikes then cost 3.6x static's
  SLO-violating requests). A job that does lose work since its checkpoint (on all its GPUs) is grown only when the
  loan adds more than the rollback (`grow_gain`): right after its checkpoint, not before.
* **Reclaims land on checkpoints.** When the job a reclaim would shrink first has just checkpointed (within a tenth
  of its checkpoint period, learned from the checkpoint times it reports: `checkpoint_periods`), the service takes
  now what the reclaim quantile needs until that job's next checkpoint and the reclaim lead after it
  (`checkpoint_reclaim_s`): taken later, the same GPUs would roll the whole job back to this checkpoint, on all its
  GPUs; taken now they cost only their own time until the demand comes. As far as the forecast reaches, and the
  reason says where it stopped short (`reclaim_window`): a job's checkpoint period is learned, bounded by nothing.
* **Hysteresis.** Scale-downs must shed at least a dead band of replicas and wait a minimum hold time after the
  service's last change; scale-ups are never delayed (the SLO comes first). Oscillating demand therefore holds
  the replicas its peaks need instead of flapping. The memory is the leader's process's own: after a restart or a
  change of leader a service's last change is unknown, so it counts as changed when the new state first sees it
  (no loan before the hold has passed from then), and demand is calm only once two readings give a slope. A loan the
  hand-over held back (the safety ledger unsaved: `planner.hold_back`) is such a sighting too, its last change left
  as before: no loan until the ledger is saved, while the latency net steps as if it was never planned (it was never
  sent; counted as the last change, it blocked the step for a warm-up).
* **Cheapest preemption.** GPUs a scale-up needs come first from idle GPUs of the service's allowed models,
  then from elastic training ranked by preemption cost: lowest priority first, then least work lost since the
  last checkpoint (a resize restarts the job from its checkpoint), then a job resized in place before one that
  restarts whole. Jobs shrink to their elastic minimum before any job is suspended.
* **Loaned GPUs go to training.** Idle GPUs left after inference's claims grow elastic jobs (highest priority
  first, in-place resizes before whole restarts) up to their elastic maximum. Not those a service on hold has
  replicas pending beside (one per pending replica's GPU), for a warm-up from when it was first seen so
  (`CapacityState.pending_since`; the placements lag a scale-up); pending longer, the replicas wait for something
  else and the GPUs are lent. A service whose replicas hold GPUs of a model its profile leaves out lends nothing
  (a note names it): the loan would give those GPUs back and no reclaim could take them again.
* **A resize that restarts the whole job is priced so.** A Job queued through Kueue and not elastic there
  (`JobView.restarts_on_resize`: no `kueue.x-k8s.io/elastic-job` annotation) is suspended, re-queued and re-admitted
  by Kueue whenever its size changes, every pod restarting from the last checkpoint. A shrink already costs the
  whole job's work since its checkpoint; a grow of such a job costs it too, so it is proposed only when the
  GPU-hours it adds over the loan horizon exceed that loss, and its expected gain is net of it.

Everything here is pure: `plan_capacity(view, forecasts, policy, state)` returns the actions, the capacity split
and the per-service GPU targets (for the `gputide_capacity_gpus{class}` and `gputide_capacity_target_gpus{service}`
gauges) and the next hysteresis state. `balancer.plan.capacity.view_from_snapshot` derives the view from a
`ClusterSnapshot`. The GPU moves the replica targets imply (cheapest preemption, loans to training, restart
pricing) are worked out by `balancer.plan.capacity_pools.apply_targets`, shared with the baselines and re-exported
here.

Expected gains, in one unit per action type: a scale-up's gain is the SLO-safe capacity (req/s) it adds,
``(target - replicas) x rps_per_replica`` (never zero, so the safety guard's minimum gain cannot veto the
headroom a reclaim is for); a loan's gain, and a training growth's, is the A100-equivalent GPU-hours it
gives training over the loan horizon (a loan's: of the replicas it sheds that hold GPUs); a training shrink carries
the gain of the scale-up it makes room for.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType

import numpy as np

from balancer.actions import Action, ScaleInference
from balancer.model import Forecast
from balancer.plan.capacity import (
    CapacityDecision,
    CapacityPolicy,
    CapacityState,
    CapacityView,
    JobView,
    ServiceCapacity,
    ServiceView,
)
from balancer.plan.capacity_pools import (  # noqa: F401  (Pools, grow_gain: re-exported)
    Pools,
    apply_targets,
    capacity_split,
    foreign_models,
    grow_gain,
    shrink_order,
)


def replicas_for(rps: float, profile: ServiceCapacity, headroom: float) -> int:
    need = math.ceil(max(rps, 0.0) * (1.0 + headroom) / profile.rps_per_replica - 1e-9)
    return int(min(max(need, profile.min_replicas), profile.max_replicas))


def forecast_peak(fc: Forecast, quantile: float, now: float, horizon_s: float) -> float:
    """Largest forecast `quantile` (nearest available) over [now, now + horizon_s]."""
    q = min(fc.quantiles, key=lambda k: abs(k - quantile))
    start = max(now - fc.issued_at, 0.0)
    return fc.window_max(q, start, start + horizon_s)


def readable_forecasts(forecasts: Mapping[str, Forecast],
                       view: CapacityView | None = None) -> tuple[dict[str, Forecast], list[str]]:
    """The forecasts the planner can read, and a note for each service whose forecast it cannot (`why_unreadable`):
    a model fit gone wrong in an injected forecaster (the built-in ones fall back to persistence first, and clip at
    0: `balancer.forecast.base.Fallback`, `QuantileForecast.to_model`). Read, a NaN raised out of `replicas_for` and
    ended the cycle, hotspot relief with it. Left out, its service plans as one without a forecast (hold, or follow
    current demand up), as every service does when the forecaster raises (`Reconciler._forecast`, which leaves out
    the same ones before the plan and the forecast gauges). With `view`, a forecast of one of its services that
    asks for more replicas than the whole fleet could hold (`beyond_fleet`) is left out too."""
    profiles = {s.profile.name: s.profile for s in view.services} if view is not None else {}
    why = {name: why_unreadable(fc) or beyond_fleet(fc, profiles.get(name), view) for name, fc in forecasts.items()}
    return ({n: fc for n, fc in forecasts.items() if not why[n]},
            [f"{n}: planned without its forecast (hold, or follow current demand up): {w}"
             for n, w in sorted(why.items()) if w])


def why_unreadable(fc: Forecast) -> str:
    """Why `fc` cannot be read ('' when it can): a NaN or infinite issue time, step or value, a step that is no
    time, or a negative value (demand is never below 0: a -30 planned as 0 and lent the service's GPUs). It names
    only what is wrong, so the note stays the same from cycle to cycle (logged once while it lasts)."""
    if not math.isfinite(fc.issued_at):
        return f"issued at {fc.issued_at}"
    if not (math.isfinite(fc.step_s) and fc.step_s > 0):
        return f"a step of {fc.step_s} s"
    bad = sorted(q for q, a in fc.quantiles.items() if not np.isfinite(a).all())
    if bad:
        return f"NaN or infinite values in its quantile(s) {', '.join(f'{q:g}' for q in bad)}"
    low = sorted(q for q, a in fc.quantiles.items() if (np.asarray(a) < 0).any())
    return f"negative values in its quantile(s) {', '.join(f'{q:g}' for q in low)}" if low else ""


def beyond_fleet(fc: Forecast, profile: ServiceCapacity | None, view: CapacityView | None) -> str:
    """Why `fc` asks for more than any plan could read as demand ('' when it does not): its highest value needs
    more replicas than the whole fleet could hold at the finest GPU share a pod takes (1 milli-GPU each: 1000 per
    GPU), a bound that moves with the fleet, no tuned constant. Below it a forecast is read, one beyond the fleet
    included (a real surge: the planner reclaims what it can, `max_replicas` the cap). Above it, it is no demand
    forecast (a finite 1e308 targeted 1,000,000 replicas and scaled training to 0, auditor a7; near the float limit
    `replicas_for` overflowed). Only the planner knows a service's profile: the forecast gauges still show it."""
    if profile is None or view is None or not fc.quantiles:
        return ""
    peak = max((float(np.max(a)) for a in fc.quantiles.values() if np.size(a)), default=0.0)
    most = 1000 * max(view.total_gpus, 1)
    if peak <= most * profile.rps_per_replica:
        return ""
    return (f"its peak needs more replicas than the whole fleet ({view.total_gpus} GPUs) could hold at 1 milli-GPU "
            f"each ({most}, at {profile.rps_per_replica:g} req/s each)")   # no value: the note stays as it lasts


def median_now(fc: Forecast | None, now: float) -> float:
    """The forecast median (nearest quantile) for `now`; 0 without a forecast."""
    if fc is None or fc.horizon == 0:
        return 0.0
    q = min(fc.quantiles, key=lambda k: abs(k - 0.5))
    start = max(now - fc.issued_at, 0.0)
    return fc.window_max(q, start, start)


def level_correction(fc: Forecast, now: float, demand_rps: float, cap: float) -> float:
    """How far demand now runs above the forecast median for now (1 when it does not), at most `cap`."""
    median = median_now(fc, now)
    if median <= 0:
        return 1.0 if demand_rps <= 0 else cap
    return float(min(max(demand_rps / median, 1.0), cap))


def reclaim_horizon_s(profile: ServiceCapacity, policy: CapacityPolicy) -> float:
    return profile.warmup_s + policy.reclaim_margin_s


def rise_allowance(times: np.ndarray, values: np.ndarray, lead_s: float, cap: float = 3.0) -> float:
    """The largest relative rise of demand within `lead_s` after any observed moment: ``max over i of
    (max y over (t_i, t_i + lead_s]) / y_i - 1``, at least 0 and at most `cap`.

    Rises are relative to a level floored at 5% of the mean demand (as conformal residuals are), so a quiet
    night's 2 -> 4 req/s is not read as a 100% burst. Vectorised over the samples: one shifted maximum per
    sample offset inside the lead."""
    t = np.asarray(times, dtype=float)
    y = np.asarray(values, dtype=float)
    ok = np.isfinite(t) & np.isfinite(y)
    t, y = t[ok], y[ok]
    if y.size < 2:
        return 0.0
    base = np.maximum(y, max(0.05 * float(np.mean(np.abs(y))), 1e-9))
    ahead = np.full(y.size, -np.inf)
    for k in range(1, y.size):
        within = t[k:] - t[:-k] <= lead_s + 1e-9
        if not within.any():
            break
        ahead[:-k] = np.where(within, np.maximum(ahead[:-k], y[k:]), ahead[:-k])
    rise = (ahead - y) / base
    rise = rise[np.isfinite(rise)]
    return float(min(max(rise.max(initial=0.0), 0.0), cap))


def surge_rps(demand_rps: float, slope: float, lead_s: float, burst: float, cap: float,
              expected_rps: float = 0.0) -> float:
    """The demand a surge reaches by the time a replica started now is warm: the latest slope (req/s per
    second, one cycle's) projected over the lead `lead_s` (the reclaim lead), when that goes past the burst floor
    ``demand x (1 + burst)``, at most `cap` x the demand now; 0 when it does not (flat, falling, a rise the
    burst floor already covers, or demand not above `expected_rps`, the forecast median for now: a rise the
    forecast foresaw is reclaimed ahead of time and holds through the loan horizon's hysteresis, and a
    projection of it would only flap). Without it a steep unforeseen rise is followed one cycle's growth at a
    time, each step a warm-up late."""
    projected = demand_rps + max(slope, 0.0) * lead_s
    if demand_rps <= expected_rps or projected <= demand_rps * (1.0 + burst):
        return 0.0
    return float(min(projected, demand_rps * cap))


def checkpoint_periods(view: CapacityView, known: Mapping[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    """Each job's last checkpoint (time) and the period between its last two, learned from the work since its
    checkpoint it reports cycle by cycle: a checkpoint is seen when that time moves forward by more than a minute
    (a cycle's jitter is not a checkpoint). A job that loses nothing on a resize (0 since its checkpoint: it saves
    on SIGTERM, or nothing is known) is not tracked."""
    out: dict[str, tuple[float, float]] = {}
    for j in view.jobs:
        # 0 is a checkpoint this instant for a job tracked already (one that saves on SIGTERM always shows 0)
        if not (0.0 < j.since_checkpoint_s < math.inf or (j.since_checkpoint_s == 0.0 and j.name in known)):
            continue
        at = view.time - j.since_checkpoint_s
        last, period = known.get(j.name, (at, 0.0))
        out[j.name] = (at, at - last) if at - last > 60.0 else (last, period)
    return out


def checkpoint_reclaim_s(view: CapacityView, models: frozenset[str] | None,
                         periods: Mapping[str, tuple[float, float]]) -> float:
    """How long a reclaim of GPUs of `models` made now costs no rollback: the time until the next checkpoint of the
    job a reclaim would shrink first (`Pools.shrink_for`'s order), when that job has just checkpointed (within a
    tenth of its learned period); 0 otherwise. A reclaim the forecast puts within that time is cheaper made now,
    at the cost of the reclaimed GPUs' time until the demand comes, than later, at the cost of the whole job's
    work since this checkpoint."""
    def usable(j: JobView) -> int:
        return sum(n for m, n in j.gpus_by_model.items() if models is None or m in models)

    ranked = [j for j in shrink_order(view.jobs, usable) if j.workers > j.elastic_min]
    if not ranked:
        return 0.0
    first = ranked[0]
    period = periods.get(first.name, (0.0, 0.0))[1]
    if period <= 0 or not 0.0 < first.since_checkpoint_s <= 0.1 * period:
        return 0.0
    return period - first.since_checkpoint_s


def forecast_reach_s(fc: Forecast, now: float) -> float:
    """How far past `now` the forecast reaches: its last step's time less now (negative once it has run out), by its
    shortest quantile: `horizon` is the first quantile's length, and `forecast_peak` reads the quantile nearest the one
    asked, which an injected forecaster may give fewer steps (the built-in ones give every quantile as many)."""
    steps = min((len(a) for a in fc.quantiles.values()), default=0)
    return fc.issued_at + steps * fc.step_s - now


def reclaim_window(lead_s: float, wait_s: float, fc: Forecast, now: float) -> tuple[float, float]:
    """The window a reclaim reads the forecast over, and the window it wanted when that was longer (0 when not): the
    reclaim lead, and `wait_s` more (`checkpoint_reclaim_s`) cut where the forecast ends. The lead is never cut: the
    controller forecasts far enough for it (`gputide run` sizes the forecast for every service's lead). The wait is a
    job's time to its next checkpoint, learned at run time from the checkpoints it reports and bounded by nothing (a
    job that checkpoints every 6 h, or one suspended for hours between two), so no forecast sized at start covers it
    all. Past the forecast's end nothing is known; the cut is the safe side for inference, since what lies there
    enters the forecast on a later cycle and is reclaimed then, the lead ahead as every reclaim is; what the cut
    can cost is the job's rollback, if that later reclaim shrinks it before its next checkpoint. Read past the end,
    the peak was the forecast's own over its reach all the same, but the reason named the whole wait ("within
    194 min" of a 140-minute forecast), which no forecast had looked at."""
    wanted = lead_s + wait_s
    window = max(lead_s, min(wanted, forecast_reach_s(fc, now)))
    return window, (wanted if window < wanted else 0.0)


def reclaim_reason(policy: CapacityPolicy, peak: float, need: int, window: float, lead: float, wanted: float) -> str:
    """A forecast reclaim's reason: the reclaim quantile's peak over `window` and the replicas it needs; where the
    window runs past the lead, that the job it shrinks has just checkpointed, and, where the forecast ended before
    that job's next checkpoint and the lead after it (`wanted`, `reclaim_window`), that the window stops there."""
    why = (f"reclaim ahead of the rise: p{round(policy.reclaim_quantile * 100)} demand {peak:.0f} req/s within "
           f"{window / 60:.0f} min needs {need} replicas")
    if wanted:
        return why + (f" (the job it shrinks has just checkpointed; its next checkpoint and the lead after it are "
                      f"{math.ceil(wanted / 60 - 1e-9)} min away, past the forecast's end: beyond it the forecast is "
                      "read on later cycles)")
    return why + (" (the job it shrinks has just checkpointed)" if window > lead else "")


def emergency_step(s: ServiceView, policy: CapacityPolicy, unhonoured: Mapping[str, int],
                   settled: bool) -> tuple[int, list[str]]:
    """The latency net's replica floor for `s` (0 when it does not step) and a note when a step is held back. Under
    pressure, once its last change has taken effect (`settled`), the service grows by `emergency_step` of its replicas
    (at least one), unless its last step is not honoured yet (`unhonoured`, `CapacityState.emergency`: it still holds
    the replicas it held then, for `emergency_retry_s` at most): asked again, the step shrank training once more for
    replicas that never came (capped by the HPA's maxReplicas, or pending), and the next cycle, holding, lent the GPUs
    back."""
    p = s.profile
    if not (s.latency_pressure >= policy.emergency_pressure and settled):   # NaN (unknown) is no pressure
        return 0, []
    if unhonoured.get(p.name) == s.replicas:
        return 0, [f"{p.name}: p99 at {s.latency_pressure:.0%} of its SLO, but its last emergency step was not "
                   f"honoured (still {s.replicas} replicas: capped by its HPA's maxReplicas, or pending): not "
                   f"repeated until its replicas change, or {policy.emergency_retry_s:.0f} s after the step"]
    return min(s.replicas + max(1, math.ceil(policy.emergency_step * s.replicas)), p.max_replicas), []


def keep_terms(s: ServiceView, policy: CapacityPolicy, *, loan: tuple[int, float],
               keep: tuple[int, int, float]) -> list[tuple[int, str]]:
    """The needs the keep rule takes the largest of (`plan_capacity`), each with what a loan's reason says when it
    sets the target: the loan quantile (`loan`: replicas, peak req/s) and the keep quantile with the reclaim headroom
    or with the burst floor (`keep`: the two replicas, peak req/s)."""
    hours = policy.loan_horizon_s / 3600
    kept = f"keeps what p{round(policy.keep_quantile * 100)} demand ({keep[2]:.0f} req/s within {hours:.1f} h) needs"
    return [(loan[0], f"p{round(policy.quantile * 100)} demand stays below {loan[1]:.0f} req/s for {hours:.1f} h"),
            (keep[0], f"{kept} with the reclaim headroom"), (keep[1], f"{kept} with its {s.burst:.0%} burst floor")]


def up_terms(s: ServiceView, policy: CapacityPolicy, *, now: int,
             lead: tuple[int, float, float]) -> list[tuple[int, str]]:
    """The needs the reclaim rule takes the largest of, as `keep_terms`: the demand now with its burst floor (`now`)
    and the reclaim quantile over the reclaim lead (`lead`: replicas, peak req/s, window s). Loans are made calm (no
    rise, no latency pressure): the demand now's need is its burst floor alone (no ramp, surge or step)."""
    return [(now, f"keeps what demand now ({s.demand_rps:.0f} req/s) needs with its {s.burst:.0%} burst floor"),
            (lead[0], f"keeps what p{round(policy.reclaim_quantile * 100)} demand ({lead[1]:.0f} req/s within "
                      f"{lead[2] / 60:.0f} min) needs")]


def top(terms: Sequence[tuple[int, str]]) -> tuple[int, str]:
    """The largest need of `terms` with its label (the first of equals)."""
    return max(terms, key=lambda t: t[0])


def loan_basis(s: ServiceView, policy: CapacityPolicy, down: int, cap: int, *, keep: tuple[int, str],
               up: tuple[int, str]) -> str:
    """What set a loan's target `down`, for its reason: a loan sheds a replica at least, so `down` is the keep rule's
    need at most `cap` (`keep`: `top` of `keep_terms`) or the reclaim rule's (`up`: `top` of `up_terms`, at most
    `cap`) when larger; the label of the one it is, or the cap's when `down` is the cap and the cap cut a need (the
    needs passed as before capping): there the cap set it, though another need ties it (the loan quantile at the cap
    was named where the reclaim quantile, cut, would keep more)."""
    if down != cap or max(keep[0], up[0]) <= cap:   # at the cap, a need the cap cut set it, whichever ties
        return keep[1] if min(keep[0], cap) == down else up[1]
    p = s.profile
    return (f"keeps its cap, {cap} replicas (home allotment {p.home_replicas} with the {policy.home_margin:.0%} "
            "margin, or what demand now needs)" if p.home_replicas else f"keeps its maxReplicas, {cap}")


def pending_beside_idle(view: CapacityView, state: CapacityState) -> dict[str, float]:
    """Per service with replicas asked but not placed while GPUs of its allowed models sit idle: since when
    (`CapacityState.pending_since`; now when first seen so)."""
    return {s.profile.name: state.pending_since.get(s.profile.name, view.time) for s in view.services
            if s.asked > s.replicas
            and any(n > 0 and (s.profile.models is None or m in s.profile.models) for m, n in view.free.items())}


def next_unhonoured(view: CapacityView, state: CapacityState, stepped: set[str],
                    actions: Sequence[Action], served: set[str], retry_s: float) -> dict[str, int]:
    """`CapacityState.emergency` for the next cycle: the services whose emergency step this cycle went out (a scale,
    or GPUs freed for replicas already asked: `served`), with the replicas they hold now, and those whose earlier
    step still is not honoured (the same replicas), for `retry_s` after it (its time: the service's last change)."""
    replicas = {s.profile.name: s.replicas for s in view.services}
    out = {n: r for n, r in state.emergency.items()
           if replicas.get(n) == r and view.time - state.last_change.get(n, -math.inf) < retry_s}
    out.update({a.service: replicas[a.service] for a in actions
                if isinstance(a, ScaleInference) and a.service in stepped})
    out.update({n: replicas[n] for n in served})
    return out


def plan_capacity(
    view: CapacityView, forecasts: Mapping[str, Forecast], policy: CapacityPolicy, state: CapacityState
) -> CapacityDecision:
    """Replica floors from the forecast, with hysteresis on the way down, then the GPU moves they imply."""
    new: dict[str, int] = {}
    reasons: dict[str, str] = {}
    gains: dict[str, float] = {}
    holding: set[str] = set()  # services that keep what they asked for: no GPU freed for their pending replicas
    needs: dict[str, int] = {}  # per service, the replicas GPUs are freed for: asks beyond are held, as on hold
    stepped: set[str] = set()  # services the latency net grows this cycle
    forecasts, notes = readable_forecasts(forecasts, view)
    last = dict(state.last_change)
    seen = dict(state.last_demand)
    # a service whose last change is unknown (a new process, a new term as leader) is held from its first sighting, and
    # one with a first sighting later than its last change from that too: a loan the hand-over held back, never sent
    # (`planner.hold_back`), which the latency net does not wait for (`settled` reads the last change alone)
    first = {n: t for n, t in state.first_seen.items() if n not in last or t > last[n]}
    hours = policy.loan_horizon_s / 3600.0
    periods = checkpoint_periods(view, state.checkpoints)
    for s in view.services:
        p = s.profile
        fc = forecasts.get(p.name)
        known = p.name in seen  # a slope needs two readings: without one, demand is not known to be calm
        t0, d0, slope0 = seen.get(p.name, (view.time, s.demand_rps, 0.0))
        if p.name not in last:
            first.setdefault(p.name, view.time)
        slope = (s.demand_rps - d0) / (view.time - t0) if view.time > t0 else 0.0
        seen[p.name] = (view.time, s.demand_rps, slope)
        # a ramp (two rises in a row; one step between two samples is not a trend) is projected over the
        # warm-up lead at its slower slope, at most to max_level_correction x the demand now
        trend = min(slope, slope0) if slope > 0 and slope0 > 0 else 0.0
        ramp = min(s.demand_rps + trend * (p.warmup_s + view.time - t0), s.demand_rps * policy.max_level_correction)
        # ... a surge steeper than any rise the burst floor learned is sized for at once (`surge_rps`) ...
        surge = surge_rps(s.demand_rps, slope, reclaim_horizon_s(p, policy) + view.time - t0, s.burst,
                          policy.max_level_correction, median_now(fc, view.time))
        # ... and the demand now plus the largest rise seen within a warm-up lead (`ServiceView.burst`)
        now_want = replicas_for(max(s.demand_rps * (1.0 + s.burst), ramp, surge), p, policy.headroom)
        # speculative spare (bursts, ramps, surges, forecast quantiles) never beyond what static sizing for the peak
        # would hold and `home_margin` of it, unless the demand now needs more (without a home allotment:
        # max_replicas, which replicas_for never passes). The margin is what lets the week's SLO match static's:
        # expected violations fall strictly as ready capacity rises, so a planner that never holds more than static
        # has at least static's at every step and more whenever it lends; near the peak, where static's are, the
        # margin holds a little more than static and pays back what the night's loans cost
        # (rounded before the ceiling: 50 x 1.1 is 55.000000000000007 in floating point, one replica too many)
        cap = (max(min(math.ceil(round(p.home_replicas * (1.0 + policy.home_margin), 9)), p.max_replicas),
                   replicas_for(s.demand_rps, p, policy.headroom)) if p.home_replicas else p.max_replicas)
        now_need = min(now_want, cap)
        settled = view.time - last.get(p.name, -math.inf) >= p.warmup_s  # the last change has taken effect
        step, held_back = emergency_step(s, policy, state.emergency, settled)  # the net under the predictive floor
        now_need, notes = max(now_need, step), notes + held_back
        stepped |= {p.name} if step else set()
        asked = s.asked
        if fc is None or fc.horizon == 0:
            new[p.name], needs[p.name] = max(asked, now_need), now_need
            reasons[p.name] = "no forecast: hold, or follow current demand up"
            gains[p.name] = max(0, now_need - s.replicas) * p.rps_per_replica
            continue
        lead = reclaim_horizon_s(p, policy)
        level = level_correction(fc, view.time, s.demand_rps, policy.max_level_correction)
        # the reclaim quantile over the reclaim lead or, when the job a reclaim would shrink has just checkpointed,
        # until its next checkpoint and the lead after it (`checkpoint_reclaim_s`: later, the same reclaim would
        # roll that job back), as far as the forecast reaches (`reclaim_window`)
        window, wanted = reclaim_window(lead, checkpoint_reclaim_s(view, p.models, periods), fc, view.time)
        peak_lead = level * forecast_peak(fc, policy.reclaim_quantile, view.time, window)
        lead_need = replicas_for(peak_lead, p, policy.reclaim_headroom)
        up_need = min(max(now_need, lead_need), cap)
        target = asked
        if up_need > s.replicas:  # more than the replicas holding GPUs: keep what was asked, or ask more
            # GPUs are freed for what demand needs: asks beyond it (an HPA's, an operator's) are held, never dropped
            # nor given GPUs (freed for them, a reclaim of one replica shrank training by every pending ask)
            target, needs[p.name] = max(up_need, asked), up_need
            reasons[p.name] = reclaim_reason(policy, peak_lead, up_need, window, lead, wanted)
            gains[p.name] = (up_need - s.replicas) * p.rps_per_replica
        else:
            peak_loan = level * forecast_peak(fc, policy.quantile, view.time, max(policy.loan_horizon_s, lead))
            loan_need = replicas_for(peak_loan, p, policy.headroom)
            # a loan the reclaim rule takes back within the loan horizon buys minutes, flaps capacity and leaves the
            # service a warm-up short of a rise the forecast missed (rolling back a lossy job too): keep what the
            # reclaim rule will ask for over the whole horizon if demand follows the keep quantile: that quantile with
            # the reclaim's headroom, and the burst floor on it (the floor scales with the demand: a loan sized at
            # today's floor was taken back as soon as demand rose along its forecast)
            peak_keep = level * forecast_peak(fc, policy.keep_quantile, view.time, max(policy.loan_horizon_s, lead))
            keep = top(keep_terms(s, policy, loan=(loan_need, peak_loan), keep=(
                replicas_for(peak_keep, p, policy.reclaim_headroom),
                replicas_for(peak_keep * (1.0 + s.burst), p, policy.headroom), peak_keep)))
            # what it keeps is speculative, capped at the home allotment as every such part is (`cap`); and a loan
            # never grows the service: never above the replicas holding GPUs, though more are asked (pending ones
            # wait for GPUs a loan must not take from training)
            down_need = min(max(up_need, min(keep[0], cap)), s.replicas)
            # a loan gives training the GPUs of the replicas it sheds that hold them, one at least: pending ones (asked
            # above `replicas`) hold none, so they count neither towards the dead band nor in the GPU-hours it gives,
            # and are never dropped alone (the module docstring: they may be an HPA's ask, which stays)
            band = max(policy.dead_band_replicas, math.ceil(policy.dead_band_frac * s.replicas), 1)
            held = view.time - max(last.get(p.name, -math.inf), first.get(p.name, -math.inf))
            calm = known and slope <= 0 and s.latency_pressure < policy.emergency_pressure  # never shed under pressure
            # under an HPA the loan only lowers its minReplicas to `down_need`: the HPA keeps what its own metrics ask
            # for, so the loan frees (and its band and gain count) only the replicas above both (`apply_targets` too)
            kept = max(down_need, s.hpa_wants or 0)
            lend = s.replicas - kept >= band and held >= policy.min_hold_s and calm
            foreign = foreign_models(s) if lend else []
            if foreign:  # a loan of GPUs its profile does not allow is one-way
                notes.append(f"{p.name}: lends nothing: its replicas hold {', '.join(foreign)} GPUs, which its "
                             f"profile's gpuModels ({', '.join(sorted(p.models or ()))}) leave out; a loan would give "
                             "them back and no reclaim could take them again")
            elif lend:
                target = down_need
                reasons[p.name] = "loan to training: " + loan_basis(
                    s, policy, down_need, cap, keep=keep,
                    up=top(up_terms(s, policy, now=now_want, lead=(lead_need, peak_lead, window))),
                ) + (f"; drops its {asked - s.replicas} pending replicas" if asked > s.replicas else "") + (
                    f"; its HPA keeps {kept}, what its metrics ask for" if kept > down_need else "")
                gains[p.name] = (s.replicas - kept) * p.gpus_per_replica * hours
        new[p.name] = target
        if p.name not in reasons:
            reasons[p.name] = "hold"
            holding.add(p.name)
    # idle GPUs a service on hold has replicas pending beside are kept for them for a warm-up (the placements the view
    # is read from lag a scale-up); pending longer, they are pending for another reason and the GPUs are lent
    pending = pending_beside_idle(view, state)
    fresh = frozenset(s.profile.name for s in view.services
                      if view.time - pending.get(s.profile.name, -math.inf) < s.profile.warmup_s)
    # the shrinks a step takes GPUs from name its service: what remembers the step as made is tied to them (kept
    # when they did not go out, a step served by replicas already asked was never asked again: `capacity_loop.unsent`)
    granted: dict[str, int] = {}
    actions, more = apply_targets(view, new, policy, reasons, gains, frozenset(holding), fresh, needs,
                                  frozenset(stepped), granted)
    notes += more
    # a latency-net step within replicas already asked sends no scale, only the GPUs freed for those asks: that is
    # its change (else no warm-up was waited and the step grew again every cycle, up to every ask); one given no GPU
    # (none to free, or its jobs left to the hotspot plan) changed nothing: remembered, it was 'not honoured' and
    # never asked again while its latency stayed high
    served = {s.profile.name for s in view.services
              if s.profile.name in stepped and granted.get(s.profile.name, 0) > s.replicas}
    for name in {a.service for a in actions if isinstance(a, ScaleInference)} | served:
        last[name] = view.time
        first.pop(name, None)
    targets = {s.profile.name: new[s.profile.name] * s.profile.gpus_per_replica for s in view.services}
    return CapacityDecision(
        actions=tuple(actions),
        split=capacity_split(view, targets),
        targets=MappingProxyType(targets),
        state=CapacityState(MappingProxyType(last), MappingProxyType(seen), MappingProxyType(first),
                            MappingProxyType(periods),
                            MappingProxyType(next_unhonoured(view, state, stepped, actions, served,
                                                             policy.emergency_retry_s)),
                            MappingProxyType(pending)),
        notes=tuple(notes),
    )


def with_home_replicas(profile: ServiceCapacity, peak_rps: float, headroom: float) -> ServiceCapacity:
    """The profile with `home_replicas` set to what the service's own peak needs (the static allotment)."""
    return replace(profile, home_replicas=replicas_for(peak_rps, profile, headroom))
