"""When `apply_targets` keeps idle GPUs for replicas asked but given no GPU (held asks), pinned for the two forms.

* `hold` (a service on hold: none of its pending asks gets a GPU freed): its pending replicas keep idle GPUs of its
  models before any scale-up takes them (`Pools.keep_for_pending`), so a larger scale-up on the same model shrinks
  training instead.
* `need` (a scale-up frees GPUs for `need` replicas, the asks beyond are held): its needed replicas take idle GPUs
  first, and its held asks keep what is idle at its turn, after the larger scale-ups took theirs.

One form alone keeps at one of those times: `hold` as `need` = the replicas holding GPUs moves the first keep after
larger scale-ups (training shrunk less, the pending replicas short of the GPUs the scheduler gives them); `need`'s keep
made before the loop gives a scale-up's needed replicas only what its held asks leave (training shrunk more)."""

from __future__ import annotations

from types import MappingProxyType

from balancer.actions import ScaleInference, ScaleTraining
from balancer.plan.capacity import CapacityPolicy, CapacityView, JobView, ServiceCapacity, ServiceView
from balancer.plan.capacity_pools import apply_targets


def service(name: str, replicas: int, asked: int) -> ServiceView:
    return ServiceView(profile=ServiceCapacity(name=name, rps_per_replica=10.0, warmup_s=300.0), demand_rps=0.0,
                       replicas=replicas, desired=asked, gpus_by_model=MappingProxyType({"A100": replicas}))


def fleet(idle: int, *services: ServiceView) -> CapacityView:
    job = JobView(name="train", workers=8, elastic_max=16, gpus_by_model=MappingProxyType({"A100": 8}))
    held = sum(s.replicas for s in services)
    return CapacityView(time=0.0, free=MappingProxyType({"A100": idle}), services=services, jobs=(job,),
                        inference_gpus=held, training_gpus=8, total_gpus=held + 8 + idle)


def moves(view: CapacityView, new: dict[str, int], **kw) -> tuple[int, dict[str, int]]:
    """Training's workers after the plan, and each service's ScaleInference."""
    actions, _ = apply_targets(view, new, CapacityPolicy(), {n: "" for n in new}, {n: 1.0 for n in new}, **kw)
    train = next((a.workers for a in actions if isinstance(a, ScaleTraining)), 8)
    return train, {a.service: a.replicas for a in actions if isinstance(a, ScaleInference)}


def test_a_service_on_hold_keeps_idle_gpus_for_its_pending_replicas_before_a_larger_scale_up_takes_them():
    # held: 1 placed, 3 asked (2 pending); up: 1 -> 5 (4 more); 2 GPUs idle
    view = fleet(2, service("held", 1, 3), service("up", 1, 1))
    held = frozenset({"held"})
    assert moves(view, {"held": 3, "up": 5}, hold=held, keep_pending=held) == (4, {"up": 5})
    # not fresh (pending past a warm-up): the idle GPUs go to the scale-up, training shrunk by 2
    assert moves(view, {"held": 3, "up": 5}, hold=held) == (6, {"up": 5})


def test_a_scale_ups_needed_replicas_take_idle_gpus_before_its_held_asks_keep_what_is_left():
    # up: 1 placed, 6 asked, 4 needed (3 more, 2 asks held); 3 GPUs idle: its 3 take them, nothing left to keep
    view = fleet(3, service("up", 1, 6))
    fresh = frozenset({"up"})
    assert moves(view, {"up": 6}, keep_pending=fresh, need={"up": 4}) == (8, {})
    # 4 idle: the one left is kept for the held asks, not lent to training; pending past a warm-up, it is lent
    assert moves(fleet(4, service("up", 1, 6)), {"up": 6}, keep_pending=fresh, need={"up": 4}) == (8, {})
    assert moves(fleet(4, service("up", 1, 6)), {"up": 6}, need={"up": 4}) == (9, {})


def test_the_held_asks_of_a_smaller_scale_up_keep_only_what_a_larger_one_left():
    # big: 1 -> 6 (5 more) first; small: 1 placed, 4 asked, 2 needed (1 more, 2 held); 6 idle: big takes 5, small
    # 1 for its needed replica, its held asks keep none, and training is not shrunk
    view = fleet(6, service("big", 1, 1), service("small", 1, 4))
    fresh = frozenset({"small"})
    assert moves(view, {"big": 6, "small": 4}, keep_pending=fresh, need={"small": 2}) == (8, {"big": 6})
