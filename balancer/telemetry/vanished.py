"""GPUs gone from telemetry: which the Prometheus source holds still for, which it forgets, and which of those it
forgot while their node is still a Kubernetes node (`forgotten`, the gauge `gputide_gpus_forgotten{node}`).

A known GPU absent from a reading holds the controller still (missing telemetry) until its node leaves the
Kubernetes API (forgotten at once) or `forget_after_s` has passed (forgotten, loudly: one node whose exporter is down
must not stop the controller for the whole fleet). Forgotten after the timeout while the Kubernetes API still lists
its node, it is out of the plan while the exporter's side (GpuMissingFromTelemetry) is all that says so: `forgotten`
keeps it until it reports again or its node goes, so the controller can gauge that state every reading.

The GPUs known are not only those this process has seen: a GPU node the Kubernetes API lists (`gpu_node`: the label
the exporter's DaemonSet selects, `nvidia.com/gpu.present=true`) with no GPU in the reading and none known is known
by its name alone (`dark_key`: its GPUs' UUIDs are unknown without telemetry), and held for as a vanished GPU is. So
a restarted controller, or a standby that becomes the leader, holds for a node whose exporter is dark exactly as the
controller that saw its GPUs does, instead of planning without the node and its pods. A node without that label gets
no exporter and is never waited for; nor is any node while no GPU of the reading is on a Kubernetes node (hostname
labels that are not node names: nothing can be matched by name).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

log = logging.getLogger("balancer.telemetry.prometheus")   # the source's own log: operators filter on it

Nodes = Callable[[], Mapping[str, object] | None]   # the Kubernetes API's nodes by name; None while not listed yet

GPU_PRESENT = "nvidia.com/gpu.present"   # the exporter's nodeSelector (deploy/base/exporter.yaml)
DARK = "node:"                            # `known` key prefix of a GPU node known by name only


def gpu_node(meta: object) -> bool:
    """Whether the Kubernetes API's node `meta` (`NodeMeta`) is one the exporter runs on, so one whose GPUs must
    report: labelled `nvidia.com/gpu.present=true` (NVIDIA's GPU feature discovery / GPU operator)."""
    return (getattr(meta, "labels", None) or {}).get(GPU_PRESENT) == "true"


def dark_key(node: str) -> str:
    """The `known` key of GPU node `node` known by name only: its GPUs' UUIDs are unknown without telemetry."""
    return DARK + node


@dataclass
class Absences:
    forget_after_s: float
    known: dict[str, str] = field(default_factory=dict)            # every GPU seen -> its node (`dark_key` too)
    missing_since: dict[str, float] = field(default_factory=dict)  # known GPUs absent from telemetry -> since when
    forgotten: dict[str, str] = field(default_factory=dict)        # forgotten with their node listed -> that node
    # the Kubernetes API's nodes last read and the GPU nodes among them (`gpu_node`, asked again when they change)
    _gpu_nodes: tuple[object, tuple[str, ...]] | None = field(default=None, init=False, repr=False)

    def reading(self, seen: set[str], now: float, nodes: Nodes | None,
                seen_nodes: frozenset[str] | set[str] = frozenset()) -> list[str]:
        """One reading that saw the GPUs `seen` on the nodes `seen_nodes`: the known GPUs absent to hold still for
        (missing telemetry), sorted, GPU nodes known by name only (`dark_key`) among them. `nodes` (None: no
        Kubernetes API) is asked every reading that names `seen_nodes`, else only when a GPU is gone or forgotten."""
        self._reported(seen, seen_nodes)
        listed = nodes() if nodes is not None and seen_nodes else None
        self._seed(listed, seen_nodes)
        gone = sorted(self.known.keys() - seen)
        if listed is None and nodes is not None and (gone or self.forgotten):
            listed = nodes()
        self.forgotten = {u: n for u, n in self.forgotten.items()   # kept until it reports again or its node goes
                          if listed is None or n in listed}
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

    def _reported(self, seen: set[str], seen_nodes: frozenset[str] | set[str]) -> None:
        """What reports again is no longer missing nor forgotten: a GPU `seen`, and a node known or forgotten by name
        only (`dark_key`) once any GPU on it is (`seen_nodes`: its GPUs are known from this reading on)."""
        for uuid in [u for u in self.missing_since if u in seen]:   # came back
            del self.missing_since[uuid]
        for key in [k for k, n in self.known.items() if n in seen_nodes and k.startswith(DARK)]:
            del self.known[key]
            self.missing_since.pop(key, None)
        self.forgotten = {u: n for u, n in self.forgotten.items()
                          if u not in seen and not (n in seen_nodes and u.startswith(DARK))}

    def _seed(self, listed: Mapping[str, object] | None, seen_nodes: frozenset[str] | set[str]) -> None:
        """Know by name (`dark_key`) each GPU node `listed` (`gpu_node`) that this reading shows no GPU on and that
        nothing known or forgotten is on: a node whose exporter went dark before this process saw its GPUs. Not while
        no node of the reading is `listed` (hostname labels that are not node names: none can be told by name)."""
        if not listed or not any(n in listed for n in seen_nodes):
            return
        if self._gpu_nodes is None or self._gpu_nodes[0] is not listed:   # the same mapping until a node changes
            self._gpu_nodes = (listed, tuple(n for n, meta in listed.items() if gpu_node(meta)))
        covered = set(self.known.values()) | set(self.forgotten.values()) | set(seen_nodes)
        for node in (n for n in self._gpu_nodes[1] if n not in covered):
            log.warning("GPU node %s has no telemetry (its exporter dark since before this controller saw it): held "
                        "for as a vanished GPU is", node)
            self.known[dark_key(node)] = node
