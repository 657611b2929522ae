"""Readiness counts only values read in this collection. With every getter of every GPU failing (NVMLError Unknown),
or every GPU fallen off the bus, the XID (0 from the event set, 79 for a lost GPU) and the temperature thresholds
(read once and kept) still had values, so ``gputide_exporter_gpus_read`` said every GPU was read and /readyz
answered 200 for an exporter that read nothing. Those kept values no longer count; their series stay."""

from __future__ import annotations

import pytest
from exporter_scrapes import Scrape
from prometheus_client.parser import text_string_to_metric_families

from exporters.backends.fake_nvml import FakeDevice, FakeNvml, NVMLError
from exporters.backends.nvml import NvmlBackend
from exporters.collector import GpuCollector
from exporters.health import CollectHealth, TrackedCollector

XID = "DCGM_FI_DEV_XID_ERRORS"


class EveryGetter(dict):
    """A device's `fail` that breaks every call but the XID event registration with an unknown NVMLError."""

    def __contains__(self, key: object) -> bool:
        return key != "nvmlDeviceRegisterEvents"

    def __getitem__(self, key: str) -> type[NVMLError]:
        return NVMLError


def gpus_read(text: str) -> float:
    fam = next(f for f in text_string_to_metric_families(text) if f.name == "gputide_exporter_gpus_read")
    return fam.samples[0].value


@pytest.mark.parametrize(("case", "xid"), [("unknown", 0), ("lost", 79)])
def test_a_collection_that_read_only_kept_values_leaves_the_exporter_not_ready(case, xid):
    devs = [FakeDevice(uuid="GPU-0", minor=0), FakeDevice(uuid="GPU-1", minor=1)]
    collector = GpuCollector(NvmlBackend(FakeNvml(devs), hostname="n1"))
    health = CollectHealth()
    tracked = TrackedCollector(collector, health)
    assert gpus_read(tracked.exposition().decode()) == 2 and health.ready()[0]
    for d in devs:
        if case == "lost":
            d.lost = True
        else:
            d.fail = EveryGetter()
    text = tracked.exposition().decode()
    assert gpus_read(text) == 0   # was 2
    assert health.ready() == (False, "not ready: the last collection read no field of its 2 GPUs (every one failed; "
                                     "see the exporter's log)")
    s = Scrape(collector)
    assert s.values[XID] == {"GPU-0": xid, "GPU-1": xid}   # the kept values are still published
    for d in devs:
        d.lost, d.fail = False, {}
    assert gpus_read(tracked.exposition().decode()) == 2 and health.ready()[0]
