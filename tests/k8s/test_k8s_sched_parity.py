"""Where the secondary scheduler must decide as kube-scheduler does, or a pod lands where it cannot run (or waits
where it could): against the fake API server.

* the Binding names the pod's uid, the API server's precondition: a pod deleted and created again under the same
  name between the pass's read and its Binding (a StatefulSet's replica, a new revision) is not bound to the node
  chosen for its predecessor;
* a cordoned node admits a pod that tolerates `node.kubernetes.io/unschedulable:NoSchedule` (kube-scheduler's
  NodeUnschedulable filter): DaemonSet-like and drain-tolerant pods are placed as kube-scheduler places them;
* a pod with DRA resource claims (`spec.resourceClaims`) waits, told why: only kube-scheduler's DynamicResources
  plugin allocates its claims, and bound without that allocation the kubelet never starts it.
"""

from __future__ import annotations

import copy

import pytest
from fakeapi import ApiError, FakeKube, node, pod

from balancer.actuate.k8s_scheduler import SecondaryScheduler


def first(request: dict, nodes: list[dict]) -> str | None:
    return nodes[0]["name"] if nodes else None


def pending(name: str, gpus: int = 1, **spec) -> dict:
    p = pod(name, gpus=gpus, scheduler="gputide", phase="Pending")
    p["spec"].update(spec)
    return p


@pytest.fixture
def uid_checked(kube: FakeKube, monkeypatch):
    """The fake API server with the real one's UID precondition on a Binding (BindingREST.setPodNodeAndMetadata:
    a Binding whose metadata.uid is not the pod's answers 409)."""
    bind = type(kube)._bind

    def checked(self, namespace: str, name: str, body: dict) -> dict:
        uid = (body.get("metadata") or {}).get("uid")
        stored = self._existing("pods", namespace, name)["metadata"]["uid"]
        if uid and uid != stored:
            raise ApiError(409, "Conflict", f"Precondition failed: UID in precondition: {uid}, "
                                            f"UID in object meta: {stored}")
        return bind(self, namespace, name, body)

    monkeypatch.setattr(type(kube), "_bind", checked)
    return kube


def test_a_pod_created_again_under_the_same_name_is_not_bound_where_its_predecessor_was_to_go(uid_checked, api):
    kube = uid_checked
    kube.add(node("a", 8, labels={"pool": "a"}))
    kube.add(node("b", 8, labels={"pool": "b"}))
    kube.add(pending("db-0", nodeSelector={"pool": "a"}))
    again = pending("db-0", nodeSelector={"pool": "b"})   # the StatefulSet's new revision, recreated meanwhile

    def recreate() -> None:
        kube.delete("pods", "db-0", "default")
        kube.add(copy.deepcopy(again))

    kube.before("POST", r"/pods/db-0/binding$", recreate)
    sched = SecondaryScheduler(api, "gputide", first)
    sched.schedule_once()
    assert kube.get("pods", "db-0", "default")["spec"].get("nodeName") is None   # not on "a", against its selector
    assert sched.schedule_once() == {"default/db-0": "b"}                       # placed by its own rules


def test_a_cordoned_node_takes_the_pods_that_tolerate_the_cordon_only(kube: FakeKube, api) -> None:
    cordoned = node("a", 8)
    cordoned["spec"]["unschedulable"] = True
    kube.add(cordoned)
    kube.add(pending("agent", tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
                                            "effect": "NoSchedule"}]))
    kube.add(pending("everyone", tolerations=[{"operator": "Exists"}]))
    kube.add(pending("plain"))
    sched = SecondaryScheduler(api, "gputide", first)
    assert sched.schedule_once() == {"default/agent": "a", "default/everyone": "a", "default/plain": None}
    assert sched.reasons["default/plain"] == "0/1 nodes are available: 1 node(s) were unschedulable."


def test_a_pod_with_dra_resource_claims_waits_told_why_and_preempts_no_one(kube: FakeKube, api) -> None:
    kube.add(node("a", 8))
    low = pod("low", gpus=8, node_name="a")
    low["spec"]["priority"] = 1
    kube.add(low)
    kube.add(node("b", 4))   # urgent fits nowhere: it would preempt low on a
    # the schema the fake validates by is 1.27's (its claim source nested); the scheduler reads the names only
    claim = [{"name": "gpu", "source": {"resourceClaimTemplateName": "one-gpu"}}]
    dra = pending("dra", resourceClaims=claim)
    dra["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    kube.add(dra)
    urgent = pending("urgent", gpus=8, resourceClaims=claim, priority=100)
    kube.add(urgent)
    kube.add(pending("plain"))
    sched = SecondaryScheduler(api, "gputide", first)
    assert sched.schedule_once() == {"default/urgent": None, "default/dra": None, "default/plain": "b"}
    assert [r.path for r in kube.calls("POST", r"/binding$")] == ["/api/v1/namespaces/default/pods/plain/binding"]
    assert sched.reasons["default/dra"] == (
        "0/2 nodes are available: pod uses dynamic resource allocation (spec.resourceClaims: gpu), whose claims only "
        "kube-scheduler allocates: gputide does not bind it.")
    assert sched.preempted == [] and kube.get("pods", "low", "default") is not None
    assert not kube.calls("GET", r"persistentvolumeclaims")   # no volume claims: none listed


def with_port(p: dict, port: int, protocol: str = "TCP", host_ip: str | None = None) -> dict:
    """`p` with a host port on its container (a hostNetwork pod's container ports get one each)."""
    entry = {"containerPort": port, "hostPort": port, "protocol": protocol, **({"hostIP": host_ip} if host_ip else {})}
    p["spec"]["containers"][0].setdefault("ports", []).append(entry)
    return p


def test_a_pod_is_not_bound_where_a_host_port_it_needs_is_taken(kube: FakeKube, api) -> None:
    kube.add(node("a", 8))
    kube.add(node("b", 8))
    kube.add(with_port(pod("rank-0", gpus=4, node_name="a"), 29500))   # a hostNetwork training pod's rendezvous
    kube.add(with_port(pending("rank-1", gpus=4), 29500))
    kube.add(with_port(pending("dns", gpus=0), 29500, "UDP"))          # another protocol: no conflict
    sched = SecondaryScheduler(api, "gputide", first)
    assert sched.schedule_once() == {"default/rank-1": "b", "default/dns": "a"}


def test_pods_bound_in_the_same_pass_take_their_host_ports(kube: FakeKube, api) -> None:
    kube.add(node("a", 8))
    kube.add(with_port(pending("w-0", gpus=1), 8080))
    kube.add(with_port(pending("w-1", gpus=1), 8080, host_ip="10.0.0.7"))   # one address, in the "every" taken
    sched = SecondaryScheduler(api, "gputide", first)
    assert sched.schedule_once() == {"default/w-0": "a", "default/w-1": None}
    assert sched.reasons["default/w-1"] == (
        "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports.")
    assert sched.preempted == []


def test_the_watching_scheduler_reads_the_host_ports_of_bound_and_assumed_pods(kube: FakeKube, api) -> None:
    from test_k8s_watch import eventually

    kube.add(node("a", 8))
    kube.add(node("b", 8))
    kube.add(with_port(pod("rank-0", gpus=1, node_name="a"), 29500))
    sched = SecondaryScheduler(api, "gputide", first, watch=True, watch_s=1.0).start()
    try:
        eventually(lambda: all(w.synced for w in sched.watches.values()))
        sched.watches["bound pods"].stop()   # a bound-pod cache that lags: it shows rank-0, never rank-1
        kube.add(with_port(pending("rank-1", gpus=1), 29500))
        eventually(lambda: [r["pod"] for r in sched.pending()] == ["rank-1"])
        assert sched.schedule_once() == {"default/rank-1": "b"}
        kube.add(with_port(pending("rank-2", gpus=1), 29500))   # a and b both taken: b by rank-1, assumed there
        eventually(lambda: [r["pod"] for r in sched.pending()] == ["rank-2"])
        assert sched.schedule_once() == {"default/rank-2": None}
    finally:
        sched.close()


def spread(key: str, max_skew: int = 1, **more) -> dict:
    return {"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}}, **more}


def replica(name: str, *constraints: dict, **spec) -> dict:
    p = pending(name, topologySpreadConstraints=list(constraints), **spec)
    p["metadata"]["labels"] = {"app": "web"}
    return p


def test_hard_topology_spread_keeps_a_replica_out_of_the_fuller_zone(kube: FakeKube, api) -> None:
    kube.add(node("a", 8, labels={"zone": "z1"}))
    kube.add(node("b", 8, labels={"zone": "z1"}))
    kube.add(node("c", 8, labels={"zone": "z2"}))
    kube.add(node("d", 8))   # no zone label: never a place for it
    kube.add(pod("web-0", gpus=1, node_name="a", labels={"app": "web"}))
    kube.add(pod("db-0", gpus=1, node_name="c", labels={"app": "db"}))   # not selected: not counted
    kube.add(replica("web-1", spread("zone"), priority=1))
    kube.add(replica("web-2", spread("zone"), priority=1))
    # soft, and last: a is as full as hard spread would refuse (z1 2, z2 1), and it goes there all the same
    kube.add(replica("loose", spread("zone", whenUnsatisfiable="ScheduleAnyway")))
    sched = SecondaryScheduler(api, "gputide", first)
    assert sched.schedule_once() == {"default/web-1": "c", "default/web-2": "a", "default/loose": "a"}


def test_hard_topology_spread_per_host_within_one_pass_and_why_not(kube: FakeKube, api) -> None:
    kube.add(node("a", 8))
    kube.add(node("b", 8))
    for name in ("web-1", "web-2", "web-3"):
        kube.add(replica(name, spread("kubernetes.io/hostname"), nodeSelector={"pool": "x"}))
    for n in ("a", "b"):   # the fake's nodes carry no hostname label: the kubelet's
        kube.mutate("nodes", n, "", {"metadata": {"labels": {"kubernetes.io/hostname": n, "pool": "x"}}})
    kube.add(node("c", 8, labels={"kubernetes.io/hostname": "c"}))   # not in pool x: its domain is not counted
    sched = SecondaryScheduler(api, "gputide", first)
    assert sched.schedule_once() == {"default/web-1": "a", "default/web-2": "b", "default/web-3": "a"}
    kube.add(node("e", 8, labels={"pool": "x"}))   # no hostname label
    kube.add(replica("web-4", spread("kubernetes.io/hostname", minDomains=3), nodeSelector={"pool": "x"}))
    assert sched.schedule_once() == {"default/web-4": None}
    assert sched.reasons["default/web-4"] == (
        "0/4 nodes are available: 1 node(s) didn't match Pod's node selector, 2 node(s) didn't match pod topology "
        "spread constraints, 1 node(s) didn't match pod topology spread constraints (missing required label).")


def test_a_pod_group_trial_keeps_members_off_each_others_host_ports_and_spread(kube: FakeKube, api) -> None:
    from balancer.actuate.k8s_gang import GROUP_LABEL, MIN_ANNOTATION

    for n in ("a", "b", "c"):
        kube.add(node(n, 8, labels={"kubernetes.io/hostname": n}))
    for rank in range(2):   # two hostNetwork ranks: each needs the rendezvous port
        p = with_port(pending(f"rank-{rank}", gpus=2), 29500)
        p["metadata"].update(labels={GROUP_LABEL: "ddp"}, annotations={MIN_ANNOTATION: "2"})
        kube.add(p)
    for w in range(2):      # two replicas spread one per host
        p = replica(f"web-{w}", spread("kubernetes.io/hostname"))
        p["metadata"].update(labels={"app": "web", GROUP_LABEL: "web"}, annotations={MIN_ANNOTATION: "2"})
        kube.add(p)
    sched = SecondaryScheduler(api, "gputide", first)
    got = sched.schedule_once()
    assert got["default/rank-0"] != got["default/rank-1"] and got["default/web-0"] != got["default/web-1"]
    assert None not in got.values()


def test_a_failed_binding_is_told_to_the_pod_as_kube_scheduler_tells_it(kube: FakeKube, api) -> None:
    kube.add(node("a", 8))
    kube.add(pending("train-0"))
    kube.inject("POST", r"/pods/train-0/binding$", 500, count=100)
    sched = SecondaryScheduler(api, "gputide", first, backoff_s=0.0)
    assert sched.schedule_once() == {"default/train-0": None}
    assert sched.reasons["default/train-0"].startswith("Binding rejected: ")
    told = [r.body for r in kube.calls("POST", r"/events$")]
    assert [(e["type"], e["reason"]) for e in told] == [("Warning", "FailedScheduling")]
    assert told[0]["message"] == sched.reasons["default/train-0"]
    assert not kube.calls("PATCH", r"/status$")   # no Unschedulable for the cluster autoscaler to scale up for


@pytest.mark.parametrize("watch", [False, True])
def test_a_pod_whose_requests_gputide_cannot_read_stops_no_pass(kube: FakeKube, api, watch: bool) -> None:
    """A quantity gputide cannot read ("1e9" was one until k8s_requests read the exponent form; here one the API
    server itself would refuse, standing for whatever a later API server may accept): the pending pod waits, told
    why, and a bound one keeps every other pod off its node; before, either failed every pass (and, watching, the
    watches never synced), and no pod was bound anywhere. Read so by `k8s_reads` itself, not by converters the
    scheduler swaps into its watches."""
    from test_k8s_watch import eventually

    kube.add(node("a", 8))
    kube.add(node("b", 8))
    odd = pod("sidecar-heavy", gpus=0, node_name="a")   # any scheduler's
    odd["spec"]["containers"][0]["resources"]["requests"]["memory"] = "1e9 bytes"
    kube.add(odd)
    waiting = pending("odd")
    waiting["spec"]["containers"][0]["resources"]["requests"]["memory"] = "1e9 bytes"
    kube.add(waiting)
    kube.add(pending("plain"))
    sched = SecondaryScheduler(api, "gputide", first, watch=watch, watch_s=1.0).start()
    try:
        eventually(lambda: all(w.synced for w in sched.watches.values()))
        assert sched.schedule_once() == {"default/odd": None, "default/plain": "b"}
    finally:
        sched.close()
    assert sched.reasons["default/odd"] == (
        "0/2 nodes are available: its resource requests cannot be read (pod default/odd: "
        "spec.containers[0].resources.requests.memory: invalid quantity '1e9 bytes': not a Kubernetes resource "
        'quantity (a number with a suffix such as "500m", "8Gi", "1e9")).')
