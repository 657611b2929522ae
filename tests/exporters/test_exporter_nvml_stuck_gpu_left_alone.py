"""What the collection's own thread and the exit still asked NVML of a GPU whose read is stuck in it (audit s32y2
follow-up): the XID drain registered a GPU not listening yet (its registration refused earlier) on the event set,
which hung the collection in that GPU's call; and `close()` ran ``nvmlShutdown`` under the call in flight. Now the
drain leaves a stuck GPU's registration to a later drain, and `close()` leaves NVML to the process's exit.

Bounded: the hung calls wait at most `BOUND_S`, the collection is joined for `JOIN_S`."""

from __future__ import annotations

from exporters.backends.fake_nvml import FakeDevice, NVMLError
from exporters.backends.nvml import XID, NvmlBackend
from exporters.backends.nvml_gpu_reads import GpuReads
from tests.exporters.test_exporter_nvml_gpu_hung import DEADLINE_S, ended
from tests.exporters.test_exporter_power_cap_stuck_gpu import HungDevice, in_thread


def stuck_backend(register_refused: bool = False) -> tuple[HungDevice, NvmlBackend]:
    devs = [FakeDevice(uuid=f"GPU-{i}", minor=i) for i in range(3)]
    if register_refused:
        devs[1].fail = {"nvmlDeviceRegisterEvents": NVMLError}   # retried at every drain
    nvml = HungDevice(devs)
    backend = NvmlBackend(nvml, hostname="n1", reads=GpuReads(DEADLINE_S))
    backend.read()
    nvml.hung, nvml.hang_on = "GPU-1", "nvmlDeviceGetTemperature"
    backend.read()   # GPU-1's read stuck in its temperature
    nvml.hang_on = None   # from now every call of GPU-1 hangs
    return nvml, backend


def test_the_xid_drain_does_not_register_a_gpu_whose_read_is_stuck():
    nvml, backend = stuck_backend(register_refused=True)
    try:
        t, out = in_thread(backend.read)
        assert not t.is_alive(), "the drain registered the stuck GPU for XID events, in its hung call"
        xid = out["result"].values[XID].tolist()
        assert xid[0] == 0 and xid[2] == 0
    finally:
        nvml.release.set()
    ended()


def test_close_does_not_shut_nvml_down_under_a_stuck_read():
    nvml, backend = stuck_backend()
    try:
        backend.close()
        assert "nvmlShutdown" not in nvml.calls
    finally:
        nvml.release.set()
    ended()
    backend.close()
    assert "nvmlShutdown" in nvml.calls
