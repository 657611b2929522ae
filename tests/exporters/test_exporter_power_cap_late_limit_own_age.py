"""In the exporter, the power-cap agent's late limit read is used at its next sync if it began at most two
``--caps-interval`` ago, whatever ``--serve-stale-for`` (`NvmlBackend.agent_syncs_every`, from `watch_gpu_reads`).

It was used only while younger than the reads' `max_age_s`, which `watch_gpu_reads` sets from ``--serve-stale-for``
(what a late read is served to a collection for): at a ``--caps-interval`` at or above it, or ``--serve-stale-for
0s``, a GPU slower than the reads' deadline was never capped nor given back (review s33r3 finding 1: 700 W over 5
syncs). The reads' `max_age_s` is left to say what a collection serves and when a call counts as stuck.

The reads' clock is a fake one, moved by the agent's interval between syncs; the slow GPU's calls are held until
their sync has returned (`tests.exporters.test_exporter_power_cap_slow_gpu.sync`): always late. They slept 50 ms
each, and a fast GPU slow to be scheduled let the slow one's read return in time (its wait, on a clock that does
not move, begins after the fast GPU's): read, and capped, at 21 s a sync."""

from __future__ import annotations

from balancer.cmd.exporter import watch_gpu_reads
from exporters.health import CollectHealth
from tests.cli.test_cli_health import Clock
from tests.exporters.test_exporter_power_cap_slow_gpu import slow_node, sync


def capped_after(serve_stale_s: float, caps_interval_s: float | None, syncs: int = 5, step_s: float | None = None):
    """(what `syncs` syncs applied, the slow GPU's limit, the backend), the reads' clock moved `step_s` (the
    interval) between syncs."""
    devs, nvml, backend, source, agent = slow_node({"GPU-1": 300.0})
    clock = Clock()
    backend.reads.clock = clock
    health = CollectHealth(clock=clock, collect_timeout_s=8.0, serve_stale_s=serve_stale_s)
    if caps_interval_s is None:
        watch_gpu_reads(backend, health)
    else:
        watch_gpu_reads(backend, health, caps_interval_s)
    assert backend.reads.max_age_s == serve_stale_s   # what a collection serves: as before
    nvml.slow = "GPU-1"
    out: dict[str, float] = {}
    for _ in range(syncs):
        out.update(sync(agent, backend))
        clock.now += step_s or caps_interval_s or 1.0
    assert agent.failed is None or "could not be read" in agent.failed
    return out, devs[1].limit_mw, backend


def test_a_slow_gpu_is_capped_at_a_caps_interval_above_serve_stale_for():
    out, limit_mw, backend = capped_after(serve_stale_s=5.0, caps_interval_s=10.0)
    assert out == {"GPU-1": 300.0} and limit_mw == 300_000


def test_a_slow_gpu_is_capped_with_serve_stale_for_0s():
    out, limit_mw, backend = capped_after(serve_stale_s=0.0, caps_interval_s=None)
    assert out == {"GPU-1": 300.0} and limit_mw == 300_000


def test_a_late_limit_read_older_than_two_intervals_is_still_dropped():
    out, limit_mw, backend = capped_after(serve_stale_s=30.0, caps_interval_s=10.0, syncs=4, step_s=21.0)
    assert backend.limits_max_age_s == 20.0
    assert out == {} and limit_mw == 700_000
