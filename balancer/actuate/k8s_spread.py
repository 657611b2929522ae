"""A migration's target against the pod's hard topology spread constraints, as kube-scheduler's PodTopologySpread
filter judges the replacement there. Pure: the pods and nodes are the snapshot's, no API call.

A constraint with `whenUnsatisfiable: DoNotSchedule` (the default) keeps a pod off a node when, counting the pods its
`labelSelector` selects (in the pod's namespace, `matchLabelKeys` added with the pod's own values) per domain of
`topologyKey` over the nodes its node selector and required node affinity admit (`nodeAffinityPolicy: Honor`, the
default), the target's domain would hold more than `maxSkew` above the least-filled domain (0 when fewer domains
than `minDomains`); a node without the key is refused. The evicted pod is no longer counted (kube-scheduler skips a
terminating pod), its replacement is. A constraint without a `labelSelector` selects no pod and never refuses.

What the snapshot does not hold is not counted: pods without GPUs that the selector selects, and nodes without GPUs
as domains (`nodeTaintsPolicy` is taken as its default, Ignore).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from balancer.model import ClusterSnapshot
from balancer.noderules import NodeRules, Requirement, Selector

Json = dict[str, Any]


def _selector(constraint: Json, labels: Mapping[str, str]) -> Selector | None:
    """The constraint's selector with its `matchLabelKeys` (the pod's values of those keys) added; None: none."""
    raw = constraint.get("labelSelector")
    if raw is None:
        return None
    keys = [k for k in constraint.get("matchLabelKeys") or () if k in labels]
    return Selector(Selector.from_json(raw).requirements + tuple(Requirement(k, "In", (labels[k],)) for k in keys))


def spread_refusal(pod: Json, snapshot: ClusterSnapshot, moving: str, target: str) -> str | None:
    """Why the replacement of `pod` (the snapshot's workload `moving`) may not run on node `target` by its hard
    topology spread constraints (module docstring); None when they allow it."""
    spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
    hard = [c for c in spec.get("topologySpreadConstraints") or ()
            if c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"]
    if not hard:
        return None
    nodes = {n.name: n for n in snapshot.nodes}
    if target not in nodes:
        return "no place in the snapshot to judge its topology spread constraints by"
    namespace, labels, rules = meta.get("namespace", "default"), meta.get("labels") or {}, NodeRules.from_pod_spec(spec)
    where = {name: snapshot.gpus[idx[0]].node for name, idx in snapshot.placements.items() if idx}
    for c in hard:
        key, selector = str(c.get("topologyKey") or ""), _selector(c, labels)
        if key not in nodes[target].labels:
            return f"no {key} label, which its topology spread constraint needs"
        if selector is None:
            continue
        honour = c.get("nodeAffinityPolicy", "Honor") == "Honor"
        domain = {n.name: n.labels[key] for n in snapshot.nodes if key in n.labels and (
            not honour or (rules.selector_matches(n.labels) and rules.affinity_allows(n.name, n.labels)))}
        counts = dict.fromkeys(domain.values(), 0)
        for w in snapshot.workloads:
            node = where.get(w.name)
            if w.name != moving and w.namespace == namespace and node in domain and selector.matches(w.labels):
                counts[domain[node]] += 1
        least = min(counts.values()) if len(counts) >= int(c.get("minDomains") or 1) else 0
        here = nodes[target].labels[key]
        skew = counts.get(here, 0) + int(selector.matches(labels)) - least
        if skew > int(c.get("maxSkew") or 1):
            return (f"{key}={here}, where its topology spread constraint (maxSkew {c.get('maxSkew') or 1}) would be "
                    f"skewed {skew}")
    return None
