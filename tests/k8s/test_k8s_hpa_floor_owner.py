"""Two controllers on one cluster give back only their own HPA floors.

Shards (`gputide run --shard east` and `--shard west`) with different --services each floor their own services'
HPAs. The give-back of floors "no longer managed" (`cmd.run.floors_released`, `restore_floors(None, managed)`) listed
every recorded floor cluster-wide: to east, west's service is not managed, so every leader term east gave back
west's floor (and west then wrote it again, and gave back east's). Now the floor record names the controller that
wrote it (`gputide.io/floor-owner`, its Lease "namespace/name") and a controller gives back only its own floors, or
those whose writer is not recorded (written by an older version: given back as before)."""

from __future__ import annotations

import argparse

import numpy as np
import pytest
import yaml
from fakeapi import FakeKube, deployment, hpa

from balancer.actuate import kubernetes as kube_mod
from balancer.actuate.base import Outcome
from balancer.actuate.k8s_hpa import HPA_FLOOR_ANNOTATION, HPA_OWN_MIN_ANNOTATION
from balancer.cmd import run as run_cmd
from balancer.metrics import ControllerMetrics
from balancer.model import GPU_ARRAYS, ClusterSnapshot, ScaleInference

SNAP = ClusterSnapshot(time=0.0, nodes=(), gpus=(), **{name: np.zeros(0) for name in GPU_ARRAYS})
OWNER = "gputide.io/floor-owner"   # the annotation is the API: spelled out, as an operator reads it
SERVICES = {"east": ["team-a/chat"], "west": ["team-b/web"]}


def controller(tmp_path, shard: str, services: list[str], protected: tuple[str, ...] = ()):
    """`gputide run --shard SHARD --services ...` as the command builds it (its reconciler), against the fake API."""
    folder = tmp_path / f"{shard}-{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    (folder / "services.yaml").write_text(yaml.safe_dump({
        "apiVersion": "gputide/v1alpha1", "kind": "ServiceProfiles",
        "services": [{"name": s, "rpsPerReplica": 10} for s in services]}))
    (folder / "policy.yaml").write_text(yaml.safe_dump({
        "apiVersion": "gputide/v1alpha1", "kind": "BalancerPolicy", "metadata": {"name": shard},
        "spec": {"capacity": {"enabled": True}, "safety": {"protectedNamespaces": list(protected)}}}))
    parser = argparse.ArgumentParser()
    run_cmd.register(parser.add_subparsers())
    return run_cmd.build_reconciler(parser.parse_args([
        "run", "--prometheus", "http://127.0.0.1:9", "--shard", shard, "--selector", f"gputide.io/shard={shard}",
        "--services", str(folder / "services.yaml"), "--policy", str(folder / "policy.yaml")]), ControllerMetrics())


def floor(rec, service: str, replicas: int) -> None:
    result = rec.actuator.inner.apply(
        ScaleInference(reason="tide", service=service, replicas=replicas, previous_replicas=3), SNAP)
    assert result.outcome is Outcome.APPLIED, result.detail


def stored(kube: FakeKube, ns: str, name: str) -> tuple[int, dict]:
    h = kube.get("horizontalpodautoscalers", name, ns)
    return h["spec"]["minReplicas"], h["metadata"].get("annotations") or {}


@pytest.fixture
def shards(kube: FakeKube, api, monkeypatch, tmp_path):
    """east floors team-a/chat at 8 and west team-b/web at 7, both over the operator's 3."""
    monkeypatch.setattr(kube_mod, "build_api_client", lambda kubeconfig=None: api)
    monkeypatch.setenv("POD_NAMESPACE", "gputide")
    for ns, name in (("team-a", "chat"), ("team-b", "web")):
        kube.add(deployment(name, ns))
        kube.add(hpa(name, name, ns, lo=3, hi=10))
    recs = {shard: controller(tmp_path, shard, services) for shard, services in SERVICES.items()}
    floor(recs["east"], "team-a/chat", 8)
    floor(recs["west"], "team-b/web", 7)
    return recs


def test_each_floor_names_the_shard_that_wrote_it(kube, shards) -> None:
    assert stored(kube, "team-a", "chat") == (8, {HPA_OWN_MIN_ANNOTATION: "3", HPA_FLOOR_ANNOTATION: "8",
                                                  OWNER: "gputide/gputide-controller-east"})
    assert stored(kube, "team-b", "web")[1][OWNER] == "gputide/gputide-controller-west"


def test_a_shard_taking_office_leaves_the_other_shards_floor(kube, shards) -> None:
    shards["east"].policy_source()   # east's first poll as leader: the floors it no longer manages given back
    assert stored(kube, "team-b", "web")[0] == 7, "west's floor: west still manages team-b/web"
    assert stored(kube, "team-a", "chat")[0] == 8
    shards["west"].policy_source()
    assert stored(kube, "team-a", "chat")[0] == 8, "east's floor: east still manages team-a/chat"
    assert not kube.calls("PATCH", r"/horizontalpodautoscalers/")[2:]   # the two floors' patches only


def test_a_shard_still_gives_back_its_own_floor_of_a_service_it_stopped_managing(kube, tmp_path, shards) -> None:
    controller(tmp_path, "east", ["team-a/other"]).policy_source()   # east restarted without team-a/chat
    assert stored(kube, "team-a", "chat") == (3, {})   # the operator's own, the record gone
    assert stored(kube, "team-b", "web")[0] == 7       # west's stays


def test_a_namespace_one_shard_protects_keeps_the_other_shards_floor_there(kube, tmp_path, shards) -> None:
    controller(tmp_path, "east", SERVICES["east"], protected=("team-b",)).policy_source()
    assert stored(kube, "team-b", "web")[0] == 7
    controller(tmp_path, "west", SERVICES["west"], protected=("team-b",)).policy_source()
    assert stored(kube, "team-b", "web") == (3, {})   # west's own: given back by west


def test_a_floor_an_older_version_wrote_without_an_owner_is_given_back_as_before(kube, tmp_path, shards) -> None:
    kube.mutate("horizontalpodautoscalers", "web", "team-b",
                {"metadata": {"annotations": {OWNER: None}}})
    shards["east"].policy_source()
    assert stored(kube, "team-b", "web") == (3, {})
    assert stored(kube, "team-a", "chat")[0] == 8
