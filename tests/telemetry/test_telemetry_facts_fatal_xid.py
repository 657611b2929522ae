"""The secondary scheduler's GPU facts hold a GPU with a fatal XID as unhealthy, as the reconcile loop does.

`ClusterSnapshot.healthy` keeps a GPU from new work on a fatal XID (`FATAL_XIDS`: 79 fallen off the bus, 48
double-bit ECC, ...) as well as on bad memory or unknown health; `gpu_facts` read only the last two, so
`gputide schedule` counted a GPU the planners never lend nor target as a free slot, ahead of the healthy busy
ones, and bound new pods to it. One rule for both: the GPUs the facts mark are those the snapshot's mask rejects.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_telemetry_e2e import stack  # noqa: F401  (the simulated exporter behind a real Prometheus)
from test_telemetry_facts_health_unknown import SLOT, Comparing, unhealthy
from test_telemetry_health_unknown import flags
from test_telemetry_prometheus_unit import source


def xid(**codes):
    return {(uuid, "xid"): code for uuid, code in codes.items()}


@pytest.mark.parametrize(("client", "bad"), [
    (Comparing(values=xid(**{"GPU-a0": 79.0})), {"GPU-a0"}),
    (Comparing(values=xid(**{"GPU-b0": 48.0, "GPU-a1": 119.0})), {"GPU-b0", "GPU-a1"}),
    (Comparing(values=xid(**{"GPU-a0": 13.0, "GPU-b0": 31.0})), set()),
    (Comparing(values=xid(**{"GPU-a0": 79.0}), flags=flags(**{"GPU-a0": 0.0, "GPU-a1": 1.0, "GPU-b0": 0.0})),
     {"GPU-a0", "GPU-a1"}),
    (Comparing(values=xid(**{"GPU-a0": 79.0}), drop=[("GPU-b0", "xid")]), {"GPU-a0", "GPU-b0"}),
], ids=["fallen off the bus", "double-bit ECC and GSP", "non-fatal XIDs only", "fatal XID beside bad memory",
        "fatal XID beside an XID series missing"])
def test_the_scheduler_counts_unusable_every_gpu_the_snapshot_holds_unhealthy(client, bad):
    snap = source(client).snapshot()
    loop_keeps = {(g.node, g.slot) for g in snap.gpus if not snap.healthy[g.index]}
    assert loop_keeps == {SLOT[u] for u in bad}
    facts = source(client).gpu_facts()
    assert unhealthy(facts) == loop_keeps
    assert sum(len(f.headroom_c) for f in facts.values()) == 3   # still reported: the facts hold every fresh GPU


@pytest.mark.integration
def test_a_gpu_fallen_off_the_bus_is_no_free_slot_through_a_real_prometheus(stack):  # noqa: F811
    sim, lock, prom, source = stack
    gpu = sim.fleet.gpus[2]
    with lock:
        sim.xid[gpu.index] = 79   # the XID alone: memory healthy, still reporting
    prom.wait_for(f'gpu:xid_last:code{{UUID="{gpu.uuid}"}} == 79', bool, timeout=20)
    snap = source.snapshot()
    assert np.flatnonzero(~snap.healthy).tolist() == [snap.gpu_by_uuid[gpu.uuid]]
    assert not snap.memory_unhealthy.any()
    assert unhealthy(source.gpu_facts()) == {(gpu.node, gpu.slot)}
