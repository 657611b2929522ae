"""The node kept open in a heat wave: a pod tolerating every taint opens no node (s33h22, audit s33a16 of b601a51).
`_takes_work` judged a node open where some placed GPU workload tolerates its taints, and a key-less `Exists`
toleration (a DaemonSet-style GPU agent's) tolerates all of them: one such pod placed counted every tainted node open,
so with n2 closed by `dedicated=other` (or `not-ready`) and n0, n1, n2 hot, the heat wave tainted n0 and n1 and kept
n2 open, where no ordinary pod could go. Such tolerations are not read now: n1 is kept open, n0 and n2 tainted, as
without the agent."""

from __future__ import annotations

import pytest

from balancer.noderules import NodeRules, Toleration
from tests.loop.loop_helpers import workload
from tests.planner.test_planner_hot_taint_last_open import HEAT_WAVE, cycles, taints

SVC = [(workload(f"svc-{i}", owner="svc"), (g,)) for i, g in enumerate((1, 5))]   # on n0, n1: tolerate nothing
CLOSED = {"dedicated=other": ("dedicated=other:NoSchedule",),
          "not-ready": ("node.kubernetes.io/not-ready:NoSchedule", "node.kubernetes.io/not-ready:NoExecute")}
EVERYTHING = (Toleration(operator="Exists"),)
EVERY_NO_SCHEDULE = (Toleration(operator="Exists", effect="NoSchedule"), Toleration(operator="Exists",
                                                                                     effect="NoExecute"))


@pytest.mark.parametrize("tolerations", [EVERYTHING, EVERY_NO_SCHEDULE], ids=["exists", "exists-per-effect"])
@pytest.mark.parametrize("closed", sorted(CLOSED))
def test_an_agent_tolerating_every_taint_opens_no_closed_node(closed, tolerations):
    agent = (workload("agent-0", owner="agent", node_rules=NodeRules(tolerations=tolerations)), (9,))   # on n2
    p, st = cycles(HEAT_WAVE, taints={"n2": CLOSED[closed]}, workloads=SVC + [agent])
    assert st.kept_open == "n1"                           # was n2: closed to every pod but the agent
    assert taints(p) == [("n0", False), ("n2", False)]   # was n0 and n1: the one node that takes work closed


def test_a_keyed_toleration_beside_it_is_still_read():
    """An agent that also names `dedicated` tolerates n2's taint by key: that opens n2 as any pod's would."""
    rules = NodeRules(tolerations=(*EVERYTHING, Toleration(key="dedicated", operator="Exists")))
    agent = (workload("agent-0", owner="agent", node_rules=rules), (9,))
    p, st = cycles(HEAT_WAVE, taints={"n2": CLOSED["dedicated=other"]}, workloads=SVC + [agent])
    assert st.kept_open == "n2" and taints(p) == [("n0", False), ("n1", False)]
