"""Sharding and fail-static, the checks that held every shard after 9be79be: one GPU UUID reported fresh under two
hosts, and an inference service with no finite demand. Each concerns some nodes only, so it holds the shards of
those nodes (and the unsharded controller), never the others:

* a UUID reported by two exporters holds still the shards of both its hosts: either may hold the GPU, and an action
  on it could reach either; a shard with neither host reads its own GPUs under their own UUIDs;
* a service whose demand is unknown is named (`demand_unknown`: their capacity plan holds, not the loop) in the
  snapshots of the shards with a replica of it on their nodes: a shard plans only those (`restrict`, the capacity
  planner's `sharded`); one with no replica placed anywhere is planned by no shard, and is left out of every shard's
  snapshot (never read as 0). Before, it held those shards still (`missing_telemetry`), thermal relief included.

Still whole-reading (not tested here: unchanged): several clusters in one Prometheus without --cluster (a
misconfiguration every shard of that Prometheus shares; hostnames are unique within a cluster only), and a partial
answer (the warning does not say which series are missing)."""

from __future__ import annotations

import math

import pytest

from tests.multisite.test_multisite_shard_fail_static import BASE, FIELDS, NOW, Fleet, controller


class Serving(Fleet):
    """Fleet's cluster with shard c's node-c, GPUs reported again under other keys (`again`: host, slot, UUID),
    inference pods on GPUs (`pods`: pod -> (UUID, service)) and each service's serving series (`demand`)."""

    def __init__(self) -> None:
        super().__init__()
        self.hosts["node-c"] = "c"
        self.again: list[tuple[str, str, str]] = []
        self.pods: dict[str, tuple[str, str]] = {}
        self.demand: dict[str, float] = {}

    def custom_query(self, promql: str) -> list[dict]:
        if promql.startswith("gputide_gpu_workload_info"):
            return [{"metric": {"__name__": "gputide_gpu_workload_info", "UUID": uuid, "namespace": "inference",
                                "pod": pod, "workload_class": "inference", "owner": service}, "value": [NOW, "1"]}
                    for pod, (uuid, service) in self.pods.items()]
        if promql.startswith('{__name__=~"gputide_inference'):
            return [{"metric": {"__name__": name, "service": s, "namespace": "inference"}, "value": [NOW, str(v)]}
                    for s, d in self.demand.items()
                    for name, v in (("gputide_inference_demand_rps", d), ("gputide_inference_replicas", 1.0))]
        rows = super().custom_query(promql)
        if promql.startswith('{__name__=~"gpu:'):
            rows += [{"metric": {"__name__": rule, "hostname": host, "gpu": slot, "UUID": uuid,
                                 "modelName": "NVIDIA H100 80GB HBM3"}, "value": [NOW, str(BASE[name])]}
                     for host, slot, uuid in self.again for name, (rule, _) in FIELDS.items()]
        return rows


def run(fleet: Serving, fault) -> dict[str, tuple[str, str]]:
    """(status, reason) of shards a, b, c and the unsharded controller after `fault`, each having read the fleet
    once before it; "ok" with the services whose demand its last snapshot names unknown, if any."""
    controllers = {name: controller(fleet, None if name == "whole" else name) for name in ("a", "b", "c", "whole")}
    assert {n: c.run_once().status for n, c in controllers.items()} == dict.fromkeys(controllers, "ok")
    fault(fleet)
    out = {}
    for n, c in controllers.items():
        r = c.run_once()
        out[n] = (r.status, r.reason) if r.status != "ok" else ("ok", ",".join(sorted(_snapshot(c).demand_unknown)))
    return out


def _snapshot(c):
    """The controller's snapshot as its planner saw it this cycle (its source read again: the fleet is unchanged)."""
    return c.source.snapshot()


HELD_FOR_TWICE = ("fail_static", "invalid_telemetry")
HELD_FOR_DEMAND = ("ok", "chat")   # not held still: named, its capacity plan holds
OK = ("ok", "")
CASES = {
    "a UUID under two of shard a's nodes": (
        lambda f: (f.hosts.update({"node-d": "a"}), f.again.append(("node-d", "0", "GPU-a0"))),
        {"a": HELD_FOR_TWICE, "b": OK, "c": OK, "whole": HELD_FOR_TWICE}),
    "a UUID under shard a's node and shard b's": (
        lambda f: f.again.append(("node-a", "2", "GPU-b0")),
        {"a": HELD_FOR_TWICE, "b": HELD_FOR_TWICE, "c": OK, "whole": HELD_FOR_TWICE}),
    "a service without demand on shard a's GPU": (
        lambda f: (f.pods.update({"chat-0": ("GPU-a0", "chat")}), f.demand.update({"chat": math.nan, "ok": 5.0})),
        {"a": HELD_FOR_DEMAND, "b": OK, "c": OK, "whole": HELD_FOR_DEMAND}),
    "a service without demand on shard a's and shard b's GPUs": (
        lambda f: (f.pods.update({"chat-0": ("GPU-a0", "chat"), "chat-1": ("GPU-b1", "chat")}),
                   f.demand.update({"chat": math.nan})),
        {"a": HELD_FOR_DEMAND, "b": HELD_FOR_DEMAND, "c": OK, "whole": HELD_FOR_DEMAND}),
    "a service without demand and no replica placed": (
        lambda f: f.demand.update({"chat": math.nan}),
        {"a": OK, "b": OK, "c": OK, "whole": HELD_FOR_DEMAND}),
}


@pytest.mark.parametrize(("fault", "expected"), CASES.values(), ids=CASES.keys())
def test_a_fault_of_some_nodes_holds_their_shards_and_the_unsharded_controller_never_another_shard(fault, expected):
    """HELD_FOR_DEMAND: the shard goes on, its snapshot naming chat's demand unknown."""
    assert run(Serving(), fault) == expected


def test_a_service_without_demand_in_no_shard_is_left_out_of_every_shards_snapshot_never_read_as_0():
    fleet = Serving()
    fleet.pods["chat-0"] = ("GPU-a0", "chat")
    fleet.demand.update({"chat": 5.0, "idle": math.nan})
    a = controller(fleet, "a")
    snap = a.source.snapshot()
    assert set(snap.services) == {"chat"} and snap.services["chat"].demand_rps == 5.0
    assert "idle" not in a.source.last_full.services
    assert dict(snap.demand_unknown) == {} and dict(a.source.last_full.demand_unknown) == {}

