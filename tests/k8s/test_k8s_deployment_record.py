"""A Deployment no HPA scales gets the operator's replicas back when its service leaves gputide's management, as an
HPA gets its minReplicas (`restore_floors`). Before, gputide wrote its count through the scale subresource and kept
no record of the operator's: a service scaled down for the night and then protected, dropped from the profiles or
left by capacity shifting turned off kept the night's count the next morning, with nothing to give it back. Now the
operator's count is recorded before each scale in the ConfigMap gputide-replicas beside the controller
(`k8s_deploy_record`: the controller may not patch Deployments), and restore_floors gives it back while
spec.replicas is still gputide's (`k8s_inference.InferenceScaling`, the actuator's `inference`, makes the calls).
Whose the count is, the API server says: the field manager owning f:spec.f:replicas in the Deployment's
managedFields ("gputide" for its scale; the fake keeps them as the real server's Update operation does); where it
tracks none (no entry owns them), the record's count: gputide's while it is the count gputide wrote last.

The fake API server serves ConfigMaps as the real one does, their keys validated ([-._a-zA-Z0-9]+, at most 253:
else 422): before, these tests patched ConfigMaps into it without any check, so a record key the API server refuses
(bc25f70's 304 characters) passed here."""

from __future__ import annotations

import json
import logging
import re

import pytest
from fakeapi import FakeKube, deployment, hpa
from kubernetes import client as k8s
from test_k8s_hpa_floor_restore import SNAP, raise_floor
from test_k8s_hpa_floor_restore import stored as hpa_stored

from balancer.actuate.base import ActionResult, Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_deploy_record import record_key, replicas_gputides
from balancer.actuate.k8s_inference import InferenceScaling
from balancer.cmd.run import floors_given_back, floors_released
from balancer.loop import NullLeaderElector
from balancer.model import ScaleInference

OWNER = "gputide/gputide-controller"
SHARD = "gputide/gputide-controller-b"   # another shard, electing on its own Lease
RECORD = ("gputide-replicas", "gputide")   # one record, shared, in the Lease's namespace
KEY_MAX, KEY_CHARS = 253, re.compile(r"[-._a-zA-Z0-9]+")   # what the API server takes for a ConfigMap key


def recorded_from(act: KubernetesActuator, read: dict, want: int) -> None:
    """`act`'s record of its write of Deployment `read` (as it read it) to `want`, its scale not made (yet): a racing
    writer's."""
    act.inference._keep_record(read, want)


def scale(act: KubernetesActuator, service: str, replicas: int, previous: int) -> ActionResult:
    return act.apply(ScaleInference(reason="tide", service=service, replicas=replicas, previous_replicas=previous),
                     SNAP)


def scaled(act: KubernetesActuator, service: str, replicas: int, previous: int) -> None:
    result = scale(act, service, replicas, previous)
    assert result.outcome is Outcome.APPLIED, result.detail


def replicas(kube: FakeKube, name: str = "web", ns: str = "serve") -> int:
    return kube.get("deployments", name, ns)["spec"]["replicas"]


def record(kube: FakeKube) -> dict[str, dict]:
    """The record's entries by key, each naming its Deployment under its own key (`record_key`), the names taken out
    (hand-written ones may lack them)."""
    cm = kube.get("configmaps", *RECORD)
    out = {k: json.loads(v) for k, v in ((cm or {}).get("data") or {}).items()}
    for key, value in out.items():
        assert "namespace" not in value or record_key(value.pop("namespace"), value.pop("name")) == key, (key, value)
    return out


@pytest.fixture
def act(kube: FakeKube, api, clock, sleeps) -> KubernetesActuator:
    """serve/web and other/web at the operator's 6, no HPA; the night lends 4 of serve/web's and 3 of other/web's."""
    for ns in ("serve", "other"):
        kube.add(deployment("web", ns, replicas=6))
    out = KubernetesActuator(api, sleep=sleeps.append, clock=clock, floor_owner=OWNER)
    scaled(out, "serve/web", 2, 6)
    scaled(out, "other/web", 3, 6)
    return out


def test_the_operators_count_is_recorded_before_the_first_scale_and_kept_after(kube, act) -> None:
    assert record(kube) == {"serve.web": {"own": 6, "scaled": 2, "owner": OWNER},
                            "other.web": {"own": 6, "scaled": 3, "owner": OWNER}}
    writes = [(r.method, r.path) for r in kube.requests if r.method in ("POST", "PUT", "PATCH")]
    assert writes[:2] == [("POST", "/api/v1/namespaces/gputide/configmaps"),   # created, then the scale
                          ("PATCH", "/apis/apps/v1/namespaces/serve/deployments/web/scale")]
    scaled(act, "serve/web", 4, 2)   # the morning's reclaim
    assert replicas(kube) == 4 and record(kube)["serve.web"] == {"own": 6, "scaled": 4, "owner": OWNER}
    scaled(act, "serve/web", 6, 4)   # back at the operator's own: the record forgotten
    assert replicas(kube) == 6 and "serve.web" not in record(kube) and "other.web" in record(kube)


def test_a_scale_whose_record_cannot_be_written_is_not_made(kube, act) -> None:
    kube.inject("PUT", r"/configmaps/gputide-replicas$", 403)
    result = scale(act, "serve/web", 1, 2)
    assert result.outcome is Outcome.RETRY and "record of its operator's count" in result.detail, result.detail
    assert not result.maybe_applied and replicas(kube) == 2
    assert record(kube)["serve.web"] == {"own": 6, "scaled": 2, "owner": OWNER}


def test_a_scale_that_did_not_land_keeps_the_operators_count(kube, act) -> None:
    kube.inject("PATCH", r"/deployments/web/scale", 422)   # recorded as 4, still at 2
    assert scale(act, "serve/web", 4, 2).outcome is Outcome.FAILED and replicas(kube) == 2
    scaled(act, "serve/web", 3, 2)   # 2 is still gputide's (the count that write replaced), not the operator's
    assert record(kube)["serve.web"]["own"] == 6
    act.restore_floors(["serve"])
    assert replicas(kube) == 6


def test_a_protected_namespace_gets_the_operators_count_back(kube, act) -> None:
    notes = act.restore_floors(["serve"])
    assert replicas(kube) == 6 and replicas(kube, "web", "other") == 3   # still managed: the night's count stays
    assert list(record(kube)) == ["other.web"]
    assert notes == ["deployment serve/web: service left gputide's management: replicas 2 -> 6 (the operator's own)"]


def test_capacity_shifting_off_or_a_service_left_out_of_the_profiles_gets_it_back(kube, act) -> None:
    act.restore_floors(None, {"other/web"})
    assert replicas(kube) == 6 and replicas(kube, "web", "other") == 3
    act.restore_floors(None, ())
    assert replicas(kube, "web", "other") == 6 and record(kube) == {}


def test_a_count_the_operator_set_since_is_left_and_logged(kube, act, caplog) -> None:
    kube.mutate("deployments", "web", "serve", {"spec": {"replicas": 5}})   # kubectl scale, GitOps
    with caplog.at_level(logging.INFO, logger="balancer.actuate.k8s_actuator"):
        act.restore_floors(["serve"])
    assert replicas(kube) == 5 and "serve.web" not in record(kube)   # theirs: kept, the stale record dropped
    assert any("set by someone else since gputide's write (spec.replicas managed by kubectl-edit): left as they are"
               in m for m in caplog.messages), caplog.messages


def test_a_count_the_operator_set_between_gputides_writes_is_their_own_from_then_on(kube, act) -> None:
    kube.mutate("deployments", "web", "serve", {"spec": {"replicas": 4}})   # a hand scale-up for a spike
    scaled(act, "serve/web", 8, 4)
    assert record(kube)["serve.web"] == {"own": 4, "scaled": 8, "owner": OWNER}
    act.restore_floors(["serve"])
    assert replicas(kube) == 4


def test_a_record_written_meanwhile_is_read_again(kube, act) -> None:
    kube.before("PUT", r"/configmaps/gputide-replicas$", lambda: kube.mutate(
        "configmaps", *RECORD, {"data": {"ml.other": json.dumps({"own": 1, "scaled": 2, "from": 1})}}))
    scaled(act, "serve/web", 4, 2)
    assert record(kube)["serve.web"]["scaled"] == 4 and "ml.other" in record(kube)   # 409, re-read: both kept


def test_a_record_created_meanwhile_is_read_again(kube, api, clock, sleeps) -> None:
    kube.add(deployment("web", "serve", replicas=6))
    act = KubernetesActuator(api, sleep=sleeps.append, clock=clock, floor_owner=OWNER)
    other = {"ml.other": json.dumps({"own": 1, "scaled": 2, "from": 1})}
    kube.before("POST", r"/configmaps$", lambda: kube.add({"apiVersion": "v1", "kind": "ConfigMap", "data": other,
                                                           "metadata": {"name": RECORD[0], "namespace": RECORD[1]}}))
    scaled(act, "serve/web", 2, 6)
    assert set(record(kube)) == {"ml.other", "serve.web"}


def test_a_shard_writes_the_shared_record_and_gives_back_only_its_own(kube, act, api, clock, sleeps) -> None:
    kube.add(deployment("api", "serve", replicas=5))
    shard = KubernetesActuator(api, sleep=sleeps.append, clock=clock, floor_owner=SHARD)
    scaled(shard, "serve/api", 1, 5)
    assert record(kube)["serve.api"] == {"own": 5, "scaled": 1, "owner": SHARD}
    shard.restore_floors(None, ())
    assert replicas(kube, "api") == 5 and replicas(kube) == 2 and "serve.web" in record(kube)
    kube.mutate("configmaps", *RECORD, {"data": {"ml.old": json.dumps({"own": 3, "scaled": 1, "from": 3})}})
    kube.add(deployment("old", "ml", replicas=3))
    k8s.AppsV1Api(api).patch_namespaced_deployment_scale(   # that version's scale, under gputide's field manager
        "old", "ml", {"spec": {"replicas": 1}}, field_manager="gputide", _content_type="application/merge-patch+json")
    shard.restore_floors(["ml"])   # written by a version that recorded no writer: any controller gives it back
    assert replicas(kube, "old", "ml") == 3 and "ml.old" not in record(kube)


def test_a_service_moving_between_shards_keeps_the_operators_count(kube, act, api, clock, sleeps) -> None:
    """Per-shard records lost it: shard A lowered serve/web 6 -> 2, its replicas moved to shard B's nodes, B's reclaim
    recorded 2 as the operator's in its own record and A's was never given back by B."""
    shard = KubernetesActuator(api, sleep=sleeps.append, clock=clock, floor_owner=SHARD)
    scaled(shard, "serve/web", 4, 2)
    assert record(kube)["serve.web"] == {"own": 6, "scaled": 4, "owner": SHARD}
    act.restore_floors(["serve"])   # no longer A's: left to B
    assert replicas(kube) == 4 and "serve.web" in record(kube)
    shard.restore_floors(["serve"])
    assert replicas(kube) == 6 and "serve.web" not in record(kube)


def test_an_unreadable_record_is_a_note_and_the_hpa_floors_still_go_back(kube, act) -> None:
    kube.add(deployment("api", "serve"))
    kube.add(hpa("api", "api", "serve", lo=3, hi=10))
    raise_floor(act, "serve/api", 8)
    kube.inject("GET", r"/configmaps/gputide-replicas$", 403)
    notes = act.restore_floors(["serve"])
    assert hpa_stored(kube, "api") == (3, {}) and replicas(kube) == 2
    assert any(n.startswith("record of deployment replicas gputide/gputide-replicas not read")
               for n in notes), notes


class Leading:
    elector = NullLeaderElector()


def retries(act: KubernetesActuator):
    """The reloader's give-back of protected namespaces and its release (run.py), on the leader, with capacity
    shifting managing other/web."""
    return floors_given_back(act, object(), Leading), floors_released(act, ("other/web",), Leading)


def test_a_deployment_not_given_back_is_tried_again_at_the_next_poll(kube, act) -> None:
    leave, release = retries(act)
    kube.inject("PATCH", r"/serve/deployments/web/scale", 500, count=10)
    assert leave(("serve",)) == ("serve",) and replicas(kube) == 2 and "serve.web" in record(kube)
    assert release() is False
    assert leave(("serve",)) == () and replicas(kube) == 6 and "serve.web" not in record(kube)


def test_a_record_unread_for_a_temporary_error_is_tried_again(kube, act) -> None:
    """An HTTP 500 reading the record was a note neither retry matched: the give-back dropped for the whole term."""
    leave, release = retries(act)
    kube.inject("GET", r"/configmaps/gputide-replicas$", 500, count=10)
    assert leave(("serve", "ml")) == ("serve", "ml") and replicas(kube) == 2
    assert release() is False
    assert leave(("serve",)) == () and replicas(kube) == 6
    assert release() is True


def test_a_raise_whose_record_cannot_be_written_is_made_anyway(kube, act, caplog) -> None:
    """The morning's reclaim was held (RETRY) while the record could not be written: the SLO waited on bookkeeping.
    The raised count is gputide's (its field manager's), so the recorded 6 still goes back."""
    kube.inject("PUT", r"/configmaps/gputide-replicas$", 422, count=10)
    with caplog.at_level(logging.WARNING, logger="balancer.actuate.k8s_actuator"):
        scaled(act, "serve/web", 4, 2)
    assert replicas(kube) == 4 and record(kube)["serve.web"] == {"own": 6, "scaled": 2, "owner": OWNER}
    assert any("raised to 4 without the record" in m for m in caplog.messages), caplog.messages
    assert scale(act, "serve/web", 3, 4).outcome is Outcome.RETRY and replicas(kube) == 4   # a lowering still waits
    act.restore_floors(["serve"])
    assert replicas(kube) == 6


def test_a_long_namespace_and_name_get_a_key_the_api_server_takes(kube, api, clock, sleeps) -> None:
    """"<ns>.<name>" ran to 304 characters for a 63-character namespace and a 240-character name: every write of the
    record refused (HTTP 422, a ConfigMap key is at most 253), so the Deployment was never scaled down, for good."""
    ns, name = "n" * 63, "d" * 240
    kube.add(deployment(name, ns, replicas=6))
    act = KubernetesActuator(api, sleep=sleeps.append, clock=clock, floor_owner=OWNER)
    scaled(act, f"{ns}/{name}", 2, 6)
    (key, value), = kube.get("configmaps", *RECORD)["data"].items()
    assert len(key) <= KEY_MAX and KEY_CHARS.fullmatch(key) and key.startswith(f"{ns}.")
    assert {k: json.loads(value)[k] for k in ("namespace", "name", "own")} == {"namespace": ns, "name": name, "own": 6}
    act.restore_floors([ns])
    assert replicas(kube, name, ns) == 6 and record(kube) == {}
    keys = (record_key("serve", "web"), record_key(ns, "a" * 253), record_key("x" * 300, "y"), record_key("a b", "c"))
    assert keys[0] == "serve.web" and all(len(k) <= KEY_MAX and KEY_CHARS.fullmatch(k) for k in keys), keys


def test_an_old_and_a_new_leader_scaling_at_once_keep_the_operators_count(kube, act, api, clock, sleeps) -> None:
    """Both read serve/web at 2 (one resourceVersion); the old leader recorded 2 -> 4, the new one 2 -> 5 over it,
    then the old one's scale landed: the new leader's retry found 4, neither of the record's counts (5, 2), and took
    it for the operator's, the 6 lost. Whichever lands, the count is gputide's (its field manager's): the 6 kept."""
    new = KubernetesActuator(api, sleep=sleeps.append, clock=clock, floor_owner=OWNER)
    read = kube.get("deployments", "web", "serve")
    kube.before("PATCH", r"/serve/deployments/web/scale", lambda: recorded_from(new, read, 5))
    scaled(act, "serve/web", 4, 2)   # the old leader's, recorded before the new one's record, landing after it
    assert record(kube)["serve.web"] == {"own": 6, "scaled": 5, "owner": OWNER}
    scaled(new, "serve/web", 5, 4)   # the new leader's scale: 409 on its resourceVersion, read again at 4
    assert record(kube)["serve.web"] == {"own": 6, "scaled": 5, "owner": OWNER}   # from a later one
    act.restore_floors(["serve"])
    assert replicas(kube) == 6


def test_the_fake_api_server_refuses_the_configmap_keys_the_real_one_does(kube, api) -> None:
    """As ValidateConfigMap (IsConfigMapKey): 422 for a key of other characters, past 253 bytes, or "..": the old
    "<ns>.<name>" key of a 63-character namespace and a 240-character name is one. Created and replaced as the
    real server does: 409 AlreadyExists, 409 for a stale resourceVersion."""
    core = k8s.CoreV1Api(api)

    def body(*keys: str, rv: str | None = None) -> dict:
        return {"metadata": {"name": "gputide-replicas", "namespace": "gputide", "resourceVersion": rv},
                "data": dict.fromkeys(keys, "{}")}

    for bad in ("n" * 63 + "." + "d" * 240, "a b", "serve/web", "..web", "é"):
        with pytest.raises(k8s.ApiException) as refused:
            core.create_namespaced_config_map("gputide", body("serve.web", bad))
        assert refused.value.status == 422, bad
    made = core.create_namespaced_config_map("gputide", body("serve.web", "x" * 253, record_key("n" * 63, "d" * 240)))
    with pytest.raises(k8s.ApiException) as exists:
        core.create_namespaced_config_map("gputide", body("other.web"))
    assert exists.value.status == 409
    rv = made.metadata.resource_version
    core.replace_namespaced_config_map("gputide-replicas", "gputide", body("other.web", rv=rv))
    with pytest.raises(k8s.ApiException) as stale:
        core.replace_namespaced_config_map("gputide-replicas", "gputide", body("serve.web", rv=rv))
    assert stale.value.status == 409 and set(record(kube)) == {"other.web"}
    with pytest.raises(k8s.ApiException) as refused:
        core.replace_namespaced_config_map("gputide-replicas", "gputide", body("a" * 254))
    assert refused.value.status == 422


def test_the_actuator_hands_inference_to_one_inference_scaling_sharing_its_refusals(kube, act, caplog) -> None:
    """The inference path lives in k8s_inference (`InferenceScaling`), held by the actuator as `inference`, with the
    actuator's gateway, floor owner and its one set of refusals told (a refusal logged at WARNING once, whichever
    path refuses); the actuator's `_scale_inference` and `restore_floors` hand on to it."""
    assert isinstance(act.inference, InferenceScaling) and act.inference.refusals is act._refusals
    assert (act.inference.api, act.inference.floor_owner) == (act.api, OWNER)
    assert not {"_scale_deployment", "_floor_clamp", "_keep_record", "_restore_namespace"} & set(vars(
        KubernetesActuator))
    kube.add(deployment("kept", "serve", replicas=3))
    kube.mutate("deployments", "kept", "serve", {"metadata": {"ownerReferences": [{
        "apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "name": "kept", "uid": "u-1",
        "controller": True}]}})
    with caplog.at_level(logging.WARNING, logger="balancer.actuate.k8s_actuator"):
        assert scale(act, "serve/kept", 1, 3).outcome is Outcome.FAILED
        assert scale(act, "serve/kept", 1, 3).outcome is Outcome.FAILED
    told = [m for m in caplog.messages if "serve/kept is kept by" in m]
    assert len(told) == 1 and any("serve/kept is kept by" in m for m in act._refusals), told


def test_racing_writers_reading_at_different_resource_versions_keep_the_operators_count(kube, act, api, clock,
                                                                                        sleeps) -> None:
    """The old leader read serve/web at 2, the Deployment controller's status write moved its resourceVersion (still 2),
    the new leader read it there: "rv" told the two writes apart, so the old leader's record (2 -> 5) dropped the new
    one's 4 ("also"), the 4 landed, the old leader's retry took it for the operator's and a give-back left 4 for the
    6. The API server names gputide the manager of the 4: the 6 kept (the /tmp/A6 scenario 1)."""
    old = KubernetesActuator(api, sleep=sleeps.append, clock=clock, floor_owner=OWNER)
    read = kube.get("deployments", "web", "serve")
    kube.mutate("deployments", "web", "serve", {"status": {"observedGeneration": 7}}, manager="kube-controller")
    kube.before("PATCH", r"/serve/deployments/web/scale", lambda: recorded_from(old, read, 5))
    scaled(act, "serve/web", 4, 2)   # the new leader's, landing after the old one's record
    scaled(old, "serve/web", 5, 4)   # the old leader's retry reads 4
    assert record(kube)["serve.web"]["own"] == 6
    act.restore_floors(["serve"])
    assert replicas(kube) == 6


def test_a_hand_scale_to_a_count_a_write_that_did_not_land_asked_is_left(kube, api, clock, sleeps) -> None:
    """A write 2 -> 8 that did not land, then 2 -> 5 from the same resourceVersion: "also" kept the 8 as gputide's,
    so the operator's own 8 for a launch, set by hand, was lowered to their old 2 by a give-back (the /tmp/A6
    scenario 2). The API server names the operator's manager: left."""
    kube.add(deployment("web", "serve", replicas=2))
    act = KubernetesActuator(api, sleep=sleeps.append, clock=clock, floor_owner=OWNER)
    kube.inject("PATCH", r"/serve/deployments/web/scale", 422)
    assert scale(act, "serve/web", 8, 2).outcome is Outcome.FAILED and replicas(kube) == 2
    scaled(act, "serve/web", 5, 2)
    kube.mutate("deployments", "web", "serve", {"spec": {"replicas": 8}}, manager="kubectl-scale")
    act.restore_floors(["serve"])
    assert replicas(kube) == 8 and record(kube) == {}


def test_a_lowering_after_a_raise_made_without_its_record_keeps_the_operators_count(kube, act) -> None:
    """3886788 raises without the record when it cannot be written: the record left at {own 6, scaled 2} took the
    raised 4 for the operator's at the next lowering, recorded it as their own and a give-back left 4 for the 6
    (the /tmp/A6 scenario 3). The 4 is gputide's to the API server: the 6 kept and given back."""
    kube.inject("PUT", r"/configmaps/gputide-replicas$", 500, count=10)
    scaled(act, "serve/web", 4, 2)   # the morning's reclaim, not recorded
    kube.faults.clear()
    scaled(act, "serve/web", 3, 4)   # the next night's lowering, recorded
    assert record(kube)["serve.web"] == {"own": 6, "scaled": 3, "owner": OWNER}
    act.restore_floors(["serve"])
    assert replicas(kube) == 6


def test_a_count_without_managed_fields_is_told_from_the_record(kube, act, caplog) -> None:
    """managedFields stripped (or never kept): the API server tracks no one's count, so the record's tells: a count
    someone else set since gputide's last write (4 for its 3) is left and says why; at gputide's 2 the 6 goes back."""
    kube.mutate("deployments", "web", "serve", {"metadata": {"managedFields": [{}]}})
    kube.mutate("deployments", "web", "other", {"metadata": {"managedFields": [{}]}, "spec": {"replicas": 4}},
                manager="kubectl-edit")
    assert "managedFields" not in kube.get("deployments", "web", "other")["metadata"]   # the edit not tracked
    with caplog.at_level(logging.INFO, logger="balancer.actuate.k8s_actuator"):
        act.restore_floors(["serve", "other"])
    assert replicas(kube) == 6 and replicas(kube, ns="other") == 4 and record(kube) == {}
    assert any("not the 3 gputide wrote last" in m for m in caplog.messages), caplog.messages
    told = [m for m in caplog.messages if "tracks no owner of its spec.replicas" in m]
    assert len(told) == 2 and any("serve/web" in m for m in told) and any("other/web" in m for m in told), told


SSA_WITHOUT_REPLICAS = [{"manager": "kustomize-controller", "operation": "Apply", "apiVersion": "apps/v1",
                         "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:selector": {}, "f:template": {}}}}]


@pytest.mark.parametrize("fields", [None, SSA_WITHOUT_REPLICAS], ids=["no managedFields", "applied without replicas"])
def test_a_second_lowering_the_api_server_does_not_track_keeps_the_operators_count(kube, api, clock, sleeps, caplog,
                                                                                    fields) -> None:
    """The API server records no owner of gputide's scale where no entry owns the replicas (skipnonapplied.go,
    scalehandler.go, kubernetes#131892): a Deployment with no managedFields, or applied server-side (Flux, Argo CD)
    from a manifest without replicas. Read from managedFields alone, the 2 of the first lowering was no one's, the
    second lowering (2 -> 1) recorded it as the operator's and a give-back left 1 for the 6 (the /tmp/A9 audit). The
    record's count tells there: the 2 is gputide's last write, the 6 kept and given back. Logged once."""
    kube.add(deployment("web", "serve", replicas=6), manager=None)
    if fields is not None:
        kube.mutate("deployments", "web", "serve", {"metadata": {"managedFields": fields}},
                    manager="kustomize-controller")
    act = KubernetesActuator(api, sleep=sleeps.append, clock=clock, floor_owner=OWNER)
    with caplog.at_level(logging.INFO, logger="balancer.actuate.k8s_actuator"):
        scaled(act, "serve/web", 2, 6)
        scaled(act, "serve/web", 1, 2)
        assert record(kube)["serve.web"] == {"own": 6, "scaled": 1, "owner": OWNER}
        act.restore_floors(["serve"])
    assert replicas(kube) == 6 and record(kube) == {}
    assert len([m for m in caplog.messages if "serve/web: the API server tracks no owner" in m]) == 1


@pytest.mark.parametrize(("fields", "gputides"), [
    ([{"manager": "gputide", "operation": "Update", "subresource": "scale", "fieldsType": "FieldsV1",
       "fieldsV1": {"f:spec": {"f:replicas": {}}}},
      {"manager": "kubectl-client-side-apply", "operation": "Update", "fieldsType": "FieldsV1",
       "fieldsV1": {"f:spec": {"f:template": {}}}}], True),
    ([{"manager": "kubectl-scale", "operation": "Update", "subresource": "scale", "fieldsType": "FieldsV1",
       "fieldsV1": {"f:spec": {"f:replicas": {}}}}], False),
    ([{"manager": "gputide", "operation": "Update", "subresource": "scale", "fieldsType": "FieldsV1",
       "fieldsV1": {"f:spec": {"f:replicas": {}}}},
      {"manager": "argocd-controller", "operation": "Apply", "fieldsType": "FieldsV1",
       "fieldsV1": {"f:spec": {"f:replicas": {}}}}], False),   # an apply sharing the value: the operator's too
    ([{"manager": "gputide", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {}}}], False),
    (None, False),   # stripped, no record: cannot be told, the safe side
], ids=["gputide's scale", "kubectl scale", "shared with an apply", "gputide owns other fields", "none"])
def test_whose_the_count_is_the_api_servers_managed_fields_say(fields, gputides) -> None:
    meta = {"name": "web", "namespace": "serve", **({"managedFields": fields} if fields is not None else {})}
    assert replicas_gputides({"metadata": meta, "spec": {"replicas": 2}}) is gputides
    assert replicas_gputides({"metadata": meta, "spec": {"replicas": 2}}, 3) is gputides   # told: not the record


@pytest.mark.parametrize("fields", [None, SSA_WITHOUT_REPLICAS,
                                    [{"manager": "gputide", "operation": "Update", "fieldsType": "FieldsV1",
                                      "fieldsV1": {"f:metadata": {}}}]], ids=["none", "apply", "other fields"])
def test_where_managed_fields_cannot_tell_the_count_gputide_wrote_last_does(fields) -> None:
    meta = {"name": "web", "namespace": "serve", **({"managedFields": fields} if fields is not None else {})}
    deployment = {"metadata": meta, "spec": {"replicas": 2}}
    assert replicas_gputides(deployment, 2) and not replicas_gputides(deployment, 3)
    assert not replicas_gputides(deployment)   # no record: not gputide's


def test_a_record_value_nested_past_the_parsers_depth_reads_as_no_record() -> None:
    """A hand-edited value nested deeper than json's parser goes ("[" * 100000) raised RecursionError out of
    `entries`, so every scale and give-back of a Deployment failed: it reads as no record, as any other value that
    is not one does."""
    from balancer.actuate.k8s_deploy_record import entries

    good = json.dumps({"namespace": "serve", "name": "api", "own": 6, "scaled": 2})
    assert set(entries({"data": {"serve.api": good, "serve.web": "[" * 100000}})) == {"serve.api"}
