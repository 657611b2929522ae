"""/readyz answered 200 while every field of every GPU failed to read (NVML uninitialised under the exporter, the
driver unloaded): the collection "succeeded" with no GPU series in it, so a rollout moved on and ``kubectl get pods``
showed a ready exporter serving nothing. Now a collection that read nothing at all (or found no GPU) leaves the
exporter not ready with the reason, until one reads a field; liveness stays 200 (a restart mends no driver)."""

from __future__ import annotations

import numpy as np
import pytest

from exporters.backends.base import GpuIdentity, GpuReadings
from exporters.backends.fake_nvml import FakeDevice, FakeNvml, NVMLError_DriverNotLoaded
from exporters.backends.nvml import NvmlBackend
from exporters.collector import GpuCollector, nothing_read
from exporters.health import CollectHealth
from exporters.server import serve
from tests.cli.test_cli_health import Clock, get

GPU = GpuIdentity("0", "GPU-0", "00000000:01:00.0", "nvidia0", "NVIDIA H100", "node-a")


class Readings:
    """A backend answering `readings` as they are."""

    def __init__(self, readings: GpuReadings) -> None:
        self.readings = readings

    def read(self) -> GpuReadings:
        return self.readings


def test_a_driver_that_stops_answering_makes_the_exporter_not_ready_but_live_until_nvml_answers_again():
    devs = [FakeDevice(uuid="GPU-0", minor=0), FakeDevice(uuid="GPU-1", minor=1)]
    nvml = FakeNvml(devs)
    server = serve(GpuCollector(NvmlBackend(nvml, hostname="n1")), port=0, health=CollectHealth(clock=Clock()))
    try:
        assert get(server.port, "/metrics")[0] == 200
        assert get(server.port, "/readyz")[0] == 200
        nvml.broken = NVMLError_DriverNotLoaded
        for _ in range(2):
            code, text = get(server.port, "/metrics")
            assert code == 200 and "gputide_exporter_gpus_read 0.0" in text and "DCGM_FI_DEV_GPU_TEMP{" not in text
            assert get(server.port, "/readyz") == (503, "not ready: the last collection read no field of its 2 GPUs "
                                                        "(every one failed; see the exporter's log)\n")
            assert get(server.port, "/healthz")[0] == 200
        nvml.broken = None
        code, text = get(server.port, "/metrics")
        assert code == 200 and "gputide_exporter_gpus_read 2.0" in text
        assert get(server.port, "/readyz")[0] == 200
    finally:
        server.close()


NAN = np.array([np.nan])


@pytest.mark.parametrize(("readings", "reason"), [
    (GpuReadings(identity=(GPU,), values={"DCGM_FI_DEV_GPU_TEMP": NAN, "DCGM_FI_DEV_XID_ERRORS": NAN},
                 errors=(("GPU-0", "DCGM_FI_DEV_GPU_TEMP"), ("GPU-0", "DCGM_FI_DEV_XID_ERRORS"))),
     "the last collection read no field of its 1 GPUs (every one failed; see the exporter's log)"),
    (GpuReadings(identity=(), values={}),
     "the last collection found no GPU to read (looked for again at each collection)"),
    (GpuReadings(identity=(GPU, GPU), values={"DCGM_FI_DEV_GPU_TEMP": np.array([np.nan, 40.0])}), None),
])
def test_a_collection_reads_nothing_when_no_field_of_any_gpu_has_a_value(readings, reason):
    assert nothing_read(GpuCollector(Readings(readings)).collect()) == reason


def test_a_registry_without_the_gpu_collector_says_nothing_of_it():
    assert nothing_read([]) is None
