"""`::` takes IPv4 too on every host (audit s33a2 of c07616a). The server left IPV6_V6ONLY to the kernel's default,
net.ipv6.bindv6only: where that is 1, `--listen-address ::` answered on IPv6 alone (the help said so, the README said
"every address"), and gputide's default chose 0.0.0.0 there, unreachable from an IPv6-only pod. The server now turns
IPV6_V6ONLY off before it binds, as http.server's DualStackServer does. `BindV6OnlyHost` makes this process's
sockets start as a bindv6only=1 host's do (the sysctl sets only that starting value), so the case runs anywhere
that has IPv6; `unshare -n` with `sysctl -w net.ipv6.bindv6only=1` shows the same with the kernel's own default."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Gauge

from exporters.server import serve, serve_app
from tests.cli.test_cli_listen_address import ipv6_loopback

needs_ipv6 = pytest.mark.skipif(not ipv6_loopback(), reason="this machine has no IPv6 loopback (::1)")


class BindV6OnlyHost(socket.socket):
    """A socket as a host with net.ipv6.bindv6only=1 makes it: an IPv6 one takes IPv6 alone unless told otherwise."""

    def __init__(self, family=-1, type=-1, proto=-1, fileno=None):   # noqa: A002 - socket.socket's signature
        super().__init__(family, type, proto, fileno)
        if fileno is None and self.family == socket.AF_INET6:   # not an accepted connection
            self.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)


@pytest.fixture
def bindv6only(monkeypatch):
    monkeypatch.setattr(socket, "socket", BindV6OnlyHost)
    with socket.socket(socket.AF_INET6) as s:
        assert s.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 1


def _get(url: str) -> str:
    return urllib.request.urlopen(url, timeout=10).read().decode()


@needs_ipv6
@pytest.mark.parametrize("addr", ["::", "[::]"])
def test_every_ipv6_address_takes_ipv4_too_where_the_kernel_says_ipv6_alone(bindv6only, addr):
    reg = CollectorRegistry()
    Gauge("probe", "a gauge", registry=reg).set(6)
    server = serve(reg, port=0, addr=addr)
    try:
        assert server.server.socket.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 0
        assert "probe 6.0" in _get(f"http://127.0.0.1:{server.port}/metrics")   # refused before
        assert "probe 6.0" in _get(f"http://[::1]:{server.port}/metrics")
    finally:
        server.close()


@pytest.mark.parametrize("addr", ["", " ", "[]", "[ ]"])
def test_an_empty_address_bracketed_or_not_is_refused_not_every_ipv4_address(addr):
    """`--listen-address '[]'` passed the command line's empty-value check and the brackets came off here: ""
    bound every IPv4 address (socketserver's INADDR_ANY). The command line refuses it now; this is the last guard."""
    with pytest.raises(ValueError, match="no address to bind"):
        serve_app(lambda environ, start_response: [], port=0, addr=addr)
