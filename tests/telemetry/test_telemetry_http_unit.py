"""The source's HTTP side against small local servers, and the frame's duplicate handling on rows: what a
Prometheus, a proxy or a TLS endpoint in front of it can answer, and what it must lead to."""

from __future__ import annotations

import json
import logging
import shutil
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import urllib3.util.retry

from balancer.errors import InvalidTelemetry, MissingTelemetry, TelemetryUnavailable
from balancer.telemetry.gpu_frame import FIELDS
from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource

NOW = 1_700_000_000.0
EMPTY = {"status": "success", "data": {"resultType": "vector", "result": []}}


class Api:
    """A local HTTP server answering each request with the next (status, headers, body) of `answers` (EMPTY once
    they run out); `tls` wraps it in TLS with that (certificate, key)."""

    def __init__(self, answers=(), tls: tuple[str, str] | None = None) -> None:
        self.answers = list(answers)
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                status, headers, body = owner.answers.pop(0) if owner.answers else (200, {}, EMPTY)
                data = json.dumps(body).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_POST = do_GET  # noqa: N815

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def api():
    servers = []

    def start(answers=(), tls=None) -> Api:
        servers.append(Api(answers, tls))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


@pytest.fixture
def slept(monkeypatch):
    """What urllib3's retries sleep, recorded instead of slept."""
    waits: list[float] = []
    monkeypatch.setattr(urllib3.util.retry.time, "sleep", waits.append)
    return waits


def facts(url: str, **opts) -> dict:
    return PrometheusTelemetrySource(PrometheusOptions(url=url, **opts)).gpu_facts()


@pytest.mark.parametrize("status", [503, 429])
def test_a_retry_after_header_is_honoured_for_at_most_the_backoff_cap(api, slept, status):
    """A proxy answering 503 (or 429) with Retry-After: 3600 made urllib3 sleep an hour per retry, holding the
    reconcile loop three hours, far past its liveness limit."""
    server = api([(status, {"Retry-After": "3600"}, {})] * 2)
    assert facts(server.url) == {}          # the third try is answered
    assert len(slept) == 2 and max(slept) <= 10.0


def test_retries_that_run_out_are_telemetry_unavailable_with_the_status(api, slept):
    server = api([(503, {}, {"status": "error", "errorType": "timeout", "error": "query timed out"})] * 9)
    with pytest.raises(TelemetryUnavailable, match="503"):
        facts(server.url, retries=2)


def test_an_execution_error_is_not_retried(api, slept):
    server = api([(422, {}, {"status": "error", "errorType": "execution", "error": "many-to-many matching"})])
    with pytest.raises(TelemetryUnavailable, match="422.*many-to-many"):
        facts(server.url)
    assert slept == []


@pytest.mark.parametrize(("warnings", "partial"), [
    (["No StoreAPIs matched for this query"], True),
    (["PromQL info: metric might not be a counter, name does not end in _total/_sum/_count/_bucket"], False),
    ([], False),
], ids=["a store down (Thanos partial response)", "a note on the query only", "an empty list"])
def test_an_answer_with_warnings_about_the_data_is_a_partial_response(api, warnings, partial):
    server = api([(200, {}, {**EMPTY, "warnings": warnings})])
    if partial:
        with pytest.raises(MissingTelemetry, match="partial response: No StoreAPIs matched"):
            facts(server.url)
    else:
        assert facts(server.url) == {}


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("openssl not found")
    where = tmp_path_factory.mktemp("tls")
    cert, key = str(where / "cert.pem"), str(where / "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert],
                   check=True, capture_output=True)
    return cert, key


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_tls_is_verified_against_the_ca_file_or_skipped_when_asked(api, slept, certificate):
    """`insecure_skip_verify` did nothing: prometheus-api-client ignores its disable_ssl once given a session, so a
    self-signed Prometheus failed every query (TelemetryUnavailable for good) whatever the option said."""
    server = api(tls=certificate)
    with pytest.raises(TelemetryUnavailable, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        facts(server.url, retries=0)
    assert facts(server.url, insecure_skip_verify=True) == {}
    assert facts(server.url, ca_file=certificate[0]) == {}


class Rows:
    """A PromQL client answering the GPU query with `gpus` [(host, slot, uuid, last_sample)], and every other query
    with nothing; it records the queries."""

    def __init__(self, gpus) -> None:
        self.gpus, self.queries = gpus, []

    def custom_query(self, promql):
        self.queries.append(promql)
        if not promql.startswith("{__name__") or "gputide_inference" in promql:   # the GPU query only
            return []
        return [{"metric": {"__name__": rule, "hostname": host, "gpu": slot, "UUID": uuid, "modelName": "NVIDIA H200"},
                 "value": [NOW, str(last if name == "last_sample" else 87.0 if name == "slowdown_temp_c" else 1.0)]}
                for host, slot, uuid, last in self.gpus for name, (rule, _) in FIELDS.items()]


def source(client) -> PrometheusTelemetrySource:
    return PrometheusTelemetrySource(PrometheusOptions(url="http://prom.invalid", scrape_interval_s=15),
                                     client=client, clock=lambda: NOW)


def test_the_stale_series_a_moved_gpu_left_behind_are_dropped_and_logged_once(caplog):
    client = Rows([("node-a", "0", "GPU-0", NOW - 5), ("node-b", "3", "GPU-0", NOW - 61),
                   ("node-b", "0", "GPU-1", NOW)])
    src = source(client)
    with caplog.at_level(logging.INFO, logger="balancer.telemetry.prometheus"):
        for _ in range(2):
            assert [(g.node, g.slot, g.uuid) for g in src.snapshot().gpus] == [("node-a", 0, "GPU-0"),
                                                                              ("node-b", 0, "GPU-1")]
    assert [r.getMessage() for r in caplog.records if "left behind" in r.getMessage()] == [
        "GPU GPU-0 is also reported as gpu 3 on node-b, by stale series only: read where it is now, that is what it "
        "left behind (a renamed node, a moved board)"]


@pytest.mark.parametrize("ages", [(5, 30), (61, 90)],
                         ids=["both fresh: two exporters disagree", "both stale: no fresh one to prefer"])
def test_a_gpu_under_two_hosts_with_no_single_fresh_one_is_never_guessed(ages):
    client = Rows([("node-a", "0", "GPU-0", NOW - ages[0]), ("node-b", "0", "GPU-0", NOW - ages[1])])
    with pytest.raises(InvalidTelemetry, match="GPU-0 as node-a gpu 0 .* and node-b gpu 0"):
        source(client).snapshot()


def test_the_queries_do_not_grow_with_the_fleet():
    """Every query is a fixed text (no per-node or per-GPU matcher), so a GET stays short at any fleet size:
    prometheus-api-client 0.7 sends the query in the URL even with method="POST"."""
    small, large = Rows([("node-0", "0", "GPU-0", NOW)]), Rows(
        [(f"node-{i // 8}", str(i % 8), f"GPU-{i}", NOW) for i in range(4000)])
    for client in (small, large):
        source(client).snapshot()
        PrometheusTelemetrySource(PrometheusOptions(url="http://prom.invalid", cluster="a-long-cluster-name" * 4),
                                  client=client).gpu_facts()
    assert small.queries == large.queries
    assert max(len(q) for q in large.queries) < 1500
