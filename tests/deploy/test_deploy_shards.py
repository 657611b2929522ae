"""overlays/sharded: two controller shards, each a Deployment of the base controller's pod with its own --shard and
--selector, electing on its own Lease (`gputide-controller-NAME`, balancer.telemetry.shard.ShardSelector.lease_name).
Before it, a sharded controller was the operator's to build, and the leader-election Role named `gputide-controller`
alone: each shard's first election was refused (403) until the operator added its Lease by hand (audit s33h4). The
overlay's Role names exactly the shards' Leases; the shards' pods, budgets and spreads are told apart by the label
gputide.io/controller-shard, so two Deployments never fight over one another's pods."""

from __future__ import annotations

import copy

import pytest
from test_deploy_manifests import objects, one, render
from test_deploy_rbac import granted_in, leases_of
from test_deploy_rbac_leases import lease_reach

from balancer.cli import build_parser
from balancer.model import Node
from balancer.telemetry.shard import parse_selector

OVERLAY = "overlays/sharded"
SHARDS = {"gputide-controller": "a", "gputide-controller-b": "b"}   # Deployment: shard
LABEL = "gputide.io/controller-shard"


def _controllers() -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in objects(OVERLAY, "Deployment") if d["metadata"]["name"] in SHARDS}


def _args(deployment: dict):
    return build_parser().parse_args(deployment["spec"]["template"]["spec"]["containers"][0]["args"])


def test_the_role_grants_each_shards_lease_and_no_other():
    rendered = render(OVERLAY)
    leases = {f"gputide-controller-{s}" for s in SHARDS.values()}
    assert leases_of(rendered) == {"gputide-controller": leases}
    granted_in(rendered)   # the Role names exactly the Leases the args elect on
    for verb in ("get", "update"):
        assert lease_reach(rendered, verb)["gputide-controller"] == leases, verb


def test_a_shard_the_role_forgets_is_caught():
    rendered = copy.deepcopy(list(render(OVERLAY)))
    (role,) = [o for o in rendered if o["kind"] == "Role" and o["metadata"]["name"] == "gputide-leader-election"]
    role["rules"][0]["resourceNames"].remove("gputide-controller-b")
    with pytest.raises(AssertionError, match=r"elect on \['gputide-controller-a', 'gputide-controller-b'\]"):
        granted_in(rendered)


def test_each_shard_acts_on_its_own_nodes_alone():
    controllers = _controllers()
    assert set(controllers) == set(SHARDS)
    selectors = {SHARDS[name]: parse_selector(a.shard, a.selector) for name, d in controllers.items()
                 for a in [_args(d)]}
    assert {name: s.name for name, s in selectors.items()} == {s: s for s in SHARDS.values()}
    for shard in SHARDS.values():
        node = Node(name=f"gpu-{shard}", gpu_model="H100-SXM", gpu_count=8, labels={"gputide.io/shard": shard})
        assert [s for s, sel in selectors.items() if sel.matches(node)] == [shard]
    assert not any(sel.matches(Node(name="gpu-none", gpu_model="H100-SXM", gpu_count=8)) for sel in selectors.values())


def test_each_shard_runs_the_base_controllers_pod_but_for_its_shard():
    """Shard b's pod spec is copied from the base controller (components/controller-shards): a change to the base's
    probes, grace period or volumes reaches every shard."""
    base = one("base", "Deployment", "gputide-controller")["spec"]["template"]["spec"]
    for name, deployment in _controllers().items():
        shard, pod = SHARDS[name], copy.deepcopy(deployment["spec"]["template"]["spec"])
        container, expected = pod["containers"][0], copy.deepcopy(base)
        want = expected["containers"][0]["args"]
        expected["containers"][0]["args"] = [want[0], f"--shard={shard}", f"--selector=gputide.io/shard={shard}",
                                             *want[1:]]
        for term in (expected["topologySpreadConstraints"][0],
                     expected["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0][
                         "podAffinityTerm"]):
            term["labelSelector"]["matchLabels"][LABEL] = shard
        assert pod == expected, name
        assert container["args"] == expected["containers"][0]["args"]
        assert deployment["spec"]["replicas"] == 2 and deployment["metadata"]["namespace"] == "gputide"


def test_no_shards_selector_budget_or_spread_takes_another_shards_pods():
    controllers = _controllers()
    budgets = {b["metadata"]["name"]: b["spec"]["selector"]["matchLabels"] for b in objects(OVERLAY,
                                                                                           "PodDisruptionBudget")}
    for name, deployment in controllers.items():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        pod = deployment["spec"]["template"]["spec"]
        spread = pod["topologySpreadConstraints"][0]["labelSelector"]["matchLabels"]
        anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0][
            "podAffinityTerm"]["labelSelector"]["matchLabels"]
        for selector in (deployment["spec"]["selector"]["matchLabels"], spread, anti):
            takes = [other for other, d in controllers.items()
                     if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()]
            assert takes == [name], (name, selector)
        assert [b for b, sel in budgets.items() if sel.items() <= labels.items()] == [name]
