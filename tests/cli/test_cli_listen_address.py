"""Every command that serves HTTP (the controller, the scheduler, the power-cap agent, the exporter) binds where
`--listen-address` says, IPv6 included (an IPv6-only cluster has no 0.0.0.0), and an address the machine does not
have exits 2 naming the flags instead of an OSError traceback."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client import CollectorRegistry

from balancer.app.health import Health
from balancer.app.health import serve as serve_metrics
from balancer.cli import build_parser
from balancer.cmd._args import bind
from balancer.errors import InputError


@pytest.mark.parametrize(("argv", "dest"), [
    (["run", "--prometheus", "http://prom:9090"], "listen_address"), (["schedule"], "listen_address"),
    (["power-cap-agent"], "listen_address"),
    (["exporter"], "listen"),
])
def test_each_serving_command_takes_a_listen_address(argv, dest):
    assert getattr(build_parser().parse_args(argv), dest) is None, "every address, `bind`'s choice (dual stack)"
    assert getattr(build_parser().parse_args([*argv, "--listen-address", "::"]), dest) == "::"


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not ipv6_loopback(), reason="this machine has no IPv6 loopback")
@pytest.mark.parametrize("addr", ["::1", "[::1]"])
def test_the_controller_metrics_and_probes_answer_on_ipv6(addr):
    server = bind(lambda **kw: serve_metrics(registry=CollectorRegistry(), health=Health(60.0), **kw), addr, 0,
                  "--metrics-port")
    try:
        with urllib.request.urlopen(f"http://[::1]:{server.port}/healthz", timeout=5) as r:
            assert r.status == 200
    finally:
        server.close()


def test_an_address_the_machine_does_not_have_is_an_input_error():
    with pytest.raises(InputError) as exc:
        bind(lambda **kw: serve_metrics(registry=CollectorRegistry(), health=Health(60.0), **kw), "192.0.2.77", 0,
             "--metrics-port")
    assert "--listen-address/--metrics-port" in str(exc.value) and "192.0.2.77" in str(exc.value)
