"""A snapshot read as arrays: what the projection, the planners and the fleet metrics compute on, every cycle.

* `workload_columns(snapshot)`: the workloads as numpy columns (class, GPUs, milli-GPUs, memory, CPU, elastic
  minimum, where each is placed), read in one pass of C-level maps and cached per snapshot object, so the
  planners and `balancer.fleet_usage.fleet_usage` share one read;
* `model_arrays(snapshot)`: the GPU catalogue's figures per GPU (TDP, minimum power limit, idle power, thermal
  resistance);
* `effective_resistance(...)`: the thermal resistance each GPU shows now, the projection's thermal model;
* `gpu_usage(snapshot)`: milli-GPUs and declared memory reserved per GPU, and running workers per training job.

Pure functions of the snapshot; nothing here changes it.
"""

from __future__ import annotations

import weakref
from collections import Counter
from dataclasses import dataclass
from itertools import chain, compress, repeat
from operator import attrgetter

import numpy as np

from balancer import catalog
from balancer.model import ClusterSnapshot, WorkloadClass


def model_arrays(snapshot: ClusterSnapshot) -> dict[str, np.ndarray]:
    """Catalogue figures per GPU (TDP, minimum power limit, idle power, thermal resistance); a model the catalogue
    does not know gets `catalog.generic` figures (the telemetry source logs it once)."""
    keys = sorted({g.model for g in snapshot.gpus})
    code = {k: i for i, k in enumerate(keys)}
    idx = np.fromiter((code[g.model] for g in snapshot.gpus), dtype=np.int64, count=snapshot.n_gpus)
    # a board the catalogue does not know: generic figures from the highest limit it has (catalog.generic)
    specs = [catalog.CATALOGUE.get(k) or catalog.generic(k, _highest(snapshot.power_limit_w[idx == i]))
             for i, k in enumerate(keys)]

    def pick(attr: str) -> np.ndarray:
        return np.array([getattr(s, attr) for s in specs], dtype=float)[idx]

    return {"tdp": pick("tdp_w"), "pmin": pick("min_power_limit_w"), "idle": pick("idle_w"),
            "r": pick("thermal_resistance_c_per_w")}


def _highest(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(finite.max()) if finite.size else 0.0


def effective_resistance(s: ClusterSnapshot, inlet: np.ndarray, power: np.ndarray, r_cat: np.ndarray,
                         tdp: np.ndarray) -> np.ndarray:
    """Thermal resistance per GPU as observed: (T - inlet) / P on busy GPUs (never below the catalogue's).

    At idle the ratio is dominated by sensor offsets and an unknown inlet, so an idle GPU takes the highest
    figure of its node's busy GPUs (a node whose cooling degraded shows it on every busy GPU), else the catalogue's.
    """
    busy = power >= 0.4 * tdp
    raw = np.maximum((s.temperature_c - inlet) / np.maximum(power, 1.0), r_cat)
    node_r = np.zeros(len(s.nodes))
    if busy.any():
        np.maximum.at(node_r, s.node_index[busy], raw[busy] / r_cat[busy])
    return np.where(busy, raw, r_cat * np.maximum(node_r[s.node_index], 1.0))


_CLASS_CODE = {WorkloadClass.INFERENCE: 0, WorkloadClass.TRAINING: 1, WorkloadClass.BATCH: 2}
_columns_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@dataclass(frozen=True, eq=False)
class WorkloadColumns:
    """A snapshot's workloads as arrays in the order of `workloads`, read in one pass and cached per snapshot
    (the projection, the fleet metrics and the planners all need them, every cycle)."""

    names: tuple[str, ...]
    owners: tuple[str, ...]
    allowed: tuple
    cls: np.ndarray          # 0 inference, 1 training, 2 batch
    gpus: np.ndarray
    gpu_milli: np.ndarray
    gpu_memory_mib: np.ndarray
    cpu_milli: np.ndarray
    memory_mib: np.ndarray
    elastic_min: np.ndarray
    placed: np.ndarray       # has an entry in `placements` (possibly with no GPU)
    counts: np.ndarray       # GPUs in its placement (0: none)
    idx: np.ndarray          # the GPU of each (workload, placed GPU) pair, workload by workload


def workload_columns(s: ClusterSnapshot) -> WorkloadColumns:
    cols = _columns_cache.get(s)
    if cols is None:
        ws, n = s.workloads, len(s.workloads)
        # one C-level map per field: building a tuple per workload (and zipping them) costs more than all of these

        def ints(attr: str) -> np.ndarray:
            return np.fromiter(map(attrgetter(attr), ws), dtype=np.int64, count=n)

        names = tuple(map(attrgetter("name"), ws))
        placements = s.placements
        placed_gpus = list(map(placements.get, names, repeat(())))
        counts = np.fromiter(map(len, placed_gpus), dtype=np.int64, count=n)
        cols = _columns_cache[s] = WorkloadColumns(
            names, tuple(map(attrgetter("owner"), ws)), tuple(map(attrgetter("allowed_models"), ws)),
            np.fromiter(map(_CLASS_CODE.__getitem__, map(attrgetter("workload_class"), ws)), dtype=np.int64, count=n),
            ints("gpus"), ints("gpu_milli"), ints("gpu_memory_mib"), ints("cpu_milli"), ints("memory_mib"),
            ints("elastic_min"), np.fromiter(map(placements.__contains__, names), dtype=bool, count=n), counts,
            np.fromiter(chain.from_iterable(placed_gpus), dtype=np.int64, count=int(counts.sum())))
    return cols


def gpu_usage(s: ClusterSnapshot) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """Milli-GPUs and declared memory per GPU, running workers per training job (C-level maps, no Python loop).

    Counted over the placements of known workloads; with unique workload names that is the columns' view.
    """
    n = s.n_gpus
    if len(s.workload_by_name) == len(s.workloads):
        c = workload_columns(s)
        used = np.rint(np.bincount(c.idx, weights=np.repeat(c.gpu_milli.astype(float), c.counts),
                                   minlength=n)).astype(np.int64)
        declared = np.bincount(c.idx, weights=np.repeat(c.gpu_memory_mib.astype(float), c.counts), minlength=n)
        workers = Counter(compress(c.owners, (c.placed & (c.cls == 1)).tolist()))
        return used, declared, dict(workers)
    by_name = s.workload_by_name
    names = [k for k in s.placements if k in by_name]
    gpus = list(map(s.placements.__getitem__, names))
    ws = list(map(by_name.__getitem__, names))
    counts = np.fromiter(map(len, gpus), dtype=np.int64, count=len(gpus))
    idx = np.fromiter(chain.from_iterable(gpus), dtype=np.int64, count=int(counts.sum()))
    milli = np.repeat(np.fromiter(map(attrgetter("gpu_milli"), ws), dtype=float, count=len(ws)), counts)
    mem = np.repeat(np.fromiter(map(attrgetter("gpu_memory_mib"), ws), dtype=float, count=len(ws)), counts)
    used = np.rint(np.bincount(idx, weights=milli, minlength=n)).astype(np.int64)
    declared = np.bincount(idx, weights=mem, minlength=n)
    training = WorkloadClass.TRAINING
    workers = Counter(w.owner for w in ws if w.workload_class == training)
    return used, declared, dict(workers)
