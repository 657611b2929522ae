"""The NVML backend's start failing after ``nvmlInit`` succeeded (audit a13 of 3a0847d6): the GPUs' count refused
(NoPermission), or a bug in the start, raised out of `NvmlBackend` with NVML still initialised, its reference never
given back (no backend, so no one to shut it down). NVML is shut down and the start's own error raised, not one from
the shutdown."""

from __future__ import annotations

import pytest

from exporters.backends.fake_nvml import FakeDevice, FakeNvml, NVMLError_NoPermission, NVMLError_Uninitialized
from exporters.backends.nvml import NvmlBackend


def failing_count(nvml: FakeNvml, exc: Exception) -> None:
    def count() -> int:
        nvml.calls.append("nvmlDeviceGetCount")
        raise exc

    nvml.nvmlDeviceGetCount = count


@pytest.mark.parametrize("exc", [NVMLError_NoPermission(), AttributeError("a bug in the start")],
                         ids=["an NVML error", "a bug"])
def test_nvml_is_shut_down_and_the_starts_error_raised(exc):
    nvml = FakeNvml([FakeDevice(uuid="GPU-0")])
    failing_count(nvml, exc)
    with pytest.raises(type(exc)) as raised:
        NvmlBackend(nvml, hostname="n1")
    assert raised.value is exc
    assert nvml.calls[0] == "nvmlInit" and nvml.calls[-2:] == ["nvmlDeviceGetCount", "nvmlShutdown"], nvml.calls
    assert not nvml.initialised


def test_an_nvml_error_at_the_shutdown_leaves_the_starts_error_said():
    nvml = FakeNvml([FakeDevice(uuid="GPU-0")])
    failing_count(nvml, NVMLError_NoPermission())

    def shutdown() -> None:
        nvml.calls.append("nvmlShutdown")
        raise NVMLError_Uninitialized()   # another user of the library shut it down already

    nvml.nvmlShutdown = shutdown
    with pytest.raises(NVMLError_NoPermission):
        NvmlBackend(nvml, hostname="n1")
    assert nvml.calls[-1] == "nvmlShutdown"
