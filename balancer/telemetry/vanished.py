"""GPUs gone from telemetry: which the Prometheus source holds still for, which it forgets, and which of those it
forgot while their node is still a Kubernetes node (`forgotten`, the gauge `gputide_gpus_forgotten{node}`).

A known GPU absent from a reading holds the controller still (missing telemetry) until its node leaves the
Kubernetes API (forgotten at once) or `forget_after_s` has passed (forgotten, loudly: one node whose exporter is down
must not stop the controller for the whole fleet). Forgotten after the timeout while the Kubernetes API still lists
its node, it is out of the plan while the exporter's side (GpuMissingFromTelemetry) is all that says so: `forgotten`
keeps it until it reports again or its node goes, so the controller can gauge that state every reading.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

log = logging.getLogger("balancer.telemetry.prometheus")   # the source's own log: operators filter on it

Nodes = Callable[[], Mapping[str, object] | None]   # the Kubernetes API's nodes by name; None while not listed yet


@dataclass
class Absences:
    forget_after_s: float
    known: dict[str, str] = field(default_factory=dict)            # every GPU seen -> its node
    missing_since: dict[str, float] = field(default_factory=dict)  # known GPUs absent from telemetry -> since when
    forgotten: dict[str, str] = field(default_factory=dict)        # forgotten with their node listed -> that node

    def reading(self, seen: set[str], now: float, nodes: Nodes | None) -> list[str]:
        """One reading that saw the GPUs `seen`: the known GPUs absent to hold still for (missing telemetry), sorted.
        `nodes` (None: no Kubernetes API) is asked only when a GPU is gone or forgotten."""
        for uuid in [u for u in self.missing_since if u in seen]:   # came back
            del self.missing_since[uuid]
        gone = sorted(self.known.keys() - seen)
        listed = nodes() if nodes is not None and (gone or self.forgotten) else None
        self.forgotten = {u: n for u, n in self.forgotten.items()   # kept until it reports again or its node goes
                          if u not in seen and (listed is None or n in listed)}
        held = []
        for uuid in gone:
            since = self.missing_since.setdefault(uuid, now)
            node = self.known[uuid]
            if listed is not None and node not in listed:
                why = f"its node {node} is no longer a Kubernetes node"
            elif now - since >= self.forget_after_s:
                why = f"absent from telemetry for {now - since:.0f}s"
                if listed is not None:
                    why += ", its node still in Kubernetes (its GPUs and pods leave the plan: GpuMissingFromTelemetry)"
                    self.forgotten[uuid] = node
            else:
                held.append(uuid)
                continue
            log.warning("forgetting GPU %s on %s: %s", uuid, node, why)
            del self.known[uuid], self.missing_since[uuid]
        return held
