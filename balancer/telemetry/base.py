"""The TelemetrySource protocol: where the controller's view of the fleet comes from.

A source returns an immutable `ClusterSnapshot` or raises a `TelemetryError` subclass (`StaleTelemetry`,
`MissingTelemetry`, `InvalidTelemetry`, `TelemetryUnavailable`); it never fills gaps with zeros. The reconcile
loop treats any of these as "hold still" (fail-static) and reports the error's `reason` label. Implementations:
`balancer.telemetry.prometheus.PrometheusTelemetrySource` (PromQL) and `balancer.telemetry.sim.SimTelemetrySource`
(straight from a `SimCluster`, with injectable faults for tests).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from balancer.model import ClusterSnapshot


@runtime_checkable
class TelemetrySource(Protocol):
    def snapshot(self) -> ClusterSnapshot:
        """The fleet as of now; raises a TelemetryError subclass when it must not be acted on."""
        ...
