"""Preferred (soft) placement for the secondary scheduler: how much a pod would rather go to each node it fits, as
kube-scheduler's NodeAffinity and InterPodAffinity score plugins weigh it.

A pod's `preferredDuringSchedulingIgnoredDuringExecution` terms (`balancer.noderules.Preferences`) give each node
two raw scores:

* **node affinity**: the summed weights (1-100) of the preferred node affinity terms the node matches;
* **pod affinity**: for each preferred pod affinity term, its weight times the pods matching it that run in the
  node's domain of its topology key, less the same for each preferred anti-affinity term (a node without the key
  is in no domain and scores 0 for the term). Bound and assumed pods count, and so do those bound earlier in the
  pass (and, in a pod group's trial, the members placed before), as for required pod affinity.

Only the nodes the pod fits are scored: a preference orders them and never makes a node feasible or infeasible.
The raw scores travel to `place` in the request, as `preferred`: an array with one (node affinity, pod affinity)
row per node offered in that call, in the order offered (numpy columns over the nodes, not a dict per pod: a
pass of pods with preferences at 5,000 nodes would spend most of its time building and reading dicts). The
placement engine normalises them over its candidates as kube-scheduler does (node affinity to 0..100 of the
highest, pod affinity min-max to 0..100) and adds them with its policy's weight
(`balancer.plan.placement.plugins.preference`).

A preferred pod term with a non-empty namespaceSelector is resolved against the namespaces' labels as a required
one is (the scheduler resolves the pending pods' terms at the start of a pass, `k8s_namespaces`); while the labels
are not known it is left out (`Preferences.resolved`). Not weighed, unlike kube-scheduler: the bound pods' own
preferred terms and required affinity terms towards the incoming pod (InterPodAffinity's symmetric part).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from balancer.actuate.k8s_podaffinity import PodPlacement
from balancer.noderules import Preferences, Term

Json = dict[str, Any]


class Preferred:
    """The preference scores over the nodes of one pass (`view`), with the pods counted where they run on `pods`
    (the pass's `PodPlacement`, or a trial's copy). A node's labels do not change within a pass, so the node
    affinity scores are computed once per distinct set of preferred node terms."""

    def __init__(self, view: Sequence[Json], pods: PodPlacement) -> None:
        self.view, self.pods = view, pods
        self._node: dict[tuple[tuple[int, Term], ...], np.ndarray] = {}

    def request(self, req: Json, offered: Sequence[int]) -> Json:
        """`req` as `place` is to get it for the nodes `offered` (indices into the view): with `preferred`, one
        (node affinity, pod affinity) row per offered node in `offered`'s order, when it prefers or shuns some of
        them; else `req` itself (it is not changed)."""
        prefs: Preferences | None = req.get("preferences")
        if not prefs or not len(offered):
            return req
        offered = np.asarray(offered, dtype=np.int64)
        scores = np.column_stack([self.node_scores(prefs)[offered], self.pod_scores(prefs)[offered]])
        return dict(req, preferred=scores) if scores.any() else req

    def node_scores(self, prefs: Preferences) -> np.ndarray:
        """Per node of the view, the summed weights of the preferred node affinity terms it matches."""
        scores = self._node.get(prefs.node)
        if scores is None:
            scores = self._node[prefs.node] = np.array(
                [prefs.node_weight(n["name"], n["labels"]) for n in self.view] if prefs.node else
                np.zeros(len(self.view)), dtype=float)
        return scores

    def pod_scores(self, prefs: Preferences) -> np.ndarray:
        """Per node of the view, the preferred pod affinity terms' weights times the matching pods in its domain,
        less the anti-affinity terms'."""
        scores = np.zeros(len(self.view))
        for sign, terms in ((1.0, prefs.affinity), (-1.0, prefs.anti)):
            for w, term in terms:
                scores += sign * w * self.pods.near(term)
        return scores
