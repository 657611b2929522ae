"""Required inter-pod affinity and anti-affinity for the secondary scheduler, as kube-scheduler's InterPodAffinity
filter evaluates them.

A term (`AffinityTerm`) selects pods by a label selector (a term without one selects no pod, an empty one every
pod) in namespaces (those it names and those whose labels its `namespaceSelector` selects; neither: the pod's own;
`namespaceSelector: {}`: every namespace), and names a topology key: a node label whose value is the node's domain
(a node without that label is in no domain). For the pod being placed and a candidate node, in this order
(kube-scheduler's reasons):

* **its required pod affinity** ("node(s) didn't match pod affinity rules"): the node has every term's topology key
  and, for each term, a pod that matches *all* the terms runs in the node's domain of that term. When no such pod
  runs anywhere (on a node with one of the keys) and the pod matches all its own terms, any node with every key
  will do: the first pod of a group with affinity to itself;
* **its required pod anti-affinity** ("node(s) didn't match pod anti-affinity rules"): no pod matching a term runs
  in the node's domain of that term (a node without the key is in no domain, so nothing there is in its way);
* **the bound pods' required anti-affinity** ("node(s) didn't satisfy existing pods anti-affinity rules"): no pod
  with an anti-affinity term that selects the incoming pod runs in the node's domain of that term.

A term with a non-empty `namespaceSelector` is resolved against the Namespace objects' labels
(`k8s_namespaces.Resolver`): the scheduler resolves the pending pods' terms at the start of a pass, and
`PodPlacement` the bound pods' anti-affinity terms with the resolver it is given. While the namespaces' labels are
not known (their list failing), a pending pod with such a term is refused (`PodAffinity.unsupported`), and a bound
pod's such term is read as selecting pods of every namespace, so it may keep a pod off more nodes than
kube-scheduler would, never fewer.

**Hard topology spread constraints** (`spread_refusals`, kube-scheduler's PodTopologySpread filter, with the same
counts): a node without a constraint's topology key is refused ("node(s) didn't match pod topology spread
constraints (missing required label)"), and so is one whose domain, with the pod, would hold more than `maxSkew`
pods the constraint selects (in the pod's namespace) above the least-filled domain of the nodes the pod's node
selector and affinity admit ("node(s) didn't match pod topology spread constraints"; the least is 0 while fewer
domains than `minDomains`). Terminating pods are counted while they are bound (kube-scheduler skips them).

`PodPlacement` answers these for every node of a pass at once: each topology key's domains as one integer column
over the nodes, and, per distinct set of terms asked about in the pass, how many pods each node holds that match
them (bound pods grouped by namespace and labels, so a Deployment's thousand replicas cost one selector match).
`add` counts a pod bound in the pass on its node, so later pods of the pass see it; `copy` is what a gang's trial
places its members on, leaving the pass's own counts as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

import numpy as np

from balancer.noderules import AffinityTerm, PodAffinity, Requirement, Selector, in_domain, occupied

Json = dict[str, Any]
AFFINITY_REASON = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY_REASON = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY_REASON = "node(s) didn't satisfy existing pods anti-affinity rules"
SPREAD_LABEL_REASON = "node(s) didn't match pod topology spread constraints (missing required label)"
SPREAD_REASON = "node(s) didn't match pod topology spread constraints"
REASONS = ("", AFFINITY_REASON, ANTI_AFFINITY_REASON, EXISTING_ANTI_AFFINITY_REASON,   # by `refusals` code
           SPREAD_LABEL_REASON, SPREAD_REASON)                                           # `spread_refusals`'


class Spread(NamedTuple):
    """One hard topology spread constraint of a pending pod (`whenUnsatisfiable: DoNotSchedule`, the default)."""

    key: str                      # topologyKey
    max_skew: int
    min_domains: int
    selector: Selector | None     # labelSelector, matchLabelKeys added (None: it selects no pod)
    honor_affinity: bool = True   # nodeAffinityPolicy: Honor (the default)
    honor_taints: bool = False    # nodeTaintsPolicy: Honor (default Ignore)


def spread_constraints(labels: Mapping[str, str], spec: Mapping[str, Any]) -> tuple[Spread, ...]:
    """The hard topology spread constraints of a pod spec (its `labels`: the values of `matchLabelKeys`)."""
    out = []
    for c in spec.get("topologySpreadConstraints") or ():
        if (c.get("whenUnsatisfiable") or "DoNotSchedule") != "DoNotSchedule":
            continue
        raw, keys = c.get("labelSelector"), [k for k in c.get("matchLabelKeys") or () if k in labels]
        selector = None if raw is None else Selector(
            Selector.from_json(raw).requirements + tuple(Requirement(k, "In", (labels[k],)) for k in keys))
        out.append(Spread(str(c.get("topologyKey") or ""), int(c.get("maxSkew") or 1), int(c.get("minDomains") or 1),
                          selector, c.get("nodeAffinityPolicy") != "Ignore", c.get("nodeTaintsPolicy") == "Honor"))
    return tuple(out)


class PodPlacement:
    """Where pods run in one pass, and the pod (anti-)affinity filter over every node at once (module docstring).

    `view`: the pass's nodes (their `name` and `labels`); `bound`: the bound and assumed pods (`k8s_reads.Usage`:
    node, key "namespace/name", labels, anti-affinity terms). Pods on nodes outside the view are not counted.
    `resolve`: what resolves a bound pod's anti-affinity term with a namespaceSelector (`k8s_namespaces.Resolver
    .term`); without, such a term covers every namespace."""

    def __init__(self, view: list[Json], bound: Iterable[Any] = (),
                 resolve: Callable[[AffinityTerm], AffinityTerm] | None = None) -> None:
        self.labels = [n["labels"] for n in view]
        self.size = len(view)
        self._index = index = {n["name"]: i for i, n in enumerate(view)}
        self._bound = bound = list(bound)   # read pod by pod only once a pod with pod affinity asks
        self._domains: dict[str, np.ndarray] = {}   # topology key -> domain id per node (-1: none); shared by copies
        self._groups: dict[tuple[str, tuple], list[int]] | None = None   # (namespace, labels) -> nodes; lazily
        self._added: list[tuple[int, str, tuple]] = []   # pods this pass (or trial) counted
        self._hits: dict[tuple[AffinityTerm, ...], np.ndarray] = {}   # terms -> pods matching all of them per node
        self._anti: dict[AffinityTerm, np.ndarray] = {}   # a bound pod's anti-affinity term -> pods holding it per node
        self._kept_off: dict[tuple[str, tuple], np.ndarray] = {}   # (namespace, labels) -> `_existing_anti`'s answer
        held: dict[AffinityTerm, list[int]] = {}
        for u in bound:
            if u.anti and (i := index.get(u.node)) is not None:
                for t in u.anti:
                    held.setdefault(t, []).append(i)
        for t, nodes in held.items():
            counts = np.bincount(nodes, minlength=self.size).astype(np.int64)
            if resolve is not None and t.namespace_selector is not None:   # two terms may resolve to one
                t = resolve(t)
            self._anti[t] = self._anti[t] + counts if t in self._anti else counts

    def copy(self) -> PodPlacement:
        """A placement to count more pods on (a gang's trial) without counting them here."""
        other = object.__new__(PodPlacement)
        other.labels, other.size, other._index, other._bound = self.labels, self.size, self._index, self._bound
        other._domains = self._domains
        other._groups = None if self._groups is None else dict(self._groups)   # its lists are replaced, never changed
        other._added = list(self._added)
        other._hits = {k: v.copy() for k, v in self._hits.items()}
        other._anti = {k: v.copy() for k, v in self._anti.items()}
        other._kept_off = dict(self._kept_off)   # its arrays are replaced, never changed
        return other

    def domain(self, key: str) -> np.ndarray:
        """The domain id of every node for topology key `key` (-1: the node lacks the label)."""
        column = self._domains.get(key)
        if column is None:
            ids: dict[str, int] = {}
            column = self._domains[key] = np.array(
                [ids.setdefault(labels[key], len(ids)) if key in labels else -1 for labels in self.labels],
                dtype=np.int64)
        return column

    def _pods(self) -> dict[tuple[str, tuple], list[int]]:
        if self._groups is None:
            self._groups = {}
            index = self._index
            for u in self._bound:
                if (i := index.get(u.node)) is not None:
                    self._groups.setdefault((u.key.split("/", 1)[0], u.labels), []).append(i)
            for i, ns, labels in self._added:
                self._groups.setdefault((ns, labels), []).append(i)
        return self._groups

    def matching(self, terms: tuple[AffinityTerm, ...]) -> np.ndarray:
        """Per node, how many pods there match every one of `terms` (kept up to date by `add`)."""
        hits = self._hits.get(terms)
        if hits is None:
            hits = self._hits[terms] = np.zeros(self.size, dtype=np.int64)
            for (ns, labels), nodes in self._pods().items():
                if all(t.matches(ns, dict(labels)) for t in terms):
                    np.add.at(hits, nodes, 1)
        return hits

    def near(self, term: AffinityTerm) -> np.ndarray:
        """Per node, how many pods matching `term` run in the node's domain of the term's topology key (0 for a
        node without the key): what a preferred term weighs (`k8s_preferred`)."""
        return in_domain(self.domain(term.topology_key), self.matching((term,)))

    def add(self, i: int, namespace: str, labels: Mapping[str, str], anti: tuple[AffinityTerm, ...] = ()) -> None:
        """A pod with `labels` (and its required anti-affinity terms `anti`) now runs on node i."""
        key = tuple(sorted(labels.items()))
        self._added.append((i, namespace, key))
        if self._groups is not None:
            self._groups[(namespace, key)] = [*self._groups.get((namespace, key), ()), i]
        for terms, hits in self._hits.items():
            if all(t.matches(namespace, labels) for t in terms):
                hits[i] += 1
        for t in anti:
            if t not in self._anti:
                self._anti[t] = np.zeros(self.size, dtype=np.int64)
            self._anti[t][i] += 1
        if anti:
            self._kept_off = {}

    def refusals(self, namespace: str, labels: Mapping[str, str], affinity: PodAffinity | None) -> np.ndarray | None:
        """Per node, why a pod in `namespace` with `labels` and `affinity` may not go there: 0 it may, else the
        index of the reason in `REASONS` (the first of the three checks that fails). None: nothing to check."""
        if affinity and affinity.unsupported:
            affinity = None   # refused everywhere by its placement rules already
        if not affinity and not self._anti:
            return None
        code = np.zeros(self.size, dtype=np.int8)
        code[self._existing_anti(namespace, labels)] = 3
        if affinity:
            for t in affinity.anti:
                code[occupied(self.domain(t.topology_key), self.matching((t,)))] = 2
            code[~self._affinity(namespace, labels, affinity.affinity)] = 1
        return code

    def spread_refusals(self, namespace: str, labels: Mapping[str, str], spread: tuple[Spread, ...],
                        eligible: Callable[[Spread], np.ndarray]) -> np.ndarray:
        """Per node, why a pod in `namespace` with `labels` and hard topology spread constraints `spread` may not go
        there, as kube-scheduler's PodTopologySpread filter judges it: 0 it may, 4 (`REASONS`) the node lacks a
        constraint's topology key, 5 the node's domain would then hold more than `max_skew` matching pods above
        the least-filled domain (0 when fewer domains than `min_domains`). Pods are counted (those the selector
        selects in the pod's namespace) on the nodes that have every constraint's key and that `eligible(c)` says
        (the pod's node selector and affinity, `honor_affinity`; its taints, `honor_taints`)."""
        code = np.zeros(self.size, dtype=np.int8)
        keyed = np.ones(self.size, dtype=bool)
        for c in spread:
            keyed &= self.domain(c.key) >= 0
        for c in spread:
            domain = self.domain(c.key)
            hits = self.matching((AffinityTerm(c.selector, frozenset({namespace}), c.key),))
            counted = keyed & eligible(c)
            per_domain = np.bincount(domain[counted], weights=hits[counted],
                                     minlength=max(int(domain.max(initial=-1)) + 1, 1))
            present = np.unique(domain[counted])
            least = per_domain[present].min() if len(present) and len(present) >= c.min_domains else 0
            own = int(c.selector is not None and c.selector.matches(labels))
            skew = per_domain[np.maximum(domain, 0)] + own - least
            code[(code == 0) & (skew > c.max_skew)] = 5
        code[~keyed] = 4
        return code

    def _existing_anti(self, namespace: str, labels: Mapping[str, str]) -> np.ndarray:
        """Nodes in a domain where a bound pod's anti-affinity term selects the pod (the pods of one template ask
        once per pass, until a pod with anti-affinity is bound)."""
        key = (namespace, tuple(sorted(labels.items())))
        refused = self._kept_off.get(key)
        if refused is None:
            refused = np.zeros(self.size, dtype=bool)
            for t, holders in self._anti.items():
                if t.matches(namespace, labels):
                    refused |= occupied(self.domain(t.topology_key), holders)
            self._kept_off[key] = refused
        return refused

    def _affinity(self, namespace: str, labels: Mapping[str, str], terms: tuple[AffinityTerm, ...]) -> np.ndarray:
        """Nodes the pod's required affinity `terms` allow."""
        keyed = np.ones(self.size, dtype=bool)
        if not terms:
            return keyed
        hits, near, anywhere = self.matching(terms), np.ones(self.size, dtype=bool), False
        for t in terms:
            domain = self.domain(t.topology_key)
            keyed &= domain >= 0
            near &= occupied(domain, hits)
            anywhere = anywhere or bool(hits[domain >= 0].any())
        if not anywhere and all(t.matches(namespace, labels) for t in terms):   # the first pod of its group
            return keyed
        return keyed & near

