"""Nodes and GPUs from the GPU series' labels, for the Prometheus source (balancer/telemetry/prometheus.py).

`Topology.build` turns the sorted wide frame of GPU series into `Node` and `Gpu` objects: catalogue keys from
`modelName` (a model the catalogue does not know is planned with generic figures, and logged once), a node's GPU
model from its first GPU, what the fleet file adds (NVLink islands, CPU, cooling) and, from the Kubernetes API,
each node's labels, taints and gputide power caps (`node_overrides`; None while not listed yet, when no snapshot
may be taken). It keeps the last answer: the fleet rarely changes, and building 10,000 objects from rows cost more
than a whole plan.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace

import numpy as np
import pandas as pd

from balancer import catalog
from balancer.errors import TelemetryUnavailable
from balancer.fleet import Fleet
from balancer.model import Gpu, Node, NodeMeta

log = logging.getLogger("balancer.telemetry.prometheus")   # the source's log, as before this module split off

NodeMetaSource = Callable[[], Mapping[str, NodeMeta] | None]   # `KubernetesNodes`: None until it has listed them


class Topology:
    """The Prometheus source's topology with its caches: the last frame's nodes and GPUs, the nodes with their
    Kubernetes metadata, the catalogue's slowdown temperatures per GPU, and the model names logged as uncatalogued."""

    def __init__(self) -> None:
        self._cache: tuple[tuple, tuple[tuple[Node, ...], tuple[Gpu, ...]]] | None = None
        self._labelled: tuple[tuple[Node, ...], Mapping[str, NodeMeta], tuple[Node, ...]] | None = None
        self._slowdown: tuple[tuple[Gpu, ...], np.ndarray] | None = None
        self._uncatalogued: set[str] = set()   # modelNames already logged as not in the catalogue

    def build(self, wide: pd.DataFrame, fleet: Fleet | None,
              node_overrides: NodeMetaSource | None) -> tuple[tuple[Node, ...], tuple[Gpu, ...]]:
        """Nodes and GPUs in `wide`'s (sorted) order; the same GPUs as last cycle reuse last cycle's objects
        (the fleet rarely changes, and building 10,000 of them from rows cost more than a whole plan)."""
        key = tuple(wide[c].to_numpy(dtype=object) for c in ("hostname", "gpu", "UUID", "modelName"))
        last = self._cache
        if last is not None and len(last[0][0]) == len(key[0]) and all(
                np.array_equal(a, b) for a, b in zip(last[0], key, strict=True)):
            return self._with_node_meta(last[1][0], node_overrides), last[1][1]
        spec_nodes = {n.name: n for n in fleet.nodes} if fleet else {}
        spec_gpus = {g.uuid: g for g in fleet.gpus} if fleet else {}
        keys: dict[str, str] = {}
        for name in set(key[3]):   # catalogue key per modelName, once each
            spec = catalog.by_model_name(name)
            keys[name] = spec.key if spec else name
            if spec is None and name not in self._uncatalogued:
                self._uncatalogued.add(name)
                log.warning("GPU model %r is not in gputide's catalogue: planned with generic figures from its "
                            "power limit (catalog.generic); add it to balancer/catalog.py for better ones", name)
        hosts, slots, uuids, names = (k.tolist() for k in key)
        models = [keys[n] for n in names]
        # the first model seen on a host is the node's, as the rows of a host are contiguous after the sort
        first: dict[str, int] = {}
        counts: dict[str, int] = {}
        for i, host in enumerate(hosts):
            first.setdefault(host, i)
            counts[host] = counts.get(host, 0) + 1
        nodes = tuple(spec_nodes.get(h) or Node(name=h, gpu_model=models[i], gpu_count=counts[h])
                      for h, i in first.items())
        node_model = {h: models[i] for h, i in first.items()}
        gpus = []
        for i, (host, slot, uuid) in enumerate(zip(hosts, slots, uuids, strict=True)):
            known = spec_gpus.get(uuid)
            gpus.append(Gpu(index=i, uuid=uuid, node=host, slot=int(slot), model=node_model[host],
                            nvlink_domain=known.nvlink_domain if known else -1,
                            pci_bus_id=known.pci_bus_id if known else ""))
        self._cache = (key, (nodes, tuple(gpus)))
        return self._with_node_meta(nodes, node_overrides), self._cache[1][1]

    def _with_node_meta(self, nodes: tuple[Node, ...], node_overrides: NodeMetaSource | None) -> tuple[Node, ...]:
        """`nodes` with the labels, taints, gputide power caps and hot-taint expiry `node_overrides` has for them
        (built again only when one changed).
        A node the API does not know keeps what the fleet file says."""
        if node_overrides is None:
            return nodes
        meta = node_overrides()
        if meta is None:
            raise TelemetryUnavailable("Kubernetes nodes not listed yet: their labels and taints (an emergency "
                                       "stop, a workload's node selector) are unknown")
        last = self._labelled
        if last is None or last[0] is not nodes or last[1] is not meta:
            labelled = tuple(replace(n, labels=m.labels, taints=m.taints, power_caps=m.power_caps,
                                     hot_until=m.hot_until) if (m := meta.get(n.name)) else n for n in nodes)
            unknown = sum(n.name not in meta for n in nodes)
            if unknown and (last is None or last[0] is not nodes):
                log.warning("%d of %d nodes with GPU metrics are not Kubernetes nodes (hostname label != node "
                            "name?): their labels and taints are unknown", unknown, len(nodes))
            self._labelled = last = (nodes, meta, labelled)
        return last[2]

    def slowdown_defaults(self, gpus: tuple[Gpu, ...]) -> np.ndarray:
        """The catalogue's slowdown temperature per GPU (85 °C for a model it does not know), computed again only
        when `build` made new GPUs."""
        if self._slowdown is None or self._slowdown[0] is not gpus:
            by_model = {m: s.slowdown_temp_c if (s := catalog.CATALOGUE.get(m)) else 85.0
                        for m in {g.model for g in gpus}}
            self._slowdown = (gpus, np.array([by_model[g.model] for g in gpus], dtype=float))
        return self._slowdown[1]
