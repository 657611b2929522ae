"""The XID drain runs after the GPU reads (audit s32y5, C): it ran before them, so a GPU hung since the last
collection was not known stuck yet, and a GPU whose XID registration had been refused was registered again in the
collection's thread, under the backend's lock: its hung call hung the collection (f5). Now the drain follows the
reads, and a GPU whose read is late is left to a later drain.

Bounded: the hung calls wait at most `BOUND_S`, the collection is joined for `JOIN_S`."""

from __future__ import annotations

from exporters.backends.fake_nvml import FakeDevice, NVMLError
from exporters.backends.nvml import XID, NvmlBackend
from exporters.backends.nvml_gpu_reads import GpuReads
from tests.exporters.test_exporter_nvml_gpu_hung import DEADLINE_S, ended
from tests.exporters.test_exporter_power_cap_stuck_gpu import HungDevice, in_thread


def test_a_gpu_hung_since_the_last_collection_is_not_registered_for_xids_before_its_read_is_found_late():
    devs = [FakeDevice(uuid=f"GPU-{i}", minor=i) for i in range(3)]
    devs[1].fail = {"nvmlDeviceRegisterEvents": NVMLError}   # refused at start: retried at every drain
    nvml = HungDevice(devs)
    backend = NvmlBackend(nvml, hostname="n1", reads=GpuReads(DEADLINE_S))
    backend.read()
    assert backend._xids.listening.tolist() == [True, False, True]
    devs[1].fail = {}
    nvml.hung = "GPU-1"   # every call of GPU-1 hangs from now: its read not begun, not stuck yet
    try:
        t, out = in_thread(backend.read)
        assert not t.is_alive(), "the drain registered GPU-1 for XID events before its read was found late"
        assert backend.reads.stuck() == ["GPU-1"]
        xid = out["result"].values[XID].tolist()
        assert xid[0] == 0 and xid[2] == 0
        assert ("GPU-1", XID) in out["result"].errors   # unheard: an error, no series
    finally:
        nvml.release.set()
    ended()
    backend.read()
    assert backend._xids.listening.tolist() == [True, True, True]   # registered once its read returned
