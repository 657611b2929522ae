"""Physics of the simulator: thermal time constant, power caps, thermal slowdown, energy, shutdown."""

from __future__ import annotations

import math

import numpy as np
import pytest

from balancer import catalog
from balancer.fleet import demo_fleet
from balancer.sim import SimCluster, physics
from tests.sim.conftest import batch, small_fleet


@pytest.mark.parametrize("model", ["A100-SXM4-80GB", "H100-SXM", "T4", "L40S"])
def test_a_gpu_at_constant_power_converges_to_inlet_plus_r_times_p_with_its_time_constant(model):
    f = small_fleet(model, nodes=1, gpus=1)
    p = physics.GpuParams.from_fleet(f)
    spec = catalog.CATALOGUE[model]
    sm, mem = np.array([0.5]), np.array([0.5])
    expected_p = spec.idle_w + (spec.tdp_w - spec.idle_w) * 0.5
    target = 25.0 + spec.thermal_resistance_c_per_w * expected_p
    t0 = 30.0
    kwargs = dict(inlet_c=np.array([25.0]), resistance=p.resistance, power_limit_w=p.tdp_w, sm=sm, mem=mem,
                  busy=np.array([True]), online=np.array([True]), noise=np.zeros(1))
    one_tau = physics.step(p, temperature_c=np.array([t0]), dt=spec.thermal_tau_s, **kwargs)
    assert one_tau.power_w[0] == pytest.approx(expected_p)
    assert one_tau.temperature_c[0] == pytest.approx(target + (t0 - target) * math.exp(-1), abs=1e-9)
    # three steps of tau/3 land on the same point: the exact update is step-size independent
    t = np.array([t0])
    for _ in range(3):
        t = physics.step(p, temperature_c=t, dt=spec.thermal_tau_s / 3, **kwargs).temperature_c
    assert t[0] == pytest.approx(one_tau.temperature_c[0], abs=1e-9)
    settled = physics.step(p, temperature_c=np.array([t0]), dt=50 * spec.thermal_tau_s, **kwargs)
    assert settled.temperature_c[0] == pytest.approx(target, abs=1e-6)


def _busy_sim(**kw):
    sim = SimCluster(small_fleet(**kw), seed=3)
    for g in range(sim.n_gpus):
        sim.submit(batch(f"b{g}"))
    sim.schedule()
    assert len(sim.placements) == sim.n_gpus
    return sim


def test_a_power_cap_lowers_power_and_clock_and_sets_the_sw_power_cap_bit():
    sim = _busy_sim()
    applied = sim.set_power_limit(0, 150.0)
    sim.advance_to(1800)
    assert applied == 150.0
    assert sim.power_w[0] <= 150.0 + 1e-6
    assert sim.power_w[1] > 200.0
    assert sim.clock_event_reasons[0] & physics.SW_POWER_CAP
    assert not sim.clock_event_reasons[1] & physics.SW_POWER_CAP
    assert sim.sm_clock_mhz[0] < sim.sm_clock_mhz[1]
    assert sim.temperature_c[0] < sim.temperature_c[1]


@pytest.mark.parametrize(("watts", "applied"), [(10.0, 100.0), (1e6, 400.0), (250.0, 250.0)],
                         ids=["below the minimum is raised", "above TDP is lowered", "in range is kept"])
def test_power_limits_are_clamped_to_the_boards_range(watts, applied):
    sim = SimCluster(small_fleet(), seed=0)
    assert sim.set_power_limit(2, watts) == applied
    assert sim.power_limit_w[2] == applied


def test_a_hot_gpu_sets_thermal_bits_loses_clock_and_is_held_near_its_slowdown_temperature():
    sim = _busy_sim(nodes=2)
    sim.degrade_cooling("n0", inlet_rise_c=35.0)
    sim.advance_to(3600)
    hot, cool = 0, 4
    assert sim.clock_event_reasons[hot] & physics.SW_THERMAL
    assert not sim.clock_event_reasons[cool] & (physics.SW_THERMAL | physics.HW_THERMAL)
    assert sim.clock_factor[hot] < 0.95 and sim.clock_factor[cool] == 1.0
    assert sim.sm_clock_mhz[hot] < sim.sm_clock_mhz[cool]
    assert abs(sim.temperature_c[hot] - sim.slowdown_temp_c[hot]) < 1.5
    assert sim.stats()["gpu_seconds_above_slowdown"] > 0


def test_cooling_so_bad_that_min_clock_cannot_hold_sets_hw_slowdown_and_eventually_shuts_the_gpu_down():
    sim = _busy_sim(nodes=2)
    sim.degrade_cooling("n0", inlet_rise_c=40.0, resistance_factor=4.0)
    seen_hw = False
    for _ in range(120):
        sim.step()
        seen_hw |= bool(sim.clock_event_reasons[0] & physics.HW_THERMAL)
    assert seen_hw
    assert not sim.online[0] and sim.xid[0] == 79 and sim.power_w[0] == 0.0
    assert all(0 not in g for g in sim.placements.values())


def test_idle_gpus_report_the_idle_bit_and_busy_cool_gpus_report_no_reason():
    sim = SimCluster(small_fleet(), seed=0)
    sim.submit(batch("one"))
    sim.schedule()
    sim.advance_to(600)
    busy_gpu = sim.placements["batch/one"][0]
    idle_gpu = (busy_gpu + 1) % sim.n_gpus
    assert sim.clock_event_reasons[idle_gpu] == physics.IDLE
    assert sim.clock_event_reasons[busy_gpu] == 0
    assert sim.sm_active[idle_gpu] == 0 and sim.sm_active[busy_gpu] > 0.5


def test_energy_counters_are_monotonic_and_integrate_power():
    sim = _busy_sim()
    e0 = sim.energy_mj.copy()
    total = np.zeros(sim.n_gpus)
    for _ in range(30):
        before = sim.energy_mj.copy()
        sim.step(10.0)
        assert (sim.energy_mj >= before).all()
        total += sim.power_w * 10.0 * 1000.0
    assert np.allclose(sim.energy_mj - e0, total)
    assert sim.stats()["energy_kwh"] == pytest.approx(sim.energy_mj.sum() / 3.6e9)


def test_liquid_cooled_nodes_run_cooler_than_air_cooled_ones_at_equal_load():
    p = physics.GpuParams.from_fleet(demo_fleet())
    f = demo_fleet()
    h100 = [g.index for g in f.gpus if g.model == "H100-SXM"]
    assert p.resistance[h100[0]] == pytest.approx(catalog.CATALOGUE["H100-SXM"].thermal_resistance_c_per_w * 35 / 47)


def test_same_seed_gives_identical_runs_and_another_seed_differs():
    def run(seed):
        sim = _busy_sim() if seed is None else SimCluster(small_fleet(), seed=seed)
        for g in range(sim.n_gpus):
            sim.submit(batch(f"x{g}", milli=500))
        sim.schedule()
        sim.advance_to(3600)
        return sim.temperature_c.copy(), sim.power_w.copy()

    a, b, c = run(7), run(7), run(8)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert not np.array_equal(a[0], c[0])
