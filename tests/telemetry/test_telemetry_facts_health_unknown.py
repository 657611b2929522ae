"""The secondary scheduler's GPU facts hold a GPU of unknown health as unhealthy, as the reconcile loop does.

A GPU lacking the XID or memory-health series the rest of the fleet publishes is kept from new work by the loop
(`gpu_frame.health_unknown`, 6309bf8); `gpu_facts` counted it usable, so `gputide schedule` bound new pods to it.
Both must apply the one rule: the same GPUs, the same exceptions (no GPU publishing a series; an exporter declaring
memory health unsupported).
"""

from __future__ import annotations

import pytest
from test_telemetry_health_unknown import MEMORY_FIELDS, Declaring, flags
from test_telemetry_prometheus_unit import GPUS, source


class Comparing(Declaring):
    """Declaring, honouring a query's trailing `== 1` as Prometheus does (FakeClient answers every query with every
    series): only the samples of the series the query names that read 1."""

    def custom_query(self, promql):
        rows = super().custom_query(promql)
        if promql.rstrip().endswith("== 1"):
            rows = [r for r in rows if r["metric"].get("__name__", "") in promql and float(r["value"][1]) == 1]
        return rows


SLOT = {uuid: (host, int(slot)) for host, slot, uuid, _ in GPUS}


def unhealthy(facts) -> set[tuple[str, int]]:
    return {(host, slot) for host, f in facts.items() for slot in f.unhealthy}


@pytest.mark.parametrize("client", [
    Comparing(flags=flags(**{"GPU-a0": 0.0, "GPU-b0": 0.0})),
    Comparing(flags=flags(**{"GPU-a0": 0.0, "GPU-a1": float("nan"), "GPU-b0": 0.0})),
    Comparing(drop=[("GPU-b0", "xid")]),
    Comparing(drop=[("GPU-b0", "xid")], flags=flags(**{"GPU-a0": 1.0, "GPU-b0": 0.0})),
    Comparing(flags=flags(**{"GPU-a0": 0.0, "GPU-b0": 0.0}), declared=[("GPU-a1", MEMORY_FIELDS[0])]),
    Comparing(drop=[(u, "xid") for _, _, u, _ in GPUS]),
    Comparing(flags=flags(**{"GPU-a0": 0.0, "GPU-b0": 0.0}), declared=[("GPU-a1", f) for f in MEMORY_FIELDS]),
    Comparing(flags=flags(**{"GPU-a0": 0.0, "GPU-a1": 1.0, "GPU-b0": 0.0})),
], ids=["memory health missing on one GPU", "memory health NaN on one GPU", "XID missing on one GPU",
        "XID missing on one, bad memory on another, memory health missing on a third",
        "only ECC declared unsupported", "no GPU publishes XIDs or memory health",
        "memory health declared unsupported", "bad memory, every series present"])
def test_the_scheduler_counts_unusable_the_gpus_the_loop_keeps_from_new_work(client):
    src = source(client)
    snap = src.snapshot()
    loop_keeps = {(g.node, g.slot) for g in snap.gpus if snap.memory_unhealthy[g.index]}
    assert unhealthy(source(client).gpu_facts()) == loop_keeps


def test_a_gpu_of_unknown_health_is_no_free_slot_for_the_scheduler():
    facts = source(Comparing(drop=[("GPU-b0", "xid")], flags=flags(**{"GPU-a0": 0.0, "GPU-b0": 0.0}))).gpu_facts()
    assert unhealthy(facts) == {SLOT["GPU-a1"], SLOT["GPU-b0"]}
    assert set(facts["node-a"].headroom_c) == {0, 1}   # still reported: the facts hold every fresh GPU
