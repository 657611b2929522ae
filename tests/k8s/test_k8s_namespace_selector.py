"""Pod affinity terms that select namespaces by their labels (`namespaceSelector`), against the fake API server.

The controller reads the Namespace objects (listed, then watched) and resolves each term to the namespaces whose
labels it selects: such a pod is movable once they are known and not before, and a label put on a Namespace
changes which pods a term selects. The secondary scheduler evaluates such terms the same way, required and
preferred, the pending pod's and the bound pods', and leaves a pod with one pending while the namespaces cannot
be read."""

from __future__ import annotations

import pytest
from fakeapi import FakeKube, namespace, node, pod

from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.k8s_workloads import KubernetesWorkloads
from balancer.app.scheduling import EnginePlacer
from balancer.noderules import PREFERRED, REQUIRED
from tests.k8s.test_k8s_watch import eventually

HOST = "kubernetes.io/hostname"
SERVING = {"matchLabels": {"team": "serving"}}


def by_team(app: str, selector: dict | None = None) -> dict:
    """A pod affinity term: `app` pods on the same host, in the namespaces labelled team=serving (or `selector`)."""
    return {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": HOST,
            "namespaceSelector": SERVING if selector is None else selector}


def kept_apart(p: dict, app: str = "web") -> dict:
    """`p` with required anti-affinity to `app` pods of the serving teams' namespaces, one per host."""
    p["spec"]["affinity"] = {"podAntiAffinity": {REQUIRED: [by_team(app)]}}
    return p


def pending(name: str, ns: str, gpus: int = 1, **labels: str) -> dict:
    return pod(name, ns, gpus=gpus, scheduler="gputide", phase="Pending", labels=labels)


def teams(kube: FakeKube, *hosts: str) -> FakeKube:
    """Namespaces team-a and team-b (team=serving) and lab (team=research), and a node per host."""
    for name, team in (("team-a", "serving"), ("team-b", "serving"), ("lab", "research")):
        kube.add(namespace(name, team=team))
    for h in hosts:
        kube.add(node(h, 8, labels={HOST: h}))
    return kube


def first_by_name(request: dict, nodes: list[dict]) -> str | None:
    return min(n["name"] for n in nodes) if nodes else None


def where(kube: FakeKube, name: str, ns: str) -> str | None:
    return kube.get("pods", name, ns)["spec"].get("nodeName")


def covered(provider: KubernetesWorkloads, key: str = "team-a/web-0") -> frozenset[str] | None:
    (term,) = provider()[key].pod_affinity.anti
    return term.namespaces


# ---- the controller ---------------------------------------------------------------------------------------------

def test_a_pod_whose_anti_affinity_selects_team_namespaces_is_movable_and_covers_only_them(kube, api, clock):
    teams(kube)
    kube.add(kept_apart(pod("web-0", "team-a", labels={"app": "web"}, owner=("ReplicaSet", "web-5c9f"))))
    provider = KubernetesWorkloads(api, ttl_s=60.0, clock=clock, sleep=lambda s: None)
    w = provider()["team-a/web-0"]
    (term,) = w.pod_affinity.anti
    assert w.movable and not w.pod_affinity.unsupported
    assert term.namespaces == {"team-a", "team-b"}
    assert term.matches("team-b", {"app": "web"}) and not term.matches("lab", {"app": "web"})


def test_before_the_namespaces_are_first_listed_the_pod_stays_unmovable(kube: FakeKube, api, clock):
    teams(kube)
    kube.add(kept_apart(pod("web-0", "team-a", labels={"app": "web"}, owner=("ReplicaSet", "web-5c9f"))))
    pinned = kept_apart(pod("web-1", "team-a", labels={"app": "web"}))
    pinned["metadata"]["annotations"] = {"gputide.io/movable": "false"}
    kube.add(pinned)
    down = kube.inject("GET", r"/namespaces(\?|$)", 503, count=10_000)
    provider = KubernetesWorkloads(api, ttl_s=60.0, clock=clock, sleep=lambda s: None)
    w = provider()["team-a/web-0"]
    assert not w.movable and w.pod_affinity.unresolved   # not guessed: where it may go cannot be told
    assert not provider()["team-a/web-0"].movable        # a failed list is tried again each cycle
    down.remaining = 0
    workloads = provider()
    assert workloads["team-a/web-0"].movable and covered(provider) == {"team-a", "team-b"}
    assert not workloads["team-a/web-1"].movable          # its annotation still says so
    kube.mutate("namespaces", "lab", "", {"metadata": {"labels": {"team": "serving"}}})
    clock.advance(61)
    assert covered(provider) == {"team-a", "team-b", "lab"}   # the next list re-evaluates it


def test_a_watching_controller_re_evaluates_the_term_when_a_namespaces_labels_change(kube: FakeKube, api, clock):
    teams(kube)
    kube.add(kept_apart(pod("web-0", "team-a", labels={"app": "web"}, owner=("ReplicaSet", "web-5c9f"))))
    provider = KubernetesWorkloads(api, ttl_s=60.0, clock=clock, sleep=lambda s: None, watch=True, watch_s=1.0)
    try:
        assert covered(provider) == {"team-a", "team-b"}
        eventually(lambda: provider.namespaces.watch.synced and provider.watch.synced)
        kube.mutate("namespaces", "lab", "", {"metadata": {"labels": {"team": "serving"}}})
        eventually(lambda: covered(provider) == {"team-a", "team-b", "lab"})   # no TTL waited
        kube.add(namespace("team-c", team="serving"))
        kube.delete("namespaces", "team-b")
        eventually(lambda: covered(provider) == {"team-a", "team-c", "lab"})
        assert provider()["team-a/web-0"].movable
    finally:
        provider.close()


def test_the_namespaces_watch_reaches_the_controller_metrics(api):
    from balancer.cmd._run_parts import kubernetes_sources
    from balancer.metrics import ControllerMetrics

    metrics = ControllerMetrics()
    overrides, nodes = kubernetes_sources(api, 30.0, False, metrics)
    try:
        def synced() -> float | None:
            return metrics.registry.get_sample_value("gputide_kubernetes_watch_synced", {"resource": "namespaces"})

        assert synced() == 0
        overrides()   # the first cycle starts the watches
        eventually(lambda: synced() == 1)
        assert metrics.registry.get_sample_value("gputide_kubernetes_watch_failures", {"resource": "namespaces"}) == 0
    finally:
        overrides.close()
        nodes.close()


# ---- the secondary scheduler ------------------------------------------------------------------------------------

def test_the_scheduler_keeps_a_replica_off_the_hosts_of_pods_in_selected_namespaces_only(kube, api, clock):
    teams(kube, "a", "b", "c")
    kube.add(pod("web-b", "team-b", node_name="a", labels={"app": "web"}))     # a serving team's: counts
    kube.add(pod("web-lab", "lab", node_name="b", labels={"app": "web"}))      # research's: does not count
    kube.add(kept_apart(pending("web-0", "team-a", app="web")))
    sched = SecondaryScheduler(api, "gputide", first_by_name, clock=clock)
    assert sched.schedule_once() == {"team-a/web-0": "b"}


def test_a_bound_pods_term_keeps_off_pods_of_the_namespaces_it_selects_as_their_labels_are_now(kube: FakeKube,
                                                                                              api, clock):
    teams(kube, "a", "b")
    kube.add(kept_apart(pod("guard", "ops", gpus=0, node_name="a", labels={"app": "guard"})))
    kube.add(pending("web-0", "team-a", app="web"))
    kube.add(pending("web-1", "lab", app="web"))
    sched = SecondaryScheduler(api, "gputide", first_by_name, clock=clock)
    assert sched.schedule_once() == {"team-a/web-0": "b", "lab/web-1": "a"}
    kube.mutate("namespaces", "lab", "", {"metadata": {"labels": {"team": "serving"}}})
    kube.add(pending("web-2", "lab", app="web"))
    assert sched.schedule_once() == {"lab/web-2": "b"}   # lab is a serving team's now: the guard keeps it off a


def test_while_the_namespaces_cannot_be_read_such_a_pending_pod_waits_and_a_bound_term_covers_all(kube: FakeKube,
                                                                                                 api, clock):
    teams(kube, "a", "b")
    kube.add(kept_apart(pod("guard", "ops", gpus=0, node_name="a", labels={"app": "guard"})))
    kube.add(kept_apart(pending("web-0", "team-a", app="web")))
    kube.add(pending("web-1", "lab", app="web"))
    kube.inject("GET", r"/namespaces(\?|$)", 503, count=10_000)
    sched = SecondaryScheduler(api, "gputide", first_by_name, clock=clock, sleep=lambda s: None)
    assert sched.schedule_once() == {"lab/web-1": "b", "team-a/web-0": None}
    assert sched.reasons["team-a/web-0"].startswith(
        "0/2 nodes are available: 2 node(s) not considered: gputide cannot evaluate required pod affinity or "
        "anti-affinity with a namespaceSelector, before the namespaces' labels are known")


def test_a_pass_without_such_a_term_does_not_read_the_namespaces(kube: FakeKube, api, clock):
    teams(kube, "a")
    kube.add(pending("plain", "team-a"))
    sched = SecondaryScheduler(api, "gputide", first_by_name, clock=clock)
    assert sched.schedule_once() == {"team-a/plain": "a"}
    assert not kube.calls("GET", r"/namespaces$")


def test_a_watching_scheduler_follows_the_namespaces_labels(kube: FakeKube, api, clock):
    teams(kube, "a", "b")
    kube.add(pod("web-lab", "lab", node_name="a", labels={"app": "web"}))
    kube.add(kept_apart(pending("web-0", "team-a", app="web")))
    sched = SecondaryScheduler(api, "gputide", first_by_name, clock=clock, watch=True, watch_s=1.0).start()
    try:
        assert set(sched.watches) == {"pending pods", "nodes", "bound pods", "namespaces", "persistentvolumeclaims",
                                      "persistentvolumes", "storageclasses"}   # each in the metrics
        eventually(lambda: all(w.synced for w in sched.watches.values()))
        kube.mutate("namespaces", "lab", "", {"metadata": {"labels": {"team": "serving"}}})
        eventually(lambda: sched.namespace_labels()["lab"] == {"team": "serving"})
        listed = len(kube.calls("GET", r"/namespaces$"))
        assert sched.schedule_once() == {"team-a/web-0": "b"}   # without the relabel: "a"
        assert len(kube.calls("GET", r"/namespaces$")) == listed   # read from the watch, not listed
    finally:
        sched.close()


@pytest.mark.parametrize(("serving_host", "research_host"), [("a", "b"), ("b", "a")])
def test_a_preferred_term_weighs_only_the_pods_of_the_namespaces_it_selects(kube: FakeKube, api, clock,
                                                                           serving_host, research_host):
    teams(kube, "a", "b")
    kube.add(pod("cache-b", "team-b", node_name=serving_host, labels={"app": "cache"}))
    kube.add(pod("cache-lab", "lab", node_name=research_host, labels={"app": "cache"}))
    reader = pending("reader", "team-a")
    reader["spec"]["affinity"] = {"podAffinity": {PREFERRED: [{"weight": 100, "podAffinityTerm": by_team("cache")}]}}
    kube.add(reader)
    SecondaryScheduler(api, "gputide", EnginePlacer("gputide"), clock=clock, preemption=False).schedule_once()
    assert where(kube, "reader", "team-a") == serving_host
