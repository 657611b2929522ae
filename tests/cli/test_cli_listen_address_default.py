"""`--listen-address` left out serves on every address, IPv6 and IPv4 alike, and given empty is refused (audit s33h4).
The default was 0.0.0.0, IPv4 alone: on an IPv6-only cluster the controller's, the scheduler's, the agent's and the
exporter's probes and metrics were unreachable unless each manifest was patched. Now `bind` takes `::` where an IPv6
socket here takes IPv4 too (IPV6_V6ONLY off, the kernel's default), else 0.0.0.0 as before, and falls back to
0.0.0.0 where `::` cannot be bound (IPv6 off in the pod's network). `--listen-address ""` bound every IPv4 address
(socketserver reads "" as INADDR_ANY) without a word; it exits 2 naming the flag, as every other empty value does."""

from __future__ import annotations

import errno
import urllib.request

import pytest
from prometheus_client import CollectorRegistry

from balancer.app.health import Health
from balancer.app.health import serve as serve_metrics
from balancer.cli import main
from balancer.cmd import _args
from balancer.errors import InputError
from tests.cli.test_cli_listen_address import ipv6_loopback
from tests.cli.test_cli_run_inputs import one_error_line


def _serve(**kw):
    return serve_metrics(registry=CollectorRegistry(), health=Health(60.0), **kw)


def _answers(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status == 200


def test_left_out_the_server_answers_on_ipv4_and_on_ipv6_where_the_machine_has_it():
    server = _args.bind(_serve, None, 0, "--metrics-port")
    try:
        assert _answers(f"http://127.0.0.1:{server.port}/healthz")
        if ipv6_loopback():
            assert server.server.server_address[0] == "::"
            assert _answers(f"http://[::1]:{server.port}/healthz")
    finally:
        server.close()


def test_every_address_is_ipv4_alone_without_ipv6_sockets_that_take_ipv4(monkeypatch):
    class V6Only:
        def __init__(self, *a):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

        def getsockopt(self, *a):
            return 1   # net.ipv6.bindv6only=1: :: would take no IPv4, and an IPv4 cluster's probes would fail

    monkeypatch.setattr(_args.socket, "socket", V6Only)
    assert _args.every_address() == "0.0.0.0"

    def no_ipv6(*a):
        raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")   # ipv6.disable=1

    monkeypatch.setattr(_args.socket, "socket", no_ipv6)
    assert _args.every_address() == "0.0.0.0"


def test_where_the_default_cannot_bind_ipv6_it_binds_ipv4(monkeypatch):
    monkeypatch.setattr(_args, "every_address", lambda: "::")
    tried = []

    def serve(port, addr):
        tried.append(addr)
        if addr == "::":
            raise OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address")
        return addr

    assert _args.bind(serve, None, 0) == "0.0.0.0" and tried == ["::", "0.0.0.0"]


def test_an_address_given_or_a_port_in_use_is_not_tried_elsewhere(monkeypatch):
    monkeypatch.setattr(_args, "every_address", lambda: "::")
    tried = []

    def serve(port, addr):
        tried.append(addr)
        raise OSError(errno.EADDRINUSE if addr == "::" else errno.EADDRNOTAVAIL, "no")

    for addr in (None, "::1"):
        with pytest.raises(InputError) as err:
            _args.bind(serve, addr, 9836, "--metrics-port")
        assert err.value.field == "--listen-address/--metrics-port"
    assert tried == ["::", "::1"]


@pytest.mark.parametrize("argv", [
    ["run", "--prometheus", "http://127.0.0.1:1", "--once", "--dry-run"], ["schedule", "--once"],
    ["power-cap-agent", "--node", "n", "--once"], ["exporter", "--backend", "sim", "--duration", "1"],
], ids=lambda a: a[0])
@pytest.mark.parametrize("value", ["", " "], ids=["empty", "blank"])
def test_an_empty_listen_address_exits_2_naming_the_flag(capsys, argv, value):
    with pytest.raises(SystemExit) as stop:
        main([*argv, "--listen-address", value])
    line = one_error_line(capsys)
    assert stop.value.code == 2, line
    assert line.startswith(f"gputide: error: field '--listen-address': invalid value {value!r}; allowed: an address"), \
        line


@pytest.mark.parametrize(("argv", "dest"), [(["schedule"], "listen_address"), (["exporter"], "listen")])
def test_the_default_is_read_from_the_environment_and_a_flag_given_wins(monkeypatch, argv, dest):
    """deploy/components/listen-address sets GPUTIDE_LISTEN_ADDRESS in every gputide container (envFrom)."""
    from balancer.cli import build_parser

    monkeypatch.setenv("GPUTIDE_LISTEN_ADDRESS", "::1")
    assert getattr(build_parser().parse_args(argv), dest) == "::1"
    assert getattr(build_parser().parse_args([*argv, "--listen-address", "127.0.0.1"]), dest) == "127.0.0.1"
    monkeypatch.delenv("GPUTIDE_LISTEN_ADDRESS")
    assert getattr(build_parser().parse_args(argv), dest) is None


def test_an_empty_environment_value_exits_2_too(monkeypatch, capsys):
    monkeypatch.setenv("GPUTIDE_LISTEN_ADDRESS", "")
    with pytest.raises(SystemExit) as stop:
        main(["schedule", "--once"])
    line = one_error_line(capsys)
    assert stop.value.code == 2 and "field '--listen-address': invalid value ''" in line and \
        "$GPUTIDE_LISTEN_ADDRESS" in line, line


def test_the_exporter_prints_the_address_it_bound(capsys):
    assert main(["exporter", "--backend", "sim", "--port", "0", "--duration", "0.1", "--listen", "127.0.0.1"]) == 0
    assert "http://127.0.0.1:" in capsys.readouterr().out
    assert main(["exporter", "--backend", "sim", "--port", "0", "--duration", "0.1"]) == 0
    assert f"http://{'[::]' if _args.every_address() == '::' else '0.0.0.0'}:" in capsys.readouterr().out
