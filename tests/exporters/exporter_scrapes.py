"""`Scrape`: one scrape of a `GpuCollector`, read back from its exposition text (asking the registry would scrape
again), with what each GPU lacks: per-field values by UUID, collect-error counts and unsupported pairs."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from exporters.collector import GPU_FIELD_NAMES, GpuCollector
from exporters.exposition import render


class Scrape:
    def __init__(self, collector: GpuCollector) -> None:
        reg = CollectorRegistry()
        reg.register(collector)
        self.text = render(reg).decode()
        fams = {f.name: f for f in text_string_to_metric_families(self.text)}
        self.values = {n: {s.labels["UUID"]: s.value for s in fams[n].samples} if n in fams else {}
                       for n in GPU_FIELD_NAMES}
        self.errors = {(s.labels["UUID"], s.labels["field"]): s.value
                       for s in fams["gputide_exporter_collect_errors"].samples}
        info = fams["gputide_exporter_unsupported_field_info"].samples
        assert all(s.value == 1 and set(s.labels) == {"UUID", "field"} for s in info)
        self.unsupported = {(s.labels["UUID"], s.labels["field"]) for s in info}

    def failed(self, uuid: str) -> set[str]:
        return {f for u, f in self.errors if u == uuid}

    def lacks(self, uuid: str) -> set[str]:
        return {f for u, f in self.unsupported if u == uuid}

    def present(self, uuid: str) -> set[str]:
        return {n for n in GPU_FIELD_NAMES if uuid in self.values[n]}
