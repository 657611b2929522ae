"""The short soak (1 simulated day, 128 GPUs, every fault class once) through the real Prometheus: every
invariant holds, every fault class was injected, and each class's alert fired and cleared."""

from __future__ import annotations

import contextlib
import json
import logging
import shutil

import pytest
from _pytest.logging import LogCaptureHandler

from balancer.app.soak import SoakConfig, run_soak
from balancer.app.soak_faults import fault_classes

pytestmark = pytest.mark.integration


@contextlib.contextmanager
def log_records_not_kept():
    """The soak's log lines go to stderr (which pytest captures as text), as `gputide soak`'s do, instead of into
    pytest's log capture: that keeps every record of a fixture's setup until its test ends, arguments included (an
    exception, and the frames of its traceback with the controller's and the client's locals), which read as about
    3-5 MiB per simulated day of memory growth in the soak's own process."""
    root = logging.getLogger()
    capture = [h for h in root.handlers if isinstance(h, LogCaptureHandler)]
    plain = logging.StreamHandler()
    for h in capture:
        root.removeHandler(h)
    root.addHandler(plain)
    try:
        yield
    finally:
        root.removeHandler(plain)
        for h in capture:
            root.addHandler(h)


@pytest.fixture(scope="module")
def summary(tmp_path_factory):
    if shutil.which("prometheus") is None:
        pytest.skip("prometheus binary not installed")
    out = tmp_path_factory.mktemp("soak")
    with log_records_not_kept():
        result = run_soak(SoakConfig.short_run(seed=3), out, say=lambda _: None)
    result["_out"] = out
    return result


INVARIANTS = ["no workload lost or without a place", "no action on stale data", "no budget exceeded",
              "controller memory flat", "alerts fire and resolve per fault class", "one leader at a time",
              "hot taint renewed without a gap"]


@pytest.mark.parametrize("name", INVARIANTS, ids=lambda n: n.replace(" ", "-"))
def test_invariant_held_and_was_checked(summary, name):
    row = next(r for r in summary["invariants"] if r["invariant"] == name)
    assert row["checked"] > 0, f"{name} was never checked"
    assert row["held"], f"{name}: {row['first_breaches']}"


def test_every_fault_class_was_injected_and_passed(summary):
    by_class = {r["fault"]: r for r in summary["fault_classes"]}
    assert set(by_class) == {f.name for f in fault_classes(with_kube=True)}
    assert all(r["ok"] == r["injected"] for r in by_class.values()), by_class


def test_controller_crashed_mid_migration_and_the_journal_was_recovered(summary):
    rec = next(f for f in summary["faults"] if f["fault"] == "controller_restart")
    assert rec["notes"]["mid_migration"] is True
    assert rec["notes"]["journal_at_crash"] >= 1
    row = next(r for r in summary["invariants"] if r["invariant"].startswith("no workload lost"))
    assert row["held"]   # includes: the journal is empty at the end


def test_leader_change_hands_over_to_another_identity(summary):
    rec = next(f for f in summary["faults"] if f["fault"] == "leader_change")
    assert rec["notes"]["new_leader"] not in (None, rec["notes"]["old_leader"])


def test_the_controller_acted_and_held_still_during_telemetry_faults(summary):
    assert sum(v for k, v in summary["actions"].items() if k.endswith(":applied")) > 0
    assert summary["fail_static_cycles"].get("missing_telemetry", 0) > 0


def test_summary_and_table_are_written(summary):
    out = summary["_out"]
    assert json.loads((out / "soak-summary.json").read_text())["all_held"] is True
    assert "| no budget exceeded | yes |" in (out / "soak-invariants.md").read_text()


def test_hot_taints_were_renewed_through_prometheus(summary):
    # the planner saw the simulated taints' expiry (sim_node_meta) on the snapshot's clock and renewed them
    assert summary["actions"].get("taint_node(renew):applied", 0) > 0, summary["actions"]
