"""Prometheus text exposition (format 0.0.4), written fast and without renaming dcgm-exporter's counters.

`render(registry)` (`render_families(families)`: families already collected) writes what prometheus_client's
`generate_latest` writes, with two differences:

* a counter family whose samples carry the family name itself (``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``) gets
  ``# TYPE <that name> counter``; `generate_latest` would announce ``<name>_total``, which no sample carries;
* `ArrayMetric` families are written from their numpy values and cached label strings, about 10x faster than
  formatting a label dict per sample.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from exporters.collector import ArrayMetric, label_str

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_TYPES = {"info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram", "unknown": "untyped"}


def _help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _value(v: float) -> str:
    return repr(v) if math.isfinite(v) else floatToGoString(v)


def render(registry: Collector) -> bytes:
    return render_families(registry.collect())


def render_families(families: Iterable[Metric]) -> bytes:
    out: list[str] = []
    for metric in families:
        if isinstance(metric, ArrayMetric):
            name = metric.name
            out.append(f"# HELP {name} {_help(metric.documentation)}\n# TYPE {name} {metric.type}\n")
            prefix = name + "{"
            vals = metric.values.tolist()
            strs = map(repr, vals) if np.isfinite(metric.values).all() else map(_value, vals)
            out.extend(f"{prefix}{lbl}}} {v}\n" for lbl, v in zip(metric.label_strs, strs))
            continue
        samples = metric.samples
        name, typ = metric.name, metric.type
        if typ == "counter" and not any(s.name == name for s in samples):
            name += "_total"
            samples = [s for s in samples if not s.name.endswith("_created")]
        elif typ == "info":
            name += "_info"
        out.append(f"# HELP {name} {_help(metric.documentation)}\n# TYPE {name} {_TYPES.get(typ, typ)}\n")
        for s in samples:
            lbl = "{" + label_str(s.labels) + "}" if s.labels else ""
            out.append(f"{s.name}{lbl} {_value(float(s.value))}\n")
    return "".join(out).encode()
