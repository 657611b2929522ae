"""A hot pod that mounts PersistentVolumeClaims moves within the nodes its volumes attach to, as kube-scheduler's
VolumeBinding places a pod whose claim is bound: the controller reads the claims and their PersistentVolumes from
the (fake) API server and ANDs each bound volume's required node affinity into the pod's node rules. A volume
without node affinity (network storage) restricts nothing; a claim not bound, missing, or bound to a missing or
local volume keeps the pod where it is; `gputide.io/movable` still settles it when it says so."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import pytest
from fakeapi import ZONE_LABEL, FakeKube, claim, pod, volume

from balancer.actuate.k8s_claims import Mounts, attachable, claim_entry, confined, volume_state
from balancer.actuate.k8s_workloads import KubernetesWorkloads
from balancer.config import BalancerPolicy
from balancer.model import Migrate
from balancer.noderules import NodeRules, Requirement, Term
from balancer.plan.planner import plan
from tests.k8s.test_k8s_watch import eventually
from tests.loop.loop_helpers import make_fleet, snapshot

HOST = "kubernetes.io/hostname"
FL = make_fleet(4, 4)   # n0: GPUs 0-3 (the pod's, hot), n1: 4-7, n2: 8-11, n3: 12-15
ZONES = {"n0": "a", "n1": "a", "n2": "b", "n3": "b"}
NODES = tuple(replace(n, labels=MappingProxyType({ZONE_LABEL: ZONES[n.name], HOST: n.name})) for n in FL.nodes)
# n3 is the coolest target, then n1, then n2: a pod moves to n3 unless a rule rules it out
TEMPS = {0: 86, 12: 35, 13: 35, 4: 40, 5: 40, 8: 45, 9: 45}


def training(name: str = "train-0", *claims: str, ephemeral: str = "", said: str | None = None) -> dict:
    """A running training pod of Job `train` on n0 mounting `claims` (and a generic ephemeral volume `ephemeral`)."""
    p = pod(name, node_name="n0", owner=("Job", "train"), labels={"gputide.io/workload-class": "training"})
    p["spec"]["volumes"] = [{"name": c, "persistentVolumeClaim": {"claimName": c}} for c in claims]
    if ephemeral:
        p["spec"]["volumes"].append({"name": ephemeral, "ephemeral": {"volumeClaimTemplate": {"spec": {
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}}}}})
    if said is not None:
        p["metadata"]["annotations"] = {"gputide.io/movable": said}
    return p


def bound(kube: FakeKube, name: str, zone: str | None, **spec) -> None:
    """Claim `name` bound to volume `pv-<name>` (zonal in `zone`, else network storage); `spec`: more of the
    volume's spec (a `local` source)."""
    pv = volume(f"pv-{name}", zone=zone, claim_ref=("default", name))
    for key, value in spec.items():
        if value is None:   # that key left out
            del pv["spec"][key]
        else:
            pv["spec"][key] = value
    kube.add(pv)
    kube.add(claim(name, volume=f"pv-{name}"))


def workloads(api, clock, **kw) -> KubernetesWorkloads:
    return KubernetesWorkloads(api, ttl_s=60.0, clock=clock, sleep=lambda s: None, **kw)


def target(w) -> str | None:
    """Where the planner moves `w` off its hot GPU 0 (None: it stays, throttled instead)."""
    snaps = [snapshot(FL, workloads=[(w, (0,))], temps=TEMPS, nodes=NODES)] * 2
    state = None
    for s in snaps:
        p, state = plan(s, None, BalancerPolicy(), state)
    moves = [a.target_node for a in p.actions if isinstance(a, Migrate)]
    assert len(moves) <= 1
    return moves[0] if moves else None


def test_a_hot_pod_on_a_zonal_disk_moves_only_within_its_zone(kube: FakeKube, api, clock):
    bound(kube, "ckpt", "a")
    kube.add(training("train-0", "ckpt"))
    w = workloads(api, clock)()["default/train-0"]
    assert w.movable and w.node_rules.terms == (Term((Requirement(ZONE_LABEL, "In", ("a",)),)),)
    assert target(w) == "n1"   # n3 is cooler, but the disk cannot attach in zone b


def test_a_volume_without_node_affinity_lets_the_pod_move_anywhere(kube: FakeKube, api, clock):
    bound(kube, "ckpt", None)
    kube.add(training("train-0", "ckpt"))
    w = workloads(api, clock)()["default/train-0"]
    assert w.movable and not w.node_rules.terms
    assert target(w) == "n3"


def test_the_volumes_node_affinity_is_anded_with_the_pods_own(kube: FakeKube, api, clock):
    bound(kube, "ckpt", "b")
    p = training("train-0", "ckpt")
    p["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": HOST, "operator": "NotIn", "values": ["n3"]}]}]}}}
    kube.add(p)
    w = workloads(api, clock)()["default/train-0"]
    assert target(w) == "n2"   # its own rule alone: n1; the disk's alone: n3; both: n2


def test_a_generic_ephemeral_volume_on_a_zonal_disk_keeps_the_pod_in_its_zone(kube: FakeKube, api, clock):
    p = kube.add(training("train-0", ephemeral="scratch"))
    kube.add(volume("pv-scratch", zone="a", claim_ref=("default", "train-0-scratch")))
    owned = claim("train-0-scratch", volume="pv-scratch")
    owned["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "train-0",
                                             "uid": p["metadata"]["uid"], "controller": True}]
    kube.add(owned)
    assert target(workloads(api, clock)()["default/train-0"]) == "n1"


@pytest.mark.parametrize("case", ["unbound", "missing-claim", "missing-volume", "local", "released"])
def test_a_pod_whose_volume_cannot_be_placed_stays_where_it_is(kube: FakeKube, api, clock, case):
    if case == "unbound":
        kube.add(claim("ckpt"))   # Pending: no volume yet, so where it will attach is not known
    elif case == "missing-volume":
        kube.add(claim("ckpt", volume="pv-gone"))
    elif case == "local":   # its data is on n0's disk: it attaches nowhere else
        bound(kube, "ckpt", None, local={"path": "/mnt/disks/ssd0"}, csi=None, nodeAffinity={"required": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": HOST, "operator": "In", "values": ["n0"]}]}]}})
    elif case == "released":
        bound(kube, "ckpt", None)
        kube.mutate("persistentvolumes", "pv-ckpt", "", {"status": {"phase": "Released"}})
    kube.add(training("train-0", "ckpt"))
    w = workloads(api, clock)()["default/train-0"]
    assert not w.movable and target(w) is None


def test_the_annotation_still_settles_it(kube: FakeKube, api, clock):
    bound(kube, "ckpt", None)
    bound(kube, "zonal", "a")
    kube.add(training("pinned", "ckpt", said="false"))
    kube.add(training("vouched", "zonal", said="true"))
    kube.add(claim("nowhere"))
    kube.add(training("vouched-unbound", "nowhere", said="true"))
    got = workloads(api, clock)()
    assert not got["default/pinned"].movable and target(got["default/pinned"]) is None
    assert target(got["default/vouched"]) == "n3"           # the operator vouches any node can mount it
    assert got["default/vouched-unbound"].movable            # today's meaning: not read at all


def test_claims_and_volumes_are_listed_once_per_ttl_and_only_when_a_pod_mounts_one(kube: FakeKube, api, clock):
    kube.add(pod("plain", node_name="n0", owner=("ReplicaSet", "plain-5c9f")))
    provider = workloads(api, clock)
    provider()
    assert not kube.calls("GET", r"/persistentvolume")   # no pod mounts a claim: nothing read
    kube.add(claim("ckpt"))
    kube.add(training("train-0", "ckpt"))
    clock.advance(61)
    assert not provider()["default/train-0"].movable     # Pending
    kube.add(volume("pv-ckpt", zone="b", claim_ref=("default", "ckpt")))
    kube.mutate("persistentvolumeclaims", "ckpt", "default", {"spec": {"volumeName": "pv-ckpt"},
                                                               "status": {"phase": "Bound"}})
    assert not provider()["default/train-0"].movable     # within the TTL: the same answer, not listed again
    assert len(kube.calls("GET", r"/persistentvolumeclaims$")) == 1
    assert len(kube.calls("GET", r"/persistentvolumes$")) == 1
    clock.advance(61)
    assert target(provider()["default/train-0"]) == "n3"   # bound in zone b now
    assert len(kube.calls("GET", r"/persistentvolumeclaims$")) == 2


def test_until_the_claims_can_be_read_the_pod_stays(kube: FakeKube, api, clock):
    bound(kube, "ckpt", None)
    kube.add(training("train-0", "ckpt"))
    down = kube.inject("GET", r"/persistentvolumeclaims(\?|$)", 503, count=10_000)
    provider = workloads(api, clock)
    assert not provider()["default/train-0"].movable     # not guessed
    down.remaining = 0
    clock.advance(61)
    assert provider()["default/train-0"].movable


def test_a_watching_controller_sees_a_claim_bound(kube: FakeKube, api, clock):
    kube.add(claim("ckpt"))
    kube.add(training("train-0", "ckpt"))
    provider = workloads(api, clock, watch=True, watch_s=1.0)
    try:
        assert not provider()["default/train-0"].movable
        eventually(lambda: provider.claims.watch.synced and provider.volumes.watch.synced)
        kube.add(volume("pv-ckpt", zone="a", claim_ref=("default", "ckpt")))
        kube.mutate("persistentvolumeclaims", "ckpt", "default", {"spec": {"volumeName": "pv-ckpt"},
                                                                   "status": {"phase": "Bound"}})
        eventually(lambda: provider()["default/train-0"].movable)   # no TTL waited
        assert target(provider()["default/train-0"]) == "n1"
    finally:
        provider.close()


# ---- the pure parts ---------------------------------------------------------------------------------------------

ZONE_A = (Term((Requirement(ZONE_LABEL, "In", ("a",)),)),)


def test_a_claim_being_deleted_or_an_ephemeral_claim_of_another_pod_keeps_the_pod():
    claims = {"default/ckpt": claim_entry(claim("ckpt", volume="pv"))}
    volumes = {"pv": volume_state(volume("pv", zone="a", claim_ref=("default", "ckpt")))}
    m = Mounts("default/train-0", "uid-1", (("ckpt", False),))
    assert attachable(m, claims, volumes) == (ZONE_A,)
    deleting = claim("ckpt", volume="pv")
    deleting["metadata"]["deletionTimestamp"] = "2026-12-05T00:00:00Z"
    assert "being deleted" in attachable(m, {"default/ckpt": claim_entry(deleting)}, volumes)
    theirs = Mounts("default/train-0", "uid-1", (("ckpt", True),))   # an ephemeral claim owned by no pod
    assert "pod is not owner" in attachable(theirs, claims, volumes)


def test_confined_rules_keep_the_pods_terms_and_refuse_an_empty_or_exploding_product():
    own = NodeRules(terms=(Term((Requirement(HOST, "NotIn", ("n3",)),)), Term((Requirement("gpu", "Exists"),))))
    both = confined(own, (ZONE_A,))
    assert both.terms == tuple(Term(t.expressions + ZONE_A[0].expressions) for t in own.terms)
    assert confined(own, ()) is own
    assert confined(own, ((Term(),),)) is None   # a volume whose only term is empty attaches nowhere
    many = tuple(Term((Requirement(ZONE_LABEL, "In", (str(i),)),)) for i in range(8))
    assert confined(NodeRules(), (many, many)) is not None
    assert confined(NodeRules(), (many, many, many)) is None   # 512 terms: not moved rather than slow
