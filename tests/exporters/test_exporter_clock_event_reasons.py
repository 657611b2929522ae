"""Clock event reasons on drivers before R535, which have only the call's old name (``...ThrottleReasons``).

nvidia-ml-py ships both ``nvmlDeviceGetCurrentClocksEventReasons`` and ``nvmlDeviceGetCurrentClocksThrottleReasons``;
the first calls a driver symbol that R470 / R525 drivers lack, and pynvml raises FunctionNotFound for it.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from exporters.backends.fake_nvml import FakeDevice, FakeNvml, NVMLError_FunctionNotFound
from exporters.backends.nvml import NvmlBackend
from exporters.collector import GpuCollector

NAME = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"


def _old_driver() -> tuple[FakeNvml, list[FakeDevice]]:
    devs = [FakeDevice(uuid=f"GPU-{i}", minor=i, reasons=0x4 | 0x40 * i,   # SW power cap; GPU 1 also HW thermal
                       fail={"nvmlDeviceGetCurrentClocksEventReasons": NVMLError_FunctionNotFound}) for i in range(2)]
    return FakeNvml(devs), devs


def test_a_driver_before_r535_reports_clock_event_reasons_through_the_old_call_without_errors():
    nvml, devs = _old_driver()
    reg = CollectorRegistry()
    reg.register(GpuCollector(NvmlBackend(nvml, hostname="h")))
    for _ in range(2):
        for d in devs:
            assert reg.get_sample_value(NAME, {"gpu": d.uuid[-1], "UUID": d.uuid, "pci_bus_id": d.bus_id,
                                               "device": f"nvidia{d.minor}", "modelName": d.name, "Hostname": "h",
                                               "DCGM_FI_DRIVER_VERSION": "580.159.04"}) == d.reasons
            assert reg.get_sample_value("gputide_exporter_collect_errors_total", {"UUID": d.uuid, "field": NAME}) \
                is None
    # the new call is not asked again once the driver proved to lack it
    assert nvml.calls.count("nvmlDeviceGetCurrentClocksEventReasons") == 1


def test_a_current_driver_is_asked_with_the_new_call_only():
    nvml = FakeNvml([FakeDevice(uuid="GPU-0", reasons=0x8)])
    backend = NvmlBackend(nvml, hostname="h")
    assert backend.read().values[NAME].tolist() == [0x8]
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" not in nvml.calls
