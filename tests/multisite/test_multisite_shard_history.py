"""`gputide run --shard NAME --services FILE`: the capacity planner's demand history (a Prometheus range query per
service, `PrometheusDemandHistory`) is read through the shard's source. `ShardedSource` had no `demand_history`,
so the read raised AttributeError (no `GputideError`, so not the "no history" warning): the forecaster failed its
cycle and the burst tracker's raised out of the planner, each service seeded with no history at all, a sharded
controller forecasting from nothing for days where an unsharded one starts with two weeks."""

from __future__ import annotations

import pandas as pd

from balancer import fleet as fleet_mod
from balancer.app.capacity_run import PrometheusDemandHistory
from balancer.sim import SimCluster
from balancer.telemetry.shard import ShardedSource, parse_selector
from balancer.telemetry.sim import SimTelemetrySource


class WithHistory(SimTelemetrySource):
    """A simulated cluster's telemetry that also answers range queries (as PrometheusTelemetrySource does)."""

    asked: list[str]

    def demand_history(self, promql: str, start: float, end: float, step_s: float) -> pd.Series:
        self.asked.append(promql)
        index = pd.date_range(pd.Timestamp(int(start), unit="s", tz="UTC"), periods=3, freq=f"{int(step_s)}s")
        return pd.Series([1.0, 2.0, 3.0], index=index, name="demand")


def test_a_shard_reads_its_services_demand_history_through_its_source():
    inner = WithHistory(SimCluster(fleet_mod.demo_fleet(), seed=1, step_s=60.0))
    inner.asked = []
    history = PrometheusDemandHistory(ShardedSource(inner, parse_selector("a", "model=L40S")), days=1.0,
                                      step_s=300.0, cluster="eu-1")
    got = history("team-a/chat", 100_000.0)
    assert got is not None and list(got) == [1.0, 2.0, 3.0]
    assert inner.asked == ['max(gputide_inference_demand_rps{service="chat", namespace="team-a", cluster="eu-1"})']
