"""The two replicas of each leader-elected Deployment (the controller, the secondary scheduler) are spread over zones
as well as nodes: node anti-affinity alone put both in one zone as often as not, and that zone's outage left no
replica to take the Lease over (no balancing, no pod with `schedulerName: gputide` bound) until pods were
rescheduled elsewhere. Preferred (ScheduleAnyway), so a one-zone cluster still runs both."""

from __future__ import annotations

import pytest
from test_deploy_manifests import OVERLAYS, objects

LEADER_ELECTED = {"gputide-controller", "gputide-scheduler"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_leader_elected_replicas_spread_over_zones_and_nodes(overlay):
    deployments = [d for d in objects(overlay, "Deployment") if d["metadata"]["name"] in LEADER_ELECTED
                   or "gputide.io/controller-shard" in d["metadata"].get("labels", {})]   # overlays/sharded
    assert deployments
    for deploy in deployments:
        pod, labels = deploy["spec"]["template"]["spec"], deploy["spec"]["template"]["metadata"]["labels"]
        zones = [c for c in pod.get("topologySpreadConstraints", ())
                 if c["topologyKey"] == "topology.kubernetes.io/zone"]
        assert len(zones) == 1, deploy["metadata"]["name"]
        (zone,) = zones
        assert zone["maxSkew"] == 1 and zone["whenUnsatisfiable"] == "ScheduleAnyway"
        assert zone["labelSelector"]["matchLabels"].items() <= labels.items()
        anti = pod["affinity"]["podAntiAffinity"]
        terms = anti.get("requiredDuringSchedulingIgnoredDuringExecution") or [
            t["podAffinityTerm"] for t in anti["preferredDuringSchedulingIgnoredDuringExecution"]]
        assert any(t["topologyKey"] == "kubernetes.io/hostname" and
                   t["labelSelector"]["matchLabels"].items() <= labels.items() for t in terms)
