"""k8s_quota.py had grown to ~670 lines saying four things: the quota patch, the two writes of a move and their
fences, the settle of open moves, the owed give-backs. Each now is its own module (`k8s_quota_patch`, pure;
`k8s_quota_writes`, `k8s_quota_settle`, `k8s_quota_owed`, mixins), and `KueueQuota` stays the one public face:
every name the actuator, its upkeep and training use is still on it, and on `k8s_quota` where they import it."""

from __future__ import annotations

import ast
import inspect

import balancer.actuate.k8s_quota as quota
import balancer.actuate.k8s_quota_patch as patch
from balancer.actuate.k8s_quota import KueueQuota
from balancer.actuate.k8s_quota_owed import OwedGiveBacks
from balancer.actuate.k8s_quota_settle import Settles
from balancer.actuate.k8s_quota_writes import QuotaWrites

PUBLIC = ("shift", "owes", "settle", "settle_all", "reconcile", "new_term", "workloads", "admitted_flavor",
          "set_active", "check_queues")


def test_each_seam_is_its_own_module_and_kueue_quota_takes_them_all():
    assert issubclass(KueueQuota, OwedGiveBacks) and issubclass(KueueQuota, Settles)
    assert issubclass(OwedGiveBacks, QuotaWrites) and issubclass(Settles, QuotaWrites)
    homes = {OwedGiveBacks: ("owes", "_pay", "_pay_one", "_spare"), Settles: ("settle", "_settle", "_told_by_loans"),
             QuotaWrites: ("_lend", "_mark", "_settled_since", "_close")}
    for cls, names in homes.items():
        for name in names:
            assert name in vars(cls) and name not in vars(KueueQuota), (cls.__name__, name)
    # the API calls stay KueueQuota's own code, where the RBAC check reads them (tests/deploy/test_deploy_rbac_scope)
    assert {"_read_queue", "_update", "_workloads_and_jobs"} <= set(vars(KueueQuota))


def test_the_public_names_stay_where_they_were():
    for name in PUBLIC:
        assert callable(getattr(KueueQuota, name)), name
    for name in ("KueueQuota", "Untold", "corrections_counter", "unsettled_gauge"):
        assert hasattr(quota, name), name   # imported from k8s_quota by k8s_upkeep, k8s_training, k8s_actuator


def test_the_quota_patch_is_pure():
    """It decides the patch from the queue as read: no gateway, no logging."""
    tree = ast.parse(inspect.getsource(patch))
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom | ast.Import)
             for alias in node.names}
    assert not names & {"_Api", "logging", "KueueQuota"}, names
