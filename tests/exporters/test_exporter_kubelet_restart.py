"""A kubelet that restarts: the exporter asks the new one at its next scrape. gRPC's channel, once its connection
failed, refuses every call until its reconnect backoff ends (1 s, then growing by 1.6x up to 2 minutes), so after
a long kubelet outage the GPUs stayed without their pods for up to two minutes more."""

from __future__ import annotations

import grpc
import pytest
from test_exporter_podresources import Kubelet

from exporters.podresources import PodResourcesClient


def test_the_scrape_after_a_kubelet_restart_reads_the_new_kubelet(tmp_path):
    sock = str(tmp_path / "kubelet.sock")
    old = Kubelet(sock)
    old.pods = [("ml", "a", [("c", "nvidia.com/gpu", ["GPU-0aaa"])])]
    client = PodResourcesClient(sock, timeout_s=2)
    assert len(client.list()) == 1
    old.stop()
    with pytest.raises(grpc.RpcError):
        client.list()   # the kubelet is down
    new = Kubelet(sock)
    new.pods = [("ml", "b", [("c", "nvidia.com/gpu", ["GPU-1aaa"])])]
    try:
        assert [a.pod for a in client.list()] == ["b"]
    finally:
        client.close()
        new.stop()
