"""`gputide exporter --backend nvml` wires each GPU's read to the probes and to its collection timeout
(`balancer.cmd.exporter.watch_gpu_reads`). The backend's reads ran unwatched with their own 3 s: a GPU whose call never
returned held no collection open, so neither ``/readyz`` nor ``/healthz`` ever failed for it, and a
``--collect-timeout`` under 4 s was outrun by the reads' deadline alone."""

from __future__ import annotations

from test_exporter_nvml_gpu_hung import HungTemperature, ended

from balancer.cmd.exporter import watch_gpu_reads
from exporters.backends.fake_nvml import FakeDevice
from exporters.backends.nvml import GPU_TIMEOUT_S, NvmlBackend
from exporters.collector import GpuCollector
from exporters.health import CollectHealth, TrackedCollector
from tests.cli.test_cli_health import Clock


def test_a_hung_gpu_read_fails_readiness_then_liveness_as_a_stuck_collection_does():
    nvml = HungTemperature([FakeDevice(uuid=f"GPU-{i}", minor=i) for i in range(2)])
    clock = Clock()
    health = CollectHealth(clock=clock, collect_timeout_s=2.0, stuck_after_s=60.0, serve_stale_s=12.0)
    backend = NvmlBackend(nvml, hostname="n1")
    watch_gpu_reads(backend, health)
    assert backend.reads.timeout_s == 0.75   # 3/8 of 2 s: with the kubelet's half after it, within the 2 s
    assert backend.lock_timeout_s == 0.25   # 1/8: lock, reads and kubelet together within the 2 s
    assert backend.reads.max_age_s == 12.0   # a late GPU read served as long as a late collection is
    tracked = TrackedCollector(GpuCollector(backend), health)
    tracked.exposition()
    nvml.hung = "GPU-1"
    try:
        tracked.exposition()
        assert health.ready()[0] and health.live()[0]
        clock.now += 3.0
        assert health.ready() == (False, "not ready: GPU GPU-1's read has been running for 3 s (timeout 2 s)")
        clock.now += 60.0
        assert health.live() == (False, "stuck: GPU GPU-1's read has been running for 63 s (limit 60 s)")
    finally:
        nvml.release.set()
    ended()
    assert health.ready()[0]


def test_the_reads_keep_their_own_deadline_under_a_long_collection_timeout_and_a_sim_backend_is_left_alone():
    health = CollectHealth(clock=Clock(), collect_timeout_s=30.0)
    backend = NvmlBackend(HungTemperature([FakeDevice(uuid="GPU-0", minor=0)]), hostname="n1")
    watch_gpu_reads(backend, health)
    assert backend.reads.timeout_s == GPU_TIMEOUT_S and backend.reads.watching == health.watching

    class Sim:
        pass

    sim = Sim()
    watch_gpu_reads(sim, health)
    assert vars(sim) == {}
