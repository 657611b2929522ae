"""What real Prometheus setups hand the controller, on a real Prometheus with the shipped rules: an HA pair read
without deduplication, one GPU scraped by two exporters, a GPU that moved node while its old series linger, MIG
instances, an exporter whose samples carry old timestamps, an answer with warnings (a partial response) and a
`cluster` label value holding a quote. Each either reads as the one fleet it is, or holds the controller still
with a reason (fail-static), never doubled GPUs or a traceback."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from balancer.errors import InvalidTelemetry, MissingTelemetry, StaleTelemetry, TelemetryError
from balancer.model import ClusterSnapshot
from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource
from balancer.telemetry.promserver import Target, default_rule_files, free_port
from exporters.server import serve_app

pytestmark = pytest.mark.integration

H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"
READINGS = {"DCGM_FI_DEV_GPU_TEMP": 50, "DCGM_FI_DEV_POWER_USAGE": 300, "DCGM_FI_DEV_POWER_MGMT_LIMIT": 700,
            "DCGM_FI_DEV_FB_USED": 1024, "DCGM_FI_DEV_FB_FREE": 80000, "DCGM_FI_PROF_SM_ACTIVE": 0.5,
            "DCGM_FI_DEV_SLOWDOWN_TEMP": 87}


def dcgm(host: str, n: int = 2, *, model: str = H100, stamp: float | None = None, board: str = "",
         **labels: str) -> str:
    """dcgm-exporter's /metrics for `n` GPUs of `host` (UUID GPU-<board or host>-<i>), optionally with explicit
    sample timestamps (seconds), and extra labels on every series."""
    extra = "".join(f',{k}="{v}"' for k, v in labels.items())
    at = f" {int(stamp * 1000)}" if stamp is not None else ""
    return "".join(f'{name}{{gpu="{i}",UUID="GPU-{board or host}-{i}",modelName="{model}",'
                   f'Hostname="{host}"{extra}}} {v}{at}\n'
                   for i in range(n) for name, v in READINGS.items())


@pytest.fixture
def exporter():
    """`exporter(render)` serves render() at /metrics, called afresh on every scrape."""
    servers = []

    def start(render: Callable[[], str]) -> str:
        def app(environ, start_response):
            start_response("200 OK", [("Content-Type", "text/plain; version=0.0.4")])
            return [render().encode()]

        servers.append(serve_app(app, port=0))
        return f"127.0.0.1:{servers[-1].port}"

    yield start
    for server in servers:
        server.close()


def source(prom, **opts) -> PrometheusTelemetrySource:
    return PrometheusTelemetrySource(PrometheusOptions(url=prom.url, scrape_interval_s=1.0, **opts))


def settle(src: PrometheusTelemetrySource, until: Callable[[ClusterSnapshot | TelemetryError], bool],
           timeout: float = 40.0) -> ClusterSnapshot | TelemetryError:
    """Snapshots (or the TelemetryError each raised) until `until` holds; the last one otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            got: ClusterSnapshot | TelemetryError = src.snapshot()
        except TelemetryError as exc:
            got = exc
        if until(got) or time.monotonic() > deadline:
            return got
        time.sleep(0.3)


def is_snapshot(got) -> bool:
    return isinstance(got, ClusterSnapshot)


def where(snap: ClusterSnapshot) -> list[tuple[str, str]]:
    return [(g.node, g.uuid) for g in snap.gpus]


def test_an_ha_pair_read_without_deduplication_is_one_fleet(prometheus_factory, exporter):
    """Two replicas scrape and record the same GPUs; a global view without dedup (Thanos Query, here federation,
    which also keeps each replica's external label) holds every series twice, by `prometheus_replica`."""
    body = (dcgm("n1") + 'gputide_gpu_workload_info{UUID="GPU-n1-0",namespace="ml",pod="chat-0",'
            'workload_class="inference"} 1\ngputide_inference_demand_rps{service="chat",namespace="ml"} 12\n')
    address = exporter(lambda: body)
    replicas = [prometheus_factory([Target("dcgm", address)], rule_files=default_rule_files(), extra_config={
        "global": {"external_labels": {"prometheus_replica": name}}}) for name in ("prom-0", "prom-1")]
    glob = prometheus_factory([], extra_config={"scrape_configs": [{
        "job_name": "federate", "honor_labels": True, "metrics_path": "/federate",
        "params": {"match[]": ['{__name__=~"gpu:.*|gputide_.*|gpu_pod:.*"}']},
        "static_configs": [{"targets": [p.url.removeprefix("http://") for p in replicas]}]}]})
    glob.wait_for("gpu:sm_active:ratio", lambda r: len(r) == 4, timeout=40)
    src = source(glob)
    snap = settle(src, is_snapshot)
    assert len(glob.query("gputide_gpu_workload_info")) == 2   # the join row twice, too
    assert where(snap) == [("n1", "GPU-n1-0"), ("n1", "GPU-n1-1")]
    assert dict(snap.placements) == {"ml/chat-0": (0,)}
    assert snap.workload_by_name["ml/chat-0"].gpu_milli == 1000      # one pod, not two sharing the GPU
    assert {k: v.demand_rps for k, v in snap.services.items()} == {"chat": 12}
    facts = src.gpu_facts()
    assert set(facts) == {"n1"} and facts["n1"].busy == frozenset({0})


def test_two_exporters_for_the_same_gpus_are_one_gpu_each_unless_they_disagree_on_the_host(prometheus_factory,
                                                                                           exporter):
    """dcgm-exporter beside gputide's exporter (or two ServiceMonitors): the same UUIDs from two jobs merge. If
    one names the GPUs' host differently (dcgm-exporter's Hostname is its pod's name unless NODE_NAME is set),
    which host holds them is unknown: held still, saying what each exporter claims."""
    same = prometheus_factory([Target("gputide-exporter", exporter(lambda: dcgm("n1"))),
                               Target("dcgm-exporter", exporter(lambda: dcgm("n1")))], rule_files=default_rule_files())
    assert where(settle(source(same), is_snapshot)) == [("n1", "GPU-n1-0"), ("n1", "GPU-n1-1")]

    pod = dcgm("n1").replace('Hostname="n1"', 'Hostname="nvidia-dcgm-exporter-x7k2p"')
    apart = prometheus_factory([Target("gputide-exporter", exporter(lambda: dcgm("n1"))),
                                Target("dcgm-exporter", exporter(lambda: pod))], rule_files=default_rule_files())
    got = settle(source(apart), lambda g: isinstance(g, InvalidTelemetry))
    assert isinstance(got, InvalidTelemetry), got
    assert "GPU-n1-0 as n1 gpu 0" in str(got) and "nvidia-dcgm-exporter-x7k2p gpu 0" in str(got)
    assert set(got.subjects) == {"GPU-n1-0", "GPU-n1-1"}


def test_a_gpu_that_moved_node_is_read_where_it_is_once_its_old_series_are_stale(prometheus_factory, exporter):
    """The node renamed (the same UUIDs under a new Hostname) while the old series are still served: no staleness
    marker ends them (after a Prometheus restart, through federation, from an exporter that stamps its samples,
    as here). Before, the UUID under two hosts held the controller still for the whole 5-minute lookback."""
    host = ["old-node"]
    prom = prometheus_factory([Target("dcgm", exporter(lambda: dcgm(host[0], stamp=time.time(), board="b")))],
                              rule_files=default_rule_files())
    src = source(prom)
    assert where(settle(src, is_snapshot)) == [("old-node", "GPU-b-0"), ("old-node", "GPU-b-1")]
    host[0] = "new-node"
    prom.wait_for('gpu:temperature:celsius{hostname="new-node"}', lambda r: len(r) == 2, timeout=30)
    assert len(prom.query('gpu:temperature:celsius{hostname="old-node"}')) == 2   # the old series linger
    got = settle(src, lambda g: is_snapshot(g) and g.gpus[0].node == "new-node")
    assert is_snapshot(got), got
    assert where(got) == [("new-node", "GPU-b-0"), ("new-node", "GPU-b-1")]


def test_samples_stamped_minutes_in_the_past_are_stale(prometheus_factory, exporter):
    """An exporter whose clock (or whose upstream's) is 2 minutes behind, with explicit timestamps: Prometheus
    takes the samples, and until the recording rule took timestamp() of the bare series they read 0 s old."""
    prom = prometheus_factory([Target("dcgm", exporter(lambda: dcgm("n1", stamp=time.time() - 120)))],
                              rule_files=default_rule_files())
    prom.wait_for("gpu:memory_free:bytes", lambda r: len(r) == 2, timeout=30)
    got = settle(source(prom, stale_after_intervals=30.0), lambda g: isinstance(g, StaleTelemetry))
    assert isinstance(got, StaleTelemetry), got
    assert "2 GPU(s) have samples older than 30s" in str(got)


def test_an_answer_with_warnings_is_a_partial_response_and_holds_still(prometheus_factory, exporter):
    """A remote store that does not answer (here a remote read, with Thanos a store of its partial responses):
    Prometheus answers 200 with `warnings` and whatever it could read. Before, the snapshot was taken from it."""
    prom = prometheus_factory([Target("dcgm", exporter(lambda: dcgm("n1")))], rule_files=default_rule_files(),
                              extra_config={"remote_read": [{"url": f"http://127.0.0.1:{free_port()}/read",
                                                             "read_recent": True}]})
    prom.wait_for("gpu:memory_free:bytes", lambda r: len(r) == 2, timeout=30)
    src = source(prom)
    got = settle(src, lambda g: isinstance(g, MissingTelemetry) and "warning" in str(g))
    assert isinstance(got, MissingTelemetry), got
    assert "answered" in str(got) and "partial response" in str(got) and "remote_read" in str(got)
    with pytest.raises(MissingTelemetry, match="partial response"):
        src.demand_history("sum(gpu:power:watts)", time.time() - 60, time.time(), 15)


def test_a_cluster_name_with_a_quote_or_unicode_selects_that_cluster(prometheus_factory, exporter):
    """The `cluster` value goes into every matcher quoted as a PromQL string: a quote in it broke every query
    (Prometheus answered 400 and the controller held still for good)."""
    odd, other = 'lab "b"\\2', "zürich-ü"
    prom = prometheus_factory([Target("a", exporter(lambda: dcgm("n1")), {"cluster": odd}),
                               Target("b", exporter(lambda: dcgm("n2")), {"cluster": other})],
                              rule_files=default_rule_files())
    prom.wait_for("gpu:memory_free:bytes", lambda r: len(r) == 4, timeout=30)
    for name, node in ((odd, "n1"), (other, "n2")):
        snap = settle(source(prom, cluster=name), is_snapshot)
        assert is_snapshot(snap), snap
        assert where(snap) == [(node, f"GPU-{node}-0"), (node, f"GPU-{node}-1")]


def test_mig_instances_are_one_gpu_with_the_pods_of_every_instance(prometheus_factory, exporter):
    """dcgm-exporter emits a MIG GPU's series per GPU instance (GPU_I_ID, GPU_I_PROFILE); gputide's exporter a join
    row per instance (f69f70d). One GPU, its instances' memory summed, each pod placed once on it."""
    mig = "".join(dcgm("n1", 1, model=A100, GPU_I_ID=gi, GPU_I_PROFILE="3g.40gb") for gi in ("1", "2"))
    join = "".join(f'gputide_gpu_workload_info{{UUID="GPU-n1-0",GPU_I_ID="{gi}",GPU_I_PROFILE="3g.40gb",'
                   f'namespace="ml",pod="{pod}",workload_class="batch"}} 1\n'
                   for gi, pod in (("1", "a"), ("2", "b"), ("1", "b")))
    prom = prometheus_factory([Target("dcgm", exporter(lambda: mig + join))], rule_files=default_rule_files())
    snap = settle(source(prom), is_snapshot)
    assert is_snapshot(snap), snap
    assert where(snap) == [("n1", "GPU-n1-0")]
    assert snap.mem_used_mib[0] == 2 * 1024 and snap.mem_total_mib[0] == 2 * (1024 + 80000)
    assert dict(snap.placements) == {"ml/a": (0,), "ml/b": (0,)}
    assert [w.gpus for w in snap.workloads] == [1, 1]
