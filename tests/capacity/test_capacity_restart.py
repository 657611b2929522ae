"""The capacity hold survives a restart or a change of leader. The hysteresis memory (`CapacityState`) lives in the
leader's process only and `Reconciler._take_office` starts a fresh `PlannerState`: a service whose last change is
unknown is held from the first cycle that sees it, and demand without two readings is not calm. Growth under
pressure (the emergency net) waits for neither."""

from __future__ import annotations

import numpy as np

from balancer import config
from balancer.model import Forecast, ScaleInference, ServiceStatus
from balancer.model import WorkloadClass as C
from balancer.plan import planner as planner_mod
from balancer.plan.capacity import CapacityPolicy, CapacityState, CapacityView, ServiceCapacity, ServiceView
from balancer.plan.capacity_loop import plan_with_capacity
from balancer.plan.capacity_plan import plan_capacity
from tests.loop.loop_helpers import make_fleet, snapshot, workload

PROF = ServiceCapacity(name="chat", rps_per_replica=10, warmup_s=300)
POLICY = CapacityPolicy()  # min_hold_s 1800
T0 = 50_000.0  # chat scaled up 8 -> 10 here (p99 over the SLO)


def view(t, demand=60.0, pressure=0.3, replicas=10, free=0):
    return CapacityView(time=t, free={"A100": free} if free else {}, jobs=(), inference_gpus=replicas,
                        training_gpus=0, total_gpus=replicas + free,
                        services=(ServiceView(profile=PROF, demand_rps=demand, replicas=replicas,
                                              gpus_by_model={"A100": replicas}, latency_pressure=pressure),))


def flat(t, level=55.0):
    return {"chat": Forecast(service="chat", issued_at=t - 300, step_s=300.0,
                             quantiles={q: np.full(60, level) for q in (0.5, 0.9, 0.99)})}


def scale_downs(d):
    return [a for a in d.actions if isinstance(a, ScaleInference) and a.replicas < a.previous_replicas]


def run(state, start, end, step=60.0, demand=60.0):
    """Cycles every `step` s over [start, end): the times at which chat was scaled down."""
    out = []
    for t in np.arange(start, end, step):
        d = plan_capacity(view(float(t), demand), flat(float(t)), POLICY, state)
        out += [float(t)] * len(scale_downs(d))
        state = d.state
    return out


def test_a_state_thrown_away_mid_hold_still_holds_the_minimum_hold_from_its_first_cycle():
    kept = CapacityState(last_change={"chat": T0}, last_demand={"chat": (T0 + 640, 60.0, 0.0)})
    assert run(kept, T0 + 700, T0 + 1800) == []                # the same process holds to T0 + 1800 ...
    restart = T0 + 700
    assert run(CapacityState(), restart, restart + 1800) == []  # ... and one restarted 700 s in holds 1800 s more
    loans = run(CapacityState(), restart, restart + 2400)
    assert loans and loans[0] == restart + 1800                # then loans as a settled one would


def test_demand_without_a_previous_reading_is_not_calm():
    long_ago = CapacityState(last_change={"chat": T0 - 86_400})
    assert scale_downs(plan_capacity(view(T0), flat(T0), POLICY, long_ago)) == []
    # a second reading gives the slope: rising holds, flat loans
    rising = plan_capacity(view(T0, 50.0), flat(T0), POLICY, long_ago).state
    assert scale_downs(plan_capacity(view(T0 + 60, 60.0), flat(T0 + 60), POLICY, rising)) == []
    flat_state = plan_capacity(view(T0, 60.0), flat(T0), POLICY, long_ago).state
    assert scale_downs(plan_capacity(view(T0 + 60, 60.0), flat(T0 + 60), POLICY, flat_state))


def test_the_emergency_net_is_not_held_back_by_a_fresh_state():
    first = plan_capacity(view(T0, pressure=0.3, free=4), flat(T0), POLICY, CapacityState())
    assert first.actions == ()
    # under pressure one cycle after the first sighting: grown at once, no hold and no settling wait
    d = plan_capacity(view(T0 + 60, pressure=0.95, free=4), flat(T0 + 60), POLICY, first.state)
    ups = [a for a in d.actions if isinstance(a, ScaleInference) and a.replicas > a.previous_replicas]
    assert ups and ups[0].replicas > 10


def test_the_reconcile_loop_new_term_holds_a_scale_up_made_in_the_previous_one():
    """`_take_office` replaces the planner state with a fresh `PlannerState()`: the loan waits the hold out."""
    fl = make_fleet(nodes=2, gpus_per_node=4)
    wl = [(workload(f"chat-{k}", owner="chat"), (k,)) for k in range(4)]
    wl += [(workload(f"job-{i}", C.TRAINING, owner="job", elastic_min=1, elastic_max=8), (g,))
           for i, g in enumerate((4, 5, 6, 7))]
    policy = config.BalancerPolicy(capacity=config.CapacityPolicy(enabled=True))

    def cycle(t, state):
        snap = snapshot(fl, workloads=wl, time=t, services={"chat": ServiceStatus(
            name="chat", demand_rps=5.0, p99_latency_s=0.1, slo_latency_s=0.5, replicas=4)})
        plan, state = plan_with_capacity(snap, flat(t, 5.0), policy, state, profiles={"chat": PROF},
                                         capacity_policy=POLICY, base=lambda s, f, p, st: (
                                             planner_mod.Plan(), st or planner_mod.PlannerState()))
        return [a for a in plan.actions if isinstance(a, ScaleInference)], state

    # the previous term scaled chat up at T0; its state knew it, and held
    state = planner_mod.PlannerState(capacity=CapacityState(last_change={"chat": T0},
                                                            last_demand={"chat": (T0 + 640, 5.0, 0.0)}))
    assert cycle(T0 + 700, state)[0] == []
    state, t, loaned_at = planner_mod.PlannerState(), T0 + 700, None  # new term: what _take_office does
    while loaned_at is None and t < T0 + 4000:
        acts, state = cycle(t, state)
        loaned_at = t if acts else None
        t += 60.0
    assert loaned_at == T0 + 700 + 1800
