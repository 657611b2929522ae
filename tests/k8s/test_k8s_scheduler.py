"""SecondaryScheduler against the fake API server: binds its own pending pods, honours reservations, and with
watches binds a new pod without polling and never counts a binding twice or not at all."""

from __future__ import annotations

import json

import pytest
from fakeapi import FakeKube, node, pod
from test_k8s_watch import eventually

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import RESERVATION_ANNOTATION, rfc3339
from balancer.noderules import NodeRules, Taint


def most_free(request: dict, nodes: list[dict]) -> str | None:
    """A stand-in placement function: the node with the most free GPUs (ties: by name)."""
    return max(nodes, key=lambda n: (n["gpus_free"], n["name"]))["name"] if nodes else None


class Recorder:
    def __init__(self, answer=most_free) -> None:
        self.answer, self.calls = answer, []

    def __call__(self, request: dict, nodes: list[dict]) -> str | None:
        self.calls.append((request, [n["name"] for n in nodes]))
        return self.answer(request, nodes)


def bound_to(kube: FakeKube, name: str, namespace: str = "default") -> str | None:
    return kube.get("pods", name, namespace)["spec"].get("nodeName")


def reserve(kube: FakeKube, node_name: str, key: str, count: int, expires: float) -> None:
    value = json.dumps({key: {"pod": key, "gpus": list(range(count)), "count": count, "expires": rfc3339(expires)}})
    kube.mutate("nodes", node_name, "", {"metadata": {"annotations": {RESERVATION_ANNOTATION: value}}})


@pytest.fixture
def cluster(kube: FakeKube) -> FakeKube:
    kube.add(node("big", 8, model="H100"))
    kube.add(node("small", 2, model="L40S"))
    return kube


def test_binds_pending_pods_of_its_own_scheduler_only(cluster: FakeKube, api, clock) -> None:
    cluster.add(pod("mine", gpus=2, scheduler="gputide", phase="Pending"))
    cluster.add(pod("theirs", gpus=1, phase="Pending"))
    cluster.add(pod("other-sched", gpus=1, scheduler="volcano", phase="Pending"))
    cluster.add(pod("already", "ml", gpus=1, scheduler="gputide", node_name="small", phase="Running"))
    place = Recorder()
    results = SecondaryScheduler(api, "gputide", place, clock=clock).schedule_once()
    assert results == {"default/mine": "big"}
    assert bound_to(cluster, "mine") == "big"
    assert bound_to(cluster, "theirs") is None and bound_to(cluster, "other-sched") is None
    request, offered = place.calls[0]
    assert (request["num_gpu"], request["cpu_milli"], request["memory_mib"]) == (2, 2000, 8192)
    assert offered == ["big"]   # small has 1 of its 2 GPUs taken by the bound pod "already"
    assert len(cluster.calls("POST", r"/binding$")) == 1


@pytest.mark.parametrize(
    ("gpus", "answer", "expected"),
    [
        pytest.param(1, lambda r, n: None, None, id="place finds nothing: the pod stays pending"),
        pytest.param(4, lambda r, n: "small", None, id="a node that cannot fit is refused, not bound"),
        pytest.param(4, lambda r, n: "nowhere", None, id="an unknown node name is refused"),
        pytest.param(1, lambda r, n: "small", "small", id="the placement function's choice is bound"),
    ],
)
def test_the_placement_answer_is_checked(cluster: FakeKube, api, clock, gpus, answer, expected) -> None:
    cluster.add(pod("p", gpus=gpus, scheduler="gputide", phase="Pending"))
    results = SecondaryScheduler(api, "gputide", answer, clock=clock).schedule_once()
    assert results == {"default/p": expected}
    assert bound_to(cluster, "p") == expected


def test_bound_pods_and_earlier_bindings_use_up_capacity(cluster: FakeKube, api, clock) -> None:
    cluster.add(pod("resident", gpus=6, node_name="big"))
    for i in range(3):
        cluster.add(pod(f"p{i}", gpus=2, scheduler="gputide", phase="Pending"))
    results = SecondaryScheduler(api, "gputide", most_free, clock=clock).schedule_once()
    # 2 GPUs free on each node: ties go to "small" by name, then "big" is the only fit, the third pod waits
    assert results == {"default/p0": "small", "default/p1": "big", "default/p2": None}


def test_tainted_and_selected_nodes(cluster: FakeKube, api, clock) -> None:
    cluster.mutate("nodes", "big", "", {"spec": {"taints": [
        {"key": "gputide.io/hot", "value": "true", "effect": "NoSchedule"}]}})
    cluster.add(pod("p", gpus=1, scheduler="gputide", phase="Pending"))
    place = Recorder()
    assert SecondaryScheduler(api, "gputide", place, clock=clock).schedule_once() == {"default/p": "small"}
    assert place.calls[0][1] == ["small"]


def test_a_reservation_goes_to_its_owner_and_is_hidden_from_others(cluster: FakeKube, api, clock) -> None:
    reserve(cluster, "small", "default/web", 2, clock.now + 60)
    cluster.add(pod("batch", gpus=1, scheduler="gputide", phase="Pending"))
    cluster.add(pod("web-5d8f-x2x", gpus=1, scheduler="gputide", phase="Pending", owner=("ReplicaSet", "web-5d8f"),
                    labels={"pod-template-hash": "5d8f"}))   # Deployment web's, as its controller labels them
    prefer_small = Recorder(lambda r, n: "small" if any(x["name"] == "small" for x in n) else most_free(r, n))
    results = SecondaryScheduler(api, "gputide", prefer_small, clock=clock).schedule_once()
    assert results == {"default/batch": "big", "default/web-5d8f-x2x": "small"}
    assert [name for request, name in ((c[0]["pod"], c[1]) for c in prefer_small.calls)] == [["big"]]
    assert RESERVATION_ANNOTATION not in (cluster.get("nodes", "small")["metadata"].get("annotations") or {})


def test_an_expired_reservation_is_ignored(cluster: FakeKube, api, clock) -> None:
    reserve(cluster, "small", "default/web", 2, clock.now - 1)
    cluster.add(pod("batch", gpus=2, scheduler="gputide", phase="Pending"))
    only_small = Recorder(lambda r, n: "small")
    assert SecondaryScheduler(api, "gputide", only_small, clock=clock).schedule_once() == {"default/batch": "small"}


def test_migrate_then_schedule_lands_the_replacement_on_the_reserved_node(cluster: FakeKube, api, clock,
                                                                          sleeps) -> None:
    from test_k8s_actuator import SNAP, migrate

    cluster.add(node("n1", 2))
    cluster.add(node("n2", 2))
    cluster.add(pod("web-1", node_name="n1", owner=("ReplicaSet", "web-5d8f"), labels={"pod-template-hash": "5d8f"}))
    actuator = KubernetesActuator(api, sleep=sleeps.append, clock=clock)
    assert actuator.apply(migrate(), SNAP).outcome is Outcome.APPLIED
    # the ReplicaSet controller recreates the pod; the scheduler must put it where the actuator reserved
    cluster.add(pod("web-5d8f-new", scheduler="gputide", phase="Pending", owner=("ReplicaSet", "web-5d8f"),
                    labels={"pod-template-hash": "5d8f"}))
    results = SecondaryScheduler(api, "gputide", most_free, clock=clock).schedule_once()
    assert results == {"default/web-5d8f-new": "n2"}


def test_a_placement_function_is_required(api) -> None:
    with pytest.raises(ValueError, match="place"):
        SecondaryScheduler(api, "gputide")


# ---- with watches ----------------------------------------------------------------------------------------------


@pytest.fixture
def watching(cluster: FakeKube, api, clock):
    sched = SecondaryScheduler(api, "gputide", Recorder(prefer("small")), clock=clock, watch=True, watch_s=1.0)
    yield sched
    sched.close()


def prefer(name: str):
    return lambda r, n: name if any(x["name"] == name for x in n) else most_free(r, n)


def list_calls(kube: FakeKube) -> int:
    return sum("watch=true" not in c.query for c in kube.calls("GET", r"/(pods|nodes)$"))


def synced(sched: SecondaryScheduler) -> None:
    eventually(lambda: all(w.synced for w in sched.watches.values()))


def test_with_watches_a_new_pod_wakes_the_scheduler_and_a_pass_lists_nothing(cluster: FakeKube, watching) -> None:
    watching.start()
    synced(watching)
    watching.wait_for_work(0)                      # the first lists themselves were changes
    lists = list_calls(cluster)
    assert watching.schedule_once() == {}
    cluster.add(pod("new", gpus=1, scheduler="gputide", phase="Pending"))
    assert watching.wait_for_work(10.0)            # woken by the pending pod's event, not by a poll
    eventually(lambda: watching.pending() != [])
    assert watching.schedule_once() == {"default/new": "small"}
    assert bound_to(cluster, "new") == "small"
    assert list_calls(cluster) == lists > 0        # caches, not lists
    eventually(lambda: watching.pending() == [] and watching.nodes_view()[1]["gpus_free"] == 1)


def test_a_binding_the_caches_have_not_seen_yet_is_assumed_not_lost_or_repeated(cluster: FakeKube, watching,
                                                                               clock) -> None:
    cluster.add(pod("p0", gpus=2, scheduler="gputide", phase="Pending"))
    watching.start()
    synced(watching)
    watching.watches["bound pods"].stop()          # the bound-pod cache lags: it never sees p0's binding
    assert watching.schedule_once() == {"default/p0": "small"}
    cluster.add(pod("p1", gpus=2, scheduler="gputide", phase="Pending"))
    eventually(lambda: [r["pod"] for r in watching.pending()] == ["p1"])   # p0 is not offered again
    # small's 2 GPUs went to p0: without the assumption p1 would be put there too
    assert watching.schedule_once() == {"default/p1": "big"}
    assert len(cluster.calls("POST", r"/binding$")) == 2
    clock.advance(watching.assume_s)   # a stopped watch cannot show it: past assume_s, p0 still holds small's GPUs
    assert watching.nodes_view()[1]["gpus_free"] == 0 and list(watching._assumed) == ["default/p0", "default/p1"]


def test_a_binding_the_cache_has_seen_is_counted_once(cluster: FakeKube, watching) -> None:
    cluster.add(pod("p0", gpus=1, scheduler="gputide", phase="Pending"))
    watching.start()
    synced(watching)
    assert watching.schedule_once() == {"default/p0": "small"}
    eventually(lambda: "default/p0" in watching.watches["bound pods"].snapshot()[1])
    assert watching.nodes_view()[1]["gpus_free"] == 1 and watching._assumed == {}


def test_a_pod_the_bound_watch_shows_first_is_not_offered_again(cluster: FakeKube, watching) -> None:
    """The two watches are separate streams: the bound-pod one may report a binding before the pending one
    reports the pod gone. The pod must not be bound a second time (a 409 from the API server)."""
    cluster.add(pod("p0", gpus=1, scheduler="gputide", phase="Pending"))
    watching.start()
    synced(watching)
    watching.watches["pending pods"].stop()        # the pending cache lags: it keeps p0 forever
    assert watching.schedule_once() == {"default/p0": "small"}
    eventually(lambda: "default/p0" in watching.watches["bound pods"].snapshot()[1])
    assert watching.pending() == [] and watching.schedule_once() == {}
    assert len(cluster.calls("POST", r"/binding$")) == 1


# ---- telling the pod's owner why ------------------------------------------------------------------------------


def events_of(kube: FakeKube, name: str) -> list[tuple[str, str, str]]:
    return [(e["type"], e["reason"], e["message"]) for (plural, _, _), e in sorted(kube.objects.items())
            if plural == "events" and e["involvedObject"]["name"] == name]


def scheduled_condition(kube: FakeKube, name: str) -> dict | None:
    conditions = (kube.get("pods", name, "default").get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "PodScheduled"), None)


def test_a_pod_that_fits_nowhere_is_told_why_as_kube_scheduler_tells_it(cluster: FakeKube, api, clock) -> None:
    cluster.mutate("nodes", "small", "", {"spec": {"taints": [
        {"key": "gputide.io/hot", "value": "true", "effect": "NoSchedule"}]}})
    cluster.add(pod("huge", gpus=4, scheduler="gputide", phase="Pending"))
    cluster.add(pod("fits", gpus=1, scheduler="gputide", phase="Pending"))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    cluster.add(pod("resident", gpus=6, node_name="big"))
    assert sched.schedule_once() == {"default/fits": "big", "default/huge": None}
    why = ("0/2 nodes are available: 1 Insufficient nvidia.com/gpu, "
           "1 node(s) had untolerated taint {gputide.io/hot: true}.")
    assert events_of(cluster, "huge") == [("Warning", "FailedScheduling", why)]
    assert events_of(cluster, "fits") == [("Normal", "Scheduled", "Successfully assigned default/fits to big")]
    condition = scheduled_condition(cluster, "huge")      # what the cluster autoscaler looks for
    assert (condition["status"], condition["reason"], condition["message"]) == ("False", "Unschedulable", why)
    assert scheduled_condition(cluster, "fits") is None
    # the same reason is not repeated at every pass but after retell_s; a new one after min_tell_s, not at every
    # pass (in a busy cluster the counts change all the time)
    sched.schedule_once()
    assert len(events_of(cluster, "huge")) == 1
    clock.advance(sched.retell_s)
    sched.schedule_once()
    assert len(events_of(cluster, "huge")) == 2
    cluster.mutate("nodes", "small", "", {"spec": {"taints": None}})
    sched.schedule_once()
    assert len(events_of(cluster, "huge")) == 2
    clock.advance(sched.min_tell_s)
    sched.schedule_once()
    changed = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    assert events_of(cluster, "huge")[-1][2] == changed and scheduled_condition(cluster, "huge")["message"] == changed


@pytest.mark.parametrize(
    ("setup", "request_", "why"),
    [
        (lambda k: k.mutate("nodes", "big", "", {"spec": {"unschedulable": True}}), {},
         "1 node(s) were unschedulable"),
        (lambda k: None, {"spec": {"nodeSelector": {"pool": "a"}}}, "2 node(s) didn't match Pod's node selector"),
        (lambda k: (reserve(k, "small", "default/web", 2, 1_700_000_060.0), k.add(pod("r", gpus=8, node_name="big"))),
         {}, "1 Insufficient nvidia.com/gpu, 1 node(s) had GPUs reserved for other pods"),
        (lambda k: None, {"spec": {"containers": [{"name": "c", "image": "x", "resources": {
            "limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "4000", "memory": "1Gi"}}}]}},
         "2 Insufficient cpu"),
    ],
    ids=["cordoned", "node-selector", "reserved", "cpu"],
)
def test_each_filter_names_its_reason(cluster: FakeKube, api, clock, setup, request_, why) -> None:
    setup(cluster)
    p = pod("p", gpus=1, scheduler="gputide", phase="Pending")
    for key, value in request_.items():
        p[key].update(value)
    cluster.add(p)
    if "unschedulable" in why:
        cluster.add(pod("r", gpus=2, node_name="small"))
    assert SecondaryScheduler(api, "gputide", most_free, clock=clock).schedule_once() == {"default/p": None}
    assert why in events_of(cluster, "p")[0][2]


def test_a_pod_the_policy_refuses_says_so_with_its_allowed_models(cluster: FakeKube, api, clock) -> None:
    p = pod("p", gpus=1, scheduler="gputide", phase="Pending")
    p["metadata"]["annotations"] = {"gputide.io/gpu-spec": "B200"}
    cluster.add(p)
    assert SecondaryScheduler(api, "gputide", lambda r, n: None, clock=clock).schedule_once() == {"default/p": None}
    assert events_of(cluster, "p")[0][2] == ("0/2 nodes are available: 2 node(s) fit the requests but not the "
                                             "placement policy (allowed GPU models: B200).")


def test_an_events_api_that_fails_does_not_stop_the_scheduler(cluster: FakeKube, api, clock, sleeps) -> None:
    cluster.inject("POST", r"/events$", 500, count=100)
    cluster.add(pod("p", gpus=1, scheduler="gputide", phase="Pending"))
    cluster.add(pod("huge", gpus=64, scheduler="gputide", phase="Pending"))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=sleeps.append)
    assert sched.schedule_once() == {"default/p": "big", "default/huge": None}
    assert bound_to(cluster, "p") == "big" and scheduled_condition(cluster, "huge")["reason"] == "Unschedulable"


# ---- Kubernetes' own placement rules ---------------------------------------------------------------------------

HOT = {"key": "gputide.io/hot", "value": "true", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [({"key": "gputide.io/hot", "operator": "Equal", "value": "true"}, True),
     ({"key": "gputide.io/hot", "value": "false"}, False),                    # Equal by default: the value counts
     ({"key": "gputide.io/hot", "operator": "Exists"}, True),
     ({"operator": "Exists"}, True),                                          # an empty key tolerates every taint
     ({"operator": "Exists", "effect": "NoExecute"}, False),                  # ... of its effect only
     ({"key": "other", "operator": "Exists"}, False),
     ({"value": "true"}, False)],                                             # empty key needs Exists
    ids=["equal", "wrong-value", "exists", "tolerate-all", "other-effect", "other-key", "empty-key-equal"])
def test_tolerations_follow_kubernetes(toleration, expected) -> None:
    assert NodeRules.from_pod_spec({"tolerations": [toleration]}).tolerates(Taint.from_json(HOT)) is expected


@pytest.mark.parametrize(
    ("terms", "expected"),
    [([], True),
     ([{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a", "b"]}]}], True),
     ([{"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["a"]}]}], False),
     ([{"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}], True),
     ([{"matchExpressions": [{"key": "gpus", "operator": "Gt", "values": ["4"]}]}], True),
     ([{"matchExpressions": [{"key": "gpus", "operator": "Lt", "values": ["4"]}]}], False),
     ([{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["b"]}]},
       {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}], True),   # terms are ORed
     ([{"matchExpressions": [{"key": "pool", "operator": "Exists"},
                             {"key": "gpus", "operator": "Gt", "values": ["x"]}]}], False),      # ANDed; bad Gt
     ([{}], False)],                                                                          # an empty term
    ids=["none", "in", "not-in", "does-not-exist", "gt", "lt", "terms-ored", "expressions-anded", "empty-term"])
def test_required_node_affinity_follows_kubernetes(terms, expected) -> None:
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
    rules = NodeRules.from_pod_spec({"affinity": affinity} if terms else {})
    assert rules.affinity_allows("n1", {"pool": "a", "gpus": "8"}) is expected


def test_the_scheduler_keeps_to_affinity_tolerations_and_init_containers(cluster: FakeKube, api, clock) -> None:
    cluster.mutate("nodes", "small", "", {"spec": {"taints": [HOT]}})
    pinned = pod("pinned", gpus=1, scheduler="gputide", phase="Pending")
    pinned["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["small"]}]}]}}}
    pinned["spec"]["tolerations"] = [{"operator": "Exists"}]
    wrong = pod("wrong-value", gpus=1, scheduler="gputide", phase="Pending")
    wrong["spec"]["affinity"] = pinned["spec"]["affinity"]
    wrong["spec"]["tolerations"] = [{"key": "gputide.io/hot", "value": "false"}]
    spread = pod("spread", gpus=1, scheduler="gputide", phase="Pending")
    spread["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname",
         "namespaceSelector": {"matchLabels": {"team": "x"}}}]}}   # no namespace has that label: keeps nothing off
    setup = pod("setup", gpus=0, scheduler="gputide", phase="Pending")
    setup["spec"]["initContainers"] = [{"name": "warm", "image": "x", "resources": {"requests": {"cpu": "500"}}}]
    for p in (pinned, wrong, spread, setup):
        cluster.add(p)
    results = SecondaryScheduler(api, "gputide", most_free, clock=clock).schedule_once()
    assert results == {"default/pinned": "small", "default/wrong-value": None, "default/spread": "big",
                       "default/setup": None}
    assert "didn't match Pod's node affinity" in events_of(cluster, "wrong-value")[0][2]
    assert "Insufficient cpu" in events_of(cluster, "setup")[0][2]   # its init container needs 500 CPUs


def test_a_pass_says_how_long_bound_pods_waited_and_the_oldest_pending_has(cluster: FakeKube, api, clock) -> None:
    from balancer.cmd.schedule import SchedulerMetrics

    for name, gpus, age in (("quick", 1, 7), ("huge", 64, 100), ("also-huge", 64, 30)):
        p = pod(name, gpus=gpus, scheduler="gputide", phase="Pending")
        p["metadata"]["creationTimestamp"] = rfc3339(clock.now - age)
        cluster.add(p)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once()["default/quick"] == "big"
    assert sched.latencies == [7.0] and sched.oldest_pending_s == 100.0
    metrics = SchedulerMetrics()
    metrics.record({}, sched.latencies, sched.oldest_pending_s)
    assert metrics.registry.get_sample_value("gputide_scheduler_binding_latency_seconds_count") == 1
    assert metrics.registry.get_sample_value("gputide_scheduler_binding_latency_seconds_bucket", {"le": "10.0"}) == 1
    assert metrics.registry.get_sample_value("gputide_scheduler_oldest_pending_seconds") == 100.0


def mig_pod(name: str, slices: int, node_name: str | None = None) -> dict:
    p = pod(name, gpus=0, scheduler=None if node_name else "gputide", phase="Running" if node_name else "Pending",
            node_name=node_name)
    p["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/mig-1g.10gb": str(slices)}
    return p


def test_extended_resources_and_the_pod_count_are_checked_like_gpus(kube: FakeKube, api, clock) -> None:
    """MIG slices (or RDMA, hugepages) are extended resources like whole GPUs: a pod asking for them goes only
    where enough are free, counting bound pods, earlier bindings of the pass and the node's pod limit. Placed
    without the check, the kubelet would refuse it at admission and the pod would fail."""
    mig = node("mig", 0, model="A100")
    mig["status"]["allocatable"] |= {"nvidia.com/mig-1g.10gb": "7", "pods": "110"}
    full = node("full", 8)
    full["status"]["allocatable"]["pods"] = "1"
    for n in (mig, full, node("plain", 8)):
        kube.add(n)
    kube.add(mig_pod("resident", 2, node_name="mig"))
    kube.add(pod("sole", node_name="full"))
    for name in ("a", "b"):
        kube.add(mig_pod(name, 4))
    only_full = pod("wants-full", gpus=1, scheduler="gputide", phase="Pending")
    only_full["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "full"}
    kube.mutate("nodes", "full", "", {"metadata": {"labels": {"kubernetes.io/hostname": "full"}}})
    kube.add(only_full)
    results = SecondaryScheduler(api, "gputide", most_free, clock=clock).schedule_once()
    assert results == {"default/a": "mig", "default/b": None, "default/wants-full": None}   # 7 - 2 - 4 = 1 left
    assert events_of(kube, "b")[0][2] == "0/3 nodes are available: 3 Insufficient nvidia.com/mig-1g.10gb."
    assert "1 Too many pods" in events_of(kube, "wants-full")[0][2]


def test_a_pod_bound_or_deleted_by_someone_else_meanwhile_is_left_alone(cluster: FakeKube, api, clock) -> None:
    """Between the read and the binding another scheduler replica (during a Lease hand-over) bound the pod, or its
    owner deleted it: the API answers 409 or 404, and the pod is neither reported nor told anything."""
    cluster.add(pod("raced", gpus=1, scheduler="gputide", phase="Pending"))
    cluster.add(pod("gone", gpus=1, scheduler="gputide", phase="Pending"))
    cluster.before("POST", r"/raced/binding$", lambda: cluster.mutate("pods", "raced", "default",
                                                                      {"spec": {"nodeName": "small"}}))
    cluster.before("POST", r"/gone/binding$", lambda: cluster.delete("pods", "gone", "default"))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {}
    assert bound_to(cluster, "raced") == "small" and not events_of(cluster, "raced")


def test_the_summed_bound_usage_follows_the_cache_when_a_pod_finishes(cluster: FakeKube, watching) -> None:
    """The usage per node is summed once per change of the bound-pod cache and reused in between: a pod that
    finishes must free its GPUs in the next view, and an unchanged cache gives the very same sums."""
    cluster.add(pod("done-soon", gpus=2, node_name="small"))
    watching.start()
    synced(watching)
    assert watching.nodes_view()[1]["gpus_free"] == 0
    memo = watching._usage_memo
    watching.nodes_view()
    assert watching._usage_memo is memo                 # nothing changed: not summed again
    cluster.mutate("pods", "done-soon", "default", {"status": {"phase": "Succeeded"}})
    eventually(lambda: watching.nodes_view()[1]["gpus_free"] == 2)
