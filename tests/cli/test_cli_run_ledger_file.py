"""`gputide run --ledger-file PATH` refuses a path it could never write the safety ledger to before any work, with
exit code 2 and one line naming the flag, the value and what is allowed; a good one is read and written by the
controller's ledger hand-over (balancer/ledger_file.py)."""

from __future__ import annotations

import argparse

import pytest

from balancer.cli import main
from balancer.cmd import run as run_cmd
from balancer.ledger_file import LedgerFile
from balancer.metrics import ControllerMetrics

PROM = "http://127.0.0.1:1"   # nothing answers there: every case must fail before a query
RUN = ["run", "--prometheus", PROM, "--dry-run", "--once", "--metrics-port", "0"]
ALLOWED = "allowed: a file path in an existing folder this process can write in (the file itself need not exist)"


@pytest.mark.parametrize("where, why", [
    ("{tmp}", "a folder"),
    ("{tmp}/no/such/ledger.json", "no such folder"),
    ("{tmp}/file/ledger.json", "under a file, not a folder"),
    ("/proc/gputide-ledger.json", ""),   # a folder no one can create files in (root neither)
], ids=["a folder", "a missing folder", "under a file", "not writable"])
def test_a_ledger_file_that_cannot_be_written_exits_2_before_any_work(tmp_path, capsys, where, why):
    (tmp_path / "file").write_text("")
    path = where.replace("{tmp}", str(tmp_path))
    assert main(RUN + ["--ledger-file", path]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("gputide: error: "), lines
    assert f"field '--ledger-file': invalid value '{path}'; {ALLOWED}" in lines[0], lines[0]
    assert why in lines[0], lines[0]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    run_cmd.register(parser.add_subparsers())
    return parser.parse_args(["run", "--prometheus", PROM, "--dry-run", *argv])


def test_a_good_ledger_file_is_where_the_controller_reads_and_saves_its_ledger(tmp_path):
    path = tmp_path / "ledger.json"
    rec = run_cmd.build_reconciler(parse(["--ledger-file", str(path)]), ControllerMetrics())
    files = [s for s in rec.handover.stores if isinstance(s, LedgerFile)]
    assert [str(f.path) for f in files] == [str(path)]
    assert not path.exists()   # checked, not created: a first start finds no ledger


def test_without_the_flag_no_file_is_kept():
    rec = run_cmd.build_reconciler(parse([]), ControllerMetrics())
    assert not any(isinstance(s, LedgerFile) for s in rec.handover.stores)
