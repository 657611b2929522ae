"""The secondary scheduler's GPU facts (`PrometheusTelemetrySource.gpu_facts`), from the rows of its queries.

Pure: the source asks Prometheus and judges whether health is known (`gpu_frame.health_unknown`, the rule the
snapshot applies); this turns the answers into `NodeGpuFacts` per node. A GPU is unhealthy for the scheduler where
the reconcile loop keeps it from new work (`ClusterSnapshot.healthy`, the rule itself: a fatal XID, bad memory, or
health unknown: an XID or memory-health series the rest of the fleet publishes and it lacks).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import pandas as pd

from balancer.model import NodeGpuFacts, may_take_work
from balancer.telemetry.gpu_frame import _SERIES, HEALTH, arrays, with_unknown
from balancer.telemetry.gpu_frame import sample as _sample

HEALTH_RULES = {_SERIES[name][0]: name for name in HEALTH}   # recorded series -> snapshot field


def health_frame(rows: list[dict], uuids: Iterable[str]) -> pd.DataFrame:
    """One row per GPU of `uuids` (column UUID) and a column per health field (`HEALTH`) that any of them publishes:
    the highest reading of its series (two exporters may publish one GPU), NaN where it has none or only NaN, as the
    snapshot's frame has them. Rows of other series or other GPUs are ignored."""
    wanted = list(dict.fromkeys(uuids))
    keep = set(wanted)
    got = [(m.get("UUID"), HEALTH_RULES[m.get("__name__", "")], v) for m, v in map(_sample, rows)
           if m.get("__name__") in HEALTH_RULES and m.get("UUID") in keep]
    frame = pd.DataFrame(got, columns=["UUID", "field", "value"])
    wide = frame.groupby(["UUID", "field"])["value"].max().unstack("field").reindex(wanted)
    return wide.rename_axis(index="UUID", columns=None).reset_index()


def unhealthy(health: pd.DataFrame, unknown: np.ndarray) -> set[str]:
    """The GPUs (UUIDs) of a `health_frame` that the reconcile loop keeps from new work: those
    `ClusterSnapshot.healthy` rejects, that rule itself applied to the arrays the snapshot would hold for them
    (`gpu_frame.arrays`, health `unknown` read as bad memory: `with_unknown`), so that a criterion added to it holds
    here too."""
    got = with_unknown(arrays(health, np.zeros(len(health))), unknown)
    return set(health["UUID"][~may_take_work(got["xid"], got["memory_unhealthy"] != 0)])   # != 0: as __post_init__


def node_facts(rows: list[dict], busy: set[str], unhealthy: set[str]) -> dict[str, NodeGpuFacts]:
    """Per node (`hostname` label) of the headroom `rows`: each GPU slot's headroom (the lower of duplicates), the
    slots of `busy` GPUs and of `unhealthy` ones (UUIDs). A row without a host, a numeric slot or a finite value is
    left out."""
    heads: dict[str, dict[int, float]] = {}
    used: dict[str, set[int]] = {}
    bad: dict[str, set[int]] = {}
    for r in rows:
        m, value = _sample(r)
        host, slot = m.get("hostname", ""), str(m.get("gpu", ""))
        if not host or not slot.isdigit() or not math.isfinite(value):
            continue
        h = heads.setdefault(host, {})
        h[int(slot)] = min(value, h.get(int(slot), math.inf))   # the hotter of duplicates
        if m.get("UUID") in busy:
            used.setdefault(host, set()).add(int(slot))
        if m.get("UUID") in unhealthy:
            bad.setdefault(host, set()).add(int(slot))
    return {host: NodeGpuFacts(h, frozenset(used.get(host, ())), frozenset(bad.get(host, ())))
            for host, h in heads.items()}
