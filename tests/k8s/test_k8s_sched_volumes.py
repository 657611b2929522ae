"""The secondary scheduler and a pod's PersistentVolumeClaims, as kube-scheduler's VolumeBinding handles them: a
WaitForFirstConsumer claim is given the pod's node before the pod is bound (else it is never provisioned and the
pod never starts), a claim bound to a zonal disk keeps the pod in that zone, and a claim not ready yet keeps the
pod waiting, told why. Against the fake API server, which serves claims, volumes and classes."""

from __future__ import annotations

import pytest
from fakeapi import ZONE_LABEL, FakeKube, claim, node, pod, storage_class, volume
from test_k8s_watch import eventually

from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.k8s_volumes import (
    AFFINITY_CONFLICT,
    LOST,
    NO_VOLUME,
    UNBOUND_IMMEDIATE,
    Volumes,
    claim_entry,
    class_entry,
    resolve,
    volume_entry,
)
from balancer.noderules import Requirement, Term

SELECTED = "volume.kubernetes.io/selected-node"


def most_free(request: dict, nodes: list[dict]) -> str | None:
    return max(nodes, key=lambda n: (n["gpus_free"], n["name"]))["name"] if nodes else None


def mounting(name: str, *claims: str, gpus: int = 1, priority: int = 0) -> dict:
    p = pod(name, gpus=gpus, scheduler="gputide", phase="Pending")
    p["spec"]["volumes"] = [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]
    p["spec"]["priority"] = priority
    return p


def selected(kube: FakeKube, name: str) -> str | None:
    return (kube.get("persistentvolumeclaims", name, "default")["metadata"].get("annotations") or {}).get(SELECTED)


def bound_to(kube: FakeKube, name: str) -> str | None:
    return kube.get("pods", name, "default")["spec"].get("nodeName")


def condition(kube: FakeKube, name: str) -> dict:
    conditions = (kube.get("pods", name, "default").get("status") or {}).get("conditions") or []
    return next(c for c in conditions if c["type"] == "PodScheduled")


@pytest.fixture
def zones(kube: FakeKube) -> FakeKube:
    """a1 in zone-a with 2 GPUs, b1 in zone-b with 8: the placement (most free) prefers b1."""
    kube.add(node("a1", 2, labels={ZONE_LABEL: "zone-a"}))
    kube.add(node("b1", 8, labels={ZONE_LABEL: "zone-b"}))
    return kube


def scheduler(api, clock, watch: bool) -> SecondaryScheduler:
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, watch=watch, watch_s=1.0).start()
    if watch:
        eventually(lambda: all(w.synced for w in sched.watches.values()))
        eventually(lambda: sched.pending() != [])
    return sched


# ---- WaitForFirstConsumer ------------------------------------------------------------------------------------


@pytest.mark.parametrize("watch", [False, True], ids=["listed", "watched"])
def test_a_pod_is_bound_only_after_its_wait_for_first_consumer_claim_names_its_node(zones: FakeKube, api, clock,
                                                                                   watch: bool) -> None:
    zones.add(storage_class("wffc"))
    zones.add(claim("ckpt", storage_class="wffc"))
    zones.add(mounting("train", "ckpt"))
    at_binding: list[str | None] = []
    zones.before("POST", r"/binding$", lambda: at_binding.append(selected(zones, "ckpt")))
    sched = scheduler(api, clock, watch)
    try:
        assert sched.schedule_once() == {"default/train": "b1"}
    finally:
        sched.close()
    assert at_binding == ["b1"] and selected(zones, "ckpt") == "b1"   # the provisioner makes the disk in b1's zone
    writes = [r.path for r in zones.requests if r.method in ("PATCH", "POST") and "/events" not in r.path]
    assert writes == ["/api/v1/namespaces/default/persistentvolumeclaims/ckpt",
                      "/api/v1/namespaces/default/pods/train/binding"]


def test_a_claim_that_cannot_be_written_leaves_the_pod_unbound_this_pass(zones: FakeKube, api, clock) -> None:
    zones.add(storage_class("wffc"))
    zones.add(claim("ckpt", storage_class="wffc"))
    zones.add(mounting("train", "ckpt"))
    zones.inject("PATCH", r"/persistentvolumeclaims/ckpt$", 403)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/train": None}
    assert "persistentvolumeclaim default/ckpt" in sched.reasons["default/train"]
    assert not zones.calls("POST", r"/binding$") and selected(zones, "ckpt") is None
    assert sched.schedule_once() == {"default/train": "b1"} and selected(zones, "ckpt") == "b1"


def test_a_claim_given_another_node_meanwhile_is_not_overwritten(zones: FakeKube, api, clock) -> None:
    zones.add(storage_class("wffc"))
    zones.add(claim("ckpt", storage_class="wffc"))
    zones.add(mounting("train", "ckpt"))
    # after the pass read the claims, another scheduler gives the claim a1 (its pod will run there)
    zones.before("GET", r"/persistentvolumeclaims/ckpt$", lambda: zones.mutate(
        "persistentvolumeclaims", "ckpt", "default", {"metadata": {"annotations": {SELECTED: "a1"}}}))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/train": None}
    assert "given node a1 meanwhile" in sched.reasons["default/train"]
    assert selected(zones, "ckpt") == "a1" and not zones.calls("POST", r"/binding$")
    assert sched.schedule_once() == {"default/train": "a1"}   # where its volume is being made, though b1 is freer


def test_pods_sharing_an_unbound_claim_go_where_the_first_of_them_sent_it(zones: FakeKube, api, clock) -> None:
    zones.add(storage_class("wffc"))
    shared = claim("ckpt", storage_class="wffc")
    shared["spec"]["accessModes"] = ["ReadWriteMany"]
    zones.add(shared)
    zones.add(mounting("w0", "ckpt", gpus=4, priority=1))
    zones.add(mounting("w1", "ckpt", gpus=1))   # most free after w0: b1 still, with 4 left against a1's 2
    zones.mutate("nodes", "b1", "", {"status": {"allocatable": {"nvidia.com/gpu": "5"}}})   # b1: 1 left after w0
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/w0": "b1", "default/w1": "b1"}   # not a1, the freer one for w1
    assert len(zones.calls("PATCH", r"/persistentvolumeclaims/ckpt$")) == 1


def test_a_class_with_allowed_topologies_keeps_the_pod_in_them(zones: FakeKube, api, clock) -> None:
    zones.add(storage_class("zonal", zones=("zone-a",)))
    zones.add(claim("ckpt", storage_class="zonal"))
    zones.add(mounting("train", "ckpt"))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/train": "a1"} and selected(zones, "ckpt") == "a1"


# ---- bound claims ---------------------------------------------------------------------------------------------


def test_a_pod_whose_volume_attaches_in_zone_a_is_never_bound_in_zone_b(zones: FakeKube, api, clock) -> None:
    zones.add(volume("pv-data", zone="zone-a", claim_ref=("default", "data")))
    zones.add(claim("data", volume="pv-data"))
    zones.add(mounting("train-0", "data", gpus=2))
    zones.add(mounting("train-1", "data", gpus=2))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/train-0": "a1", "default/train-1": None}   # b1 had 8 GPUs free
    assert sched.reasons["default/train-1"] == (
        "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had volume node affinity conflict.")
    assert sched.schedule_once() == {"default/train-1": None}
    assert bound_to(zones, "train-1") is None and not zones.calls("PATCH", r"/persistentvolumeclaims/")


# ---- claims not ready --------------------------------------------------------------------------------------------


def test_a_pod_with_an_unbound_immediate_claim_waits_told_why_and_preempts_no_one(zones: FakeKube, api,
                                                                                 clock) -> None:
    zones.add(storage_class("standard", None))   # volumeBindingMode left to the API server: Immediate
    zones.add(claim("data", storage_class="standard"))
    zones.add(pod("low", gpus=2, node_name="a1"))
    zones.add(mounting("train", "data", gpus=8, priority=100))   # fits nowhere but by preempting low... if it could
    zones.mutate("nodes", "b1", "", {"spec": {"unschedulable": True}})
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/train": None} and sched.preempted == []
    why = "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims."
    assert sched.reasons["default/train"] == why
    assert (condition(zones, "train")["reason"], condition(zones, "train")["message"]) == ("Unschedulable", why)
    assert not zones.calls("POST", r"/(binding|eviction)$")
    # the volume controller binds it, to a disk in zone-b; b1 is uncordoned: the pod goes there
    zones.add(volume("pv-data", zone="zone-b", claim_ref=("default", "data")))
    zones.mutate("persistentvolumeclaims", "data", "default", {"spec": {"volumeName": "pv-data"},
                                                                "status": {"phase": "Bound"}})
    zones.mutate("nodes", "b1", "", {"spec": {"unschedulable": None}})
    assert sched.schedule_once() == {"default/train": "b1"}


def test_a_pass_whose_pods_mount_no_claims_reads_none(zones: FakeKube, api, clock) -> None:
    zones.add(pod("plain", gpus=1, scheduler="gputide", phase="Pending"))
    assert SecondaryScheduler(api, "gputide", most_free, clock=clock).schedule_once() == {"default/plain": "b1"}
    assert not zones.calls("GET", r"/(persistentvolumeclaims|persistentvolumes|storageclasses)$")


def test_a_pod_group_waits_whole_for_a_member_whose_claim_is_missing(zones: FakeKube, api, clock) -> None:
    zones.add(storage_class("wffc"))
    zones.add(claim("ckpt-0", storage_class="wffc"))
    for i in range(2):
        member = mounting(f"w{i}", f"ckpt-{i}")
        member["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "train"}
        zones.add(member)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/w0": None, "default/w1": None}
    assert sched.reasons["default/w0"] == ('pod group default/train: member default/w1: 0/2 nodes are available: '
                                           'persistentvolumeclaim "ckpt-1" not found.')
    assert not zones.calls("PATCH", r"/persistentvolumeclaims/")   # w0's claim is not given a node for nothing


def gang_member(name: str, claim_name: str, gpus: int) -> dict:
    member = mounting(name, claim_name, gpus=gpus)
    member["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "train"}
    member["metadata"]["annotations"] = {"gputide.io/pod-group-min": "2"}
    return member


@pytest.fixture
def pair(kube: FakeKube) -> FakeKube:
    """Two 8-GPU nodes, a WaitForFirstConsumer class and one unbound claim `shared`."""
    kube.add(node("a", 8))
    kube.add(node("b", 8))
    kube.add(storage_class("wffc"))
    kube.add(claim("shared", storage_class="wffc"))
    return kube


def test_pod_group_members_sharing_an_unbound_claim_are_placed_on_the_node_it_is_given(pair: FakeKube, api,
                                                                                         clock) -> None:
    """Placed together before the claim is written, w1 went to the freer node a while w0 gave the claim b: w0 was
    bound, w1 refused (the claim given b meanwhile), the gang left half-bound."""
    pair.add(gang_member("w0", "shared", 4))
    pair.add(gang_member("w1", "shared", 4))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/w0": "b", "default/w1": "b"}
    assert selected(pair, "shared") == "b"
    assert len(pair.calls("PATCH", r"/persistentvolumeclaims/shared$")) == 1


def test_a_pod_group_whose_members_sharing_a_claim_cannot_fit_its_node_binds_none(pair: FakeKube, api,
                                                                                   clock) -> None:
    """Two 8-GPU members of one claim cannot run on one 8-GPU node: none is bound, the claim is given no node (w0
    bound alone held 8 GPUs for ever, w1 kept off every node)."""
    pair.add(gang_member("w0", "shared", 8))
    pair.add(gang_member("w1", "shared", 8))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    for _ in range(2):
        assert sched.schedule_once() == {"default/w0": None, "default/w1": None}
    assert sched.reasons["default/w0"] == (
        "pod group default/train: member default/w1 fits nowhere with the others: 0/2 nodes are available: 1 "
        f"Insufficient nvidia.com/gpu, 1 {NO_VOLUME}.")
    assert selected(pair, "shared") is None and not pair.calls("PATCH", r"/persistentvolumeclaims/")
    assert bound_to(pair, "w0") is None and bound_to(pair, "w1") is None


# ---- what the claims allow, without the API -------------------------------------------------------------------


def request(*claims: tuple[str, bool], uid: str = "pod-uid") -> dict:
    return {"name": "ml/train", "namespace": "ml", "uid": uid, "claims": claims}


CLASSES = {"wffc": class_entry(storage_class("wffc")), "zonal": class_entry(storage_class("zonal", zones=("z1",))),
           "standard": class_entry(storage_class("standard", "Immediate")),
           "local": class_entry(storage_class("local", provisioner="kubernetes.io/no-provisioner"))}
VOLUMES = {"pv-z1": volume_entry(volume("pv-z1", zone="z1")), "pv-any": volume_entry(volume("pv-any"))}


def pvc(name: str, **kw) -> tuple[str, object]:
    owner = kw.pop("owner", None)
    obj = claim(name, "ml", **kw)
    if owner:
        obj["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "train", "uid": owner,
                                               "controller": True}]
    return f"ml/{name}", claim_entry(obj)


Z1 = (Term((Requirement(ZONE_LABEL, "In", ("z1",)),)),)
ON_A = (Term(fields=(Requirement("metadata.name", "In", ("a",)),)),)


@pytest.mark.parametrize(("why", "claims", "pod_claims", "expected"), [
    ("a claim bound to a volume without node affinity restricts nothing", [pvc("c", volume="pv-any")],
     [("c", False)], Volumes()),
    ("a zonal volume keeps the pod in its zone", [pvc("c", volume="pv-z1")], [("c", False)], Volumes(attach=(Z1,))),
    ("a volume that does not exist admits no node", [pvc("c", volume="gone")], [("c", False)], Volumes(lost=True)),
    ("a WaitForFirstConsumer claim is given the node", [pvc("c", storage_class="wffc")], [("c", False)],
     Volumes(select=("ml/c",))),
    ("a class's allowed topologies restrict it", [pvc("c", storage_class="zonal")], [("c", False)],
     Volumes(provision=(Z1,), select=("ml/c",))),
    ("a claim given a node already keeps the pod there", [pvc("c", storage_class="wffc", selected_node="a")],
     [("c", False)], Volumes(provision=(ON_A,))),
    ("an unbound Immediate claim waits", [pvc("c", storage_class="standard")], [("c", False)],
     Volumes(waiting=UNBOUND_IMMEDIATE)),
    ("an unbound claim without a class waits", [pvc("c", storage_class=None)], [("c", False)],
     Volumes(waiting=UNBOUND_IMMEDIATE)),
    ("an unbound claim of a class that does not exist waits", [pvc("c", storage_class="gone")], [("c", False)],
     Volumes(waiting=UNBOUND_IMMEDIATE)),
    ("a missing claim waits", [], [("c", False)], Volumes(waiting='persistentvolumeclaim "c" not found')),
    ("a missing ephemeral claim waits for its controller", [], [("train-scratch", True)],
     Volumes(waiting='waiting for ephemeral volume controller to create the persistentvolumeclaim "train-scratch"')),
    ("an ephemeral claim of another pod waits", [pvc("train-scratch", storage_class="wffc", owner="other")],
     [("train-scratch", True)],
     Volumes(waiting="PVC ml/train-scratch was not created for pod ml/train (pod is not owner)")),
    ("its own ephemeral claim is given the node", [pvc("train-scratch", storage_class="wffc", owner="pod-uid")],
     [("train-scratch", True)], Volumes(select=("ml/train-scratch",))),
    ("a class without a provisioner is said to be unsupported", [pvc("c", storage_class="local")], [("c", False)],
     Volumes(waiting='persistentvolumeclaim "c" of StorageClass "local" waits for a pre-provisioned '
                     "PersistentVolume, which gputide does not bind (no provisioner)")),
    ("every claim counts", [pvc("c", volume="pv-z1"), pvc("d", storage_class="zonal")], [("c", False), ("d", False)],
     Volumes(attach=(Z1,), provision=(Z1,), select=("ml/d",))),
])
def test_what_a_pods_claims_allow(why, claims, pod_claims, expected) -> None:
    assert resolve(request(*pod_claims), dict(claims), VOLUMES, CLASSES) == expected


def test_a_claim_being_deleted_waits() -> None:
    key, c = pvc("c", volume="pv-any")
    assert resolve(request(("c", False)), {key: c._replace(deleting=True)}, VOLUMES, CLASSES) == Volumes(
        waiting='persistentvolumeclaim "c" is being deleted')


@pytest.mark.parametrize(("volumes", "labels", "name", "refusal"), [
    (Volumes(attach=(Z1,)), {ZONE_LABEL: "z1"}, "x", None),
    (Volumes(attach=(Z1,)), {ZONE_LABEL: "z2"}, "x", AFFINITY_CONFLICT),
    (Volumes(provision=(Z1,)), {}, "x", NO_VOLUME),
    (Volumes(provision=(ON_A,)), {}, "a", None),
    (Volumes(provision=(ON_A,)), {}, "b", NO_VOLUME),
    (Volumes(lost=True), {ZONE_LABEL: "z1"}, "a", LOST),
])
def test_the_volumes_refuse_a_node_in_kube_schedulers_words(volumes, labels, name, refusal) -> None:
    assert volumes.refusal(name, labels) == refusal


# ---- the fake API server's storage -------------------------------------------------------------------------------


@pytest.mark.parametrize(("obj", "change", "refused"), [
    (claim("c"), {"spec": {"storageClassName": "other"}}, "spec is immutable"),
    (claim("c"), {"spec": {"accessModes": None}}, "at least 1 access mode"),
    (storage_class("s"), {"volumeBindingMode": "Immediate"}, "updates to volumeBindingMode are forbidden"),
    (volume("v", zone="z1"), {"spec": {"nodeAffinity": None}}, "field is immutable"),
])
def test_the_fake_api_server_validates_storage_as_the_real_one(kube: FakeKube, obj, change, refused) -> None:
    stored = kube.add(obj)
    plural = {"PersistentVolumeClaim": "persistentvolumeclaims", "StorageClass": "storageclasses",
              "PersistentVolume": "persistentvolumes"}[obj["kind"]]
    with pytest.raises(Exception, match=refused):
        kube.mutate(plural, stored["metadata"]["name"], stored["metadata"].get("namespace", ""), change)


def test_the_fake_api_server_defaults_a_class_to_immediate_and_a_claim_may_be_bound_once(kube: FakeKube) -> None:
    assert kube.add(storage_class("s", None))["volumeBindingMode"] == "Immediate"
    kube.add(claim("c"))
    kube.mutate("persistentvolumeclaims", "c", "default", {"spec": {"volumeName": "v1"}})
    with pytest.raises(Exception, match="spec is immutable"):
        kube.mutate("persistentvolumeclaims", "c", "default", {"spec": {"volumeName": "v2"}})
