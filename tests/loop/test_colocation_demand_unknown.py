"""Co-location holds for a service whose demand is unknown (`ClusterSnapshot.demand_unknown`: a stalled vLLM pod).

Such a service is not in the snapshot's services (no NaN demand in arithmetic, never read as 0), and co-location read
a service missing from them with no pod left as gone: a job shrunk for it was given its workers back, training put
onto the GPUs of a service last seen under pressure whose series are there, only NaN (its pods unread, or a stalled
Deployment's pods gone from the placements). Now it is never gone while its demand is unknown: no slack is read from
it (no give-back), no pressure either (no new shrink), and a note says why a shrink is held. Known again, it needs its
slack readings afresh.
"""

from __future__ import annotations

from test_colocation_unseen_service import POLICY, PRESSURED, SLACK, observe

from balancer.model import ScaleTraining
from balancer.plan.planner import PlannerState, acknowledge, plan

WHY = "stalled: 1 pod(s) with requests in hand and no progress"


def run(readings, unknown=lambda t: False, a_pod=lambda t: True):
    """Cycles of the planner over `readings` ({service: p99} per cycle), a's demand unknown where `unknown(t)` (a left
    out of the services, in `demand_unknown`): the job's resizes, each cycle's notes, the last state."""
    workers, state, resizes, notes = 3, PlannerState(), [], []
    for t, p99 in enumerate(readings):
        if unknown(t):
            p99 = {n: v for n, v in p99.items() if n != "a"}
        snap = observe(workers, p99, t, a_pod=a_pod(t))
        if unknown(t):
            snap = snap.replace(demand_unknown={"a": WHY})
        p, state = plan(snap, None, POLICY, state)
        for a in p.actions:
            if isinstance(a, ScaleTraining):
                workers = a.workers
                resizes.append((t, a.cause, a.workers))
        notes.append(p.notes)
        state = acknowledge(state, p.actions, snap)
    return resizes, notes, state


def test_a_service_whose_demand_is_unknown_is_not_gone_though_no_pod_of_it_is_read():
    resizes, notes, state = run([{"a": PRESSURED, "b": SLACK}] * 8, unknown=lambda t: t >= 2, a_pod=lambda t: t < 2)
    assert resizes == [(0, "colocation_slo", 2)]   # before: given back at cycle 2, a read as gone
    assert dict(state.colocation.shrunk) == {"job": (3, "a")}
    assert any("keeps job shrunk: a's demand is unknown" in n and WHY in n for n in notes[-1]), notes[-1]


def test_an_unknown_demand_is_no_slack_while_its_pods_run():
    resizes, _, state = run([{"a": PRESSURED, "b": SLACK}] + [{"a": SLACK, "b": SLACK}] * 8, unknown=lambda t: t >= 1)
    assert resizes == [(0, "colocation_slo", 2)] and dict(state.colocation.shrunk) == {"job": (3, "a")}
    assert "a" not in state.colocation.slack_streak


def test_an_unknown_demand_is_no_pressure():
    resizes, _, _ = run([{"a": PRESSURED, "b": SLACK}] * 4, unknown=lambda t: True)
    assert resizes == []


def test_known_again_it_needs_its_slack_readings_afresh():
    n = POLICY.colocation.slack_readings
    readings = [{"a": PRESSURED, "b": SLACK}] + [{"a": SLACK, "b": SLACK}] * (n + 5)
    resizes, _, _ = run(readings, unknown=lambda t: 1 <= t < 4)
    assert [(t, cause) for t, cause, _ in resizes] == [(0, "colocation_slo"), (4 + n - 1, "colocation_slack")]
