"""On a real Prometheus with the shipped rules: the GPUs of a node whose exporter says the kubelet's PodResources API
does not answer (`gputide_pod_resources_up` 0, its pods dropped) are refused until it answers again, joined to them
by the exporter's target (no `Hostname` on the health series needed); the shard that does not own the node reads on,
and a target without the series (dcgm-exporter, the simulator) is never read as down."""

from __future__ import annotations

import time

import pytest
from test_telemetry_real_world import dcgm, exporter, is_snapshot, settle, source  # noqa: F401  (fixture)

from balancer.errors import MissingTelemetry
from balancer.telemetry.promserver import Target, default_rule_files

pytestmark = pytest.mark.integration


def pods(uuid: str, pod: str) -> str:
    return f'gputide_gpu_workload_info{{UUID="{uuid}",namespace="ml",pod="{pod}",workload_class="training"}} 1\n'


def test_a_node_whose_kubelet_does_not_answer_is_held_until_it_does(prometheus_factory, exporter):  # noqa: F811
    up = ["0"]   # n1's kubelet: its exporter drops the pods while it does not answer

    def n1() -> str:
        return dcgm("n1") + f"gputide_pod_resources_up {up[0]}\n" + (pods("GPU-n1-0", "a") if up[0] == "1" else "")

    def n2() -> str:
        return dcgm("n2") + "gputide_pod_resources_up 1\n" + pods("GPU-n2-0", "b")

    prom = prometheus_factory([Target("gputide-exporter", exporter(n1)), Target("gputide-exporter", exporter(n2)),
                               Target("dcgm-exporter", exporter(lambda: dcgm("n3")))],
                              rule_files=default_rule_files())
    prom.wait_for("gputide_pod_resources_up", lambda r: len(r) == 2, timeout=30)
    src = source(prom)
    # settled: a reading before every target's first scrape and rule evaluation may name other GPUs too
    got = settle(src, lambda g: isinstance(g, MissingTelemetry) and "PodResources" in str(g)
                 and set(g.subjects) == {"GPU-n1-0", "GPU-n1-1"})
    assert isinstance(got, MissingTelemetry), got
    assert "on 1 node(s) (n1;" in str(got) and set(got.subjects) == {"GPU-n1-0", "GPU-n1-1"}
    # the shard without n1 reads on; polled, as a reading may come before n2's attribution has been recorded (a
    # rule evaluation behind the scrape, under load)
    deadline = time.monotonic() + 40.0
    while dict((others := src.snapshot_for(lambda name, _node: name != "n1")).placements) != {"ml/b": (2,)} \
            and time.monotonic() < deadline:
        time.sleep(0.3)
    assert dict(others.placements) == {"ml/b": (2,)}
    up[0] = "1"
    snap = settle(src, lambda g: is_snapshot(g) and dict(g.placements) == {"ml/a": (0,), "ml/b": (2,)})
    assert is_snapshot(snap), snap
    assert dict(snap.placements) == {"ml/a": (0,), "ml/b": (2,)}
