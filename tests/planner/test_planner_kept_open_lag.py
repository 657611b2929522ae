"""The node kept open in a heat wave holds when the node list lags a cycle (s33h13, audit s33a7 of 2154ce8).
`kept_open` preferred the hot node not hot-tainted now, but the planner remembers only the taints it wrote
(`PlannerState.tainted`), not one it took away: a node list still showing the kept node's removed taint made every
node look closed, so the coolest by a tenth of a degree was kept instead, its taint removed too, and the next cycle
the first again: n0 -> n1 -> n0 -> n1, both open two cycles, the note logged four times. Now the planner remembers the
node it kept (`PlannerState.kept_open`) and keeps it while it still takes work."""

from __future__ import annotations

from dataclasses import replace

from balancer.config import BalancerPolicy
from balancer.model import TaintNode
from balancer.plan.planner import PlannerState, acknowledge, plan
from tests.loop.loop_helpers import make_fleet, snapshot, workload

FL = make_fleet(3, 4)
HOT = "gputide.io/hot=true:NoSchedule"
CORDON = "node.kubernetes.io/unschedulable:NoSchedule"


def test_a_node_list_a_cycle_late_does_not_move_the_kept_node():
    wl = [(workload(f"svc-{i}", owner="svc"), (g,)) for i, g in enumerate((0, 4, 8))]
    # n0 and n1 hot and tainted; n2 is then cordoned: n0 is kept open; n0 then heats past n1 by a tenth of a degree
    seq = [({0: 96.0, 4: 96.1}, False)] * 3 + [({0: 96.0, 4: 96.1}, True)] + [({0: 96.2, 4: 96.1}, True)] * 4
    nodes = shown = FL.nodes
    state, kept, acts = PlannerState(), [], []
    for c, (temps, cordon) in enumerate(seq):
        listed = tuple(replace(n, taints=n.taints + ((CORDON,) if cordon and n.name == "n2" else ())) for n in shown)
        s = snapshot(FL, workloads=wl, temps=temps, nodes=listed, time=1000.0 + 30 * c)
        p, state = plan(s, None, BalancerPolicy(), state)
        state = acknowledge(state, p.actions, s)
        kept += [n.split()[1] for n in p.notes if "kept open" in n]
        written = [a for a in p.actions if isinstance(a, TaintNode) and not a.renew]
        acts += [(c, a.node, a.remove) for a in written]
        rem, add = {a.node for a in written if a.remove}, {a.node for a in written if not a.remove}
        shown = nodes   # the list this cycle's writes land in is read a cycle late
        nodes = tuple(replace(n, taints=tuple(t for t in n.taints if n.name not in rem) + (
            (HOT,) if n.name in add and HOT not in n.taints else ())) for n in nodes)
    assert set(kept) == {"n0"}, kept   # was n0, n1, n0, n1, ...
    assert [(c, n, r) for c, n, r in acts if c > 1 and n == "n1"] == [], acts   # n1 stays closed
    assert [(c, n, r) for c, n, r in acts if n == "n0" and not r] == [(1, "n0", False)], acts   # n0 not closed again
    assert [n.name for n in nodes if HOT in n.taints] == ["n1"]
