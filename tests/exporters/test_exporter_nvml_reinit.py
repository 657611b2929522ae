"""NVML stopping under a running exporter (shut down by another user of the library in the process, the driver
unloaded or reloaded) made every later read fail for good: the backend never called ``nvmlInit`` again, so the
exporter stayed blind until its process was restarted. Now each read while NVML does not answer makes one attempt
to initialise it again (counted and logged when it fails, never failing the scrape), names the GPUs again by UUID
(a handle is one initialisation's), and asks again what NVML said of them under the previous one."""

from __future__ import annotations

import math

import pytest
from exporter_scrapes import Scrape

from exporters.backends.fake_nvml import (
    FakeDevice,
    FakeHandle,
    FakeNvml,
    NVMLError_DriverNotLoaded,
    NVMLError_LibRmVersionMismatch,
)
from exporters.backends.nvml import NvmlBackend
from exporters.collector import GPU_FIELD_NAMES, GpuCollector

XID = "DCGM_FI_DEV_XID_ERRORS"
TEMP = "DCGM_FI_DEV_GPU_TEMP"
SM = "DCGM_FI_PROF_SM_ACTIVE"


def node(**first: object) -> tuple[FakeNvml, list[FakeDevice], NvmlBackend]:
    devs = [FakeDevice(uuid="GPU-0", minor=0, **first), FakeDevice(uuid="GPU-1", minor=1, bus_id="00000000:2A:00.0")]
    nvml = FakeNvml(devs)
    return nvml, devs, NvmlBackend(nvml, hostname="n1")


def blind(r) -> bool:
    """Every field of every GPU NaN, and each an error or known unsupported."""
    pairs = set(r.errors) | set(r.unsupported)
    return (all(math.isnan(v) for name in GPU_FIELD_NAMES for v in r.values[name])
            and pairs == {(g.uuid, f) for g in r.identity for f in GPU_FIELD_NAMES})


def test_nvml_shut_down_under_the_exporter_is_initialised_again_at_the_next_read():
    nvml, devs, backend = node()
    collector = GpuCollector(backend)
    nvml.push_xid(devs[1], 48)
    assert Scrape(collector).values[XID] == {"GPU-0": 0, "GPU-1": 48}
    nvml.nvmlShutdown()   # another user of the library in this process, once too often
    s = Scrape(collector)
    assert s.values[TEMP] == {} and s.values[XID] == {}   # blind, and no XID read as "healthy"
    s = Scrape(collector)   # was blind for good
    assert s.values[TEMP] == {"GPU-0": 45, "GPU-1": 45}
    assert s.values[XID] == {"GPU-0": 0, "GPU-1": 48}   # what was heard before is kept
    assert all(isinstance(h, FakeHandle) and h.generation == 1 for h in backend.handles)   # named again
    assert nvml.refs == 1   # its own initialisation only: the shutdown it did not make is not repeated
    nvml.push_xid(devs[0], 79)
    assert Scrape(collector).values[XID] == {"GPU-0": 79, "GPU-1": 48}   # events heard on the new set
    assert 'gputide_exporter_nvml_reinits_total 1.0' in s.text
    assert 'gputide_exporter_nvml_reinit_failures_total 0.0' in s.text


@pytest.mark.parametrize("error", [NVMLError_DriverNotLoaded, NVMLError_LibRmVersionMismatch])
def test_while_the_driver_does_not_answer_each_read_tries_nvml_init_once_and_never_fails(error):
    nvml, devs, backend = node(mem_temp=None)
    assert not blind(backend.read())
    nvml.broken = error
    for attempt in range(3):
        before = nvml.calls.count("nvmlInit")
        r = backend.read()
        assert blind(r)
        assert ("GPU-0", "DCGM_FI_DEV_MEMORY_TEMP") in r.unsupported   # what a board lacks stays so meanwhile
        assert ("GPU-0", XID) in r.errors
        assert nvml.calls.count("nvmlInit") - before == (0 if attempt == 0 else 1)
    assert backend.nvml_reinit_failures == 2 and backend.nvml_reinits == 0
    nvml.broken = None
    r = backend.read()
    assert r.values[TEMP].tolist() == [45, 45] and r.values[XID].tolist() == [0, 0]
    assert backend.nvml_reinits == 1 and nvml.refs == 1   # its first reference was given back before the new one


def test_what_nvml_said_under_the_previous_initialisation_is_asked_again():
    nvml, devs, backend = node(ecc_supported=False)
    collector = GpuCollector(backend)
    Scrape(collector)
    assert "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" in Scrape(collector).lacks("GPU-0")
    assert "GPU-0" in Scrape(collector).values[SM]
    nvml.broken = NVMLError_DriverNotLoaded
    Scrape(collector)
    devs[0].ecc_supported = True   # ECC switched on: the pending mode applies as the driver loads
    nvml.broken = None
    s = Scrape(collector)
    assert s.values["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] == {"GPU-0": 0, "GPU-1": 0}
    assert s.lacks("GPU-0") == set()
    assert "GPU-0" not in s.values[SM]   # no GPM sample of this initialisation yet: no series, no error
    assert ("GPU-0", SM) not in backend.read().errors
    assert "GPU-0" in Scrape(collector).values[SM]


def test_a_gpu_nvml_no_longer_names_is_no_longer_served_and_the_others_are_labelled_as_nvml_counts_them():
    nvml, devs, backend = node()
    backend.read()
    nvml.broken = NVMLError_DriverNotLoaded
    backend.read()
    nvml.devices = [devs[1]]   # the reload did not find GPU-0 again: GPU-1 is NVML's index 0 now
    nvml.broken = None
    r = backend.read()   # what a restarted exporter would serve (test_exporter_nvml_reinit_gpus_found_and_gone)
    assert [(g.uuid, g.gpu, g.device) for g in r.identity] == [("GPU-1", "0", "nvidia0")]
    assert r.values[TEMP].tolist() == [45] and not r.errors


def test_nvml_naming_none_of_the_gpus_served_is_a_failed_attempt():
    nvml, devs, backend = node()
    backend.read()
    nvml.broken = NVMLError_DriverNotLoaded
    backend.read()
    nvml.broken, nvml.devices = None, []
    assert blind(backend.read())
    assert backend.nvml_reinit_failures == 1 and nvml.refs == 0   # the init it made is given back
    nvml.devices = devs
    assert backend.read().values[TEMP].tolist() == [45, 45]
    assert backend.nvml_reinits == 1 and nvml.refs == 1
