"""Co-location's give-back waits while a worker of the job runs on a hot node, as the hotspot's own give-back does.

The job (4 workers, one on GPU 0 with the inference service) is shrunk to 3 by co-location under latency pressure.
Its service then has slack, but GPU 8, where another of its workers runs, is an active hotspot: growing the job
back there and then would add load to the node the hotspot planner is cooling (and would hand back, with it, any
worker a hotspot took from the job after co-location's shrink). The shrink stays held, and is given back once the
node has cooled. Before, the give-back went out as soon as the service had `slackReadings` of slack.
"""

from __future__ import annotations

from test_shrink_record_colocation import POLICY, job, reconcile

from balancer.actuate import k8s_jobs
from balancer.plan.planner import PlannerState


def test_the_give_back_waits_for_the_jobs_hot_node_to_cool_and_the_shrink_stays_held():
    (a,), obj, state = reconcile(job(4), PlannerState(), p99=0.45)
    assert (a.cause, a.previous_workers, a.workers) == ("colocation_slo", 4, 3)
    for _ in range(POLICY.colocation.slack_readings + 4):   # slack, GPU 8 (a worker's) hot all along
        resizes, obj, state = reconcile(obj, state, p99=0.1, hot_gpu=8)
        assert resizes == [], "a give-back while a worker of the job runs on a hot node"
    assert k8s_jobs.size(obj) == 3 and dict(state.colocation.shrunk) == {"job": (4, "svc")}
    seen = []
    for _ in range(POLICY.hotspots.cool_readings + 2):   # cool again: the workers come back
        resizes, obj, state = reconcile(obj, state, p99=0.1)
        seen += [(r.cause, r.previous_workers, r.workers) for r in resizes]
    assert seen == [("colocation_slack", 3, 4)], seen
    assert k8s_jobs.size(obj) == 4 and not state.colocation.shrunk
