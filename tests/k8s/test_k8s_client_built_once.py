"""The tests' clients are production's: the fake API server's `client()` is `build_api_client(host=...)`.

The fake's client, the unreachable-server test and the bench each wrote out `build_api_client`'s Configuration
(urllib3 retries off) by hand: a copy that drifted (retries left on) would pass a case a deployment fails, or the
reverse. Now they call `build_api_client(host=...)`; `test_k8s_client_retries` pins that it turns retries off."""

from __future__ import annotations

import fakeapi
import pytest
from fakeapi import FakeKube

from balancer.actuate import kubernetes as kube_mod
from balancer.actuate.kubernetes import build_api_client

POD = r"/namespaces/default/pods/p1$"


def test_the_fake_api_servers_client_is_built_by_build_api_client(kube: FakeKube, monkeypatch) -> None:
    assert fakeapi.build_api_client is kube_mod.build_api_client
    seen: list[dict] = []

    def spy(**kwargs):
        seen.append(kwargs)
        return kube_mod.build_api_client(**kwargs)

    monkeypatch.setattr(fakeapi, "build_api_client", spy)
    client = kube.client()
    client.close()
    assert seen == [{"host": kube.url}]


@pytest.mark.parametrize("other", [{"kubeconfig": "/nonexistent"}, {"in_cluster": True}, {"context": "c"}])
def test_a_bare_url_takes_no_other_configuration(other) -> None:
    with pytest.raises(ValueError, match="host="):
        build_api_client(host="http://127.0.0.1:9", **other)
