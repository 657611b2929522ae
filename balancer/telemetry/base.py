"""The TelemetrySource protocol: where the controller's view of the fleet comes from.

A source returns an immutable `ClusterSnapshot` or raises a `TelemetryError` subclass (`StaleTelemetry`,
`MissingTelemetry`, `InvalidTelemetry`, `TelemetryUnavailable`); it never fills gaps with zeros. The reconcile
loop treats any of these as "hold still" (fail-static) and reports the error's `reason` label. Implementations:
`balancer.telemetry.prometheus.PrometheusTelemetrySource` (PromQL) and `balancer.telemetry.sim.SimTelemetrySource`
(straight from a `SimCluster`, with injectable faults for tests).

A controller that acts on some nodes only (a shard: `balancer.telemetry.shard.ShardedSource`) holds still for the
telemetry of those nodes only. A `ScopedSource` takes a `NodeScope` with the reading: its per-GPU checks (stale,
vanished, missing, NaN or impossible values, frozen counters, pods unknown) refuse a reading for the GPUs of the nodes
the scope owns, as do one GPU reported fresh under two hosts (where the scope owns either) and an inference service
without demand (where a replica of it is on the scope's nodes); the snapshot still lists every node and GPU it read (the
others unchecked: the caller keeps none of them). What concerns the reading as a whole (Prometheus unreachable, no GPU
series at all, several clusters, a partial answer that does not say what it lacks) still refuses it for everyone.
`snapshot()` is the reading with every node checked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from balancer.model import ClusterSnapshot, Node

# Whether the node named so is the caller's: `node` as this reading shows it (its labels, pool, site), None when the
# reading lacks it (its exporter dark: no series of its GPUs), when only the caller's own memory can tell.
NodeScope = Callable[[str, Node | None], bool]


@runtime_checkable
class TelemetrySource(Protocol):
    def snapshot(self) -> ClusterSnapshot:
        """The fleet as of now; raises a TelemetryError subclass when it must not be acted on."""
        ...


@runtime_checkable
class ScopedSource(TelemetrySource, Protocol):
    def snapshot_for(self, scope: NodeScope) -> ClusterSnapshot:
        """The fleet as of now, as `snapshot()`, refused only for what is wrong on the nodes `scope` owns (or with
        the reading as a whole)."""
        ...
