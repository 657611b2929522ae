"""Policy files as operators break them, met the three ways the controller meets a file: `gputide run` at start
(config.load: an InputError, exit 2), the running controller's reload (PolicyReloader.poll: the running policy
stays, gputide_policy_last_reload_successful 0, the reason in `last_error`) and `gputide check` (exit 2). The same
file never passes one and fails another, and the error says where in the file it went wrong."""

from __future__ import annotations

import os

import pytest
from prometheus_client import CollectorRegistry

from balancer import config
from balancer.app.policy_reload import PolicyReloader
from balancer.cli import main
from balancer.errors import InputError

HEAD = "apiVersion: gputide/v1alpha1\nkind: BalancerPolicy\nmetadata: {name: p}\n"
GOOD = HEAD + "spec:\n  safety: {evictionBudget: 20}\n"


def _write(path, text: str) -> None:
    path.write_text(text)
    st = os.stat(path)   # two writes within one clock tick must still read as a change
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))


def three_ways(tmp_path, capsys, text: str) -> tuple[str, str, str]:
    """(start's error, reload's error, check's stderr) for a policy file holding `text`; each must refuse it."""
    path = tmp_path / "policy.yaml"
    _write(path, GOOD)
    reg = CollectorRegistry()
    r = PolicyReloader(path, config.load(path), registry=reg)
    _write(path, text)
    with pytest.raises(InputError) as start:
        config.load(path)
    assert r.poll() is None and r.current.safety.eviction_budget == 20
    assert reg.get_sample_value("gputide_policy_last_reload_successful") == 0
    assert main(["check", str(path)]) == 2
    return str(start.value), r.last_error, capsys.readouterr().err


@pytest.mark.parametrize(("value", "said"), [
    ("2026-13-45", "'2026-13-45' is not a valid !!timestamp (month must be in 1..12)"),
    ("!!int abc", "'abc' is not a valid !!int"),
    ("!!bool maybe", "'maybe' is not a valid !!bool"),
    ("!!timestamp soon", "'soon' is not a valid !!timestamp"),
    ("9" * 5000, "is not a valid !!int"),
], ids=["an impossible date", "a tagged int", "a tagged bool", "a tagged timestamp", "an int past 4300 digits"])
def test_a_value_its_yaml_type_cannot_hold_is_refused_at_start_at_reload_and_by_check(tmp_path, capsys, value, said):
    # PyYAML lets ValueError/KeyError/AttributeError out of its constructors: a traceback and exit 1 at start, and
    # at reload an exception out of poll() that left the success gauge at 1 and the file never tried again
    start, reload, check = three_ways(tmp_path, capsys, HEAD + f"spec:\n  forecast: {{timezone: {value}}}\n")
    for text in (start, reload, check):
        assert "policy.yaml" in text and said in text, text


@pytest.mark.parametrize(("text", "said"), [
    (HEAD + "spec:\n  safety:\n\tevictionBudget: 3\n", "found character '\\t' that cannot start any token, line 6 "
                                                      "column 1"),
    (HEAD + "spec:\n  safety: {evictionBudget: 3, cool", "expected ',' or '}', but got '<stream end>', line 5"),
    (HEAD + "spec:\n  safety:\n    evictionBudget: 3\n    cooldownS", "could not find expected ':', line 7"),
], ids=["a tab indenting a field", "an editor's write cut inside a flow mapping", "... after a key"])
def test_unparseable_yaml_says_what_was_found_and_at_which_line(tmp_path, capsys, text, said):
    # PyYAML's first line was only its context ('while scanning for the next token'), naming no line at all
    for message in three_ways(tmp_path, capsys, text):
        assert "valid YAML" in message and said in message, message


SERVICES = "apiVersion: gputide/v1alpha1\nkind: ServiceProfiles\nservices:\n  - {name: a, rpsPerReplica: 3}\n"


def _config_map(name: str, key: str, text: str) -> str:
    body = text.strip().replace("\n", "\n    ")
    return f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata:\n  {key}: |\n    {body}\n"


def test_check_reports_a_wrong_gputide_api_version_instead_of_passing_over_it(tmp_path, capsys):
    # a policy of another gputide/ version was taken for another tool's object and skipped: a manifest that also
    # carried valid service profiles passed, though the controller refuses that policy at start and at reload
    wrong = GOOD.replace("gputide/v1alpha1", "gputide/v1beta1")
    manifest = tmp_path / "m.yaml"
    manifest.write_text(_config_map("gputide-policy", "policy.yaml", wrong) + "---\n"
                        + _config_map("gputide-services", "services.yaml", SERVICES))
    bare = tmp_path / "policy.yaml"
    bare.write_text(wrong)
    with pytest.raises(InputError, match="field 'apiVersion'"):
        config.load(bare)
    for path in (manifest, bare):
        assert main(["check", str(path)]) == 2
        err = capsys.readouterr().err
        assert "field 'apiVersion': invalid value 'gputide/v1beta1'; allowed: gputide/v1alpha1" in err, err
    manifest.write_text(_config_map("gputide-policy", "policy.yaml", GOOD) + "---\napiVersion: apps/v1\n"
                        "kind: Deployment\nmetadata: {name: x}\n")
    assert main(["check", str(manifest)]) == 0   # other tools' objects are still left alone


@pytest.mark.parametrize("text", [GOOD + "---\n" + GOOD, GOOD + "---\n"], ids=["two policies", "a trailing ---"])
def test_a_policy_file_of_several_yaml_documents_fails_check_as_it_fails_start_and_reload(tmp_path, capsys, text):
    # check read every document and passed each, while gputide run reads one ('expected a single document')
    _, _, check = three_ways(tmp_path, capsys, text)
    assert "policy.yaml" in check and "of 2 YAML documents" in check and "'---' starts another" in check, check


def test_a_telemetry_age_gputide_run_refuses_at_start_is_refused_by_check_and_at_reload(tmp_path, capsys):
    # config allows spec.safety.maxTelemetryAgeS from 1 s, gputide run only from 45 s (less holds a healthy
    # controller still): check said ok and a reload applied a file the next start refuses with exit 2
    from balancer.cmd.run import stale_after

    path = tmp_path / "policy.yaml"
    _write(path, GOOD)
    reg = CollectorRegistry()
    r = PolicyReloader(path, config.load(path), registry=reg, check=lambda p: stale_after(None, p, str(path)))
    _write(path, HEAD + "spec:\n  safety: {maxTelemetryAgeS: 30}\n")
    with pytest.raises(InputError, match="maxTelemetryAgeS"):
        stale_after(None, config.load(path), str(path))   # what gputide run does at start
    assert r.poll() is None and r.current.safety.max_telemetry_age_s == 120
    assert reg.get_sample_value("gputide_policy_last_reload_successful") == 0
    assert "spec.safety.maxTelemetryAgeS" in r.last_error and ">= 45" in r.last_error
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: field 'spec.safety.maxTelemetryAgeS': invalid value 30.0; allowed: >= 45" in err, err
    _write(path, HEAD + "spec:\n  safety: {maxTelemetryAgeS: 45}\n")
    assert r.poll().safety.max_telemetry_age_s == 45 and main(["check", str(path)]) == 0


@pytest.mark.parametrize(("text", "said"), [("", "'an empty file'"), ("# nothing yet\n", "'an empty file'"),
                                            ("- safety\n", "'a YAML list'")], ids=["empty", "comments", "a list"])
def test_an_empty_file_is_called_empty(tmp_path, capsys, text, said):
    # an editor that truncates before it writes leaves an empty file for a moment: the error said 'NoneType'
    start, reload, _ = three_ways(tmp_path, capsys, text)
    for message in (start, reload):
        assert f"field '(document)': invalid value {said}; allowed: a mapping with apiVersion" in message, message


def test_check_leaves_alone_a_configmap_entry_of_another_tool_that_is_not_yaml(tmp_path, capsys):
    # an nginx.conf indented with tabs, or a script, in a ConfigMap of the same manifest failed the whole check
    manifest = tmp_path / "m.yaml"
    manifest.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: nginx}\ndata:\n"
                        '  nginx.conf: "server {\\n\\tlisten 80;\\n}\\n"\n  run.sh: |\n    echo "a: b: c"\n---\n'
                        + _config_map("gputide-policy", "policy.yaml", GOOD))
    assert main(["check", str(manifest)]) == 0, capsys.readouterr().err
    assert "data.policy.yaml): ok" in capsys.readouterr().out
    manifest.write_text(_config_map("gputide-policy", "policy.yaml", GOOD.replace("  safety", "\tsafety")))
    assert main(["check", str(manifest)]) == 2   # ours, unparseable: still an error
    assert "data.policy.yaml): field '(document)'" in capsys.readouterr().err


def test_an_edit_between_the_start_load_and_the_reloader_is_applied_at_the_first_poll(tmp_path, caplog):
    # gputide run loads the policy, then builds its Kubernetes client, informers and forecaster before the reloader:
    # the reloader took the file's signature then, so an edit landing in between passed for the running policy
    path = tmp_path / "policy.yaml"
    _write(path, GOOD)
    started = config.load(path)
    _write(path, HEAD + "spec:\n  safety: {evictionBudget: 3}\n")
    reg = CollectorRegistry()
    r = PolicyReloader(path, started, registry=reg)
    assert r.poll().safety.eviction_budget == 3 and r.poll() is None
    unchanged = PolicyReloader(path, config.load(path), registry=CollectorRegistry())
    caplog.clear()
    assert unchanged.poll() is None and not caplog.messages   # the first poll of an unchanged file says nothing


def test_a_namespace_yaml_reads_as_a_boolean_is_told_to_be_quoted(tmp_path, capsys):
    # `protectedNamespaces: [on]` is [True] to YAML 1.1: the error showed [True] and asked for strings, no more
    for message in three_ways(tmp_path, capsys, HEAD + "spec:\n  safety: {protectedNamespaces: [kube-system, on]}\n"):
        assert "spec.safety.protectedNamespaces" in message and "quote a name YAML reads as a boolean" in message
    _write(tmp_path / "policy.yaml", HEAD + "spec:\n  safety: {protectedNamespaces: [kube-system, 'on']}\n")
    assert config.load(tmp_path / "policy.yaml").safety.protected_namespaces == ("kube-system", "on")
