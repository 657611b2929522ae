"""One scrape of `gputide exporter` reports its own kubelet answer: the GPUs are read (which asks the kubelet)
before the attribution's health is collected. Registered the other way round, `gputide_pod_resources_up` said the
previous scrape's state: 0 on the first scrape, and 1 on the scrape after the kubelet went silent."""

from __future__ import annotations

import argparse

from prometheus_client.parser import text_string_to_metric_families
from test_exporter_podresources import GPUS, Backend, kubelet  # noqa: F401 - the fixture

from exporters.exposition import render


def _up(registry) -> float:
    """gputide_pod_resources_up of one scrape (one render, as the HTTP server does; `get_sample_value` would
    collect the registry a second time)."""
    fams = {f.name: f for f in text_string_to_metric_families(render(registry).decode())}
    return fams["gputide_pod_resources_up"].samples[0].value


def test_each_scrape_reports_the_kubelet_answer_of_that_scrape(kubelet):  # noqa: F811 - the fixture
    from balancer.cmd.exporter import exporter_registry

    k, sock = kubelet
    k.pods = [("ml", "a", [("c", "nvidia.com/gpu", ["GPU-2aaa"])])]
    backend, registry = exporter_registry(Backend(), argparse.Namespace(backend="nvml", pod_resources_socket=sock))
    assert backend.identity == GPUS
    assert _up(registry) == 1   # the first scrape: the kubelet answered it
    k.fail = True
    assert _up(registry) == 0   # the kubelet went silent: this scrape says so, not the next one
