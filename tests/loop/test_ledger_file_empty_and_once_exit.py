"""`--ledger-file`: an empty file is an unreadable ledger, not a first start; a `--once` run whose last save of the
ledger fails exits non-zero.

An empty (zero-byte) file was read as a fresh ledger with the full eviction budget, while a file of blanks held the
budget. gputide never writes an empty file (a missing file is the first start), so one made by `touch` or created
ahead on a volume says nothing of what the last run spent. A `--once` run has no next cycle to try a failed save
again: the cooldowns it recorded after acting were lost to the next cron run, which could repeat the same action at
once, and the run exited 0."""

from __future__ import annotations

import argparse
import logging

import pytest
from prometheus_client import CollectorRegistry
from test_ledger_file import POLICY, _Act, _evicted, _planner, _Src

from balancer.actions import Plan, TaintNode
from balancer.actuate.leader import InMemoryLeaderElector, InMemoryLease, LedgerNotSaved
from balancer.cmd import run as run_cmd
from balancer.cmd._run_parts import keep_ledger
from balancer.ledger_file import LedgerFile
from balancer.ledger_handover import LedgerHandover
from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics
from balancer.safety import SafetyLedger


def _taint(s, f, p, st):   # an action that evicts nothing: its cooldown is saved only after it is done
    return Plan(actions=(TaintNode(node="n1", reason="hot", expected_gain=1.0),)), st


def _controller(path, clock, planner=_planner) -> Reconciler:
    metrics = ControllerMetrics(CollectorRegistry())
    rec = Reconciler(source=_Src(), actuator=_Act(), policy=POLICY, planner=planner, clock=lambda: clock[0],
                     metrics=metrics)
    keep_ledger(rec, argparse.Namespace(ledger_file=str(path), leader_elect=False, dry_run=False), metrics)
    return rec


def test_an_empty_ledger_file_holds_the_budget_like_an_unreadable_one_and_says_it_is_empty(tmp_path, caplog):
    path, clock = tmp_path / "ledger.json", [1000.0]
    path.write_bytes(b"")   # `touch`, or a volume's file created ahead
    with pytest.raises(ValueError, match="empty"):
        LedgerFile(path).load_state()
    rec = _controller(path, clock)
    assert _evicted(rec.run_once()) == 0
    assert "unreadable (ledger file" in caplog.text and "the file is empty" in caplog.text
    clock[0] += 60
    assert _evicted(rec.run_once()) == 0
    assert SafetyLedger.from_json(path.read_text()).evictions == (1000.0, 1000.0)   # the held budget, saved over it


def test_an_empty_ledger_on_the_lease_is_still_no_ledger(tmp_path):
    lease = InMemoryLease(duration_s=15)
    lease.state = ""
    handover = LedgerHandover(InMemoryLeaderElector(lease, "b"))
    assert handover.inherit(SafetyLedger()) == SafetyLedger() and not handover.unreadable


def _once(rec, monkeypatch) -> int:
    monkeypatch.setattr(run_cmd, "build_reconciler", lambda args, metrics: rec)
    return run_cmd.run(argparse.Namespace(interval="30s", metrics_port=0, once=True, listen_address="127.0.0.1"))


def test_a_once_run_whose_last_ledger_save_fails_exits_non_zero_and_says_why(tmp_path, monkeypatch, caplog):
    path, clock = tmp_path / "ledger.json", [1000.0]
    rec = _controller(path, clock, planner=_taint)

    def refuse(self, text):
        raise LedgerNotSaved("refused", f"{self.path}: read-only file system")

    monkeypatch.setattr(LedgerFile, "save_state", refuse)
    assert _once(rec, monkeypatch) == run_cmd.EXIT_LEDGER_NOT_SAVED != 0
    assert any(r.levelno == logging.ERROR and "not saved where the next run reads it" in r.getMessage()
               for r in caplog.records)
    assert not path.exists()   # what the next cron run inherits: not the taint's cooldown


def test_a_once_run_that_saves_its_ledger_exits_0_with_the_cooldown_in_the_file(tmp_path, monkeypatch):
    path, clock = tmp_path / "ledger.json", [1000.0]
    assert _once(_controller(path, clock, planner=_taint), monkeypatch) == 0
    assert SafetyLedger.from_json(path.read_text()).last_action   # the taint's cooldown, for the next run


def test_a_once_run_over_an_unreadable_file_that_never_reviewed_is_not_a_failed_save(tmp_path):
    path = tmp_path / "ledger.json"
    path.write_text("{")
    handover = LedgerHandover(None, file=LedgerFile(path))
    handover.inherit(SafetyLedger())
    handover.unsaved = True   # e.g. a Lease's ledger the file lacks, in a cycle that held still before its review
    assert handover.saved_before_exit(SafetyLedger()) and path.read_text() == "{"   # left for the next run to hold
