"""The policy file is re-read while the controller runs: a valid edit applies from the next cycle, an invalid one
leaves the running policy in force and says why, and the parts built at start wait for a restart."""

from __future__ import annotations

import os
import textwrap

from prometheus_client import CollectorRegistry
from test_loop_reconciler import Recording, cycles, hot_sim, loop_for

from balancer.actuate.sim import SimActuator
from balancer.app.policy_reload import PolicyReloader
from balancer.cli import build_parser
from balancer.cmd.run import build_reconciler
from balancer.config import BalancerPolicy, load
from balancer.metrics import ControllerMetrics
from balancer.safety import SafetyGuard


def write(path, spec: str) -> None:
    text = "apiVersion: gputide/v1alpha1\nkind: BalancerPolicy\nmetadata: {name: p}\nspec:\n"
    path.write_text(text + textwrap.indent(textwrap.dedent(spec), "  "))
    st = os.stat(path)   # two writes within one clock tick must still read as a change
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))


def reloader(tmp_path, spec: str = "safety: {evictionBudget: 20}\n"):
    path = tmp_path / "policy.yaml"
    write(path, spec)
    reg = CollectorRegistry()
    return path, PolicyReloader(path, load(path), registry=reg, clock=lambda: 1234.0), reg


def test_an_unchanged_file_is_not_loaded_again(tmp_path):
    _, r, reg = reloader(tmp_path)
    assert r.poll() is None and r.poll() is None
    assert reg.get_sample_value("gputide_policy_last_reload_successful") == 1
    assert reg.get_sample_value("gputide_policy_last_reload_success_timestamp_seconds") == 1234.0


def test_a_valid_edit_is_returned_once_and_applies(tmp_path):
    path, r, reg = reloader(tmp_path)
    write(path, "safety: {evictionBudget: 3, protectedNamespaces: [prod]}\n")
    new = r.poll()
    assert new is not None and new.safety.eviction_budget == 3 and new.safety.protected_namespaces == ("prod",)
    assert r.poll() is None   # no change since
    assert reg.get_sample_value("gputide_policy_restart_required") == 0


def test_an_invalid_edit_keeps_the_running_policy_and_names_file_field_and_value(tmp_path, caplog):
    path, r, reg = reloader(tmp_path)
    write(path, "safety: {evictionBudget: -4}\n")
    assert r.poll() is None
    assert reg.get_sample_value("gputide_policy_last_reload_successful") == 0
    assert str(path) in r.last_error and "spec.safety.evictionBudget" in r.last_error and "-4" in r.last_error
    assert r.current.safety.eviction_budget == 20
    assert r.poll() is None and sum("not reloaded" in m for m in caplog.messages) == 1   # logged once per content
    write(path, "safety: {evictionBudget: 5}\n")
    assert r.poll().safety.eviction_budget == 5
    assert reg.get_sample_value("gputide_policy_last_reload_successful") == 1


def test_a_deleted_or_unparseable_file_keeps_the_running_policy(tmp_path):
    path, r, reg = reloader(tmp_path)
    path.write_text("spec: [unclosed\n")
    assert r.poll() is None and "valid YAML" in r.last_error
    path.unlink()
    assert r.poll() is None and r.current.safety.eviction_budget == 20
    assert reg.get_sample_value("gputide_policy_last_reload_successful") == 0


def test_parts_built_at_start_wait_for_a_restart_and_the_rest_applies(tmp_path):
    path, r, reg = reloader(tmp_path)
    write(path, """\
        safety: {evictionBudget: 7}
        capacity: {enabled: true}
        colocation: {latencySloS: 2.0, sloPressure: 0.9}
        """)
    new = r.poll()
    assert new.safety.eviction_budget == 7 and new.colocation.slo_pressure == 0.9
    assert new.capacity == BalancerPolicy().capacity and new.colocation.latency_slo_s == 0.5
    assert reg.get_sample_value("gputide_policy_restart_required") == 1
    write(path, "safety: {evictionBudget: 7}\ncolocation: {sloPressure: 0.9}\n")   # back to what runs
    assert r.poll() is None
    assert reg.get_sample_value("gputide_policy_restart_required") == 0


def test_a_configmap_update_swaps_a_link_and_is_seen(tmp_path):
    # the kubelet writes a new timestamped folder and renames `..data` onto it; the mounted path is a link through it
    mount = tmp_path / "mount"
    mount.mkdir()
    for version, budget in (("..v1", 20), ("..v2", 9)):
        (mount / version).mkdir()
        write(mount / version / "policy.yaml", f"safety: {{evictionBudget: {budget}}}\n")
    (mount / "..data").symlink_to("..v1")
    (mount / "policy.yaml").symlink_to("..data/policy.yaml")
    r = PolicyReloader(mount / "policy.yaml", load(mount / "policy.yaml"), registry=CollectorRegistry())
    (mount / "..tmp").symlink_to("..v2")
    os.replace(mount / "..tmp", mount / "..data")
    assert r.poll().safety.eviction_budget == 9


def test_the_running_loop_obeys_an_emergency_stop_set_in_the_policy_file(tmp_path):
    path, r, _ = reloader(tmp_path, "safety: {emergencyStop: false}\n")
    sim = hot_sim()
    actuator = Recording(SimActuator(sim))
    policy = r.current
    rec, _ = loop_for(sim, actuator=actuator, policy=policy, guard=SafetyGuard(policy.safety), policy_source=r.poll)
    write(path, "safety: {emergencyStop: true}\n")
    assert {c.reason for c in cycles(sim, rec, 4)} == {"emergency_stop"}
    assert not actuator.calls and rec.guard.policy.emergency_stop
    write(path, "safety: {emergencyStop: false}\n")
    cycles(sim, rec, 4)
    assert actuator.calls


def test_gputide_run_follows_its_policy_file_except_with_once(tmp_path):
    path, _, _ = reloader(tmp_path)
    base = ["run", "--prometheus", "http://127.0.0.1:9", "--dry-run", "--policy", str(path)]
    rec = build_reconciler(build_parser().parse_args(base), ControllerMetrics())
    write(path, "safety: {evictionBudget: 2}\n")
    rec._reload_policy()
    assert rec.policy.safety.eviction_budget == 2 and rec.guard.policy.eviction_budget == 2
    once = build_reconciler(build_parser().parse_args([*base, "--once"]), ControllerMetrics())
    assert once.policy_source is None
