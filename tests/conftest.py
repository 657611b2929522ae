"""Shared fixtures: a real Prometheus per test (or per module), promtool, and a static /metrics server.

Prometheus and promtool come from Debian's `prometheus` package (`make test` installs it). Where they are
missing a test is skipped, except in CI (env CI == "true"), where a missing binary fails the run. Hypothesis runs
under a repeatable profile unless HYPOTHESIS_PROFILE says otherwise (see below).
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from hypothesis import settings

from balancer.telemetry.promserver import INSTALL_HINT, PrometheusServer

# Property tests draw the same examples on every run, so `make test` passes or fails the same way for the same
# code (a random counterexample must not turn an unrelated commit red); `make fuzz` explores instead: new random
# examples, ten times as many (HYPOTHESIS_PROFILE=explore, GPUTIDE_FUZZ_SCALE=10). What it finds is pinned with
# @example, so the repeatable runs keep checking it.
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


def require_binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        message = f"'{name}' not found; {INSTALL_HINT}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


class MetricsServer:
    """Serves `text` at /metrics on 127.0.0.1:<free port>, in the exposition format; `text` can change."""

    def __init__(self, text: str) -> None:
        self.text = text
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                body = owner.text.encode()
                status = 200 if self.path.split("?")[0] == "/metrics" else 404
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def _prometheus_factory() -> Iterator[Callable[..., PrometheusServer]]:
    servers: list[PrometheusServer] = []

    def start(*args: Any, **kwargs: Any) -> PrometheusServer:
        require_binary("prometheus")
        kwargs.setdefault("scrape_interval", "1s")
        server = PrometheusServer(*args, **kwargs)
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.stop()
        server.cleanup()


def _metrics_server() -> Iterator[Callable[[str], MetricsServer]]:
    servers: list[MetricsServer] = []

    def start(text: str) -> MetricsServer:
        servers.append(MetricsServer(text))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def wait_for_gpu_rules(prom: PrometheusServer, timeout: float = 30.0) -> None:
    """Until every recording rule the controller requires has a sample: the rule groups start at different
    offsets, so one rule answering says nothing of the others."""
    from balancer.telemetry.prometheus import FIELDS, OPTIONAL

    for name, (rule, _) in FIELDS.items():
        if name not in OPTIONAL:
            prom.wait_for(rule, bool, timeout=timeout)


@pytest.fixture
def prometheus_factory() -> Iterator[Callable[..., PrometheusServer]]:
    """`prometheus_factory(targets, rule_files, **options)` starts a PrometheusServer (1 s scrape interval)."""
    yield from _prometheus_factory()


@pytest.fixture(scope="module")
def module_prometheus_factory() -> Iterator[Callable[..., PrometheusServer]]:
    """Like `prometheus_factory`, shared by the tests of one module (one start for a table of checks)."""
    yield from _prometheus_factory()


@pytest.fixture
def metrics_server() -> Iterator[Callable[[str], MetricsServer]]:
    """`metrics_server(text)` serves text at http://<.address>/metrics until the test ends."""
    yield from _metrics_server()


@pytest.fixture(scope="module")
def module_metrics_server() -> Iterator[Callable[[str], MetricsServer]]:
    yield from _metrics_server()


@pytest.fixture(scope="session")
def promtool() -> str:
    return require_binary("promtool")
