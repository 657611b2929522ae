"""Fixtures for the Kubernetes tests: a fresh fake API server per test, the official client pointed at it,
and injected `sleep` / `clock` so retries and lease expiry take no real time."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from fakeapi import FakeKube
from kubernetes import client as k8s


class FakeClock:
    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RBAC = [DEPLOY / "base" / "rbac.yaml", *sorted((DEPLOY / "components").glob("*/rbac.yaml"))]


def granted() -> set[tuple[str, str, str]]:
    """(API group, resource, verb) the shipped roles grant gputide: the controller's ClusterRole and leader-election
    Role, and those of the components (the scheduler's, the power-cap agent's); which ServiceAccount holds which is
    tests/deploy/test_deploy_rbac.py's."""
    out = set()
    for doc in (d for path in RBAC for d in yaml.safe_load_all(path.read_text())):
        if doc and doc["kind"] in ("ClusterRole", "Role"):
            for rule in doc["rules"]:
                out |= set(itertools.product(rule["apiGroups"], rule["resources"], rule["verbs"]))
    return out


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    """The fake API server. At the end of the test every request it served must be one the shipped RBAC grants
    gputide (a verb missing there is a 403 on a real cluster)."""
    with FakeKube() as fake:
        yield fake
        denied = sorted(fake.rbac_requests() - granted())
        assert not denied, f"requests deploy/*/rbac.yaml do not grant: {denied}"


@pytest.fixture
def api(kube: FakeKube) -> Iterator[k8s.ApiClient]:
    client = kube.client()
    yield client
    client.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sleeps() -> list[float]:
    """Pass `sleeps.append` as `sleep=`: records the backoff instead of waiting."""
    return []


@pytest.fixture
def kubeconfig(kube: FakeKube, tmp_path) -> str:
    """A kubeconfig file pointing at the fake API server, for commands run as a user would run them."""
    import yaml

    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": kube.url}}], "users": [{"name": "fake", "user": {}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}]}))
    return str(path)
