"""`--listen-address` left out serves on every address, IPv6 and IPv4 alike, and given empty is refused (audit s33h4).
The default was 0.0.0.0, IPv4 alone: on an IPv6-only cluster the controller's, the scheduler's, the agent's and the
exporter's probes and metrics were unreachable unless each manifest was patched. Now `bind` takes `::` where an IPv6
socket here takes IPv4 too (IPV6_V6ONLY off, the kernel's default), else 0.0.0.0 as before, and falls back to
0.0.0.0 where `::` cannot be bound (IPv6 off in the pod's network). `--listen-address ""` bound every IPv4 address
(socketserver reads "" as INADDR_ANY) without a word; it exits 2 naming the flag, as every other empty value does.

Audit s33a2: the choice read net.ipv6.bindv6only, so where it is 1 the default was 0.0.0.0 (an IPv6-only pod
unreachable) and this file's first test failed there; the server now turns IPV6_V6ONLY off itself, so `::` is the
default wherever the kernel has IPv6 and takes IPv4 too. `[]` passed the empty-value check (the server took the
brackets off); a port in use read `:::9836`."""

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
from tests.exporters.test_exporter_listen_dual_stack import bindv6only  # noqa: F401 - a fixture


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


@pytest.mark.skipif(not ipv6_loopback(), reason="this machine has no IPv6 loopback")
@pytest.mark.usefixtures("bindv6only")
def test_left_out_on_a_host_whose_ipv6_sockets_take_ipv6_alone_the_server_still_answers_on_both():
    server = _args.bind(_serve, None, 0, "--metrics-port")
    try:
        assert server.server.server_address[0] == "::"   # 0.0.0.0 before: an IPv6-only pod's probes refused
        assert _answers(f"http://[::1]:{server.port}/healthz") and _answers(f"http://127.0.0.1:{server.port}/healthz")
    finally:
        server.close()


@pytest.mark.parametrize("errno_", [errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT], ids=["no :: here", "no IPv6 kernel"])
def test_where_the_default_cannot_bind_ipv6_it_binds_ipv4(errno_):
    tried = []

    def serve(port, addr):
        tried.append(addr)
        if addr == "::":
            raise OSError(errno_, "no IPv6")
        return addr

    assert _args.bind(serve, None, 0) == "0.0.0.0" and tried == ["::", "0.0.0.0"]


def test_an_address_given_or_a_port_in_use_is_not_tried_elsewhere():
    tried = []

    def serve(port, addr):
        tried.append(addr)
        raise OSError(errno.EADDRINUSE if addr == "::" else errno.EADDRNOTAVAIL, "no")

    for addr in (None, "::1"):
        with pytest.raises(InputError) as err:
            _args.bind(serve, addr, 9836, "--metrics-port")
        assert err.value.field == "--listen-address/--metrics-port"
    assert tried == ["::", "::1"]


@pytest.mark.parametrize(("addr", "shown"), [
    (None, "[::]:9836"), ("::1", "[::1]:9836"), ("[::1]", "[::1]:9836"), ("127.0.0.1", "127.0.0.1:9836"),
], ids=["default", "IPv6", "IPv6 bracketed", "IPv4"])
def test_a_port_in_use_names_the_address_as_a_url_does(addr, shown):
    def serve(port, addr):
        raise OSError(errno.EADDRINUSE, "Address already in use")

    with pytest.raises(InputError) as err:
        _args.bind(serve, addr, 9836, "--metrics-port")
    assert f"invalid value {shown!r}" in str(err.value), str(err.value)   # ':::9836' before


@pytest.mark.parametrize("argv", [
    ["run", "--prometheus", "http://127.0.0.1:1", "--once", "--dry-run"], ["schedule", "--once"],
    ["power-cap-agent", "--node", "n", "--once"], ["exporter", "--backend", "sim", "--duration", "1"],
], ids=lambda a: a[0])
@pytest.mark.parametrize("value", ["", " ", "[]", "[ ]"], ids=["empty", "blank", "brackets", "blank brackets"])
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


@pytest.mark.parametrize("value", ["", "[]"])
def test_an_empty_environment_value_exits_2_too(monkeypatch, capsys, value):
    """Refused, not ignored: it is set only to choose an address (deploy/components/listen-address), and an empty
    one is an edit gone wrong whose operator may have meant fewer addresses than every one."""
    monkeypatch.setenv("GPUTIDE_LISTEN_ADDRESS", value)
    with pytest.raises(SystemExit) as stop:
        main(["schedule", "--once"])
    line = one_error_line(capsys)
    assert stop.value.code == 2 and f"field '--listen-address': invalid value {value!r}" in line and \
        "$GPUTIDE_LISTEN_ADDRESS" in line, line


def test_the_exporter_prints_the_address_it_bound(capsys):
    assert main(["exporter", "--backend", "sim", "--port", "0", "--duration", "0.1", "--listen", "127.0.0.1"]) == 0
    assert "http://127.0.0.1:" in capsys.readouterr().out
    assert main(["exporter", "--backend", "sim", "--port", "0", "--duration", "0.1"]) == 0
    out = capsys.readouterr().out
    assert "http://[::]:" in out or (not ipv6_loopback() and "http://0.0.0.0:" in out), out
