"""`gputide run --ledger-file PATH`: the safety ledger in a local file, so a controller restarted without leader
election (a crash loop of a single replica, `--once` from cron) keeps the eviction budget it spent. Before it, every
start had a full budget: a controller restarting every minute could evict its hourly budget every minute."""

from __future__ import annotations

import argparse
import errno
import logging
import os

import pytest
from loop_helpers import make_fleet, snapshot, workload
from prometheus_client import CollectorRegistry

from balancer.actions import Plan
from balancer.actuate.base import ActionResult, Outcome
from balancer.actuate.leader import InMemoryLeaderElector, InMemoryLease, LedgerNotSaved
from balancer.cmd import run as run_cmd
from balancer.cmd._run_parts import keep_ledger
from balancer.config import BalancerPolicy, SafetyPolicy
from balancer.ledger_file import LedgerFile
from balancer.ledger_handover import LedgerHandover
from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics
from balancer.model import Migrate
from balancer.safety import EvictionBudgetExhausted, SafetyGuard, SafetyLedger

FL = make_fleet(3, 4)
LW = [(workload(f"w{i}-0", owner=f"w{i}"), (i,)) for i in range(4)]
SNAP = snapshot(FL, workloads=LW, time=1000.0)
POLICY = BalancerPolicy(safety=SafetyPolicy(eviction_budget=2, max_concurrent_migrations_per_node=10,
                                            max_actions_per_cycle=10))
WINDOW = POLICY.safety.eviction_window_s


class _Src:
    def snapshot(self):
        return SNAP


class _Act:
    def __init__(self, crash: bool = False) -> None:
        self.crash = crash

    def apply(self, a, s):
        if self.crash:   # the process dies mid-action: nothing after this line runs
            raise KeyboardInterrupt
        return ActionResult(a, Outcome.APPLIED, "ok")


def _planner(s, f, p, st):
    return Plan(actions=tuple(Migrate(workload=w.name, source_gpus=g, target_gpus=(8 + g[0],), target_node="n2",
                                      reason="hot", expected_gain=1.0) for w, g in LW)), st


def _flags(path, *, leader_elect=False, dry_run=False) -> argparse.Namespace:
    return argparse.Namespace(ledger_file=None if path is None else str(path), leader_elect=leader_elect,
                              dry_run=dry_run)


def _controller(path, clock, *, elector=None, crash=False) -> Reconciler:
    """A controller process as `gputide run --ledger-file PATH` builds it (`keep_ledger`), started afresh."""
    metrics = ControllerMetrics(CollectorRegistry())
    rec = Reconciler(source=_Src(), actuator=_Act(crash), policy=POLICY, planner=_planner, clock=lambda: clock[0],
                     metrics=metrics, elector=elector)
    keep_ledger(rec, _flags(path, leader_elect=elector is not None), metrics)
    return rec


def _evicted(report) -> int:
    return sum(1 for x in report.results if x.outcome == Outcome.APPLIED)


def test_a_restarted_controller_keeps_the_eviction_budget_its_previous_run_spent(tmp_path):
    path, clock = tmp_path / "ledger.json", [1000.0]
    assert _evicted(_controller(path, clock).run_once()) == 2   # the whole budget
    clock[0] += 60   # a crash loop: the same controller again a minute later
    assert _evicted(_controller(path, clock).run_once()) == 0
    clock[0] = 1000.0 + WINDOW   # the first run's evictions have left the window
    assert _evicted(_controller(path, clock).run_once()) == 2


def test_without_the_file_every_restart_has_a_full_budget_which_is_the_gap_it_closes(tmp_path):
    clock = [1000.0]
    assert _evicted(_controller(None, clock).run_once()) == 2
    clock[0] += 60
    assert _evicted(_controller(None, clock).run_once()) == 2


def test_evictions_are_in_the_file_before_any_is_carried_out_so_a_crash_mid_action_spends_them(tmp_path):
    path, clock = tmp_path / "ledger.json", [1000.0]
    with pytest.raises(KeyboardInterrupt):
        _controller(path, clock, crash=True).run_once()
    assert SafetyLedger.from_json(path.read_text()).evictions == (1000.0, 1000.0)
    clock[0] += 60
    assert _evicted(_controller(path, clock).run_once()) == 0


def test_a_missing_file_is_a_first_start_an_empty_ledger_said_in_the_log(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    path = tmp_path / "ledger.json"
    assert LedgerFile(path).load_state() is None
    assert "no safety ledger file at" in caplog.text and "first start" in caplog.text
    assert _evicted(_controller(path, [1000.0]).run_once()) == 2
    assert len(SafetyLedger.from_json(path.read_text()).evictions) == 2


@pytest.mark.parametrize("content", [b'{"evictions":[1', b"\xff\xfe not utf-8", b"[]"],
                         ids=["cut short", "not UTF-8", "not a ledger"])
def test_an_unreadable_file_holds_the_budget_for_a_window_and_is_saved_over(tmp_path, caplog, content):
    path, clock = tmp_path / "ledger.json", [1000.0]
    path.write_bytes(content)
    rec = _controller(path, clock)
    assert _evicted(rec.run_once()) == 0
    assert "unreadable (ledger file" in caplog.text and "taken as spent" in caplog.text
    clock[0] += 60
    assert _evicted(rec.run_once()) == 0
    assert SafetyLedger.from_json(path.read_text()).evictions == (1000.0, 1000.0)   # saved over the unreadable one
    clock[0] = 1000.0 + WINDOW
    assert _evicted(_controller(path, clock).run_once()) == 2   # a restart inherits it, until its window passed


def test_a_file_that_cannot_be_opened_is_unreadable_not_a_crash(tmp_path):
    folder = tmp_path / "ledger.json"
    folder.mkdir()   # made a folder after the start's check
    with pytest.raises(ValueError, match="ledger.json"):
        LedgerFile(folder).load_state()


def test_the_write_is_atomic_a_temporary_file_fsynced_then_renamed_over(tmp_path, monkeypatch):
    path = tmp_path / "ledger.json"
    path.write_text("old")
    calls: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append("fsync"), real_fsync(fd))[1])

    def replace(src, dst):
        calls.append("replace")
        assert os.path.dirname(src) == str(tmp_path) and path.read_text() == "old"   # the old one until renamed
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    assert LedgerFile(path).save_state('{"evictions":[1.0]}') == 0
    assert path.read_text() == '{"evictions":[1.0]}'
    assert calls[:2] == ["fsync", "replace"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.json"]   # no temporary file left


@pytest.mark.parametrize("exc, reason", [(PermissionError(errno.EACCES, "Permission denied"), "refused"),
                                         (OSError(errno.ENOSPC, "No space left on device"), "error")])
def test_a_failed_write_leaves_the_old_file_and_no_temporary_one(tmp_path, monkeypatch, exc, reason):
    path = tmp_path / "ledger.json"
    path.write_text("old")

    def fail(src, dst):
        raise exc

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(LedgerNotSaved) as err:
        LedgerFile(path).save_state("{}")
    assert err.value.reason == reason
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["ledger.json"]


def test_evictions_wait_while_the_file_cannot_be_written(tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    handover = LedgerHandover(None, file=LedgerFile(gone / "ledger.json"))
    handover.inherit(SafetyLedger())
    gone.rmdir()   # the volume went away
    migrate = _planner(SNAP, None, POLICY, None)[0].actions[:1]
    review = handover.review(SafetyGuard(POLICY.safety), migrate, SNAP, SafetyLedger(), 1000.0)
    assert not review.accepted and isinstance(review.rejected[0][1], EvictionBudgetExhausted)
    assert handover.metrics.write_failures.labels(reason="error")._value.get() == 1


def test_with_the_lease_too_a_leader_merges_both_and_saves_to_both(tmp_path):
    path, clock = tmp_path / "ledger.json", [1000.0]
    lease = InMemoryLease(duration_s=15)
    lease.state = SafetyLedger(evictions=(990.0,)).to_json()    # the previous leader's, on the Lease
    path.write_text(SafetyLedger(evictions=(995.0,)).to_json())   # this pod's own, before its restart
    rec = _controller(path, clock, elector=InMemoryLeaderElector(lease, "b"))
    assert _evicted(rec.run_once()) == 0   # the budget of 2 is spent by the two together
    for text in (lease.state, path.read_text()):
        assert SafetyLedger.from_json(text).evictions == (990.0, 995.0)


def test_a_once_run_saves_a_held_budget_over_an_unreadable_file_before_it_exits(tmp_path, monkeypatch):
    path, clock = tmp_path / "ledger.json", [1000.0]
    path.write_text("{")
    rec = _controller(path, clock)
    monkeypatch.setattr(run_cmd, "build_reconciler", lambda args, metrics: rec)
    args = argparse.Namespace(interval="30s", metrics_port=0, once=True, listen_address="127.0.0.1")
    assert run_cmd.run(args) == 0
    # the next cron run finds the budget held from this one's review, not a file it must hold for again
    assert SafetyLedger.from_json(path.read_text()).evictions == (1000.0, 1000.0)


def test_neither_a_lease_nor_a_file_is_warned_of_at_start_unless_it_is_a_dry_run(tmp_path, caplog):
    for flags, warned in ((_flags(None), True), (_flags(None, dry_run=True), False),
                          (_flags(None, leader_elect=True), False), (_flags(tmp_path / "l.json"), False)):
        caplog.clear()
        keep_ledger(Reconciler(source=_Src(), actuator=_Act(), policy=POLICY), flags, ControllerMetrics())
        assert ("safety budgets do not survive a restart" in caplog.text) is warned, flags
