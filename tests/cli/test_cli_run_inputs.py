"""`gputide run` (and the commands sharing its helpers) refuse unusable input before any work, with exit code 2 and
one line naming the flag or file, the value and what is allowed; found by an audit:

* `--interval inf` (float() reads `inf`, `nan`, `1e999`) ran one cycle and then waited forever;
* a kubeconfig that is not UTF-8, a folder, empty, not YAML, a list or without current-context was a
  UnicodeDecodeError, IsADirectoryError, YAML or TypeError traceback in `run`, `schedule` and `power-cap-agent`;
* `--audit-log` naming a folder or a path that cannot be written was a traceback once the reconciler was built;
* `--forecast-model`, `--forecast-history` and `--demand-query` without `--services` were silently ignored.
"""

from __future__ import annotations

import argparse

import pytest
import yaml

from balancer.cli import main
from balancer.cmd import _args
from balancer.cmd import run as run_cmd
from balancer.cmd._args import parse_interval
from balancer.errors import InputError

PROM = "http://127.0.0.1:1"   # nothing answers there: every case must fail before a query
RUN = ["run", "--prometheus", PROM, "--dry-run", "--once", "--metrics-port", "0"]
KUBECONFIG = {"apiVersion": "v1", "kind": "Config", "current-context": "f",
              "contexts": [{"name": "f", "context": {"cluster": "f", "user": "f"}}],
              "clusters": [{"name": "f", "cluster": {"server": "http://127.0.0.1:1"}}],
              "users": [{"name": "f", "user": {}}]}


def capacity_files(tmp_path) -> list[str]:
    """`--services FILE --policy FILE`: one service, and a policy that turns capacity shifting on."""
    (tmp_path / "services.yaml").write_text("apiVersion: gputide/v1alpha1\nkind: ServiceProfiles\nservices:\n"
                                            "  - {name: chat, rpsPerReplica: 3}\n")
    (tmp_path / "policy.yaml").write_text("apiVersion: gputide/v1alpha1\nkind: BalancerPolicy\nmetadata: {name: t}\n"
                                          "spec: {capacity: {enabled: true}}\n")
    return ["--services", str(tmp_path / "services.yaml"), "--policy", str(tmp_path / "policy.yaml")]


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("gputide: error: "), err
    return lines[0]


@pytest.mark.parametrize("text", ["inf", "+inf", "infinity", "1e999", "1e999s", "infm", "nan", "nans", "-nan",
                                  "0", "0s", "-1", "-30s", "", "s", "soon"])
def test_a_duration_that_is_not_finite_and_positive_is_refused(text):
    with pytest.raises(InputError) as err:
        parse_interval(text, "--interval")
    assert err.value.field == "--interval" and "finite positive duration" in err.value.allowed


def test_durations_in_every_unit_still_parse():
    assert [parse_interval(t) for t in ("500ms", "30s", "30", "1.5m", "2h", "14d")] == [
        0.5, 30.0, 30.0, 90.0, 7200.0, 14 * 86400.0]
    assert parse_interval("0s", allow_zero=True) == 0.0
    with pytest.raises(InputError):
        parse_interval("inf", allow_zero=True)


@pytest.mark.parametrize("argv, flag", [
    (["--interval", "inf"], "--interval"),
    (["--interval", "nan"], "--interval"),
    (["--interval", "0"], "--interval"),
    (["--interval=-30s"], "--interval"),
    (["CAPACITY", "--forecast-history", "inf"], "--forecast-history"),
], ids=["inf", "nan", "zero", "negative", "infinite forecast history"])
def test_run_refuses_an_interval_that_is_not_finite_and_positive(tmp_path, capsys, argv, flag):
    value = argv[-1].split("=")[-1]
    assert main(RUN + [b for a in argv for b in (capacity_files(tmp_path) if a == "CAPACITY" else [a])]) == 2
    line = one_error_line(capsys)
    assert f"field '{flag}'" in line and repr(value) in line and "allowed: a finite positive duration" in line


BAD_KUBECONFIGS = [
    pytest.param(b"\xff\xfe\x00a", "not UTF-8", id="not UTF-8"),
    pytest.param(None, "a folder", id="a folder"),
    pytest.param(b"", "empty", id="empty"),
    pytest.param(b"clusters: [\n", "not YAML", id="not YAML"),
    pytest.param(b"- a\n- b\n", "a YAML list, not a mapping", id="a list"),
    pytest.param(b"just words\n", "a YAML str, not a mapping", id="a scalar"),
    pytest.param(yaml.safe_dump({k: v for k, v in KUBECONFIG.items() if k != "current-context"}).encode(),
                 "no current-context", id="no current-context"),
    # nine anchors of nine aliases: a few hundred bytes that stand for 387 million values (safe_load ran for ever)
    pytest.param(("a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8))).encode(),
        "aliases that expand to", id="alias bomb"),
    pytest.param(b"[" * 5000 + b"]" * 5000, "nested too deeply", id="deep nesting"),
]


def bad_kubeconfig(tmp_path, content: bytes | None) -> str:
    path = tmp_path / "kubeconfig"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    return str(path)


@pytest.mark.parametrize("command", [
    pytest.param(["run", "--prometheus", PROM, "--once", "--metrics-port", "0"], id="run"),
    pytest.param(["schedule", "--once", "--metrics-port", "0"], id="schedule"),
    pytest.param(["power-cap-agent", "--node", "n", "--once", "--port", "0"], id="power-cap-agent"),
])
@pytest.mark.parametrize("content, why", BAD_KUBECONFIGS)
def test_an_unreadable_kubeconfig_exits_2_naming_it(tmp_path, capsys, monkeypatch, command, content, why):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    path = bad_kubeconfig(tmp_path, content)
    assert main(command + ["--kubeconfig", path]) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"gputide: error: {path}: field '--kubeconfig': invalid value '{path}'; allowed: "), line
    assert f"({why}" in line, line


def default_kubeconfig(monkeypatch, path: str) -> None:
    """$KUBECONFIG (else ~/.kube/config) as the client reads it: it took the variable when first imported."""
    from kubernetes.config import kube_config

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", path)


def test_a_default_kubeconfig_the_client_cannot_read_exits_2_naming_kubeconfig(tmp_path, capsys, monkeypatch):
    """$KUBECONFIG (or ~/.kube/config) is read by the client itself: what it raises is one line too."""
    default_kubeconfig(monkeypatch, bad_kubeconfig(tmp_path, b"\xff\xfe\x00a"))
    assert main(["run", "--prometheus", PROM, "--once", "--metrics-port", "0"]) == 2
    line = one_error_line(capsys)
    assert "field '--kubeconfig'" in line and "allowed: a usable Kubernetes configuration" in line
    assert "UnicodeDecodeError" in line, line


def test_certificate_data_the_client_cannot_decode_exits_2_naming_the_kubeconfig(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    doc = yaml.safe_load(yaml.safe_dump(KUBECONFIG))
    doc["clusters"][0]["cluster"] = {"server": "https://127.0.0.1:1", "certificate-authority-data": "!!!notbase64"}
    path = bad_kubeconfig(tmp_path, yaml.safe_dump(doc).encode())
    assert main(["run", "--prometheus", PROM, "--once", "--metrics-port", "0", "--kubeconfig", path]) == 2
    assert "field '--kubeconfig'" in one_error_line(capsys)


def test_a_dry_run_of_capacity_shifting_with_an_unreadable_default_kubeconfig_runs_blind(tmp_path, monkeypatch):
    """It tries the default configuration read-only and warns when there is none; one it cannot read is the same."""
    default_kubeconfig(monkeypatch, bad_kubeconfig(tmp_path, b"\xff\xfe\x00a"))
    rec = run_cmd.build_reconciler(parse(capacity_files(tmp_path)), metrics())
    assert rec.source.workload_overrides is None


def test_a_good_kubeconfig_passes_the_check(tmp_path):
    path = bad_kubeconfig(tmp_path, yaml.safe_dump(KUBECONFIG).encode())
    assert _args.kubeconfig_file(path) == path and run_cmd.kube_client(path) is not None


@pytest.mark.parametrize("where, why", [
    ("{tmp}", "a folder"),
    ("{tmp}/no/such/audit.jsonl", "No such file or directory"),
    ("{tmp}/file/audit.jsonl", "Not a directory"),
    ("/proc/gputide-audit.jsonl", ""),   # not writable whoever runs it (root too)
], ids=["a folder", "a missing folder", "under a file", "not writable"])
def test_an_audit_log_that_cannot_be_appended_to_exits_2_before_any_work(tmp_path, capsys, where, why):
    (tmp_path / "file").write_text("")
    path = where.replace("{tmp}", str(tmp_path))
    assert main(RUN + ["--audit-log", path]) == 2
    line = one_error_line(capsys)
    assert f"field '--audit-log': invalid value '{path}'; allowed: a file this process can append to" in line, line
    assert why in line, line


def test_an_audit_log_that_can_be_appended_to_is_kept(tmp_path):
    log = tmp_path / "audit.jsonl"
    log.write_text('{"old": 1}\n')
    assert _args.appendable_file(str(log), "--audit-log") == str(log)
    assert log.read_text() == '{"old": 1}\n'


@pytest.mark.parametrize("argv", [["--forecast-model", "persistence"], ["--forecast-model", "prophet"],
                                  ["--forecast-history", "7d"], ["--demand-query", "sum(rps)"]],
                         ids=["model", "unknown model", "history", "demand query"])
def test_forecast_flags_without_services_exit_2_instead_of_being_ignored(capsys, argv):
    assert main(RUN + argv) == 2
    line = one_error_line(capsys)
    assert f"field '{argv[0]}': invalid value '{argv[1]}'; allowed: only with --services FILE" in line, line


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    run_cmd.register(parser.add_subparsers())
    return parser.parse_args(["run", "--prometheus", PROM, "--dry-run", *argv])


def metrics():
    from balancer.metrics import ControllerMetrics

    return ControllerMetrics()


def test_forecast_defaults_still_apply_with_services(tmp_path):
    rec = run_cmd.build_reconciler(parse(capacity_files(tmp_path)), metrics())
    assert rec.forecaster.online.model == "mstl" and rec.forecaster.history.days == 14.0
