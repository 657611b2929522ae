"""A fleet the test sets reading by reading, shared by controller replicas: one busy GPU (GPU 0, on n0) at the
temperature the test gives, n0 carrying gputide's hot taint while the fleet says so. It is both the replicas'
telemetry source and their actuator: a `TaintNode` it applies changes the taint the next snapshot shows, and every
applied action is recorded with the replica that applied it."""

from __future__ import annotations

from dataclasses import replace

from prometheus_client import CollectorRegistry

from balancer.actuate.base import ActionResult, Outcome
from balancer.config import BalancerPolicy
from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics
from balancer.model import Action, ClusterSnapshot, TaintNode
from tests.loop.loop_helpers import make_fleet, snapshot, workload

FL = make_fleet(3, 4)   # A100: slowdown 89 C, hot from 84 C, cool under 77 C
HOT, WARM, COOL = 86.0, 80.0, 60.0
N = BalancerPolicy().hotspots.hot_readings
M = BalancerPolicy().hotspots.cool_readings
HOT_TAINT = "gputide.io/hot=true:NoSchedule"


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class ScriptedFleet:
    def __init__(self, clock: Clock) -> None:
        self.clock, self.t0, self.tainted = clock, COOL, False
        self.applied: list[tuple[str, Action]] = []

    def snapshot(self) -> ClusterSnapshot:
        nodes = [replace(FL.nodes[0], taints=(HOT_TAINT,)), *FL.nodes[1:]] if self.tainted else FL.nodes
        return snapshot(FL, workloads=[(workload("svc-0"), (0,))], temps={0: self.t0}, nodes=nodes,
                        time=self.clock.now)

    def actuator(self, who: str):
        fleet = self

        class Applies:
            name = f"scripted-{who}"

            def apply(self, action: Action, snap: ClusterSnapshot) -> ActionResult:
                if isinstance(action, TaintNode) and action.node == "n0":
                    fleet.tainted = not action.remove
                fleet.applied.append((who, action))
                return ActionResult(action, Outcome.APPLIED, "applied")

        return Applies()

    def replica(self, who: str, elector) -> Reconciler:
        return Reconciler(source=self, actuator=self.actuator(who), clock=self.clock, elector=elector,
                          metrics=ControllerMetrics(CollectorRegistry()))

    def acted(self, who: str) -> list[Action]:
        return [a for w, a in self.applied if w == who]


def taint_changes(actions: list[Action]) -> list[tuple[str, bool]]:
    """(node, removed) of the TaintNode actions among `actions`."""
    return [(a.node, a.remove) for a in actions if isinstance(a, TaintNode)]
