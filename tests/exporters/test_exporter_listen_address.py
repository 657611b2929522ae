"""The metrics servers listen on the address they are given, IPv6 included: on an IPv6-only cluster a pod has no
IPv4 address, and a server that could bind only IPv4 (0.0.0.0) was unreachable there: no GPU series at all."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Gauge
from test_exporter_cli_and_counters import _start

from exporters.server import serve


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


needs_ipv6 = pytest.mark.skipif(not _ipv6_loopback(), reason="this machine has no IPv6 loopback (::1)")


def _get(url: str) -> str:
    return urllib.request.urlopen(url, timeout=10).read().decode()


@needs_ipv6
@pytest.mark.parametrize("addr", ["::1", "[::1]"])
def test_the_server_binds_an_ipv6_address_bracketed_or_not(addr):
    reg = CollectorRegistry()
    Gauge("probe", "a gauge", registry=reg).set(3)
    server = serve(reg, port=0, addr=addr)
    try:
        assert "probe 3.0" in _get(f"http://[::1]:{server.port}/metrics")
    finally:
        server.close()


def test_an_ipv4_address_is_still_served_over_ipv4():
    reg = CollectorRegistry()
    Gauge("probe", "a gauge", registry=reg).set(4)
    server = serve(reg, port=0, addr="127.0.0.1")
    try:
        assert "probe 4.0" in _get(f"http://127.0.0.1:{server.port}/metrics")
    finally:
        server.close()


@needs_ipv6
def test_gputide_exporter_listens_on_the_listen_address_it_is_given():
    proc, port = _start("--backend", "sim", "--node", "h100-00", "--port", "0", "--listen-address", "::1",
                        "--duration", "60")
    try:
        assert "DCGM_FI_DEV_GPU_TEMP{" in _get(f"http://[::1]:{port}/metrics")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
