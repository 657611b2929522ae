"""A second site's idle GPUs take site A's inference overflow at its peak; the round trip counts against the SLO."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from balancer import fleet as fleet_mod
from balancer.app.multisite import effective_slo, global_spare, overflow_rps, run_multisite, spare_gpus
from balancer.sim import SimCluster, default_mix


@pytest.fixture(scope="module")
def runs():
    kw = dict(start_hour=10.0, hours=8.0, seed=2)
    return {"none": run_multisite(overflow=False, rtt_s=0.03, **kw),
            "30ms": run_multisite(overflow=True, rtt_s=0.03, **kw),
            "690ms": run_multisite(overflow=True, rtt_s=0.69, **kw)}


def test_overflow_raises_site_a_slo_attainment_at_its_peak(runs):
    assert runs["none"].peak_attainment < 0.9
    assert runs["30ms"].peak_attainment > runs["none"].peak_attainment + 0.1
    assert runs["30ms"].overflow_share > 0 and runs["none"].overflow_share == 0


def test_the_round_trip_is_added_to_every_overflowed_requests_latency(runs):
    assert runs["30ms"].remote_p99_s and min(runs["30ms"].remote_p99_s) >= 0.03 + 0.1   # RTT + base latency
    assert min(runs["690ms"].remote_p99_s) >= 0.69 + 0.1


def test_a_longer_round_trip_costs_slo_attainment(runs):
    # same traffic crossed, but the remote replicas have 110 ms of budget left instead of 770 ms
    assert runs["690ms"].overflowed_requests == pytest.approx(runs["30ms"].overflowed_requests, rel=0.05)
    assert runs["690ms"].peak_attainment < runs["30ms"].peak_attainment - 0.02


@pytest.mark.parametrize("demand, local, remote, expected", [
    (50.0, 100.0, 100.0, 0.0),
    (100.0, 100.0, 100.0, 15.0),
    (200.0, 100.0, 20.0, 17.0),
    (100.0, 0.0, 0.0, 0.0),
    (0.0, 10.0, 10.0, 0.0),
], ids=["under capacity: keep it local", "above 85% of local: send the excess", "capped by the remote capacity",
        "no remote capacity: nothing", "no demand: nothing"])
def test_overflow_rps_table(demand, local, remote, expected):
    assert overflow_rps(demand, local, remote) == pytest.approx(expected)


@given(st.floats(0, 1e5), st.floats(0, 1e5), st.floats(0, 1e5))
def test_overflow_is_within_demand_and_remote_capacity(demand, local, remote):
    out = overflow_rps(demand, local, remote)
    assert 0.0 <= out <= demand + 1e-9 and out <= 0.85 * remote + 1e-9


def test_overflow_refuses_nan():
    with pytest.raises(ValueError):
        overflow_rps(float("nan"), 1.0, 1.0)


@pytest.mark.parametrize("slo, rtt, base, expected", [(0.8, 0.03, 0.1, 0.77), (0.5, 0.2, 0.1, 0.3)],
                         ids=["30 ms of 800", "200 ms of 500"])
def test_effective_slo_subtracts_the_round_trip(slo, rtt, base, expected):
    assert effective_slo(slo, rtt, base) == pytest.approx(expected)


@pytest.mark.parametrize("rtt", [0.75, 0.9, -0.01], ids=["leaves less than the base latency", "beyond the SLO",
                                                         "negative"])
def test_effective_slo_refuses_a_round_trip_that_leaves_no_budget(rtt):
    with pytest.raises(ValueError):
        effective_slo(0.8, rtt, 0.1)


def test_global_spare_view_counts_idle_gpus_per_site_and_model():
    busy = SimCluster(fleet_mod.scaled_fleet(64, "a"), seed=1)
    default_mix(busy, inference_share=0.45, training_share=0.45)
    idle = SimCluster(fleet_mod.scaled_fleet(64, "b"), seed=1)
    view = global_spare({"a": busy.snapshot(), "b": idle.snapshot()})
    assert sum(view["b"].values()) == 64
    assert sum(view["a"].values()) < 64
    idle.fail_gpu(0)
    assert sum(spare_gpus(idle.snapshot()).values()) == 63
