"""A busy GPU never reads free (`balancer.telemetry.attribution`). 4ffe01f gave a whole-GPU row whatever the GPU's
instances left: a pod known on a GPU by its whole row alone, on a GPU whose instances (other pods', or rows left from
before a repartition) claim all of it, held 0 there, and as a pod's share is the least over its GPUs, 0 on every GPU
it holds: `multisite.spare_gpus` lent the busy GPU and `k8s_migrate.free_besides` counted it free (audit s33a1, cases
B and E2). Only the same pod's whole row beside its own instance rows is left out; reading a GPU fuller than it is
stays the safe side, so over-claimed instances keep their fractions, and a slot's fraction is the same in any order."""

from __future__ import annotations

import numpy as np
import pytest

from balancer.actuate.k8s_migrate import free_besides
from balancer.app.multisite import spare_gpus
from balancer.inventory import Gpu, Node
from balancer.model import GPU_ARRAYS, ClusterSnapshot
from balancer.telemetry.attribution import attributed

INDEX = {"GPU-0": 0, "GPU-1": 1}
F4, F3 = 4 / 7, 3 / 7


def row(pod: str, uuid: str = "GPU-0", gi: str = "", value: float = 1.0) -> dict:
    labels = {"UUID": uuid, "namespace": "ml", "pod": pod, "workload_class": "training"}
    labels |= {"GPU_I_ID": gi} if gi else {}
    return {"metric": labels, "value": [0, str(value)]}


def snapshot(rows: list[dict]) -> ClusterSnapshot:
    workloads, placements = attributed(rows, INDEX, {})
    gpus = tuple(Gpu(index=i, uuid=f"GPU-{i}", node="n1", slot=i, model="A100") for i in range(2))
    return ClusterSnapshot(time=0.0, nodes=(Node(name="n1", gpu_model="A100", gpu_count=2),), gpus=gpus,
                           workloads=workloads, placements=placements, **{n: np.zeros(2) for n in GPU_ARRAYS})


@pytest.mark.parametrize(("rows", "least"), [
    ([row("x", gi="1", value=F4), row("x", "GPU-1"), row("y", "GPU-1", gi="1", value=F4),
      row("z", "GPU-1", gi="2", value=F3)], [571, 1000]),
    ([row("job"), row("job", "GPU-1"), row("a", gi="1", value=F4), row("b", gi="2", value=F3)], [1000, 1000]),
], ids=["B: x on a 4g of GPU-0 and whole on GPU-1, whose 4g + 3g are other pods'",
        "E2: a two-GPU job whole on both, GPU-0 also listing 4g + 3g rows (stale, or another pod's)"])
def test_a_busy_gpu_never_reads_free(rows, least):
    s = snapshot(rows)
    assert (s.gpu_milli_used >= least).all(), s.gpu_milli_used
    assert spare_gpus(s) == {} and free_besides(s, "n1", ()) == 0


def test_a_pod_known_by_its_whole_row_alone_holds_the_whole_gpu_beside_others_instances():
    workloads, _ = attributed([row("u"), row("big", gi="1", value=F4), row("small", gi="2", value=F3)], INDEX, {})
    assert {w.name: w.gpu_milli for w in workloads} == {"ml/u": 1000, "ml/big": 571, "ml/small": 428}


def test_over_claimed_instances_keep_their_fractions():
    """Rows left from before a repartition beside the new layout's: a GPU read fuller than it is, not scaled down."""
    rows = [row("a", gi="1", value=F4), row("b", gi="2", value=F3), row("c", gi="3", value=F3),
            row("d", gi="4", value=F4)]
    workloads, _ = attributed(rows, INDEX, {})
    assert {w.name: w.gpu_milli for w in workloads} == {"ml/a": 571, "ml/b": 428, "ml/c": 428, "ml/d": 571}


@pytest.mark.parametrize("rows", [
    [row("p", gi="1", value=0.5), row("q", gi="1", value=F4)],
    [row("q", gi="1", value=F4), row("p", gi="1", value=0.5)],
    [row("p", gi="1", value=0.5), row("p", gi="1", value=F4), row("q", gi="1", value=0.5)],
    [row("q", gi="1", value=0.5), row("p", gi="1", value=F4), row("p", gi="1", value=0.5)],
], ids=["p's fraction first", "q's fraction first", "p's rows disagree, smaller first", "larger first"])
def test_an_instance_given_two_fractions_is_the_larger_in_any_order(rows):
    workloads, _ = attributed(rows, INDEX, {})
    assert {w.name: w.gpu_milli for w in workloads} == {"ml/p": 285, "ml/q": 285}
