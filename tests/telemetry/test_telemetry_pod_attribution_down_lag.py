"""On real Prometheus servers: a global view fed as remote write feeds it (each raw `gputide_*` series as it is
scraped, a series gone marked stale at once) holds the GPUs of a node whose kubelet stops answering from the scrape
that says so, not from the next rule evaluation. An exporter scraped each 60 s or more (or restarted while the
kubelet is down) drops the node's pods in the very scrape that first reads `gputide_pod_resources_up` 0; until the
rules run again (up to 15 s), `gpu:pod_attribution_down:bool` still says 0 there, so the hold that read the record
alone read the pods gone and the GPUs idle (audit s36a11). The up series, labelled with the node's `Hostname` by the
shipped PodMonitor (deploy/base/monitoring.yaml) as every series of the target, comes with that scrape.

The global view here scrapes the local Prometheus's series without their timestamps (so a series gone is stale at
once, as remote write marks it), with the record held at what its last evaluation said: the window between a
scrape and the next evaluation, made to last."""

from __future__ import annotations

import pytest
import requests
from test_telemetry_pod_attribution_down_global import _facts
from test_telemetry_pod_attribution_down_prometheus import pods
from test_telemetry_real_world import dcgm, exporter, is_snapshot, settle, source  # noqa: F401  (fixture)

from balancer.errors import MissingTelemetry, TelemetryError
from balancer.telemetry.promserver import Target, default_rule_files

pytestmark = pytest.mark.integration

RECORD = "gpu:pod_attribution_down:bool"
# what docs/readme/scale-out.md sends to the global view
MATCH = ['{__name__=~"gpu:.+|node:.+|model:.+|cluster:.+|service:.+"}', '{__name__=~"gputide_.+"}']


def test_a_global_view_holds_a_node_from_the_scrape_that_reads_its_kubelet_down(prometheus_factory,
                                                                                 exporter):  # noqa: F811
    up = ["1"]

    def n1() -> str:   # the 1m-scrape case: the scrape that reads the kubelet down drops the pods
        return dcgm("n1") + f"gputide_pod_resources_up {up[0]}\n" + (pods("GPU-n1-0", "a") if up[0] == "1" else "")

    local = prometheus_factory([   # Hostname on the target, as the shipped PodMonitor sets it
        Target("gputide-exporter", exporter(n1), {"Hostname": "n1"}),
        Target("gputide-exporter", exporter(lambda: dcgm("n2") + "gputide_pod_resources_up 1\n"
                                            + pods("GPU-n2-0", "b")), {"Hostname": "n2"})],
        rule_files=default_rule_files())
    held: list[str] = []   # the record's lines as its last evaluation left them, once the rules stop running

    def global_feed() -> str:
        text = requests.get(f"{local.url}/federate", params={"match[]": MATCH}, timeout=5).text
        lines = [line.rsplit(" ", 1)[0] for line in text.splitlines()   # without the timestamp
                 if line and not line.startswith("#") and not (held and line.startswith(RECORD + "{"))]
        return "\n".join(lines + held) + "\n"

    glob = prometheus_factory([], extra_config={"scrape_configs": [{
        "job_name": "global-feed", "honor_labels": True,
        "static_configs": [{"targets": [exporter(global_feed)]}]}]})
    glob.wait_for(f"{RECORD} == 0", lambda r: len(r) == 4, timeout=40)
    src = source(glob)
    before = settle(src, lambda g: is_snapshot(g) and dict(g.placements) == {"ml/a": (0,), "ml/b": (2,)})
    assert is_snapshot(before), before

    text = requests.get(f"{local.url}/federate", params={"match[]": MATCH}, timeout=5).text
    held[:] = [line.rsplit(" ", 1)[0] for line in text.splitlines() if line.startswith(RECORD + "{")]
    assert len(held) == 4 and all(line.endswith(" 0") for line in held), held
    up[0] = "0"
    glob.wait_for('gputide_pod_resources_up{Hostname="n1"} == 0', timeout=30)
    glob.wait_for('gputide_gpu_workload_info{pod="a"}', lambda r: r == [], timeout=30)
    assert len(glob.query(f'{RECORD}{{hostname="n1"}} == 0')) == 2   # the record has not caught up

    got = settle(src, lambda g: isinstance(g, MissingTelemetry) and "PodResources" in str(g))
    assert isinstance(got, MissingTelemetry), got   # before: a snapshot, n1's GPUs idle
    assert "on 1 node(s) (n1;" in str(got) and set(got.subjects) == {"GPU-n1-0", "GPU-n1-1"}
    facts = _facts(src, lambda f: set(f) == {"n1", "n2"} and f["n1"].busy == frozenset({0, 1}), timeout=10)
    assert not isinstance(facts, TelemetryError), facts
    assert facts["n1"].busy == frozenset({0, 1}) and facts["n2"].busy == frozenset({0})
