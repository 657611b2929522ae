"""Required pod affinity and anti-affinity in the secondary scheduler: kube-scheduler's InterPodAffinity filter.

The pass filter (`PodPlacement`, one integer column per topology key) must answer what a plain node-by-node reading
of kube-scheduler's Go code answers, also after pods are counted during the pass; against the fake API server,
replicas spread one per host, a pod follows another's zone, the first pod of a self-affine group is placed, and a
bound pod's anti-affinity keeps others away, across passes and within a pod group's trial."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pytest
from fakeapi import FakeKube, node, pod
from hypothesis import given, settings
from hypothesis import strategies as st

from balancer.actuate.k8s_gang import GROUP_LABEL
from balancer.actuate.k8s_namespaces import Resolver
from balancer.actuate.k8s_podaffinity import (
    AFFINITY_REASON,
    ANTI_AFFINITY_REASON,
    EXISTING_ANTI_AFFINITY_REASON,
    REASONS,
    PodPlacement,
)
from balancer.actuate.k8s_reads import pod_usage, scheduling_request
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.noderules import NO_AFFINITY, AffinityTerm, PodAffinity, Selector
from tests.fuzz.fuzzing import examples

HOST, ZONE = "kubernetes.io/hostname", "topology.kubernetes.io/zone"


def term(topology: str = HOST, namespaces: list[str] | None = None, **labels: str) -> dict:
    out = {"labelSelector": {"matchLabels": labels}, "topologyKey": topology}
    if namespaces is not None:
        out["namespaces"] = namespaces
    return out


def with_affinity(p: dict, affinity: list[dict] = (), anti: list[dict] = ()) -> dict:
    rules = {}
    if affinity:
        rules["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": list(affinity)}
    if anti:
        rules["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": list(anti)}
    p["spec"]["affinity"] = rules
    return p


def pending(name: str, gpus: int = 1, **labels: str) -> dict:
    return pod(name, gpus=gpus, scheduler="gputide", phase="Pending", labels=labels)


def replica(name: str, app: str = "web") -> dict:
    """A pending replica spread one per host: required anti-affinity to its own app on the hostname."""
    return with_affinity(pending(name, app=app), anti=[term(app=app)])


NO_PREEMPTION = " preemption: not considered for a pod with required pod affinity or anti-affinity."


def first_by_name(request: dict, nodes: list[dict]) -> str | None:
    """A packing placement function: the first node offered, by name (so only the filters spread pods)."""
    return min(n["name"] for n in nodes) if nodes else None


def most_free(request: dict, nodes: list[dict]) -> str | None:
    return max(nodes, key=lambda n: (n["gpus_free"], n["name"]))["name"] if nodes else None


def nodes_of(kube: FakeKube, *names: str) -> list[str | None]:
    return [kube.get("pods", n, "default")["spec"].get("nodeName") for n in names]


def hosts(kube: FakeKube, zones: Mapping[str, str], gpus: int = 8) -> FakeKube:
    for name, zone in zones.items():
        kube.add(node(name, gpus, labels={HOST: name, ZONE: zone}))
    return kube


# ---- reading the terms ------------------------------------------------------------------------------------------

NAMESPACES = {"ml": {"team": "ml"}, "a": {"team": "x"}, "b": {"team": "y"}, "c": {"team": "x", "tier": "gold"}}


def team(*values: str) -> dict:
    return {"matchExpressions": [{"key": "team", "operator": "In", "values": list(values)}]}


@pytest.mark.parametrize(("raw", "namespaces", "selected"), [
    (term(app="web"), frozenset({"ml"}), ["ml"]),
    (term(namespaces=["a", "b"], app="web"), frozenset({"a", "b"}), ["a", "b"]),
    ({**term(app="web"), "namespaceSelector": {}}, None, ["ml", "a", "b", "c"]),
    ({**term(app="web"), "namespaceSelector": {"matchLabels": {"team": "x"}}}, frozenset({"a", "c"}), ["a", "c"]),
    ({**term(namespaces=["b"], app="web"), "namespaceSelector": team("x")}, frozenset({"a", "b", "c"}),
     ["a", "b", "c"]),
    ({**term(app="web"), "namespaceSelector": team("nobody")}, frozenset(), []),
    ({"topologyKey": HOST}, frozenset({"ml"}), []),
], ids=["own-namespace-by-default", "namespaces-named", "empty-namespace-selector-is-every-namespace",
        "namespace-selector-selects-by-the-namespaces-labels", "named-and-selected-namespaces-are-united",
        "a-selector-matching-no-namespace-selects-no-pod", "no-label-selector-selects-no-pod"])
def test_a_term_reads_as_kubernetes_defines_it(raw, namespaces, selected) -> None:
    parsed = PodAffinity.from_spec("ml", {"affinity": {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [raw]}}}, NAMESPACES)
    (t,) = parsed.anti
    assert t.namespaces == namespaces and t.topology_key == HOST and t.namespace_selector is None
    assert [ns for ns in NAMESPACES if t.matches(ns, {"app": "web"})] == selected
    assert not parsed.unsupported and bool(parsed)


def test_a_namespace_selector_stays_unresolved_until_the_namespaces_labels_are_known() -> None:
    spec = {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {**term(namespaces=["b"], app="web"), "namespaceSelector": team("x")}, term(app="db")]}}}
    raw = PodAffinity.from_spec("ml", spec)
    assert raw.unresolved and "namespaceSelector" in raw.unsupported and raw.resolved(None) is raw
    selecting, own = raw.anti
    assert all(selecting.matches(ns, {"app": "web"}) for ns in ("ml", "a", "elsewhere"))   # meanwhile: every one
    assert own.namespace_selector is None and own.namespaces == frozenset({"ml"})
    assert raw.resolved(NAMESPACES) == PodAffinity.from_spec("ml", spec, NAMESPACES)
    assert raw.resolved(NAMESPACES).anti[0].namespaces == frozenset({"a", "b", "c"})
    assert raw.resolved({"ml": {}}).anti[0].namespaces == frozenset({"b"})   # a label changed: rebuilt


def test_a_pod_without_required_pod_affinity_has_none_and_a_bound_pod_keeps_its_anti_affinity_terms() -> None:
    plain = scheduling_request(pending("p"))
    assert not plain["pod_affinity"]
    preferred = pending("q")
    preferred["spec"]["affinity"] = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "podAffinityTerm": term(app="x")}]}}
    assert not scheduling_request(preferred)["pod_affinity"]
    bound = with_affinity(pod("b", node_name="n1", labels={"app": "web"}), affinity=[term(app="db")],
                          anti=[term(app="web")])
    assert pod_usage(bound).anti == (AffinityTerm(Selector.from_json({"matchLabels": {"app": "web"}}),
                                                  frozenset({"default"}), HOST),)


# ---- the pass filter against kube-scheduler's reading, node by node --------------------------------------------

def counts(nodes: list[dict], pods: Iterable[tuple[str, str, Mapping[str, str], tuple]], namespace: str,
           labels: Mapping[str, str], affinity: PodAffinity) -> tuple[dict, dict, dict]:
    """kube-scheduler's PreFilter of InterPodAffinity as its Go code reads: per (topology key, value) pair, the pods
    whose anti-affinity selects the incoming pod, those matching ALL its affinity terms, those matching each of its
    anti-affinity terms."""
    where = {n["name"]: n["labels"] for n in nodes}
    existing: dict[tuple[str, str], int] = {}
    near: dict[tuple[str, str], int] = {}
    away: dict[tuple[str, str], int] = {}

    def count(into: dict, node_name: str, key: str) -> None:
        if node_name in where and key in where[node_name]:
            pair = (key, where[node_name][key])
            into[pair] = into.get(pair, 0) + 1

    for node_name, ns, lab, anti in pods:
        for t in (t for t in anti if t.matches(namespace, labels)):
            count(existing, node_name, t.topology_key)
        if affinity.affinity and all(t.matches(ns, lab) for t in affinity.affinity):
            for t in affinity.affinity:
                count(near, node_name, t.topology_key)
        for t in (t for t in affinity.anti if t.matches(ns, lab)):
            count(away, node_name, t.topology_key)
    return existing, near, away


def reference(nodes: list[dict], pods: Iterable[tuple[str, str, Mapping[str, str], tuple]], namespace: str,
              labels: Mapping[str, str], affinity: PodAffinity) -> list[str | None]:
    """kube-scheduler's Filter of InterPodAffinity node by node, on `counts`."""
    existing, near, away = counts(nodes, pods, namespace, labels, affinity)
    first = not near and bool(affinity.affinity) and all(t.matches(namespace, labels) for t in affinity.affinity)
    out: list[str | None] = []
    for n in nodes:
        lab = n["labels"]
        keyed = all(t.topology_key in lab for t in affinity.affinity)
        exist = all(near.get((t.topology_key, lab.get(t.topology_key)), 0) > 0 for t in affinity.affinity)
        if not keyed or not (exist or first):
            out.append(AFFINITY_REASON)
        elif any(away.get((t.topology_key, lab[t.topology_key]), 0) > 0
                 for t in affinity.anti if t.topology_key in lab):
            out.append(ANTI_AFFINITY_REASON)
        elif any(existing.get(pair, 0) > 0 for pair in lab.items()):
            out.append(EXISTING_ANTI_AFFINITY_REASON)
        else:
            out.append(None)
    return out


KEYS = [HOST, ZONE, "rack"]
label_sets = st.dictionaries(st.sampled_from(["app", "tier"]), st.sampled_from(["a", "b"]), max_size=2)
terms = st.builds(AffinityTerm, st.one_of(st.none(), st.builds(Selector.from_json, st.builds(
    lambda labels: {"matchLabels": labels}, label_sets))),
    st.sampled_from([frozenset({"ml"}), frozenset({"other"}), None]), st.sampled_from(KEYS))


@st.composite
def clusters(draw):
    nodes = []
    for k in range(draw(st.integers(1, 6))):
        labels = {HOST: f"n{k}"} if draw(st.booleans()) else {}
        for key, values in ((ZONE, ["z1", "z2"]), ("rack", ["r1", "r2", "r3"])):
            if draw(st.booleans()):
                labels[key] = draw(st.sampled_from(values))
        nodes.append({"name": f"n{k}", "labels": labels})
    running = draw(st.lists(st.tuples(st.sampled_from([f"n{k}" for k in range(7)]), st.sampled_from(["ml", "other"]),
                                      label_sets, st.lists(terms, max_size=2).map(tuple)), max_size=8))
    return nodes, running


class Bound:
    """A bound pod as `k8s_reads.Usage` gives it (what `PodPlacement` reads of one)."""

    def __init__(self, node_name: str, ns: str, labels: Mapping[str, str], anti: tuple) -> None:
        self.node, self.key, self.labels, self.anti = node_name, f"{ns}/p", tuple(sorted(labels.items())), anti


def answers(placement: PodPlacement, namespace: str, labels: Mapping[str, str], affinity: PodAffinity) -> list:
    code = placement.refusals(namespace, labels, affinity)
    return [None] * placement.size if code is None else [REASONS[c] or None for c in code.tolist()]


@settings(max_examples=examples(300), deadline=None)
@given(cluster=clusters(), asks=st.lists(st.tuples(st.sampled_from(["ml", "other"]), label_sets,
                                                   st.lists(terms, max_size=2), st.lists(terms, max_size=2),
                                                   st.integers(0, 5)), min_size=1, max_size=5))
def test_the_pass_filter_answers_what_kube_scheduler_answers_node_by_node(cluster, asks) -> None:
    nodes, running = cluster
    placement = PodPlacement(nodes, [Bound(*p) for p in running])
    for ns, labels, affinity, anti, where in asks:
        wanted = PodAffinity(tuple(affinity), tuple(anti))
        here, there = nodes[where % len(nodes)]["name"], nodes[(where + 1) % len(nodes)]["name"]
        # a gang's trial counts the pod on a copy: the copy sees it, the placement does not
        trial = placement.copy()
        trial.add((where + 1) % len(nodes), ns, labels, wanted.anti)
        tried = [*running, (there, ns, labels, wanted.anti)]
        assert answers(trial, ns, labels, wanted) == reference(nodes, tried, ns, labels, wanted)
        assert answers(placement, ns, labels, wanted) == reference(nodes, running, ns, labels, wanted)
        # the pod is bound: counted on its node from now on, in the placement but not in the copy
        placement.add(where % len(nodes), ns, labels, wanted.anti)
        running.append((here, ns, labels, wanted.anti))
        assert answers(trial, ns, labels, wanted) == reference(nodes, tried, ns, labels, wanted)
        assert answers(placement, "ml", {}, NO_AFFINITY) == reference(nodes, running, "ml", {}, NO_AFFINITY)


LABELLED = {"ml": {"team": "x"}, "other": {"team": "y"}}
selecting = st.builds(lambda t, team: AffinityTerm(t.selector, t.namespaces or frozenset(), t.topology_key,
                                                   Selector.from_json({"matchLabels": {"team": team}})),
                      terms, st.sampled_from(["x", "y"]))


@settings(max_examples=examples(200), deadline=None)
@given(cluster=clusters(), more=st.lists(st.tuples(st.sampled_from([f"n{k}" for k in range(6)]),
                                                   st.sampled_from(["ml", "other"]), label_sets,
                                                   st.lists(selecting, min_size=1, max_size=2).map(tuple)),
                                         max_size=4),
       ask=st.tuples(st.sampled_from(["ml", "other"]), label_sets), known=st.booleans())
def test_bound_terms_with_a_namespace_selector_count_as_the_namespaces_they_resolve_to(cluster, more, ask,
                                                                                       known) -> None:
    """Resolved by the placement (two terms may become one), a bound pod's anti-affinity keeps pods off as the same
    terms read resolved do; while the labels are unknown, as covering every namespace."""
    nodes, running = cluster
    running = [*running, *more]
    labels = LABELLED if known else None
    placement = PodPlacement(nodes, [Bound(*p) for p in running], Resolver(lambda: labels).term)
    read = [(n, ns, lab, tuple(t.resolve(labels) if labels else t for t in anti)) for n, ns, lab, anti in running]
    assert answers(placement, *ask, NO_AFFINITY) == reference(nodes, read, *ask, NO_AFFINITY)


# ---- the scheduler against the fake API server ------------------------------------------------------------------

def test_two_replicas_with_hostname_anti_affinity_in_one_pass_go_to_different_nodes(kube, api, clock) -> None:
    hosts(kube, {"a": "z1", "b": "z1", "c": "z2"})
    for name in ("web-1", "web-2"):
        kube.add(replica(name))
    kube.add(pending("batch", app="batch"))   # no rule of its own, and no one's anti-affinity selects it
    results = SecondaryScheduler(api, "gputide", first_by_name, clock=clock).schedule_once()
    assert results == {"default/web-1": "a", "default/web-2": "b", "default/batch": "a"}


def test_a_replica_bound_in_an_earlier_pass_keeps_the_next_one_off_its_node(kube, api, clock) -> None:
    hosts(kube, {"a": "z1", "b": "z1"})
    sched = SecondaryScheduler(api, "gputide", first_by_name, clock=clock)
    kube.add(replica("web-1"))
    assert sched.schedule_once() == {"default/web-1": "a"}
    kube.add(replica("web-2"))
    kube.add(replica("web-3"))
    assert sched.schedule_once() == {"default/web-2": "b", "default/web-3": None}
    assert sched.reasons["default/web-3"] == (
        "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules." + NO_PREEMPTION)


def test_a_bound_pods_anti_affinity_keeps_the_pods_it_selects_off_its_node(kube, api, clock) -> None:
    hosts(kube, {"a": "z1", "b": "z1", "c": "z2"}, gpus=2)
    kube.add(with_affinity(pod("guard", gpus=0, node_name="a", labels={"app": "guard"}), anti=[term(app="web")]))
    kube.add(pod("big", gpus=2, node_name="c"))
    kube.add(pending("web", app="web"))        # no rule of its own: the guard's keeps it off node a
    kube.add(pending("other", 0, app="other"))    # not selected by the guard's term
    elsewhere = pending("web-ns", 0, app="web")
    elsewhere["metadata"]["namespace"] = "ml"  # the guard's term selects pods of its own namespace only
    kube.add(elsewhere)
    sched = SecondaryScheduler(api, "gputide", first_by_name, clock=clock)
    results = sched.schedule_once()
    assert results == {"default/web": "b", "default/other": "a", "ml/web-ns": "a"}
    kube.add(pending("web-2", 2, app="web"))
    assert sched.schedule_once() == {"default/web-2": None}
    assert sched.reasons["default/web-2"] == ("0/3 nodes are available: 2 Insufficient nvidia.com/gpu, "
                                              "1 node(s) didn't satisfy existing pods anti-affinity rules.")


def test_a_pod_with_affinity_to_a_running_pods_zone_lands_in_that_zone(kube, api, clock) -> None:
    hosts(kube, {"a": "z1", "b": "z2", "c": "z2"})
    kube.add(pod("cache", gpus=0, node_name="c", labels={"app": "cache"}))
    kube.add(with_affinity(pending("reader", app="reader"), affinity=[term(ZONE, app="cache")]))
    kube.add(with_affinity(pending("lost", app="lost"), affinity=[term(ZONE, app="nothing")]))
    sched = SecondaryScheduler(api, "gputide", first_by_name, clock=clock)
    assert sched.schedule_once() == {"default/reader": "b", "default/lost": None}
    assert sched.reasons["default/lost"] == "0/3 nodes are available: 3 node(s) didn't match pod affinity rules." + (
        NO_PREEMPTION)


def test_the_first_pod_of_a_self_affine_group_is_placed_and_the_next_follows_it(kube, api, clock) -> None:
    hosts(kube, {"a": "z1", "b": "z2", "c": "z1"})
    kube.add(node("bare", 8))   # no zone label: in no domain, so never offered to a pod with zone affinity
    for name in ("grp-1", "grp-2"):
        kube.add(with_affinity(pending(name, app="grp"), affinity=[term(ZONE, app="grp")]))
    results = SecondaryScheduler(api, "gputide", most_free, clock=clock).schedule_once()
    assert results == {"default/grp-1": "c", "default/grp-2": "a"}   # without the affinity: "bare"


def test_a_pod_groups_trial_counts_the_members_placed_before(kube, api, clock) -> None:
    hosts(kube, {"a": "z1", "b": "z1"}, gpus=4)
    for k in range(2):
        kube.add(with_affinity(pending(f"w{k}", 2, **{GROUP_LABEL: "train"}),
                               anti=[term(**{GROUP_LABEL: "train"})]))
    for k in range(3):
        kube.add(with_affinity(pending(f"x{k}", 1, **{GROUP_LABEL: "three"}),
                               anti=[term(**{GROUP_LABEL: "three"})]))
    sched = SecondaryScheduler(api, "gputide", first_by_name, clock=clock)
    results = sched.schedule_once()
    assert nodes_of(kube, "w0", "w1") == ["a", "b"]
    assert nodes_of(kube, "x0", "x1", "x2") == [None, None, None]   # only two hosts for three: none bound
    assert results["default/x0"] is None
    assert "member default/x2 fits nowhere with the others" in sched.reasons["default/x0"]
    assert ANTI_AFFINITY_REASON in sched.reasons["default/x0"]
