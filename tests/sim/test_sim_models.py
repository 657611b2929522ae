"""Properties of the latency model, the tidal demand curve and the default workload mix."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from balancer.fleet import demo_fleet
from balancer.sim import SimCluster, TidalDemand, default_mix
from balancer.sim.workloads import P99_CAP_S, inference_step

_pods = st.lists(st.tuples(st.integers(0, 2), st.floats(0.0, 50.0)), min_size=0, max_size=8)


@settings(max_examples=100, deadline=None)
@given(_pods, st.lists(st.floats(0.0, 200.0), min_size=3, max_size=3))
def test_violations_never_exceed_requests_and_p99_stays_between_base_and_the_cap(pods, demand):
    svc = np.array([p[0] for p in pods], dtype=np.int64)
    mu = np.array([p[1] for p in pods], dtype=float)
    base, slo = np.full(3, 0.1), np.full(3, 0.5)
    r = inference_step(demand_rps=np.array(demand), pod_service=svc, pod_mu=mu, slo_s=slo, base_s=base, dt=60.0)
    assert (r.violations <= r.requests + 1e-9).all() and (r.violations >= 0).all()
    assert (r.p99_s >= base - 1e-12).all() and (r.p99_s <= P99_CAP_S).all()
    assert np.isfinite(r.p99_s).all() and np.isfinite(r.violations).all()


@settings(max_examples=60, deadline=None)
@given(st.floats(1.0, 50.0), st.floats(0.0, 0.95), st.floats(0.0, 0.95))
def test_more_load_on_the_same_capacity_never_lowers_p99_or_the_violation_share(mu, a, b):
    lo, hi = sorted((a, b))

    def run(rho):
        return inference_step(demand_rps=np.array([rho * mu]), pod_service=np.array([0]), pod_mu=np.array([mu]),
                              slo_s=np.array([0.5]), base_s=np.array([0.1]), dt=1.0)

    r_lo, r_hi = run(lo), run(hi)
    assert r_hi.p99_s[0] >= r_lo.p99_s[0] - 1e-9
    share = [r.violations[0] / r.requests[0] if r.requests[0] else 0.0 for r in (r_lo, r_hi)]
    assert share[1] >= share[0] - 1e-12 or r_lo.requests[0] == 0


@pytest.mark.parametrize(("hour", "expected"), [(14, 100.0), (2, 20.0), (8, 60.0)],
                         ids=["peak hour", "twelve hours later", "half way"])
def test_the_tide_peaks_at_its_peak_hour_and_ebbs_twelve_hours_later(hour, expected):
    tide = TidalDemand(peak=100.0, trough=20.0, peak_hour=14.0)
    assert tide(hour * 3600.0) == pytest.approx(expected)


def test_weekends_dip_and_noise_is_deterministic_per_seed():
    tide = TidalDemand(peak=100.0, trough=20.0, weekend_factor=0.5)
    saturday_peak = (2 * 86400) + 14 * 3600  # 1970-01-03 was a Saturday
    assert tide(saturday_peak) == pytest.approx(50.0)
    noisy = [TidalDemand(peak=100, trough=20, noise=0.05, seed=s) for s in (1, 1, 2)]
    t = 5 * 3600 + 17
    assert noisy[0](t) == noisy[1](t) != noisy[2](t)


def test_the_default_mix_loads_the_demo_fleet_with_inference_and_training():
    sim = SimCluster(demo_fleet(), seed=0)
    default_mix(sim)
    assert sim.services and sim.training_jobs and not sim.pending
    used = sim.used_milli.sum() / (1000 * sim.n_gpus)
    assert 0.5 < used < 0.85
    sim.advance_to(3600)
    stats = sim.stats()
    assert all(s["requests"] > 0 for s in stats["inference"].values())
    assert all(j["progress_gpu_hours"] > 0 for j in stats["training"].values())
