"""The XID drain named each event's GPU with ``nvmlDeviceGetUUID`` on the event's handle, from the collection's
thread under the backend's lock (audit s32y2): a GPU in recovery raises an XID while its calls hang, so its own XID
hung the collection, which the per-GPU reads were to prevent. The event's handle is now matched against the handles
held (`handle_key`, by the address a pynvml handle holds), NVML asked only for a handle not held.

Bounded: the hung calls wait at most `BOUND_S`, the collection is joined for `JOIN_S`."""

from __future__ import annotations

import ctypes

import pynvml

from exporters.backends.fake_nvml import FakeDevice
from exporters.backends.nvml import XID, NvmlBackend
from exporters.backends.nvml_gpu_reads import GpuReads
from exporters.backends.nvml_xid import handle_key
from tests.exporters.test_exporter_nvml_gpu_hung import DEADLINE_S, ended
from tests.exporters.test_exporter_power_cap_stuck_gpu import HungDevice, in_thread


def test_a_hung_gpus_xid_is_heard_without_asking_nvml_for_its_uuid():
    devs = [FakeDevice(uuid=f"GPU-{i}", minor=i) for i in range(3)]
    nvml = HungDevice(devs)
    backend = NvmlBackend(nvml, hostname="n1", reads=GpuReads(DEADLINE_S))
    backend.read()
    nvml.hung = "GPU-1"
    try:
        backend.read()   # GPU-1's read stuck
        nvml.push_xid(devs[1], 119)
        t, out = in_thread(backend.read)
        assert not t.is_alive(), "the drain asked NVML for the hung GPU's UUID"
        assert out["result"].values[XID].tolist() == [0, 119, 0]
    finally:
        nvml.release.set()
    ended()


def test_two_pynvml_handles_of_one_address_are_one_gpu():
    a = ctypes.cast(ctypes.c_void_p(0x5000), pynvml.c_nvmlDevice_t)
    b = ctypes.cast(ctypes.c_void_p(0x5000), pynvml.c_nvmlDevice_t)
    c = ctypes.cast(ctypes.c_void_p(0x6000), pynvml.c_nvmlDevice_t)
    assert a is not b and handle_key(a) == handle_key(b) != handle_key(c)
    d = FakeDevice(uuid="GPU-0")
    assert handle_key(d) == handle_key(d) != handle_key(FakeDevice(uuid="GPU-0"))


def test_string_handles_are_keyed_by_value_not_by_a_temporary_buffers_address():
    """ctypes casts a string to a temporary buffer's address, which two strings may share (and one string's two
    casts need not): a handle that is no ctypes pointer is keyed by itself."""
    one, same = "GPU-0", "".join(["GPU-", "0"])
    assert one is not same
    assert handle_key(one) == handle_key(same) == ("handle", "GPU-0") != handle_key("GPU-1")
    assert handle_key(b"GPU-0") == handle_key(b"".join([b"GPU-", b"0"])) != handle_key(b"GPU-1")
