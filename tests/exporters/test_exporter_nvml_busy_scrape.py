"""A collection that gives up on the backend's lock (`NvmlBusy`: the power-cap agent's NVML call has not returned, a
GPU in recovery) is answered as a timed-out collection: the last complete exposition while it began within
``--serve-stale-for``, else a 503 naming why. It reached HTTP as a 500 with a traceback (audit s32y5, A): the
collection health re-raised it and the server caught only `CollectTimeout`.

Every wait is bounded: the hung agent call at most `BOUND_S`, the lock `LOCK_S`, the threads joined with a timeout."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from exporters.backends.fake_nvml import FakeDevice
from exporters.backends.nvml import NvmlBackend
from exporters.backends.nvml_gpu_reads import GpuReads
from exporters.collector import GpuCollector
from exporters.health import CollectHealth
from exporters.server import serve
from tests.cli.test_cli_health import get
from tests.exporters.test_exporter_power_cap_stuck_gpu import BOUND_S, HungDevice, lock_held

LOCK_S = 0.2


def exporter(serve_stale_s: float):
    nvml = HungDevice([FakeDevice(uuid=f"GPU-{i}", minor=i) for i in range(2)])
    backend = NvmlBackend(nvml, hostname="n1", reads=GpuReads(1.0))
    backend.lock_timeout_s = LOCK_S   # well within the collection timeout: the collection ends, failed, in time
    health = CollectHealth(collect_timeout_s=5.0, serve_stale_s=serve_stale_s, stuck_after_s=60.0)
    registry = CollectorRegistry()
    registry.register(GpuCollector(backend))
    return nvml, backend, health, serve(registry, health=health, port=0)




def test_a_scrape_behind_a_hung_agent_call_gets_the_last_complete_exposition_not_a_500():
    _, backend, health, server = exporter(serve_stale_s=30.0)
    try:
        code, before = get(server.port, "/metrics")
        assert code == 200 and 'DCGM_FI_DEV_GPU_TEMP{' in before
        agent, release = lock_held(backend)   # an agent's NVML call that does not return
        try:
            for _ in range(2):
                code, text = get(server.port, "/metrics")
                assert code == 200, text
                assert text.split("gputide_exporter_collect_timeouts")[0] == before.split(
                    "gputide_exporter_collect_timeouts")[0]   # the last complete one
            assert health.timeouts == 2   # each collection that gave up counted as one that timed out
        finally:
            release.set()
        agent.join(BOUND_S)
        code, text = get(server.port, "/metrics")
        assert code == 200 and health.timeouts == 2
    finally:
        server.close()


def test_with_nothing_recent_to_serve_a_scrape_behind_a_hung_agent_call_is_a_503_naming_why():
    _, backend, _, server = exporter(serve_stale_s=30.0)
    try:
        agent, release = lock_held(backend)   # before any collection: nothing complete to serve
        try:
            code, text = get(server.port, "/metrics")
            assert code == 503, text
            assert "power-cap agent" in text and "none has completed" in text and "Traceback" not in text
        finally:
            release.set()
        agent.join(BOUND_S)
        assert get(server.port, "/metrics")[0] == 200
    finally:
        server.close()
