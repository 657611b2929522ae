"""Hot taints never close a pool: when every node of a pool (a GPU model) is hot, one of them stays untainted.

A cooling fault across a row put one hot GPU on every node; the planner tainted them all, and nine idle GPUs were
closed to every new or recreated pod (a rollout, a failed node, a migration's replacement): "no action may leave a
workload without a place to run". Now one node of each such pool is kept open (one with a free GPU, one not tainted
now, then the coolest), and a plan note says which and why; a pool with a node not hot, or whose hot nodes have no
free GPU, taints every hot node as before."""

from __future__ import annotations

from dataclasses import replace

import pytest
from loop_helpers import make_fleet, snapshot, workload

from balancer import catalog
from balancer.actuate.base import ActionResult, Outcome
from balancer.config import BalancerPolicy
from balancer.loop import Reconciler
from balancer.model import TaintNode
from balancer.model import WorkloadClass as C
from balancer.plan.planner import PlannerState, plan
from balancer.plan.simulate import HOT_TAINT

FL = make_fleet(nodes=3, gpus_per_node=4)   # n0: GPUs 0-3, n1: 4-7, n2: 8-11
SLOW = catalog.get(FL.gpus[0].model).slowdown_temp_c
HOT_TAINT_TEXT = f"{HOT_TAINT}=true:NoSchedule"


def row_fault(fl=FL, temps=None, nodes=None, **kw):
    """GPU 0 of every node hot (unmovable chat on it), GPU 1 busy with a training worker, GPUs 2-3 free."""
    per = fl.n_gpus // len(fl.nodes)
    wl = [(workload(f"chat-{i}", owner="chat", movable=False), (per * i,)) for i in range(len(fl.nodes))]
    wl += [(workload(f"job-{i}", C.TRAINING, owner="job", movable=False), (per * i + 1,)) for i in range(len(fl.nodes))]
    hot = temps or {per * i: SLOW - 1 for i in range(len(fl.nodes))}
    return snapshot(fl, workloads=wl, temps=hot, nodes=nodes, **kw)


def planned(snap, policy=None, state=None, cycles=2):
    """The plan after `cycles` readings of `snap` (two make a hotspot active)."""
    state = state or PlannerState()
    for _ in range(cycles):
        out, state = plan(snap, None, policy or BalancerPolicy(), state)
    return out, state


def taints(p, remove=False) -> set[str]:
    return {a.node for a in p.actions if isinstance(a, TaintNode) and a.remove == remove and not a.renew}


def tainted(nodes, *names):
    return tuple(replace(n, taints=(HOT_TAINT_TEXT,)) if n.name in names else n for n in nodes)


def test_a_row_fault_leaves_one_node_of_the_pool_open_and_says_so():
    p, _ = planned(row_fault())
    assert taints(p) == {"n1", "n2"}   # all equally hot: n0 by name
    assert [n for n in p.notes if "left untainted" in n] == [
        "hot node n0 left untainted: every node of pool A100-SXM4-80GB is hot, and tainting them all would close its "
        "free GPUs to every new or recreated pod"]


def test_the_coolest_hot_node_is_the_one_kept_open():
    p, _ = planned(row_fault(temps={0: SLOW - 1, 4: SLOW - 3, 8: SLOW - 2}))
    assert taints(p) == {"n0", "n2"}


def test_every_pool_keeps_a_node_open():
    fl = make_fleet(nodes=4, gpus_per_node=4, models=["A100-SXM4-80GB", "A100-SXM4-80GB", "H100-SXM", "H100-SXM"])
    temps = {g: catalog.get(fl.gpus[g].model).slowdown_temp_c - 1 for g in (0, 4, 8, 12)}
    p, _ = planned(row_fault(fl, temps=temps))
    assert taints(p) == {"n1", "n3"}
    assert sum("left untainted" in n for n in p.notes) == 2


@pytest.mark.parametrize("full", [False, True], ids=["with free GPUs", "full"])
def test_a_node_not_hot_lets_every_hot_node_be_tainted(full):
    """The taint steers work within the pool: a hot node whose work moved off keeps new work off its freed GPUs even
    when they are the pool's only free ones (n2 full)."""
    snap = row_fault(temps={0: SLOW - 1, 4: SLOW - 1})   # n2 cool
    if full:
        fill = [(workload(f"batch-{g}", C.BATCH, owner=f"b{g}"), (g,)) for g in (10, 11)]
        snap = snapshot(FL, workloads=[*((w, snap.placements[w.name]) for w in snap.workloads), *fill],
                        temps={0: SLOW - 1, 4: SLOW - 1})
    p, _ = planned(snap)
    assert taints(p) == {"n0", "n1"}
    assert not [n for n in p.notes if "left untainted" in n]


def test_a_cordoned_cool_node_is_no_room():
    cordoned = tuple(replace(n, taints=("node.kubernetes.io/unschedulable:NoSchedule",)) if n.name == "n2" else n
                     for n in FL.nodes)
    p, _ = planned(row_fault(temps={0: SLOW - 1, 4: SLOW - 2}, nodes=cordoned))
    assert taints(p) == {"n0"}   # n1, the cooler hot node, is kept open: n2 takes no new pod


def test_a_full_hot_node_is_tainted_and_a_hot_node_with_room_kept_open():
    snap = row_fault()
    fill = [(workload(f"batch-{g}", C.BATCH, owner=f"b{g}"), (g,)) for g in (2, 3)]   # n0 full
    snap = snapshot(FL, workloads=[*((w, snap.placements[w.name]) for w in snap.workloads), *fill],
                    temps={0: SLOW - 1, 4: SLOW - 1, 8: SLOW - 1})
    p, _ = planned(snap)
    assert taints(p) == {"n0", "n2"}


def test_an_all_hot_pool_without_a_free_gpu_is_tainted_whole():
    """The taints close no idle GPU: every hot node is tainted as before."""
    snap = row_fault()
    fill = [(workload(f"batch-{g}", C.BATCH, owner=f"b{g}"), (g,)) for g in (2, 3, 6, 7, 10, 11)]
    snap = snapshot(FL, workloads=[*((w, snap.placements[w.name]) for w in snap.workloads), *fill],
                    temps={0: SLOW - 1, 4: SLOW - 1, 8: SLOW - 1})
    p, _ = planned(snap)
    assert taints(p) == {"n0", "n1", "n2"}
    assert not [n for n in p.notes if "left untainted" in n]


def test_an_all_tainted_pool_has_its_coolest_node_opened_again():
    """Every node already carries the hot taint (an earlier controller's): the coolest is untainted, with the reason."""
    snap = row_fault(temps={0: SLOW - 1, 4: SLOW - 1, 8: SLOW - 4}, nodes=tainted(FL.nodes, "n0", "n1", "n2"))
    p, _ = planned(snap)
    assert taints(p) == set() and taints(p, remove=True) == {"n2"}
    (why,) = (a.reason for a in p.actions if isinstance(a, TaintNode) and a.remove)
    assert "left untainted" in why
    assert not [a for a in p.actions if isinstance(a, TaintNode) and a.renew and a.node == "n2"]


def test_the_node_kept_open_stays_the_one_open_when_another_turns_cooler():
    """No flapping: n0 is open and n1, n2 tainted; n2 now reads cooler than n0, and nothing changes."""
    snap = row_fault(temps={0: SLOW - 1, 4: SLOW - 1, 8: SLOW - 3}, nodes=tainted(FL.nodes, "n1", "n2"))
    p, _ = planned(snap)
    assert not [a for a in p.actions if isinstance(a, TaintNode) and not a.renew]


def test_with_taints_off_nothing_is_said():
    policy = BalancerPolicy()
    policy = replace(policy, hotspots=replace(policy.hotspots, taint_hot_nodes=False))
    p, _ = planned(row_fault(), policy=policy)
    assert not taints(p) and not [n for n in p.notes if "left untainted" in n]


def test_the_loop_never_taints_the_whole_row():
    """The auditor's loop (a2): eight cycles of the row fault through the reconciler; a node of the pool stays open."""
    clock = [1000.0]

    class Src:
        def snapshot(self):
            return row_fault(time=clock[0])

    class Act:
        name = "spy"

        def apply(self, a, s):
            return ActionResult(a, Outcome.APPLIED)

    rec = Reconciler(source=Src(), actuator=Act(), clock=lambda: clock[0])
    seen: set[str] = set()
    for k in range(8):
        clock[0] = 1000.0 + 60 * k
        seen |= {r.action.node for r in rec.run_once().results
                 if isinstance(r.action, TaintNode) and not r.action.remove}
    assert seen == {"n1", "n2"}
