"""A pod's share of a GPU as the controller reads it (`balancer.telemetry.attribution`): a whole GPU split between
its pods, a MIG instance's fraction of its GPU split between the pods on that instance, as the recording rule
`gpu_pod:attribution:share` bills it; and the query that hands the fractions over, on a real Prometheus."""

from __future__ import annotations

import time

import pytest

from balancer.errors import InvalidTelemetry
from balancer.model import ClusterSnapshot
from balancer.telemetry.attribution import attributed
from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource
from balancer.telemetry.promserver import Target, default_rule_files

INDEX = {"GPU-0": 0, "GPU-1": 1}


def row(pod: str, uuid: str = "GPU-0", gi: str = "", value: float = 1.0, ns: str = "ml") -> dict:
    labels = {"UUID": uuid, "namespace": ns, "pod": pod, "workload_class": "batch"}
    labels |= {"GPU_I_ID": gi} if gi else {}
    return {"metric": labels, "value": [0, str(value)]}


def milli(rows: list[dict]) -> dict[str, int]:
    workloads, _ = attributed(rows, INDEX, {})
    return {w.name.split("/")[1]: w.gpu_milli for w in workloads}


@pytest.mark.parametrize(("rows", "expected"), [
    ([row("a"), row("b")], {"a": 500, "b": 500}),
    ([row("big", gi="1", value=4 / 7), row("small", gi="2", value=3 / 7)], {"big": 571, "small": 428}),
    ([row(f"p{i}", gi=str(7 + i), value=1 / 7) for i in range(7)], {f"p{i}": 142 for i in range(7)}),
    ([row("s0", gi="13", value=1 / 7), row("s1", gi="13", value=1 / 7), row("t", gi="7", value=1 / 7)],
     {"s0": 71, "s1": 71, "t": 142}),
    ([row("a", gi="1", value=0.5), row("b", gi="2", value=0.25), row("b", gi="3", value=0.25)], {"a": 500, "b": 500}),
    ([row("u", gi="5"), row("v", gi="6")], {"u": 500, "v": 500}),
    ([row("big", gi="1", value=4 / 7), row("big", gi="1", value=4 / 7), row("small", gi="2", value=3 / 7)],
     {"big": 571, "small": 428}),
    ([row("j", gi="1", value=4 / 7), row("j", "GPU-1"), row("k", "GPU-1")], {"j": 500, "k": 500}),
], ids=["a whole GPU is split evenly between its pods (time-slicing, MPS), as before",
        "an A100 as 4g.20gb + 3g.20gb: each pod its slice's fraction, not half each",
        "an A100 as 1g.10gb x7: a seventh each",
        "two pods time-slicing one 1g instance split its seventh",
        "a pod on two instances of one GPU holds both fractions (an A30 of 4 slices)",
        "instances whose fraction is not known (value 1) are counted as whole-GPU sharers",
        "a repeated row (an HA pair read without deduplication) is one holder",
        "a pod on two GPUs is sized by the GPU where it holds least"])
def test_a_pods_share_is_its_slots_fraction_split_between_the_pods_on_the_slot(rows, expected):
    assert milli(rows) == expected


def test_a_pod_on_two_instances_of_one_gpu_is_one_placement_on_it():
    workloads, placements = attributed([row("b", gi="2", value=0.25), row("b", gi="3", value=0.25)], INDEX, {})
    assert placements == {"ml/b": (0,)} and workloads[0].gpus == 1


@pytest.mark.parametrize("value", [0.0, 1.5, float("nan"), -0.25])
def test_an_instance_share_outside_zero_to_one_is_refused_naming_the_pod_and_the_rule(value):
    with pytest.raises(InvalidTelemetry, match=r"ml/big.*GPU-0.*gpu_instance:gpu_share:ratio"):
        attributed([row("big", gi="1", value=value)], INDEX, {})


@pytest.mark.integration
def test_on_a_real_prometheus_mig_pods_read_their_slices_from_both_exporters(prometheus_factory, metrics_server):
    """GPU-d0: dcgm-exporter's per-instance series with its pod labels (4g.20gb + 3g.20gb on an A100 40GB); GPU-g0:
    gputide's exporter's per-GPU series and join table (1g.6gb + 2g.12gb on an A30, 4 slices)."""
    def series(uuid: str, model: str, extra: str = "") -> str:
        return "".join(f'{name}{{gpu="0",UUID="{uuid}",modelName="{model}",Hostname="n1"{extra}}} {v}\n'
                       for name, v in (("DCGM_FI_DEV_GPU_TEMP", 50), ("DCGM_FI_DEV_POWER_USAGE", 200),
                                       ("DCGM_FI_DEV_POWER_MGMT_LIMIT", 400), ("DCGM_FI_DEV_FB_USED", 1024),
                                       ("DCGM_FI_DEV_FB_FREE", 9000), ("DCGM_FI_PROF_SM_ACTIVE", 0.5),
                                       ("DCGM_FI_DEV_SLOWDOWN_TEMP", 87)))
    dcgm = "".join(series("GPU-d0", "NVIDIA A100-SXM4-40GB", f',GPU_I_ID="{gi}",GPU_I_PROFILE="{p}",namespace="ml",'
                          f'pod="{pod}"') for gi, p, pod in (("1", "4g.20gb", "big"), ("2", "3g.20gb", "small")))
    ours = series("GPU-g0", "NVIDIA A30").replace('Hostname="n1"', 'Hostname="n2"') + "".join(
        f'gputide_gpu_workload_info{{UUID="GPU-g0",GPU_I_ID="{gi}",GPU_I_PROFILE="{p}",namespace="web",pod="{pod}",'
        f'workload_class="inference"}} 1\n' for gi, p, pod in (("1", "1g.6gb", "one"), ("2", "2g.12gb", "two")))
    prom = prometheus_factory([Target("dcgm", metrics_server(dcgm).address),
                               Target("ours", metrics_server(ours).address)], rule_files=default_rule_files())
    src = PrometheusTelemetrySource(PrometheusOptions(url=prom.url, scrape_interval_s=1.0))
    deadline, got = time.monotonic() + 40, None
    while time.monotonic() < deadline:
        try:
            got = src.snapshot()
        except Exception as exc:  # noqa: BLE001 - rules not evaluated yet: asked again
            got = exc
        if isinstance(got, ClusterSnapshot) and len(got.workloads) == 4 and \
                all(w.gpu_milli < 1000 for w in got.workloads):
            break
        time.sleep(0.3)
    assert isinstance(got, ClusterSnapshot), got
    assert {w.name: w.gpu_milli for w in got.workloads} == {"ml/big": 571, "ml/small": 428, "web/one": 250,
                                                            "web/two": 500}
