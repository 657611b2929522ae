"""Two scrapes at once (an HA pair of Prometheus replicas, or Prometheus and a person's curl): the server answers
each from its own thread, and both read one collector and one NVML backend. Interleaved, two reads shared the GPM
samples (one scrape freed the sample the other was still comparing, or freed one twice: a crash in C with the real
library, a failed scrape here) and took SM activity over the microseconds between the two scrapes; the collector's
caches could hand one scrape the label sets of the other. Scrapes are now collected one at a time."""

from __future__ import annotations

import contextlib
import threading
import time
import urllib.request
from types import SimpleNamespace

from prometheus_client.parser import text_string_to_metric_families

from exporters.backends.fake_nvml import FakeDevice, FakeMig, FakeNvml, NVMLError
from exporters.backends.nvml import NvmlBackend
from exporters.collector import GPU_FIELD_NAMES, GpuCollector
from exporters.server import serve

SCRAPES = 20   # per scraper


class SlowNvml(FakeNvml):
    """A fake NVML whose calls take a little time (as the real driver's do, freeing the GIL between them), that
    counts energy up on every read, and that keeps track of its GPM samples: `misuse` lists a sample freed twice,
    used after it was freed, or compared with one taken at the same moment (no interval to measure SM activity
    over). Once `meet()` is armed, the next two GPM samples wait for each other (up to 1 s): two reads at once are
    then inside one GPU's GPM read together."""

    def __init__(self, devices) -> None:
        super().__init__(devices)
        self.misuse: list[str] = []
        self._meet: threading.Barrier | None = None
        self._meetings = 0

    def meet(self) -> None:
        self._meet, self._meetings = threading.Barrier(2, timeout=1.0), 2

    def _dev(self, h, fn):
        time.sleep(0.0002)
        return super()._dev(h, fn)

    def nvmlDeviceGetFieldValues(self, h, ids):
        h.energy_mj += 1000
        return super().nvmlDeviceGetFieldValues(h, ids)

    def nvmlGpmSampleAlloc(self):
        return SimpleNamespace(device=None, freed=False, t=0.0)

    def nvmlGpmSampleGet(self, h, sample):
        if self._meetings > 0:
            self._meetings -= 1
            with contextlib.suppress(threading.BrokenBarrierError):   # scrapes one at a time: nobody to meet
                self._meet.wait()
        sample.t = time.monotonic()
        return super().nvmlGpmSampleGet(h, sample)

    def nvmlGpmMigSampleGet(self, h, gpu_instance_id, sample):
        sample.t = time.monotonic()
        return super().nvmlGpmMigSampleGet(h, gpu_instance_id, sample)

    def _misused(self, what: str) -> None:
        self.misuse.append(what)
        raise NVMLError(what)

    def nvmlGpmSampleFree(self, sample) -> None:
        if sample.freed:
            self._misused("GPM sample freed twice")
        sample.freed = True
        super().nvmlGpmSampleFree(sample)

    def nvmlGpmMetricsGet(self, mg):
        if mg.sample1.freed or mg.sample2.freed:
            self._misused("GPM sample used after it was freed")
        if mg.sample2.t - mg.sample1.t < 0.001:
            self._misused("GPM samples taken at the same moment")
        time.sleep(0.0005)
        return super().nvmlGpmMetricsGet(mg)


def _scrape(port: int) -> dict:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_two_scrapers_at_once_each_get_every_series_and_counters_that_only_rise():
    gpus = [FakeDevice(uuid=f"GPU-{i}", minor=i, bus_id=f"00000000:{0x18 + i:02X}:00.0") for i in range(3)]
    gpus.append(FakeDevice(uuid="GPU-mig", minor=3, migs=[FakeMig("MIG-1", gpu_instance_id=1, profile="3g.40gb"),
                                                          FakeMig("MIG-2", gpu_instance_id=2, profile="4g.40gb")]))
    gpus[1].fail["nvmlDeviceGetClockInfo"] = NVMLError   # a field failing every scrape: a rising error counter
    nvml = SlowNvml(gpus)
    server = serve(GpuCollector(NvmlBackend(nvml, hostname="node-a")), port=0)
    try:
        _scrape(server.port)   # GPM compares two samples: from the second scrape on, every GPU has SM activity
        nvml.meet()
        results: dict[int, list] = {0: [], 1: []}
        start = threading.Barrier(2)

        def scraper(k: int) -> None:
            start.wait()
            for _ in range(SCRAPES):
                try:
                    results[k].append(_scrape(server.port))
                except OSError as exc:   # a scrape the server failed (500)
                    results[k].append(exc)

        threads = [threading.Thread(target=scraper, args=(k,)) for k in results]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    finally:
        server.close()
    assert nvml.misuse == []
    uuids = {g.uuid for g in gpus}
    for k, scrapes in results.items():
        assert len(scrapes) == SCRAPES and not [s for s in scrapes if isinstance(s, Exception)], scrapes
        for fams in scrapes:
            for name in GPU_FIELD_NAMES:
                got = {s.labels["UUID"] for s in fams[name].samples if "GPU_I_ID" not in s.labels}
                want = uuids - {"GPU-1"} if name == "DCGM_FI_DEV_SM_CLOCK" else uuids
                assert got == want, (k, name)
            sm = {(s.labels["UUID"], s.labels.get("GPU_I_ID", "")): s.value
                  for s in fams["DCGM_FI_PROF_SM_ACTIVE"].samples}
            assert sm == {**{(u, ""): 0.55 for u in uuids - {"GPU-mig"}}, ("GPU-mig", ""): 0.55,
                          ("GPU-mig", "1"): 0.4, ("GPU-mig", "2"): 0.4}, k
        for name in ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "gputide_exporter_collect_errors"):
            series = [{tuple(sorted(s.labels.items())): s.value for s in fams[name].samples} for fams in scrapes]
            for before, after in zip(series, series[1:]):
                assert all(after[key] >= v for key, v in before.items()), (k, name)
