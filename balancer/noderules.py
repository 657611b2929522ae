"""Kubernetes' node-selection rules as plain, hashable data: may this pod run on that node?

A pod's own placement rules, as kube-scheduler and the kubelet apply them:

* **taints**: a node's `NoSchedule` or `NoExecute` taint keeps off every pod that does not tolerate it
  (`PreferNoSchedule` only discourages, so it never refuses). A toleration matches a taint by effect (or none
  given) and by `Exists` on the key (an empty key with `Exists` tolerates every taint) or `Equal` on key and value;
* **the node selector**: every label it names, with that value;
* **required node affinity**: any term (ORed) whose requirements all hold (`In`, `NotIn`, `Exists`,
  `DoesNotExist`, `Gt`, `Lt` on labels, numbers read as Go's `strconv.ParseInt` reads them: `parse_int`; on
  fields, `metadata.name`); a term with no requirement matches nothing, and no terms at all allow every node.

`NodeRules.from_pod_spec(spec)` turns a pod spec (or a pod template's) into frozen tuples. Pods of one template
have equal rules, so whoever checks many pods against many nodes checks each distinct rule set once: the
controller's snapshot (`ClusterSnapshot.admits`, one mask over all nodes per rule set), the Migrate chokepoint of
the Kubernetes actuator (`placement_refusal`) and the secondary scheduler all ask these rules, one reading of
Kubernetes for all three.

Preferred (soft) rules are read here too (`Preferences`): preferred node affinity terms and preferred pod affinity
and anti-affinity terms, each with a weight from 1 to 100. They never refuse a node; the secondary scheduler scores
the nodes a pod fits by them (`balancer/actuate/k8s_preferred.py`).

Node taints travel as kubectl writes them, `key[=value][:effect]`; without an effect a taint is `NoSchedule`.
`Selector` is a label selector over the same requirements, for what selects pods (PodDisruptionBudgets), and
`PodAffinity` a pod's required pod affinity and anti-affinity terms (`AffinityTerm`: a selector, namespaces, a
topology key), read here and evaluated where pods are known (the scheduler's `k8s_podaffinity`, the controller's
`ClusterSnapshot.affinity_admits`).

A term's namespaces are, as kube-scheduler reads them, the union of those it names (`namespaces`) and those whose
labels its `namespaceSelector` selects; an empty selector (`{}`) selects every namespace, and a term with neither
covers the pod's own namespace. The labels are the Namespace objects', which a pod spec does not carry: a term
with a non-empty selector is read *unresolved* (it keeps the selector) until `resolve` is given the namespaces'
labels, as kube-scheduler resolves it against its namespace lister. Until then the pod's `PodAffinity.unsupported`
says so and the term `matches` pods of every namespace (for a bound pod's anti-affinity: more nodes kept off than
kube-scheduler would, never fewer); who reads pods from the API resolves them (`k8s_workloads`, the scheduler's
`k8s_namespaces`) and keeps them unresolved, never guessed, while the labels are not known.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

REPELLING = ("NoSchedule", "NoExecute")


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"

    @classmethod
    def parse(cls, text: str) -> Taint:
        """A taint in kubectl's syntax `key[=value][:effect]`."""
        head, _, effect = text.partition(":")
        key, _, value = head.partition("=")
        return cls(key, value, effect or "NoSchedule")

    @classmethod
    def from_json(cls, taint: Mapping[str, Any]) -> Taint:
        """A taint of a Node object's `spec.taints`."""
        return cls(str(taint.get("key") or ""), str(taint.get("value") or ""), str(taint.get("effect") or ""))

    def __str__(self) -> str:
        return self.key + (f"={self.value}" if self.value else "") + (f":{self.effect}" if self.effect else "")

    @property
    def repels(self) -> bool:
        return self.effect in REPELLING


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def matches(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        exists = self.operator == "Exists"
        if not self.key:
            return exists
        return self.key == taint.key and (exists or self.value == taint.value)


_INT = re.compile(r"[+-]?[0-9]+")   # Go's strconv.ParseInt(s, 10, 64): a sign, ASCII digits, nothing else
_INT64 = range(-(2**63), 2**63)


def parse_int(text: str | None) -> int | None:
    """`text` as Kubernetes reads a `Gt`/`Lt` value and the label it is compared with (`strconv.ParseInt(s, 10, 64)`),
    None where it fails (the requirement then holds for no node). Python's `int` takes more: "1_0", " 10 ", other
    scripts' digits ("١٠"), integers past 64 bits; a node such a label gives matched here and nowhere else."""
    if text is None or not _INT.fullmatch(text):
        return None
    value = int(text)
    return value if value in _INT64 else None


@dataclass(frozen=True, slots=True)
class Requirement:
    """One node selector requirement, on a label or a field."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def holds(self, values_of: Mapping[str, str]) -> bool:
        has, value = self.key in values_of, values_of.get(self.key)
        if self.operator in ("Gt", "Lt"):
            a, b = parse_int(value), parse_int(self.values[0]) if len(self.values) == 1 else None
            if a is None or b is None:
                return False
            return a > b if self.operator == "Gt" else a < b
        if self.operator == "In":
            return has and value in self.values
        if self.operator == "NotIn":
            return not has or value not in self.values
        return {"Exists": has, "DoesNotExist": not has}.get(self.operator, False)


@dataclass(frozen=True, slots=True)
class Term:
    """A node selector term: all its requirements, on labels and on fields, must hold."""

    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()

    @classmethod
    def from_json(cls, term: Mapping[str, Any]) -> Term:
        """A `nodeSelectorTerm` as the API gives it (a pod's node affinity, a PersistentVolume's)."""
        return cls(_requirements(term.get("matchExpressions")), _requirements(term.get("matchFields")))

    def allows(self, name: str, labels: Mapping[str, str]) -> bool:
        if not (self.expressions or self.fields):
            return False
        return (all(r.holds(labels) for r in self.expressions)
                and all(r.holds({"metadata.name": name}) for r in self.fields))


def _requirements(items: Iterable[Mapping[str, Any]] | None) -> tuple[Requirement, ...]:
    return tuple(Requirement(str(e.get("key") or ""), str(e.get("operator") or ""),
                             tuple(str(v) for v in e.get("values") or ())) for e in items or ())


@dataclass(frozen=True, slots=True)
class Selector:
    """A label selector (`matchLabels` and `matchExpressions`, as PodDisruptionBudgets and pod affinity terms
    select pods): every requirement must hold; an empty selector selects everything."""

    requirements: tuple[Requirement, ...] = ()

    @classmethod
    def from_json(cls, selector: Mapping[str, Any] | None) -> Selector:
        selector = selector or {}
        return cls(tuple(Requirement(str(k), "In", (str(v),)) for k, v in sorted((selector.get("matchLabels") or {})
                                                                               .items()))
                   + _requirements(selector.get("matchExpressions")))

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.holds(labels) for r in self.requirements)


def affinity_terms(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The `nodeSelectorTerms` of a pod spec's required node affinity, as the API gives them."""
    return ((((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or [])


@dataclass(frozen=True, slots=True)
class NodeRules:
    """A pod's own node-selection rules: its tolerations, node selector and required node affinity terms."""

    tolerations: tuple[Toleration, ...] = ()
    selector: tuple[tuple[str, str], ...] = ()
    terms: tuple[Term, ...] = ()

    @classmethod
    def from_pod_spec(cls, spec: Mapping[str, Any]) -> NodeRules:
        tolerations = tuple(Toleration(str(t.get("key") or ""), str(t.get("operator") or "Equal"),
                                       str(t.get("value") or ""), str(t.get("effect") or ""))
                            for t in spec.get("tolerations") or ())
        selector = tuple(sorted((str(k), str(v)) for k, v in (spec.get("nodeSelector") or {}).items()))
        terms = tuple(Term.from_json(t) for t in affinity_terms(spec))
        return cls(tolerations, selector, terms)

    @property
    def labels_named(self) -> frozenset[str]:
        """The node labels these rules read."""
        return frozenset(k for k, _ in self.selector) | {r.key for t in self.terms for r in t.expressions}

    def tolerates(self, taint: Taint) -> bool:
        return any(t.matches(taint) for t in self.tolerations)

    def untolerated(self, taints: Iterable[Taint]) -> Taint | None:
        """The first `NoSchedule` / `NoExecute` taint these rules do not tolerate, None when there is none."""
        return next((t for t in taints if t.repels and not self.tolerates(t)), None)

    def selector_matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.selector)

    def affinity_allows(self, name: str, labels: Mapping[str, str]) -> bool:
        return not self.terms or any(t.allows(name, labels) for t in self.terms)

    def refusal(self, name: str, labels: Mapping[str, str], taints: Iterable[Taint]) -> str | None:
        """Why a pod with these rules may not run on the node (`name`, `labels`, `taints`); None when it may."""
        taint = self.untolerated(taints)
        if taint is not None:
            return f"a taint it does not tolerate ({taint.key}={taint.value}:{taint.effect})"
        if not self.selector_matches(labels):
            return "labels its node selector does not match"
        if not self.affinity_allows(name, labels):
            return "labels its required node affinity does not allow"
        return None


NO_RULES = NodeRules()
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


NamespaceLabels = Mapping[str, Mapping[str, str]]   # namespace name -> its labels


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """One pod (anti-)affinity term: which pods (selector, namespaces) in which domain (topology key).

    `namespace_selector` is a non-empty `namespaceSelector` not resolved yet: the namespaces it selects are still to
    be added to `namespaces` (`resolve`); meanwhile the term matches pods of every namespace (module docstring)."""

    selector: Selector | None            # None: no labelSelector, which selects no pod
    namespaces: frozenset[str] | None    # None: every namespace
    topology_key: str
    namespace_selector: Selector | None = None   # unresolved: its namespaces are not known yet

    def matches(self, namespace: str, labels: Mapping[str, str]) -> bool:
        return (self.selector is not None
                and (self.namespaces is None or self.namespace_selector is not None or namespace in self.namespaces)
                and self.selector.matches(labels))

    def resolve(self, namespaces: NamespaceLabels) -> AffinityTerm:
        """The term with the namespaces its selector selects (by `namespaces`: name -> labels) added to those it
        names; the term itself when it has no selector to resolve."""
        if self.namespace_selector is None:
            return self
        chosen = {name for name, labels in namespaces.items() if self.namespace_selector.matches(labels)}
        return AffinityTerm(self.selector, (self.namespaces or frozenset()) | chosen, self.topology_key)


UNRESOLVED = "required pod affinity or anti-affinity with a namespaceSelector, before the namespaces' labels are known"


@dataclass(frozen=True, slots=True)
class PodAffinity:
    """A pod's required pod affinity and anti-affinity terms; false when it has none (nor an unsupported one)."""

    affinity: tuple[AffinityTerm, ...] = ()
    anti: tuple[AffinityTerm, ...] = ()
    unsupported: str = ""   # why gputide cannot evaluate them yet ("": it can)

    def __bool__(self) -> bool:
        return bool(self.affinity or self.anti or self.unsupported)

    @classmethod
    def from_spec(cls, namespace: str, spec: Mapping[str, Any],
                  namespace_labels: NamespaceLabels | None = None) -> PodAffinity:
        """The required terms of a pod spec in `namespace`, namespaceSelectors resolved by `namespace_labels` (name
        -> labels of every namespace); without them such terms stay unresolved and `unsupported` says so."""
        affinity = spec.get("affinity") or {}
        if not affinity.get("podAffinity") and not affinity.get("podAntiAffinity"):
            return NO_AFFINITY
        parsed = {kind: tuple(_affinity_term(namespace, t) for t in (affinity.get(kind) or {}).get(REQUIRED) or ())
                  for kind in ("podAffinity", "podAntiAffinity")}
        unresolved = any(t.namespace_selector is not None for terms in parsed.values() for t in terms)
        raw = cls(parsed["podAffinity"], parsed["podAntiAffinity"], UNRESOLVED if unresolved else "")
        return raw.resolved(namespace_labels)

    @property
    def unresolved(self) -> bool:
        """Whether a term has a namespaceSelector still to resolve."""
        return any(t.namespace_selector is not None for t in self.affinity + self.anti)

    def resolved(self, namespaces: NamespaceLabels | None) -> PodAffinity:
        """These terms with their namespaceSelectors resolved by `namespaces` (name -> labels); unchanged while
        `namespaces` is None (not known) or there is nothing to resolve."""
        if namespaces is None or not self.unresolved:
            return self
        return PodAffinity(tuple(t.resolve(namespaces) for t in self.affinity),
                           tuple(t.resolve(namespaces) for t in self.anti))


def _affinity_term(namespace: str, t: Mapping[str, Any]) -> AffinityTerm:
    """A pod (anti-)affinity term of a pod in `namespace`: with a non-empty namespaceSelector, unresolved (module
    docstring)."""
    ns_selector, named = t.get("namespaceSelector"), frozenset(str(n) for n in t.get("namespaces") or ())
    unresolved = None
    if ns_selector is None:
        namespaces = named or frozenset({namespace})
    elif ns_selector.get("matchLabels") or ns_selector.get("matchExpressions"):
        namespaces, unresolved = named, Selector.from_json(ns_selector)
    else:   # an empty namespace selector selects every namespace
        namespaces = None
    selector = t.get("labelSelector")
    return AffinityTerm(None if selector is None else Selector.from_json(selector), namespaces,
                        str(t.get("topologyKey") or ""), unresolved)


NO_AFFINITY = PodAffinity()
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def weight(value: Any) -> int | None:
    """A preferred term's weight when it is one the API server admits, a whole number from 1 to 100; else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 100 else None


@dataclass(frozen=True, slots=True)
class Preferences:
    """A pod's preferred (soft) placement: node affinity terms and pod affinity and anti-affinity terms, each with
    its weight. They order the nodes a pod may go to and never refuse one; false when there are none."""

    node: tuple[tuple[int, Term], ...] = ()
    affinity: tuple[tuple[int, AffinityTerm], ...] = ()
    anti: tuple[tuple[int, AffinityTerm], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.node or self.affinity or self.anti)

    @classmethod
    def from_spec(cls, namespace: str, spec: Mapping[str, Any],
                  namespace_labels: NamespaceLabels | None = None) -> Preferences:
        """The preferred terms of a pod spec in `namespace`, namespaceSelectors resolved by `namespace_labels` as
        `PodAffinity.from_spec` resolves them (unresolved without). Ignored, as no-ops: a term whose weight is not a
        whole number from 1 to 100 (the API server admits no other)."""
        affinity = spec.get("affinity") or {}
        node = tuple((w, Term.from_json(pref))
                     for t in ((affinity.get("nodeAffinity") or {}).get(PREFERRED) or ())
                     if (w := weight(t.get("weight"))) and (pref := t.get("preference") or {}))
        pods: dict[str, tuple[tuple[int, AffinityTerm], ...]] = {}
        for kind in ("podAffinity", "podAntiAffinity"):
            pods[kind] = tuple((w, _affinity_term(namespace, t.get("podAffinityTerm") or {}))
                               for t in (affinity.get(kind) or {}).get(PREFERRED) or ()
                               if (w := weight(t.get("weight"))))
        if not (node or pods["podAffinity"] or pods["podAntiAffinity"]):
            return NO_PREFERENCES
        raw = cls(node, pods["podAffinity"], pods["podAntiAffinity"])
        return raw if namespace_labels is None else raw.resolved(namespace_labels)

    @property
    def unresolved(self) -> bool:
        """Whether a preferred pod term has a namespaceSelector still to resolve."""
        return any(t.namespace_selector is not None for _, t in self.affinity + self.anti)

    def resolved(self, namespaces: NamespaceLabels | None) -> Preferences:
        """These preferences with their pod terms' namespaceSelectors resolved by `namespaces` (name -> labels).
        While the labels are not known (None) such a term is left out: a preference is better left out than read
        as covering every namespace."""
        if not self.unresolved:
            return self

        def kept(terms: tuple[tuple[int, AffinityTerm], ...]) -> tuple[tuple[int, AffinityTerm], ...]:
            if namespaces is None:
                return tuple((w, t) for w, t in terms if t.namespace_selector is None)
            return tuple((w, t.resolve(namespaces)) for w, t in terms)

        out = Preferences(self.node, kept(self.affinity), kept(self.anti))
        return out if out else NO_PREFERENCES

    def node_weight(self, name: str, labels: Mapping[str, str]) -> int:
        """The summed weights of the preferred node affinity terms the node (`name`, `labels`) matches."""
        return sum(w for w, t in self.node if t.allows(name, labels))


NO_PREFERENCES = Preferences()


def in_domain(domain: np.ndarray, per_node: np.ndarray) -> np.ndarray:
    """Per node: how many of `per_node` (a count per node) its domain holds (`domain`: an id per node, -1: none).
    A node in no domain holds none."""
    inside = domain >= 0
    out = np.zeros(len(domain))
    if inside.any():
        counts = np.bincount(domain[inside], weights=per_node[inside])
        out[inside] = counts[domain[inside]]
    return out


def occupied(domain: np.ndarray, per_node: np.ndarray) -> np.ndarray:
    """Per node: whether its domain (`domain`: an id per node, -1: none) holds any of `per_node` (a count per
    node). A node in no domain is never occupied."""
    return in_domain(domain, per_node) > 0
