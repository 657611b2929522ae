"""A loan counts the GPUs it frees, pending replicas are never dropped on their own, and a loan's reason says what
set its target (review of the loan branch, then audit a1).

* Replicas asked but pending hold no GPU. The loan's dead band and its gain (GPU-hours given training) counted them:
  a scale-down of pending replicas alone passed for a 'loan to training' that freed nothing, a loan of one held
  replica past a band of two went out on the pending ones beside it, and the gain of a loan that also dropped pending
  asks counted those as GPU-hours lent. Now the band and the gain count the replicas holding GPUs.
* Such pending replicas were then dropped as a change of their own ('drop N pending replicas', bc0aa80). But gputide
  asks only for replicas it frees GPUs for: pending a hold after its last change, they are an HPA's or an operator's
  ask (or wait on a placement it cannot see), and it cannot tell which. Under an HPA the drop writes only minReplicas
  (raised past the operator's own) and the pods stay: a gain claimed every hold, and the idle GPUs they waited for
  lent to training (1). It dropped below what the keep rule keeps, so the reclaim asked them back within the hour
  (2); its reason said the replicas holding GPUs cover the reclaim quantile when the cap had cut it (3); and it
  counted as a change, so the latency net waited a warm-up after a drop that freed nothing (4). Now they are held.
* Held, they had no time limit on what they took (audit a4): the next reclaim, a rise of one replica, freed GPUs for
  every ask, so training lost 4 workers where demand needed 1 (5). Now a reclaim frees GPUs only for the replicas
  demand needs beyond those holding GPUs; the asks stay, and keep idle GPUs a warm-up as on hold.
* The reason named the loan quantile ('p90 demand stays below ...') whatever set the target: the keep quantile's
  burst floor, the reclaim quantile, the cap. Then (audit a4) it named the demand now where the cap had cut its need
  (6), and a need that tied the cap where another, cut, would keep more (7): the cap set those.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import numpy as np

from balancer.actions import ScaleInference, ScaleTraining
from balancer.model import Forecast
from balancer.plan.capacity import CapacityPolicy, CapacityView, JobView, ServiceCapacity, ServiceView
from balancer.plan.capacity_plan import plan_capacity
from tests.capacity.settled_state import settled

POLICY = CapacityPolicy(headroom=0.0, reclaim_headroom=0.0, dead_band_replicas=1, dead_band_frac=0.0,
                        min_hold_s=1800.0)
HOURS = POLICY.loan_horizon_s / 3600.0


def forecast(p90: float | list[float], p99: float | None = None) -> Forecast:
    a = np.array(p90, dtype=float) if isinstance(p90, list) else np.full(24, float(p90))
    return Forecast(service="chat", issued_at=0.0, step_s=600.0,
                    quantiles={0.5: a, 0.9: a, 0.99: np.full(a.size, float(p99)) if p99 is not None else a})


def cluster(replicas: int, *, desired: int | None = None, demand: float = 20.0, burst: float = 0.0,
            home: int = 0, free: int = 0, t: float = 0.0, pressure: float = 0.0) -> CapacityView:
    profile = ServiceCapacity(name="chat", rps_per_replica=10.0, warmup_s=300.0, min_replicas=1, home_replicas=home)
    service = ServiceView(profile=profile, demand_rps=demand, replicas=replicas, desired=desired, burst=burst,
                          latency_pressure=pressure, gpus_by_model=MappingProxyType({"A100": replicas}))
    job = JobView(name="train", workers=4, elastic_max=32, gpus_by_model=MappingProxyType({"A100": 4}))
    return CapacityView(time=t, free=MappingProxyType({"A100": free}), services=(service,), jobs=(job,),
                        inference_gpus=replicas, training_gpus=4, total_gpus=replicas + 4 + free)


def plan(v: CapacityView, fc: Forecast, policy: CapacityPolicy = POLICY):
    d = plan_capacity(v, {"chat": fc}, policy, settled(v))
    scale = next(a for a in d.actions if isinstance(a, ScaleInference))
    grown = sum(a.workers - a.previous_workers for a in d.actions if isinstance(a, ScaleTraining))
    return scale, grown


def scales(d) -> list[ScaleInference]:
    return [a for a in d.actions if isinstance(a, ScaleInference)]


def training(d) -> int:
    """Workers training gains (+) or loses (-) by `d`."""
    return sum(a.workers - a.previous_workers for a in d.actions if isinstance(a, ScaleTraining))


def test_pending_replicas_alone_are_held_not_dropped_nor_lent():
    # 4 hold GPUs, 8 asked; the forecast needs the 4: nothing lent, and the 4 pending asks are held (were 'loan to
    # training', gain 4 replicas x 2 h of GPUs lent; then 'drop 4 pending replicas', the same gain)
    for policy in (POLICY, replace(POLICY, dead_band_replicas=0)):   # no band: a loan still sheds a replica at least
        d = plan_capacity(cluster(4, desired=8), {"chat": forecast(40.0)}, policy, settled(cluster(4, desired=8)))
        assert d.actions == () and d.targets["chat"] == 8


def test_a_loan_beside_pending_replicas_gains_only_the_gpus_it_frees():
    # 6 hold GPUs, 10 asked, the forecast needs 4: the loan frees 2 replicas' GPUs, which training grows into; its
    # gain is those 2 over the loan horizon (was 6: the 4 pending counted as lent)
    scale, grown = plan(cluster(6, desired=10), forecast(40.0))
    assert (scale.previous_replicas, scale.replicas, grown) == (10, 4, 2)
    assert scale.expected_gain == 2 * 1 * HOURS
    assert scale.reason.startswith("loan to training: ") and scale.reason.endswith("; drops its 4 pending replicas")
    # without pending replicas the loan is as before
    scale, grown = plan(cluster(6), forecast(40.0))
    assert (scale.previous_replicas, scale.replicas, grown, scale.expected_gain) == (6, 4, 2, 2 * 1 * HOURS)
    assert scale.reason == "loan to training: p90 demand stays below 40 req/s for 2.0 h"


def test_the_dead_band_counts_the_replicas_holding_gpus():
    # band 2: 5 hold GPUs and the forecast needs 4, so a loan would free one (below the band); 5 pending asks beside
    # them made it 6 and the one replica was lent. Now nothing is lent, and the pending asks are held
    for desired in (10, 6):
        v = cluster(5, desired=desired)
        d = plan_capacity(v, {"chat": forecast(40.0)}, replace(POLICY, dead_band_replicas=2), settled(v))
        assert d.actions == () and d.targets["chat"] == desired


def test_1_pending_replicas_an_hpa_asks_are_held_with_the_idle_gpus_they_wait_for():
    # 4 hold GPUs; the HPA asks 8 (its metrics: gputide's floor is 4), 4 A100s idle for the 4 pending; the forecast
    # needs 4. The drop wrote minReplicas 4 (a raise over the operator's 2; the HPA kept 8) every 30 min, each with
    # 8 GPU-hours claimed, and training grew onto the 4 idle GPUs at once. Now the asks are held: no scale, and the
    # idle GPUs are kept for them for a warm-up (`pending_beside_idle`), after which they are lent as before
    state = settled(cluster(4, desired=8, free=4))
    for k in range(3):
        d = plan_capacity(cluster(4, desired=8, free=4, t=1800.0 * k), {"chat": forecast(40.0)}, POLICY, state)
        state = d.state
        assert scales(d) == [], k
        if k == 0:
            assert training(d) == 0, "the idle GPUs are the pending replicas' for a warm-up"


def test_2_pending_replicas_the_keep_rule_keeps_are_not_dropped_and_asked_back():
    # 4 hold GPUs, 8 asked; demand rises to 80 req/s (8 replicas) 40 min ahead: the reclaim lead (15 min) needs 4,
    # the keep rule 8. Every 5 min: the drop went 8 -> 4 at once and the reclaim asked 4 -> 8 back at 20 min
    state, desired, asks = settled(cluster(4, desired=8)), 8, []
    for k in range(6):
        t = 300.0 * k
        fc = forecast(([40.0] * 4 + [80.0] * 20)[k // 2:] + [80.0] * (k // 2))
        d = plan_capacity(cluster(4, desired=desired, t=t), {"chat": fc}, POLICY, state)
        state = d.state
        asks += [(t, a.replicas) for a in scales(d)]
        desired = next((a.replicas for a in scales(d)), desired)
    assert asks == [], "was [(0, 4), (1200, 8)]: dropped, then asked back"


def test_3_no_change_says_the_replicas_holding_gpus_cover_what_the_cap_cut():
    # home 5 (cap 6), 6 hold GPUs, 10 asked, demand 55 req/s and p90 90 req/s (9 replicas) within 15 min: the cap,
    # not the forecast, keeps the 6. The drop 10 -> 6 said 'the 6 holding GPUs cover demand now and p90 demand within
    # 15 min'. Now nothing goes out
    v = cluster(6, desired=10, home=5, demand=55.0)
    d = plan_capacity(v, {"chat": forecast(90.0)}, POLICY, settled(v))
    assert d.actions == () and d.targets["chat"] == 10
    # a loan the cap sets names it, and the pending asks it drops with the replicas it sheds
    scale, grown = plan(cluster(8, desired=10, home=5, demand=55.0), forecast(90.0))
    assert (scale.previous_replicas, scale.replicas, grown) == (10, 6, 2)
    assert scale.reason.startswith("loan to training: keeps its cap, 6 replicas (home allotment 5 with the 5% margin")
    assert scale.reason.endswith("; drops its 2 pending replicas")


def test_4_the_latency_net_does_not_wait_a_warm_up_after_pending_replicas():
    # 4 hold GPUs, 8 asked, the forecast needs 4; 2 min later p99 is at 60% of the SLO (the net's 50%). The drop at 0
    # counted as the service's last change, so the net waited its warm-up (300 s) though nothing had changed; now
    # nothing goes out at 0, the settled clock stays, and at 120 s training makes room for the asked replicas
    state, desired = settled(cluster(4, desired=8)), 8
    for t, pressure in ((0.0, 0.0), (120.0, 0.6)):
        d = plan_capacity(cluster(4, desired=desired, t=t, pressure=pressure), {"chat": forecast(40.0)}, POLICY,
                          state)
        if t == 0.0:
            assert d.state.last_change["chat"] == state.last_change["chat"]
        state = d.state
        desired = next((a.replicas for a in scales(d)), desired)
    assert training(d) < 0 and d.targets["chat"] >= 5, d.actions


def test_a_loans_reason_names_what_set_its_target():
    # the keep quantile's burst floor: p90 40 req/s x 1.5 needs 6 (the loan quantile alone 4)
    scale, _ = plan(cluster(10, burst=0.5), forecast(40.0))
    assert scale.replicas == 6
    assert scale.reason == ("loan to training: keeps what p90 demand (40 req/s within 2.0 h) needs with its 50% "
                            "burst floor")
    # the reclaim quantile (p99, 70 req/s over the reclaim lead) above what the keep quantile keeps
    scale, _ = plan(cluster(10), forecast(40.0, p99=70.0), replace(POLICY, reclaim_quantile=0.99))
    assert scale.replicas == 7
    assert scale.reason == "loan to training: keeps what p99 demand (70 req/s within 15 min) needs"
    # the cap: home allotment 5 with the 5 % margin holds 6, the forecast would keep 8
    scale, _ = plan(cluster(10, home=5), forecast(80.0))
    assert scale.replicas == 6
    assert scale.reason.startswith("loan to training: keeps its cap, 6 replicas (home allotment 5 with the 5% margin")


def test_5_a_reclaim_frees_gpus_only_for_what_demand_needs_beside_held_asks():
    # 4 hold GPUs, 8 asked (held: an HPA's or an operator's ask); demand rises to 50 req/s, 5 replicas. The reclaim
    # freed GPUs for all 8: training 4 -> 0 (the shrink's gain 4 replicas' req/s) for asks demand does not need. Now
    # for the 5th alone, the asks still held (no scale, no drop); likewise with no forecast, following demand up
    v = cluster(4, desired=8, demand=50.0)
    for fc in ({"chat": forecast(50.0)}, {}):
        d = plan_capacity(v, fc, POLICY, settled(v))
        assert (scales(d), training(d), d.targets["chat"]) == ([], -1, 8), d.actions
        assert [a.expected_gain for a in d.actions] == [10.0]
    # idle GPUs: one goes to the 5th, the other is kept for the held asks a warm-up (as on hold), then lent
    v = cluster(4, desired=8, demand=50.0, free=2)
    d = plan_capacity(v, {"chat": forecast(50.0)}, POLICY, settled(v))
    assert (d.actions, d.targets["chat"]) == ((), 8)
    d = plan_capacity(v, {"chat": forecast(50.0)}, POLICY,
                      replace(settled(v), pending_since=MappingProxyType({"chat": -1e6})))
    assert (scales(d), training(d)) == ([], 1)


def test_6_a_loan_the_cap_sets_names_the_cap_not_the_need_it_cut():
    # home 4, demand now 60 req/s: cap max(ceil(4 x 1.05), 6) = 6; demand now x 1.5 (burst) needs 9, cut to 6, and the
    # keep rule (p90 10 req/s, level-corrected) keeps 5. The reason said 'keeps what demand now (60 req/s) needs'
    scale, _ = plan(cluster(10, home=4, demand=60.0, burst=0.5), forecast(10.0))
    assert scale.replicas == 6
    assert scale.reason.startswith("loan to training: keeps its cap, 6 replicas (home allotment 4 with the 5% margin")


def test_7_a_need_tying_the_cap_is_not_named_where_another_was_cut():
    # home 5 (cap 6); p90 60 req/s keeps 6, p99 90 req/s over the reclaim lead needs 9, cut to 6: the cap set the 6,
    # though the loan quantile ties it (the reason said 'p90 demand stays below 60 req/s')
    scale, _ = plan(cluster(8, home=5), forecast(60.0, p99=90.0), replace(POLICY, reclaim_quantile=0.99))
    assert scale.replicas == 6
    assert scale.reason.startswith("loan to training: keeps its cap, 6 replicas (home allotment 5 with the 5% margin")
    # nothing cut: the need at the cap is named
    scale, _ = plan(cluster(8, home=5), forecast(60.0))
    assert scale.replicas == 6
    assert scale.reason == "loan to training: p90 demand stays below 60 req/s for 2.0 h"


def test_8_a_latency_step_served_by_held_asks_waits_its_warm_up_as_a_scale_does():
    """A step within replicas already asked sends no scale, only the GPUs freed for those asks: before, that was no
    change, so no warm-up was waited and the step grew every cycle, training losing a worker or two each minute up to
    every ask (audit a8). Now it goes as without asks: a step, a warm-up, the next."""
    runs = {}
    for asked in (None, 12):
        r, desired, train, state, lost = 4, asked, 8, None, []
        for k in range(6):   # a cycle a minute; the GPUs freed hold a replica by the next
            v = cluster(r, desired=desired, t=60.0 * k, demand=40.0, pressure=2.0)
            v = replace(v, jobs=tuple(replace(j, workers=train, elastic_max=32,
                                              gpus_by_model=MappingProxyType({"A100": train})) for j in v.jobs),
                        training_gpus=train, total_gpus=r + train)
            d = plan_capacity(v, {"chat": forecast(40.0)}, POLICY, state or settled(v))
            state, took = d.state, -training(d)
            desired = scales(d)[0].replicas if scales(d) else desired
            train, r = train - took, r + took
            lost.append(took)
        runs[asked] = lost
    assert runs[None] == [1, 0, 0, 0, 0, 2]
    assert runs[12] == runs[None]
