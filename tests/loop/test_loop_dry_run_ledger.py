"""A dry run's results in a what-if ledger: the safety guard restrains `gputide run --dry-run` as it would a live run,
yet none of it reaches the ledger a live successor inherits (the Lease, --ledger-file). Before, DRY_RUN results never
entered the ledger: a dry run proposed and "did" the same migrations every cycle, the eviction budget never spent, so
its audit log and metrics showed far more than a live run would do; and the review's reservation of those what-if
evictions was saved where a successor reads it."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

from loop_helpers import make_fleet, snapshot, workload
from prometheus_client import CollectorRegistry

from balancer.actions import Plan
from balancer.actuate.base import ActionResult, Outcome
from balancer.actuate.dryrun import DryRunActuator
from balancer.actuate.leader import InMemoryLeaderElector, InMemoryLease
from balancer.cmd._run_parts import keep_ledger
from balancer.config import BalancerPolicy, SafetyPolicy
from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics
from balancer.model import Migrate
from balancer.plan.planner import PlannerState
from balancer.safety import SafetyLedger

FL = make_fleet(3, 4)
HOT = [(workload(f"web{i}-0", owner=f"web{i}"), (i,)) for i in range(4)]   # four pods, each on its own hot GPU


class _Hot:
    def __init__(self, clock: list[float]) -> None:
        self.clock = clock

    def snapshot(self):
        return snapshot(FL, workloads=HOT, temps={g: 86.0 for g in range(4)}, time=self.clock[0])


def _migrations(report) -> int:
    return sum(1 for r in report.results if r.action.kind == "migrate" and r.outcome == Outcome.DRY_RUN)


def test_a_dry_run_proposes_no_more_evictions_in_the_window_than_its_budget_allows():
    """Four hot GPUs for most of an hour, cycles a minute apart: the budget of 2 is spent by the first two moves, as
    it would be live (on HEAD the same two moves were "done" every cycle: 2 x 50)."""
    clock = [1000.0]
    metrics = ControllerMetrics(CollectorRegistry())
    rec = Reconciler(source=_Hot(clock), actuator=DryRunActuator(), clock=lambda: clock[0], metrics=metrics,
                     policy=BalancerPolicy(safety=SafetyPolicy(eviction_budget=2)))
    window = rec.policy.safety.eviction_window_s
    moved = []
    while clock[0] < 1000.0 + window - 120:
        moved.append(_migrations(rec.run_once()))
        clock[0] += 60
    assert sum(moved) == 2, moved
    assert metrics.registry.get_sample_value("gputide_eviction_budget_remaining") == 0
    # what the dry run "did" is no belief of the planner's: it throttled nothing, the next reading shows as much
    assert isinstance(rec.state, PlannerState) and not rec.state.throttled
    while clock[0] < 1000.0 + 2 * window and sum(moved) == 2:   # the window passes: the budget is back
        moved.append(_migrations(rec.run_once()))
        clock[0] += 60
    assert sum(moved) > 2


SNAP = snapshot(FL, workloads=HOT, time=1000.0)
POLICY = BalancerPolicy(safety=SafetyPolicy(eviction_budget=3, max_concurrent_migrations_per_node=10,
                                            max_actions_per_cycle=10))


def _moves(s, f, p, st):
    return Plan(actions=tuple(Migrate(workload=w.name, source_gpus=g, target_gpus=(8 + g[0],), target_node="n2",
                                      reason="hot", expected_gain=1.0) for w, g in HOT)), st


LIVE = SimpleNamespace(apply=lambda a, s: ActionResult(a, Outcome.APPLIED, "ok"))   # a live actuator, all applied


def _replica(name, actuator, lease, path, clock, saved) -> Reconciler:
    """A replica as `gputide run --leader-elect --ledger-file PATH [--dry-run]` builds it, every save it makes to the
    Lease or the file kept in `saved`."""
    metrics = ControllerMetrics(CollectorRegistry())
    rec = Reconciler(source=SimpleNamespace(snapshot=lambda: SNAP), actuator=actuator, policy=POLICY, planner=_moves,
                     clock=lambda: clock[0], metrics=metrics, elector=InMemoryLeaderElector(lease, name))
    keep_ledger(rec, argparse.Namespace(ledger_file=str(path), leader_elect=True,
                                        dry_run=isinstance(actuator, DryRunActuator)), metrics)
    for store in rec.handover.stores:
        store.save_state = (lambda save: lambda text: (saved.append(text), save(text))[1])(store.save_state)
    return rec


def test_a_dry_run_hands_on_the_ledger_it_inherited_and_none_of_what_it_would_have_done(tmp_path):
    path, clock, saved = tmp_path / "ledger.json", [1000.0], []
    lease = InMemoryLease(duration_s=15)
    inherited = SafetyLedger(evictions=(990.0,))   # a live leader's, before the dry run took the Lease
    lease.state = inherited.to_json()
    dry = _replica("dry", DryRunActuator(), lease, path, clock, saved)
    dry_run = []
    for _ in range(3):
        dry_run.append(sum(1 for r in dry.run_once().results if r.outcome == Outcome.DRY_RUN))
        clock[0] += 10
    assert dry_run == [2, 0, 0]   # the budget of 3 less the inherited eviction, spent as if applied
    assert saved and all(SafetyLedger.from_json(t) == inherited for t in saved)   # the file got the Lease's, no more
    assert SafetyLedger.from_json(path.read_text()) == inherited == SafetyLedger.from_json(lease.state)
    dry.elector.release()   # the dry run stops; a live controller takes the Lease and inherits its budget whole
    live = _replica("live", LIVE, lease, path, clock, [])
    assert sum(1 for r in live.run_once().results if r.outcome == Outcome.APPLIED) == 2


def test_a_dry_run_keeps_a_pod_off_a_node_its_what_if_ledger_holds_full_until_that_move_settles():
    """The guard's full nodes, asked each cycle to let a pod back where it was kept off (`planner.still_full`), are
    counted with the what-if ledger in a dry run (`_WhatIf.full_nodes`), as the review counts them. A move the dry
    run "did" to n1 at T0-10 settles there until T0+50 (migrationSettleS 60 s; one migration a node): at T0+10 web-0
    is refused n1 (full) and kept off it, then off n2 (the same move's source); throttled meanwhile, it goes to n1 at
    T0+50. Counted on the live ledger alone, n1 read free every cycle: the pod was proposed n1 again at each, and
    refused for max_concurrent_migrations each time."""
    clock = [1000.0]
    web = workload("web-0", owner="web")

    class Src:
        def snapshot(self):
            return snapshot(FL, workloads=[(web, (0,))], temps={0: 86}, time=clock[0])

    rec = Reconciler(source=Src(), actuator=DryRunActuator(), clock=lambda: clock[0],
                     policy=BalancerPolicy(safety=SafetyPolicy(max_concurrent_migrations_per_node=1)))
    rec.what_if = SafetyLedger(migrations=((clock[0] - 10.0, "n2", "n1", "svc-y"),))
    moves, refused = [], []
    for _ in range(6):   # T0 .. T0+50
        report = rec.run_once()
        moves.append([a.target_node for a in report.plan.actions if isinstance(a, Migrate)])
        refused.append([(a.target_node, why) for a, why in report.rejected if isinstance(a, Migrate)])
        clock[0] += 10.0
    assert moves == [[], ["n1"], ["n2"], [], [], ["n1"]], moves   # mutated: n1 at every cycle from T0+10
    assert refused == [[], [("n1", "max_concurrent_migrations")], [("n2", "max_concurrent_migrations")], [], [],
                       []], refused
    assert rec.ledger.migrations == ()   # none of it the live ledger's
