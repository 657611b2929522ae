"""`gputide schedule`'s own series on a replica that stopped leading: none of the leader's figures stay behind.

Dashboards take a `max` of `gputide_scheduler_gpu_facts_nodes` over replicas and anyone may `sum` the pending or
starving pods; a demoted replica that kept its last values as leader would hide the leader's 0 (Prometheus failing)
or count its pods twice.
"""

from __future__ import annotations

import argparse
from types import SimpleNamespace

from balancer.cmd import schedule as schedule_cmd
from balancer.cmd.schedule import SchedulerMetrics


class _Scheduler:
    """Enough of SecondaryScheduler for `serve`: one pod starving and unschedulable in every pass."""

    turn_budget_s = 120.0
    watches: dict = {}
    latencies = ()
    oldest_pending_s = 900.0
    preempted: list = []
    starving = ["default/big"]
    stuck_holds = ["default/big"]
    reasons: dict = {}

    def __init__(self, leads: list[bool], placer: SimpleNamespace) -> None:
        self.leads, self.placer, self.stopping, self.progress, self.seen = leads, placer, False, None, []
        self.metrics: SchedulerMetrics | None = None

    def start(self) -> None:
        pass

    def schedule_once(self) -> dict[str, str | None]:
        self.placer.facts_nodes = 3   # the pass refreshed the GPU facts of three nodes
        return {"default/big": None}

    def wait_for_work(self, _interval: float) -> None:
        r = self.metrics.registry
        self.seen.append({name: r.get_sample_value(name) for name in (
            "gputide_scheduler_leader", "gputide_scheduler_pending_pods", "gputide_scheduler_oldest_pending_seconds",
            "gputide_scheduler_starving_pods", "gputide_scheduler_holds_stuck", "gputide_scheduler_gpu_facts_nodes")})
        self.stopping = len(self.seen) == len(self.leads)


def test_a_demoted_scheduler_reports_none_of_the_leaders_figures(monkeypatch):
    placer = SimpleNamespace(facts_nodes=0)
    sched = _Scheduler([True, False], placer)

    def metrics() -> SchedulerMetrics:
        sched.metrics = SchedulerMetrics()
        return sched.metrics

    monkeypatch.setattr(schedule_cmd, "SchedulerMetrics", metrics)
    leads = iter(sched.leads)
    args = argparse.Namespace(metrics_port=0, scheduler_name="gputide", policy="gputide")
    assert schedule_cmd.serve(args, sched, placer, lambda: next(leads), 2.0) == 0
    leading, standby = sched.seen
    assert leading == {"gputide_scheduler_leader": 1, "gputide_scheduler_pending_pods": 1,
                       "gputide_scheduler_oldest_pending_seconds": 900, "gputide_scheduler_starving_pods": 1,
                       "gputide_scheduler_holds_stuck": 1, "gputide_scheduler_gpu_facts_nodes": 3}
    assert standby == dict.fromkeys(leading, 0)
    assert placer.facts_nodes == 3   # the placer still has them; they are just not this replica's to report


def test_a_scheduler_that_never_led_reports_no_gpu_facts_nodes():
    metrics, placer = SchedulerMetrics(), SimpleNamespace(facts_nodes=5)
    metrics.follow_facts(lambda: placer.facts_nodes)
    assert metrics.registry.get_sample_value("gputide_scheduler_gpu_facts_nodes") == 0
    metrics.lead(True)
    assert metrics.registry.get_sample_value("gputide_scheduler_gpu_facts_nodes") == 5
