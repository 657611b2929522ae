"""The namespaces' labels, for pod (anti-)affinity terms that select their namespaces by a `namespaceSelector`.

A pod affinity term covers the namespaces it names and those whose labels its `namespaceSelector` selects
(`balancer.noderules`). The labels are the Namespace objects', which no pod carries, so a term with a non-empty
selector is read unresolved and resolved here against the Namespace objects, as kube-scheduler resolves it
against its namespace lister. Until the namespaces have been read (the first list not answered, or failing), such
a term stays unresolved: the controller does not move the pod, the scheduler does not place it, and a bound pod's
such anti-affinity term covers every namespace. Nothing is guessed.

* `namespace_entry(obj)` is a Namespace as a cache item (its name and labels) for `ListWatch` / `ListCache`
  (balancer/actuate/k8s_watch.py), and `labels_by_name(items)` those items as {name: labels}, what a term is
  resolved by (a `ListCache` view). The controller's `KubernetesWorkloads` and the secondary scheduler each
  follow the namespaces by watch, as they follow pods and nodes, so a label changed on a Namespace changes which
  pods a term selects from the next planning cycle or pass on; `listed_labels(list_call)` is one list of them,
  for when the watch has not synced.
* `Resolver(read)` resolves for one pass of the scheduler (or one rebuild of the controller's workloads): `read()`
  is called at most once and only when a term needs the labels (most passes have none: no list), and each
  distinct set of terms is resolved once (a Deployment's thousand replicas share one).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from balancer.actuate.k8s_watch import converted
from balancer.errors import ActuationError
from balancer.noderules import AffinityTerm, NamespaceLabels, PodAffinity, Preferences

log = logging.getLogger(__name__)
Json = dict[str, Any]


def namespace_entry(obj: Json) -> tuple[str, tuple[tuple[str, str], ...]] | None:
    """(name, labels) of a Namespace object; None without a name."""
    meta = obj.get("metadata") or {}
    if not meta.get("name"):
        return None
    return str(meta["name"]), tuple(sorted((str(k), str(v)) for k, v in (meta.get("labels") or {}).items()))


def labels_by_name(items: dict[str, Any]) -> dict[str, dict[str, str]]:
    """{namespace name: its labels} of `namespace_entry` items."""
    return {name: dict(labels) for name, labels in items.values()}


def listed_labels(list_call: Callable[[], Json], who: str) -> dict[str, dict[str, str]] | None:
    """{namespace name: its labels} by one list (`list_call()`); None when it fails (logged as `who`'s: terms that
    need the labels are then left unresolved, never guessed)."""
    try:
        listed = list_call()
    except ActuationError as err:
        log.warning("%s: namespaces unknown, namespaceSelectors not evaluated: %s", who, err)
        return None
    return labels_by_name(converted(listed, namespace_entry))


_UNREAD = object()


class Resolver:
    """namespaceSelectors resolved by the labels `read()` returns (None: not known, so left unresolved), read at
    most once and only when a term has a selector; each distinct term (set) resolved once (module docstring)."""

    def __init__(self, read: Callable[[], NamespaceLabels | None]) -> None:
        self._read = read
        self._labels: Any = _UNREAD
        self._resolved: dict[Any, Any] = {}   # a PodAffinity, Preferences or AffinityTerm -> it resolved

    @property
    def labels(self) -> NamespaceLabels | None:
        """The namespaces' labels by name (read on first use); None when they are not known."""
        if self._labels is _UNREAD:
            self._labels = self._read()
        return self._labels

    def _once(self, value: Any, resolve: Callable[[NamespaceLabels | None], Any]) -> Any:
        out = self._resolved.get(value)
        if out is None:
            out = self._resolved[value] = resolve(self.labels)
        return out

    def affinity(self, affinity: PodAffinity) -> PodAffinity:
        """`affinity` resolved (still unresolved while the labels are not known)."""
        return self._once(affinity, affinity.resolved) if affinity.unresolved else affinity

    def preferences(self, prefs: Preferences) -> Preferences:
        """`prefs` resolved; while the labels are not known, without the terms that have a selector."""
        return self._once(prefs, prefs.resolved) if prefs.unresolved else prefs

    def term(self, term: AffinityTerm) -> AffinityTerm:
        """One term resolved (a bound pod's anti-affinity term); unresolved while the labels are not known."""
        if term.namespace_selector is None:
            return term
        return self._once(term, lambda labels: term if labels is None else term.resolve(labels))

    def request(self, req: Json) -> Json:
        """A scheduling request (`k8s_reads.scheduling_request`) with its required and preferred pod terms
        resolved: a copy when it has a selector to resolve, else `req` itself."""
        affinity, prefs = req["pod_affinity"], req.get("preferences")
        if not (affinity and affinity.unresolved) and not (prefs and prefs.unresolved):
            return req
        out = dict(req, pod_affinity=self.affinity(affinity) if affinity else affinity)
        if prefs:
            out["preferences"] = self.preferences(prefs)
        return out
