"""Serve a registry over HTTP (``/metrics``) from a background thread; returns the bound port (port 0 works).

Given a `CollectHealth` (`exporters.health`), the server also answers ``/healthz`` and ``/readyz`` from it, without
collecting (a probe never reads NVML), and collects for ``/metrics`` through it: one collection at a time, a
scrape waiting for at most the collection timeout, then answered with the last complete exposition while it is
recent enough, else ``503 Service Unavailable`` saying what is running and for how long.

The app renders with `exporters.exposition.render` (dcgm-exporter's counter names kept verbatim) and is served
by wsgiref in a daemon thread, one thread per request, as prometheus_client's own `start_http_server` does. The
address may be IPv4 or IPv6 (``::``, ``::1``, bracketed or not), for IPv6-only clusters; ``::`` takes IPv4 too.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client.registry import Collector

from exporters.exposition import CONTENT_TYPE, render
from exporters.health import CollectHealth, CollectTimeout, TrackedCollector


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _Server6(_Server):
    """IPv6, and on `::` IPv4 too: IPV6_V6ONLY is turned off before the bind, as http.server's DualStackServer does.
    Left to the kernel's default (net.ipv6.bindv6only), a host with bindv6only=1 made `::` IPv6 alone, so the IPv4
    probes of a dual-stack pod failed, and gputide's default chose 0.0.0.0 there, which an IPv6-only pod could not
    reach."""

    address_family = socket.AF_INET6

    def server_bind(self) -> None:
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass


def _probes(health: CollectHealth | None):
    return {} if health is None else {"/healthz": health.live, "/readyz": health.ready}


def _text(start_response, ok: bool, text: str) -> list[bytes]:
    body = (text + "\n").encode()
    start_response("200 OK" if ok else "503 Service Unavailable",
                   [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))])
    return [body]


def metrics_app(registry: Collector, health: CollectHealth | None = None):
    """``/metrics`` (and ``/``) rendered from `registry`; with `health`, its probes too and every collection
    made through it (bounded in time, module docstring)."""
    probes = _probes(health)
    tracked = None if health is None else TrackedCollector(registry, health)

    def app(environ, start_response):
        path = environ.get("PATH_INFO", "/")
        if path in probes:
            return _text(start_response, *probes[path]())
        if path not in ("/metrics", "/"):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found: try /metrics\n"]
        if tracked is None:
            body = render(registry)
        else:
            try:
                body = tracked.exposition()
            except CollectTimeout as exc:
                return _text(start_response, False, str(exc))
        start_response("200 OK", [("Content-Type", CONTENT_TYPE), ("Content-Length", str(len(body)))])
        return [body]

    return app


@dataclass
class RunningServer:
    port: int
    server: WSGIServer
    thread: threading.Thread

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve_app(app, *, port: int, addr: str = "127.0.0.1", name: str = "gputide-http") -> RunningServer:
    """Serve any WSGI `app` from a daemon thread, one thread per request, without request logs. An empty address
    (`[]` too) is a ValueError: socketserver reads "" as every IPv4 address."""
    host = addr.removeprefix("[").removesuffix("]")   # [::] as in a URL
    if not host.strip():
        raise ValueError(f"no address to bind in {addr!r}: give 0.0.0.0 (every IPv4 address) or :: (every address)")
    httpd = make_server(host, port, app, server_class=_Server6 if ":" in host else _Server,
                        handler_class=_QuietHandler)
    thread = threading.Thread(target=httpd.serve_forever, name=name, daemon=True)
    thread.start()
    return RunningServer(port=int(httpd.server_address[1]), server=httpd, thread=thread)


def serve(registry: Collector, *, port: int = 9400, addr: str = "127.0.0.1",
          health: CollectHealth | None = None) -> RunningServer:
    """`metrics_app(registry, health)` from a daemon thread."""
    return serve_app(metrics_app(registry, health), port=port, addr=addr, name="gputide-exporter")
