"""Each ServiceAccount reads and writes its own Lease alone. The Lease is more than a lock: its
`gputide.io/safety-ledger` annotation carries the controller's cooldowns and eviction windows to the next holder
(balancer/actuate/k8s_leader.py). Both accounts were bound to one Role with get and update on every Lease of the
namespace, so the scheduler's token could rewrite the controller's ledger or take its Lease (a reset safety budget,
or no controller leading), and the controller's the scheduler's (audit s32x1). Each account now has a Role whose get
and update name the Leases its commands elect on (--lease-name, a shard's <lease-name>-NAME); create cannot be
restricted by name and stays a rule of its own. What a token may do is read from the rendered RBAC the way the API
server's RBAC authorizer matches a request: verb, resource, namespace, then resourceNames."""

from __future__ import annotations

import copy

import pytest
from test_deploy_manifests import OVERLAYS, render
from test_deploy_rbac import NAMESPACE, bound_rules, granted_in, leases_of

EVERY = None   # a rule without resourceNames: every Lease of the namespace
WRITES = ("get", "update", "patch", "delete")   # what touches a named Lease: its ledger, its holder


def lease_reach(rendered, verb: str) -> dict[str, set[str] | None]:
    """{ServiceAccount: the names of the Leases in gputide's namespace it may `verb` (EVERY: all of them)}."""
    out: dict[str, set[str] | None] = {}
    for account, where, rule in bound_rules(rendered):
        if not (where in ("*", NAMESPACE) and {"coordination.k8s.io", "*"} & set(rule.get("apiGroups", ()))
                and {"leases", "*"} & set(rule.get("resources", ())) and {verb, "*"} & set(rule.get("verbs", ()))):
            continue
        names = rule.get("resourceNames")
        if names is None:
            out[account] = EVERY
        elif out.get(account, set()) is not EVERY:
            out[account] = out.get(account, set()) | set(names)
    return out


def _may(rendered, account: str, verb: str, lease: str) -> bool:
    reach = lease_reach(rendered, verb).get(account, set())
    return reach is EVERY or lease in reach


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_account_may_read_and_write_its_own_leases_and_no_other(overlay):
    rendered = render(overlay)
    own = leases_of(rendered)
    shards = {"gputide-controller-a", "gputide-controller-b"}   # overlays/sharded: test_deploy_shards.py
    assert own.get("gputide-controller") == (shards if overlay == "overlays/sharded" else {"gputide-controller"}), own
    for verb in WRITES:
        for account, reach in lease_reach(rendered, verb).items():
            assert reach is not EVERY, f"{overlay}: {account} may {verb} every Lease of {NAMESPACE}"
            assert reach <= own.get(account, set()), (overlay, account, verb, reach, own)
    for account, leases in own.items():
        for lease in leases:
            assert _may(rendered, account, "get", lease) and _may(rendered, account, "update", lease), (account, lease)


@pytest.mark.parametrize("overlay", [o for o in OVERLAYS if o.endswith("scheduler")])
def test_the_scheduler_may_not_touch_the_controllers_lease_nor_the_controller_the_schedulers(overlay):
    rendered = render(overlay)
    own = leases_of(rendered)
    assert set(own) == {"gputide-controller", "gputide-scheduler"}, own
    for account, other in (("gputide-scheduler", "gputide-controller"), ("gputide-controller", "gputide-scheduler")):
        for lease in own[other]:
            for verb in WRITES:
                assert not _may(rendered, account, verb, lease), f"{overlay}: {account} may {verb} Lease {lease}"


def _with_args(rendered, deployment: str, edit) -> list[dict]:
    out = copy.deepcopy(list(rendered))
    for obj in out:
        if obj["kind"] == "Deployment" and obj["metadata"]["name"] == deployment:
            container = obj["spec"]["template"]["spec"]["containers"][0]
            container["args"] = edit(container["args"])
    return out


@pytest.mark.parametrize(("deployment", "edit", "lease"), [
    ("gputide-scheduler", lambda args: [a.replace("=gputide-scheduler", "=gputide-binder") for a in args],
     "gputide-binder"),
    ("gputide-controller", lambda args: [*args, "--shard=h100", "--selector=pool=H100-SXM"], "gputide-controller-h100"),
])
def test_a_lease_renamed_in_the_args_but_not_in_its_role_is_caught(deployment, edit, lease):
    """The Role's resourceNames follow the container's --lease-name (and --shard): changed in one place alone,
    leader election would be refused at run time (403), so the RBAC reading refuses it here."""
    rendered = render("overlays/scheduler")
    granted_in(rendered)   # as deployed: accepted
    renamed = _with_args(rendered, deployment, edit)
    with pytest.raises(AssertionError, match=rf"^{deployment}: a rule names \['leases'\] \['{deployment}'\], "
                                             rf"its commands elect on \['{lease}'\]"):
        granted_in(renamed)
