"""A telemetry source that reads a `SimCluster` directly, with faults injectable for tests.

`SimTelemetrySource(sim)` returns `sim.snapshot()`: the ground truth, as fresh Prometheus data would show it.
Faults model what goes wrong between a real fleet and the controller:

* `down=True`            the source cannot be reached         -> `TelemetryUnavailable`
* `sample_age_s=600`     scrapes stopped some time ago          -> the snapshot carries old samples
                                                                  (the loop's staleness check fails it)
* `nan_gpus={3, 7}`      a broken exporter reports NaN          -> the snapshot carries NaN temperatures
* `missing=True`         series vanished                        -> `MissingTelemetry`

The sample-age and NaN faults are deliberately *not* raised here: they are passed through so the controller's own
fail-static gate (`balancer.safety.check_telemetry`) is what catches them, as it would with a real source.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from balancer.errors import MissingTelemetry, TelemetryUnavailable
from balancer.model import ClusterSnapshot
from balancer.sim import SimCluster


@dataclass
class SimTelemetrySource:
    sim: SimCluster
    down: bool = False
    missing: bool = False
    sample_age_s: float = 0.0
    nan_gpus: set[int] = field(default_factory=set)
    calls: int = 0
    health_unknown: ClassVar[frozenset[str]] = frozenset()   # the simulator knows every GPU's health

    def snapshot(self) -> ClusterSnapshot:
        self.calls += 1
        if self.down:
            raise TelemetryUnavailable("simulated Prometheus is down (connection refused)")
        if self.missing:
            raise MissingTelemetry("simulated series vanished")
        snap = self.sim.snapshot(sample_age_s=self.sample_age_s)
        if self.nan_gpus:
            temp = np.array(snap.temperature_c, dtype=float)
            temp[sorted(self.nan_gpus)] = np.nan
            snap = snap.replace(temperature_c=temp)
        return snap
