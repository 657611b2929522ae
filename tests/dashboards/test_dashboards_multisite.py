"""The controller dashboard on a Prometheus that sees several clusters (federation, or one Prometheus for two
sites), with the cluster variable at "All": each cluster's controller and scheduler lead on Leases of the same
names, so "one leader per Lease" is per cluster. Two healthy sites are not a problem; a site whose Lease two
replicas claim, or none, is.
"""

from __future__ import annotations

import pytest
from panel_eval import check

PANELS = {"Leases not led by one replica": "leases", "Schedulers not led by one replica": "schedulers"}


def _leaders(site: str, controller: tuple[int, ...], scheduler: tuple[int, ...]) -> list[dict]:
    out = [{"series": f'gputide_leader{{cluster="{site}", job="gputide-controller", instance="10.244.1.{i}:9836", '
                      f'lease="gputide-controller"}}', "values": f"{v}x10"} for i, v in enumerate(controller)]
    out += [{"series": f'gputide_scheduler_leader{{cluster="{site}", job="gputide-scheduler", '
                       f'instance="10.244.2.{i}:9837"}}', "values": f"{v}x10"} for i, v in enumerate(scheduler)]
    return out


@pytest.mark.parametrize("sites, bad", [
    ({"site-a": ((1, 0), (1, 0)), "site-b": ((1, 0), (1, 0))}, 0),
    ({"site-a": ((1, 1), (1, 1)), "site-b": ((1, 0), (1, 0))}, 1),
    ({"site-a": ((0, 0), (0, 0)), "site-b": ((1, 0), (1, 0))}, 1),
], ids=["two sites, one leader each", "two leaders in one site", "no leader in one site"])
@pytest.mark.integration
def test_leases_and_schedulers_are_counted_per_cluster(promtool, tmp_path, sites, bad):
    series = [s for site, (ctl, sched) in sites.items() for s in _leaders(site, ctl, sched)]
    check(promtool, tmp_path, series, {("balancer.json", title, legend): bad for title, legend in PANELS.items()})
