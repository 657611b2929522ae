"""The API client sends a request once per try of gputide's own (`_Api`): urllib3's retries are off.

Left at None, the client's `Configuration.retries` let urllib3 apply its default `Retry(total=3)`: a refused
connection, or a GET that timed out, was sent 3 more times inside one call, each with the whole request timeout, unseen
by `_Api`'s retries, backoff, deadline and halt. Every client gputide builds (`build_api_client`: in-cluster, a
kubeconfig) and the fake API server's `client()` the tests and the soak use has them off."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import pytest
import urllib3.util.connection
from fakeapi import FakeKube

from balancer.actuate.kubernetes import KubeTemporaryError, _Api, build_api_client

POD = r"/namespaces/default/pods/p1$"


def gateway(client, retries: int, timeout_s: float = 5.0) -> _Api:
    return _Api(client, retries, 0.0, lambda _s: None, timeout_s)


def kubeconfig(tmp_path, server: str) -> str:
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t0k3n"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }  # fmt: skip
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))
    return str(path)


def closed_port() -> int:
    """A local port nothing listens on: a connection to it is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def connects(monkeypatch) -> list[tuple[str, int]]:
    """Every TCP connection urllib3 opens (refused ones included)."""
    seen: list[tuple[str, int]] = []
    real = urllib3.util.connection.create_connection

    def counted(address, *args, **kwargs):
        seen.append(address)
        return real(address, *args, **kwargs)

    monkeypatch.setattr(urllib3.util.connection, "create_connection", counted)
    return seen


@pytest.fixture
def silent() -> Iterator[tuple[str, list[socket.socket]]]:
    """A server that accepts connections and never answers: (its URL, the connections it accepted)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    srv.settimeout(0.05)
    accepted: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        while not done.is_set():
            try:
                accepted.append(srv.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.getsockname()[1]}", accepted
    done.set()
    thread.join()
    for conn in accepted:
        conn.close()
    srv.close()


def in_cluster(monkeypatch, tmp_path, port: int):
    """`build_api_client(in_cluster=True)` as in a pod whose API server is 127.0.0.1:`port`."""
    from kubernetes.config import incluster_config

    (tmp_path / "token").write_text("t0k3n")
    (tmp_path / "ca.crt").write_text("not a certificate: the connection is refused before TLS reads it")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(tmp_path / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(tmp_path / "ca.crt"))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(port))
    return build_api_client(in_cluster=True)


@pytest.mark.parametrize("branch", ["kubeconfig", "in-cluster"])
def test_a_refused_connection_is_tried_once_per_try(branch, monkeypatch, tmp_path, connects) -> None:
    port = closed_port()
    if branch == "kubeconfig":
        client = build_api_client(kubeconfig(tmp_path, f"http://127.0.0.1:{port}"))
    else:
        client = in_cluster(monkeypatch, tmp_path, port)
    gw = gateway(client, retries=2)
    with pytest.raises(KubeTemporaryError, match="pod default/p1"):
        gw("pod default/p1", gw.core.read_namespaced_pod, "p1", "default")
    client.close()
    assert connects.count(("127.0.0.1", port)) == 3   # 3 tries, not 12
    assert client.configuration.retries is False


def test_a_timed_out_get_is_sent_once_per_try(silent, tmp_path) -> None:
    url, accepted = silent
    client = build_api_client(kubeconfig(tmp_path, url))
    gw = gateway(client, retries=1, timeout_s=0.2)
    with pytest.raises(KubeTemporaryError, match="ReadTimeoutError"):
        gw("pod default/p1", gw.core.read_namespaced_pod, "p1", "default")
    client.close()
    assert len(accepted) == 2   # 2 tries of 0.2 s, not 8


def test_the_fake_api_servers_client_sends_a_timed_out_get_once_per_try(kube: FakeKube, api) -> None:
    kube.inject("GET", POD, 200, count=100, delay_s=1.0)
    gw = gateway(api, retries=1, timeout_s=0.2)
    with pytest.raises(KubeTemporaryError, match="ReadTimeoutError"):
        gw("pod default/p1", gw.core.read_namespaced_pod, "p1", "default")
    assert len(kube.calls("GET", POD)) == 2
    assert api.configuration.retries is False   # the tests and the soak see what a deployment sees
