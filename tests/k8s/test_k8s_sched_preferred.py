"""Preferred (soft) node affinity and pod affinity / anti-affinity in the secondary scheduler, scored as
kube-scheduler's NodeAffinity and InterPodAffinity score plugins score them: among the nodes a pod fits, the
preferred one wins when the others are equal, anti-affinity spreads, and a preference never puts a pod where it
does not fit. Read from the pod spec (`Preferences`), weighed over the pass (`Preferred`), normalised and added by
the placement engine (`plugins.preference`), against the fake API server with the real engine."""

from __future__ import annotations

import numpy as np
import pytest
from fakeapi import FakeKube, node, pod
from hypothesis import given, settings
from hypothesis import strategies as st

from balancer.actuate.k8s_gang import GROUP_LABEL
from balancer.actuate.k8s_podaffinity import PodPlacement
from balancer.actuate.k8s_preferred import Preferred
from balancer.actuate.k8s_reads import pod_usage
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.app.scheduling import EnginePlacer
from balancer.noderules import NO_PREFERENCES, PREFERRED, Preferences, Requirement, Term
from balancer.plan.placement.nodestats import NodeStats
from balancer.plan.placement.plugins import Candidates, preference
from balancer.plan.placement.state import ClusterState, PodRequest
from tests.fuzz.fuzzing import examples

HOST, ZONE = "kubernetes.io/hostname", "topology.kubernetes.io/zone"


def zone_is(zone: str) -> dict:
    return {"matchExpressions": [{"key": ZONE, "operator": "In", "values": [zone]}]}


def pods_term(topology: str = HOST, **labels: str) -> dict:
    return {"labelSelector": {"matchLabels": labels}, "topologyKey": topology}


def preferring(p: dict, *, nodes: list[tuple] = (), affinity: list[tuple] = (), anti: list[tuple] = ()) -> dict:
    """`p` with preferred node affinity ((weight, preference), ...) and pod affinity and anti-affinity ((weight,
    podAffinityTerm), ...)."""
    rules = p["spec"].setdefault("affinity", {})
    if nodes:
        rules["nodeAffinity"] = {PREFERRED: [{"weight": w, "preference": t} for w, t in nodes]}
    for kind, terms in (("podAffinity", affinity), ("podAntiAffinity", anti)):
        if terms:
            rules[kind] = {PREFERRED: [{"weight": w, "podAffinityTerm": t} for w, t in terms]}
    return p


def pending(name: str, gpus: int = 1, **labels: str) -> dict:
    return pod(name, gpus=gpus, scheduler="gputide", phase="Pending", labels=labels)


def hosts(kube: FakeKube, zones: dict[str, str], gpus: int = 8) -> FakeKube:
    for name, zone in zones.items():
        kube.add(node(name, gpus, labels={HOST: name, ZONE: zone}))
    return kube


def nodes_of(kube: FakeKube, *names: str) -> list[str | None]:
    return [kube.get("pods", n, "default")["spec"].get("nodeName") for n in names]


def scheduler(api, clock, policy: str = "gputide") -> SecondaryScheduler:
    return SecondaryScheduler(api, "gputide", EnginePlacer(policy), clock=clock, preemption=False)


# ---- reading the terms ------------------------------------------------------------------------------------------

IN_Z2 = Term((Requirement(ZONE, "In", ("z2",)),))


@pytest.mark.parametrize(("weight", "kept"), [
    (1, True), (100, True), (0, False), (101, False), (-5, False), ("50", False), (50.5, False), (True, False),
    (None, False),
], ids=["least", "most", "zero", "over-100", "negative", "a-string", "a-fraction", "a-boolean", "missing"])
def test_a_term_whose_weight_the_api_server_would_refuse_is_ignored_and_only_that_term(weight, kept) -> None:
    spec = preferring(pending("p"), nodes=[(weight, zone_is("z2")), (7, zone_is("z1"))])["spec"]
    parsed = Preferences.from_spec("default", spec)
    assert [w for w, _ in parsed.node] == ([weight, 7] if kept else [7])


@pytest.mark.parametrize(("spec", "expected"), [
    ({}, NO_PREFERENCES),
    ({"affinity": {"nodeAffinity": {PREFERRED: [{"weight": 5, "preference": zone_is("z2")}]}}},
     Preferences(node=((5, IN_Z2),))),
    ({"affinity": {"nodeAffinity": {PREFERRED: [{"weight": 5, "preference": {}}]}}}, NO_PREFERENCES),
    ({"affinity": {"podAntiAffinity": {PREFERRED: [{"weight": 9, "podAffinityTerm": pods_term(app="web")}]}}},
     "anti"),
    ({"affinity": {"podAffinity": {PREFERRED: [{"weight": 9, "podAffinityTerm": {
        **pods_term(app="web"), "namespaceSelector": {"matchLabels": {"team": "x"}}}}]}}}, NO_PREFERENCES),
    ({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [pods_term(app="web")]}}},
     NO_PREFERENCES),
], ids=["none", "node-term", "an-empty-preference-is-a-no-op", "pod-anti-affinity-term",
        "a-namespace-selector-is-left-out-while-the-namespaces-are-unknown", "required-terms-are-no-preference"])
def test_preferred_terms_read_as_kubernetes_defines_them(spec, expected) -> None:
    parsed = Preferences.from_spec("ml", spec).resolved(None)   # what is weighed while no namespace is known
    if expected == "anti":
        ((w, term),) = parsed.anti
        assert (w, term.topology_key, term.namespaces, parsed.node, parsed.affinity) == (9, HOST, {"ml"}, (), ())
        assert term.matches("ml", {"app": "web"}) and not term.matches("other", {"app": "web"})
    else:
        assert parsed == expected
    assert bool(parsed) == (expected != NO_PREFERENCES)


def test_place_is_told_the_offered_nodes_preferences_in_the_order_offered_and_nothing_without_any() -> None:
    view = [{"name": n, "labels": {HOST: n, ZONE: z}} for n, z in (("a", "z1"), ("b", "z2"), ("c", "z2"))]
    bound = [pod_usage(pod("db", node_name="c", labels={"app": "db"}))]
    preferred = Preferred(view, PodPlacement(view, bound))
    spec = preferring(pending("p"), nodes=[(30, zone_is("z2"))], anti=[(5, pods_term(ZONE, app="db"))])["spec"]
    req = {"name": "default/p", "preferences": Preferences.from_spec("default", spec)}
    assert preferred.request(req, [2, 0])["preferred"].tolist() == [[30, -5], [0, 0]]
    assert preferred.request(req, [0]) is req                        # nothing preferred nor shunned there
    plain = {"name": "default/q", "preferences": NO_PREFERENCES}
    assert preferred.request(plain, [0, 1, 2]) is plain and "preferred" not in plain


# ---- placing against the fake API server ------------------------------------------------------------------------

@pytest.mark.parametrize("policy", ["gputide", "bestfit", "fgd"])
@pytest.mark.parametrize(("zone", "chosen"), [(None, "a"), ("z1", "a"), ("z2", "b")])
def test_of_two_otherwise_equal_nodes_the_preferred_one_is_chosen(kube, api, clock, policy, zone, chosen) -> None:
    hosts(kube, {"a": "z1", "b": "z2"})
    kube.add(preferring(pending("p"), nodes=[(1, zone_is(zone))] if zone else []))
    scheduler(api, clock, policy).schedule_once()
    assert nodes_of(kube, "p") == [chosen]   # alike, the first node


def test_a_full_preference_outweighs_the_policys_packing(kube, api, clock) -> None:
    hosts(kube, {"a": "z1", "b": "z2"})
    kube.add(pod("running", gpus=4, node_name="a"))
    kube.add(pending("plain"))
    kube.add(preferring(pending("picky"), nodes=[(1, zone_is("z2"))]))
    scheduler(api, clock).schedule_once()
    assert nodes_of(kube, "plain", "picky") == ["a", "b"]


def test_the_heavier_preference_wins(kube, api, clock) -> None:
    hosts(kube, {"a": "z1", "b": "z2", "c": "z3"})
    kube.add(preferring(pending("p"), nodes=[(10, zone_is("z1")), (90, zone_is("z3")), (20, zone_is("z3"))]))
    scheduler(api, clock).schedule_once()
    assert nodes_of(kube, "p") == ["c"]


def test_preferred_anti_affinity_spreads_replicas_the_policy_would_pack(kube, api, clock) -> None:
    hosts(kube, {"a": "z1", "b": "z1", "c": "z2"})
    for k in range(3):
        kube.add(pending(f"packed-{k}", app="packed"))
        kube.add(preferring(pending(f"spread-{k}", app="spread"), anti=[(100, pods_term(app="spread"))]))
    scheduler(api, clock).schedule_once()
    assert len(set(nodes_of(kube, "packed-0", "packed-1", "packed-2"))) == 1
    assert sorted(nodes_of(kube, "spread-0", "spread-1", "spread-2")) == ["a", "b", "c"]


def test_preferred_pod_affinity_follows_a_running_pods_zone_and_anti_affinity_leaves_it(kube, api, clock) -> None:
    hosts(kube, {"a": "z1", "b": "z2", "c": "z2"})
    kube.add(pod("db", gpus=1, node_name="c", labels={"app": "db"}))
    kube.add(preferring(pending("near"), affinity=[(50, pods_term(ZONE, app="db"))]))
    kube.add(preferring(pending("far"), anti=[(50, pods_term(ZONE, app="db"))]))
    scheduler(api, clock).schedule_once()
    near, far = nodes_of(kube, "near", "far")
    assert near in ("b", "c") and far == "a"


@pytest.mark.parametrize("why", ["full", "cordoned", "tainted"])
def test_a_preference_never_places_a_pod_where_it_does_not_fit(kube, api, clock, why) -> None:
    hosts(kube, {"a": "z1"})
    preferred = node("b", 8, labels={HOST: "b", ZONE: "z2"})
    if why == "full":
        kube.add(pod("hog", gpus=8, node_name="b"))
    elif why == "cordoned":
        preferred["spec"]["unschedulable"] = True
    else:
        preferred["spec"]["taints"] = [{"key": "gputide.io/hot", "value": "true", "effect": "NoSchedule"}]
    kube.add(preferred)
    kube.add(preferring(pending("picky"), nodes=[(100, zone_is("z2"))]))
    kube.add(preferring(pending("stuck", gpus=9), nodes=[(100, zone_is("z2"))]))
    sched = scheduler(api, clock)
    assert sched.schedule_once() == {"default/picky": "a", "default/stuck": None}


def test_a_pod_groups_trial_weighs_the_members_placed_before(kube, api, clock) -> None:
    hosts(kube, {"a": "z1", "b": "z1"})
    for k in range(2):
        kube.add(preferring(pending(f"w{k}", 2, **{GROUP_LABEL: "train"}),
                            anti=[(100, pods_term(**{GROUP_LABEL: "train"}))]))
    scheduler(api, clock).schedule_once()
    assert sorted(nodes_of(kube, "w0", "w1")) == ["a", "b"]


# ---- the engine's score -----------------------------------------------------------------------------------------

def candidates(n: int) -> Candidates:
    state = ClusterState.from_nodes(np.full(n, 64000), np.full(n, 262144), np.full(n, 8), ["H100"] * n)
    return Candidates(state, PodRequest(1000, 1024, 2, 1000), np.arange(n), np.full(n, -1), np.full(n, 1000),
                      NodeStats(state))


@pytest.mark.parametrize(("preferred", "expected"), [
    ([(10, 0), (20, 0), (0, 0), (0, 0)], [50, 100, 0, 0]),       # node affinity: to 100 for the highest
    ([(0, -2), (0, 0), (0, 3), (0, 0)], [0, 40, 100, 40]),       # pod affinity: min-max, anti-affinity subtracts
    ([(10, -2), (20, 0), (0, 3), (0, 0)], [50, 140, 100, 40]),   # the two added
    ([(0, 4)] * 4, [0, 0, 0, 0]),                                 # alike everywhere: no preference
])
def test_the_score_is_normalised_over_the_candidates_as_kube_scheduler_normalises(preferred, expected) -> None:
    assert preference(candidates(4), np.array(preferred)).tolist() == pytest.approx(expected)


def test_nodes_that_are_no_candidates_do_not_move_the_scale() -> None:
    c = candidates(4)
    c.node = np.array([0, 1])   # nodes 2 and 3 are not feasible
    assert preference(c, np.array([(10, 0), (20, 1), (100, -50), (0, 90)])).tolist() == pytest.approx([50, 200])


@settings(max_examples=examples(60), deadline=None)
@given(free=st.lists(st.integers(0, 8), min_size=1, max_size=6),
       scores=st.lists(st.tuples(st.integers(0, 300), st.integers(-300, 300)), min_size=6, max_size=6),
       gpus=st.integers(1, 3))
def test_a_pass_places_a_preferring_pod_where_a_placer_asked_for_it_alone_would(free, scores, gpus) -> None:
    view = [{"name": f"n{k}", "labels": {}, "gpu_model": "H100", "gpus_total": 8, "gpus_free": f, "gpus_usable": f,
             "cpu_milli_total": 64000, "cpu_milli_free": 64000, "memory_mib_total": 262144,
             "memory_mib_free": 262144} for k, f in enumerate(free)]
    offered = [k for k, f in enumerate(free) if f >= gpus]
    req = {"name": "ml/p", "num_gpu": gpus, "cpu_milli": 1000, "memory_mib": 1024,
           "preferred": np.array([scores[k] for k in offered], dtype=float).reshape(-1, 2)}
    alone = EnginePlacer("gputide")(req, [view[k] for k in offered])
    assert EnginePlacer("gputide").start_pass(view).place(req, offered) == alone
