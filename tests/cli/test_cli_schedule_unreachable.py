"""`gputide schedule --once` against an API server it cannot reach says so in one line and exits 3 (as `gputide run
--once` does when its cycle holds), nothing bound. It was an uncaught KubeTemporaryError traceback, exit 1."""

from __future__ import annotations

from balancer.cli import main

UNREACHABLE = """apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: x}
contexts:
- name: ctx
  context: {cluster: c, user: u}
current-context: ctx
"""


def test_schedule_once_without_an_api_server_exits_3_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(UNREACHABLE)
    assert main(["schedule", "--once", "--metrics-port", "0", "--kubeconfig", str(kubeconfig)]) == 3
    err = capsys.readouterr().err
    assert "the Kubernetes API could not be read: list pending pods" in err and "nothing bound" in err, err
    assert "Traceback" not in err
