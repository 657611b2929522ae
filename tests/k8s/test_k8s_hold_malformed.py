"""A hold whose victim fields are not lists of pod names (written by hand, or by another tool) must not stop the
scheduler's pass. Since 7c303b4 a preemption carried on reads the victims every hold on its node names
(`Holds._leaving`): `"victims": 1` on any hold there raised TypeError, which the pass does not catch (only
ActuationError), so the scheduler process exited, and again after each restart. Such a field names no victim;
the rest of the hold still holds what it says. Such fields are left out where the annotation is parsed
(`k8s_reads.node_facts`, `k8s_filters.well_formed`), so every reader sees the same well-formed holds: the pass's,
and those outside a pass (the nodes' cache, `nodes_view`)."""

from __future__ import annotations

import json

import pytest
from fakeapi import FakeKube, node
from test_k8s_preemption import most_free, reservations
from test_k8s_preemption_room_taken import half_preempted
from test_k8s_watch import eventually

from balancer.actuate.k8s_holds import Holds
from balancer.actuate.k8s_reads import node_facts
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import RESERVATION_ANNOTATION

ODD = [1, [1], [{"pod": "default/low-2"}], "default/low-2", {"default/low-2": 1}, None]


def _write(kube: FakeKube, node: str, key: str, change: dict) -> None:
    """Another writer changes `key`'s hold on `node` (None: removes the fields named)."""
    notes = reservations(kube, node)
    notes[key] = {k: v for k, v in {**notes.get(key, {}), **change}.items() if v is not None}
    kube.mutate("nodes", node, "", {"metadata": {"annotations": {RESERVATION_ANNOTATION: json.dumps(notes)}}})


@pytest.mark.parametrize("field", ["victims", "evicted"])
@pytest.mark.parametrize("odd", ODD[:-1])
def test_an_odd_hold_beside_a_preemption_does_not_stop_the_pass(kube: FakeKube, api, clock, field, odd):
    """A hold written by hand on mid's node (it holds nothing): mid's preemption carries on, low-2 is evicted."""
    sched = half_preempted(kube, api, clock)
    _write(kube, "a", "ops/by-hand", {"count": 0, field: odd, "expires": "2099-01-01T00:00:00Z"})
    clock.advance(5)
    assert sched.schedule_once() == {"default/mid": None}
    assert sched.preempted == [("default/low-2", "a")]
    clock.advance(5)
    assert sched.schedule_once() == {"default/mid": "a"}


@pytest.mark.parametrize("odd", ODD)
def test_a_preemption_whose_own_victims_field_is_odd_does_not_stop_the_pass(kube: FakeKube, api, clock, odd):
    """mid's own hold, its victims field changed by hand, read by a scheduler started afresh (a restart: this one
    remembers what it wrote): the field names no victim, none is evicted for it, and the pass goes on; the hold
    still holds a for mid until it expires, then mid preempts afresh and is bound."""
    half_preempted(kube, api, clock)
    _write(kube, "a", "default/mid", {"victims": odd, "evicted": odd})
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    clock.advance(5)
    assert sched.schedule_once() == {"default/mid": None}
    assert sched.preempted == [] and "default/mid" in reservations(kube, "a")
    clock.advance(3600)
    sched.schedule_once()
    assert sched.preempted == [("default/low-2", "a")]
    clock.advance(5)
    assert sched.schedule_once() == {"default/mid": "a"}


@pytest.mark.parametrize("odd", ODD[:-1])
def test_no_reader_of_the_pass_sees_an_odd_victim_field(kube: FakeKube, api, clock, monkeypatch, odd):
    """The holds are made well-formed once, as the node is parsed (`k8s_filters.well_formed`, in `node_facts`), not
    by each reader: every hold of the view the pass's readers are handed (`Holds.for_unplaced`: preemption, its
    resumption, `k8s_stuck`, the victims leaving a node) names its victims as a list of pod names or not at all.
    Here mid's own hold (its victims still right, its `evicted` changed by hand) and one written by hand, read by a
    scheduler started afresh: mid's preemption carries on with the victims its hold still names."""
    half_preempted(kube, api, clock)
    _write(kube, "a", "default/mid", {"evicted": odd})
    _write(kube, "a", "ops/by-hand", {"count": 0, "victims": odd, "evicted": odd, "expires": "2099-01-01T00:00:00Z"})
    seen: list[object] = []
    for_unplaced = Holds.for_unplaced

    def spy(self, req, view, index, offers, now):
        seen.extend(e[f] for n in view for e in n["reservations"].values() for f in ("victims", "evicted") if f in e)
        return for_unplaced(self, req, view, index, offers, now)

    monkeypatch.setattr(Holds, "for_unplaced", spy)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    clock.advance(5)
    assert sched.schedule_once() == {"default/mid": None}
    assert seen == [["default/low-2"]]   # mid's victims; no odd field
    assert sched.preempted == [("default/low-2", "a")]
    assert reservations(kube, "a")["ops/by-hand"]["victims"] == odd   # the annotation is not rewritten


def test_the_parse_of_a_node_leaves_out_the_victim_fields_that_name_no_pods():
    """`node_facts`, the one parse of the annotation every reader goes through: each odd victim field left out,
    the rest of its hold kept as written; a well-formed hold is the same hold; an entry that is no map is none."""
    ok = {"count": 8, "victims": ["default/low-2"], "evicted": [], "priority": 10, "expires": "2099-01-01T00:00:00Z"}
    notes = {"default/mid": ok, "default/odd": {**ok, "evicted": 1}, "junk": 3,
             **{f"ops/by-hand-{i}": {"count": 0, "victims": odd, "evicted": odd} for i, odd in enumerate(ODD)}}
    annotated = {**node("a"), "metadata": {"name": "a", "annotations": {RESERVATION_ANNOTATION: json.dumps(notes)}}}
    facts = node_facts(annotated)
    assert facts["reservations"] == {"default/mid": ok, "default/odd": {k: v for k, v in ok.items() if k != "evicted"},
                                     **{f"ops/by-hand-{i}": {"count": 0} for i in range(len(ODD))}}


@pytest.mark.parametrize("watch", [False, True])
@pytest.mark.parametrize("odd", ODD[:-1])
def test_no_reader_outside_a_pass_sees_an_odd_victim_field(kube: FakeKube, api, clock, watch, odd):
    """Outside a pass (no `release_gone` before them) the nodes as the scheduler reads them (`nodes_view`, listed
    or from the nodes' watch cache) and that cache itself (what its change handler, `node_openings`, compares) hold
    no victim field that names no pods: mid's own hold keeps its right victims, the hand-written hold its count."""
    half_preempted(kube, api, clock)
    _write(kube, "a", "default/mid", {"evicted": odd})
    _write(kube, "a", "ops/by-hand", {"count": 0, "victims": odd, "evicted": odd, "expires": "2099-01-01T00:00:00Z"})
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, watch=watch, watch_s=1.0)
    try:
        if watch:
            sched.start()
            eventually(lambda: sched.watches["nodes"].synced)
        reads = [sched.nodes_view(), *([list(sched.watches["nodes"].snapshot()[1].values())] if watch else [])]
    finally:
        sched.close()
    for nodes in reads:
        held = {n["name"]: n["reservations"] for n in nodes}["a"]
        assert held["default/mid"]["victims"] == ["default/low-2"] and "evicted" not in held["default/mid"]
        assert {k: v for k, v in held["ops/by-hand"].items() if k != "expires"} == {"count": 0}
    assert reservations(kube, "a")["ops/by-hand"]["victims"] == odd   # the annotation is not rewritten
