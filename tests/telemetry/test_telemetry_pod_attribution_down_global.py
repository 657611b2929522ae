"""On real Prometheus servers: a global view (here federation) that keeps the recorded `gpu:*` and the `gputide_*`
series, not the raw `DCGM_FI_*` ones (docs/readme/scale-out.md), still holds the GPUs of a node whose exporter says
the kubelet's PodResources API does not answer: they come through as `gpu:pod_attribution_down:bool` 1. Before, the
hold joined the raw series to the exporter's target, so a shard reading the global view read those GPUs idle. The
scheduler's facts (`gpu_facts`) count them busy, never free, on either view: their pods are unknown."""

from __future__ import annotations

import time

import pytest
from test_telemetry_pod_attribution_down_prometheus import pods
from test_telemetry_real_world import dcgm, exporter, settle, source  # noqa: F401  (fixture)

from balancer.errors import MissingTelemetry, TelemetryError
from balancer.telemetry.promserver import Target, default_rule_files

pytestmark = pytest.mark.integration


def _views(prometheus_factory, exporter):  # noqa: F811
    """(a Prometheus scraping n1, whose kubelet does not answer, and n2 with a pod on GPU 0, with the shipped rules;
    a global one federating it by the README's match), once the record has come through."""
    local = prometheus_factory([
        Target("gputide-exporter", exporter(lambda: dcgm("n1") + "gputide_pod_resources_up 0\n")),
        Target("gputide-exporter", exporter(lambda: dcgm("n2") + "gputide_pod_resources_up 1\n"
                                                 + pods("GPU-n2-0", "b")))],
        rule_files=default_rule_files())
    glob = prometheus_factory([], extra_config={"scrape_configs": [{   # the README's federation match
        "job_name": "gputide-federate", "honor_labels": True, "metrics_path": "/federate",
        "params": {"match[]": ['{__name__=~"gpu:.+|node:.+|model:.+|cluster:.+|service:.+"}',
                               '{__name__=~"gputide_.+"}']},
        "static_configs": [{"targets": [local.url.removeprefix("http://")]}]}]})
    glob.wait_for("gpu:pod_attribution_down:bool", lambda r: len(r) == 4, timeout=40)
    assert glob.query('{__name__=~"DCGM_FI_.+"}') == []   # the raw series stay local
    return local, glob


def test_a_global_view_holds_the_gpus_of_a_node_whose_kubelet_does_not_answer(prometheus_factory, exporter):  # noqa: F811
    _, glob = _views(prometheus_factory, exporter)
    src = source(glob)
    got = settle(src, lambda g: isinstance(g, MissingTelemetry) and "PodResources" in str(g))
    assert isinstance(got, MissingTelemetry), got
    assert "on 1 node(s) (n1;" in str(got) and set(got.subjects) == {"GPU-n1-0", "GPU-n1-1"}


def _facts(src, until, timeout=40.0):
    """`gpu_facts()` until `until` holds (a reading before a scrape, a rule evaluation or a federation may lack some
    GPUs or pods); the last one (or the error it raised) otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = src.gpu_facts()
        except TelemetryError as exc:
            got = exc
        if (not isinstance(got, TelemetryError) and until(got)) or time.monotonic() > deadline:
            return got
        time.sleep(0.3)


def test_the_scheduler_counts_the_gpus_of_a_node_whose_kubelet_does_not_answer_busy(prometheus_factory,
                                                                                   exporter):  # noqa: F811
    """Read free, the scheduler's placer would rank n1's slots first, as if no pod were on them."""
    for view in _views(prometheus_factory, exporter):
        facts = _facts(source(view), lambda f: set(f) == {"n1", "n2"} and f["n2"].busy == frozenset({0}))
        assert not isinstance(facts, TelemetryError), facts
        assert facts["n1"].busy == frozenset({0, 1}) and facts["n2"].busy == frozenset({0})
