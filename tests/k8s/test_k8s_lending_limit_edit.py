"""An operator's lendingLimit edit made during a loan is theirs, not undone by gputide. While quota is lent, the
inference ClusterQueue's lendingLimit is clamped to its lowered nominalQuota and the operator's own kept on it
(`gputide.io/own-lending-limits`); every later move restored that saved value, so an operator who lowered the
lendingLimit during the loan (16 nominal, limit 14, 6 lent, set to 4) saw it raised to 8 by the next loan and to 14
by the give-back. gputide now also keeps the lendingLimit it wrote (`gputide.io/lending-limits-set`); a live one
that differs from it is the operator's, and their own value from then on."""

from __future__ import annotations

from fakeapi import FakeKube, clusterqueue
from test_k8s_quota_restart import controller

NOTES = ("gputide.io/own-lending-limits", "gputide.io/lending-limits-set")


def gpu(kube: FakeKube, queue: str) -> tuple[int, int]:
    res = kube.get("clusterqueues", queue)["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]
    return res["nominalQuota"], res["lendingLimit"]


def set_lending(kube: FakeKube, queue: str, value: int) -> None:
    groups = kube.get("clusterqueues", queue)["spec"]["resourceGroups"]
    groups[0]["flavors"][0]["resources"][1]["lendingLimit"] = value
    kube.mutate("clusterqueues", queue, "", {"spec": {"resourceGroups": groups}})


def notes(kube: FakeKube) -> dict:
    return {k: v for k, v in (kube.get("clusterqueues", "inference")["metadata"].get("annotations") or {}).items()
            if k in NOTES}


def test_the_operators_lower_lending_limit_during_a_loan_is_kept(kube: FakeKube, api, clock, sleeps) -> None:
    kube.add(clusterqueue("inference", "tide", 16, lending=14))
    kube.add(clusterqueue("training", "tide", 8))
    c = controller(api, clock, sleeps)
    c.shift_kueue_quota("inference", "training", 6)
    assert gpu(kube, "inference") == (10, 10)   # clamped, the operator's 14 kept
    set_lending(kube, "inference", 4)           # the operator: lend at most 4 from now on
    c.shift_kueue_quota("inference", "training", 2)
    assert gpu(kube, "inference") == (8, 4)
    c.shift_kueue_quota("training", "inference", 8)
    assert gpu(kube, "inference") == (16, 4)
    assert notes(kube) == {}


def test_the_operators_edit_while_clamped_is_restored_as_theirs(kube: FakeKube, api, clock, sleeps) -> None:
    kube.add(clusterqueue("inference", "tide", 16, lending=14))
    kube.add(clusterqueue("training", "tide", 8))
    c = controller(api, clock, sleeps)
    c.shift_kueue_quota("inference", "training", 6)   # (10, 10)
    set_lending(kube, "inference", 9)                  # the operator's 9, below the clamp
    c.shift_kueue_quota("training", "inference", 2)    # (12, 9): nothing clamps it any more
    assert gpu(kube, "inference") == (12, 9)
    c.shift_kueue_quota("inference", "training", 4)    # (8, 8): clamped again, their 9 kept
    assert gpu(kube, "inference") == (8, 8)
    c.shift_kueue_quota("training", "inference", 8)
    assert gpu(kube, "inference") == (16, 9)
    assert notes(kube) == {}

