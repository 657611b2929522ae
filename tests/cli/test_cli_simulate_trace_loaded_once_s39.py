"""The hotspot scenario reads a `simulate --trace` once, not once per service (audit a9 of
4ea58ae7). Before: its setup called `demand_from_trace` in its service loop and parsed the file for each of its
three services (each time twice for a trace finer than --step). A trace finer than --step is loaded once too, at
--step (`load_demand`'s coarsen_to; session 40): loaded at its own step and again at --step, it was parsed twice."""

from __future__ import annotations

import pytest

from balancer.app import scenarios
from balancer.forecast import traces

START = 1704067200   # 2024-01-01T00:00:00Z
MINUTES = 60


@pytest.mark.parametrize("rows, loads", [
    pytest.param(lambda m: [(START + 60 * m, 1 + m)], 1, id="a trace at the simulator's step: one load"),
    pytest.param(lambda m: [(START + 60 * m + s, 1 + m) for s in range(60)], 1,
                 id="a finer trace: one load, at the step"),
])
def test_the_hotspot_setup_reads_the_trace_once_for_all_its_services(tmp_path, monkeypatch, rows, loads):
    trace = tmp_path / "trace.csv"
    trace.write_text("timestamp,value\n" + "".join(f"{t},{v}\n" for m in range(MINUTES) for t, v in rows(m)))
    calls = []
    load_demand = traces.load_demand
    monkeypatch.setattr(traces, "load_demand", lambda *a, **k: calls.append(a) or load_demand(*a, **k))
    sim, _, _ = scenarios.build("hotspot", trace=str(trace), step_s=60.0, days=0.02)
    assert len(calls) == loads
    assert sorted(sim.service_status()) == ["llm-0", "llm-1", "llm-2"]
