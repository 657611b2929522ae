"""`gputide schedule --once --leader-elect` with the Lease out of reach (CLI audit of session 38): it said "not the
leader: another replica holds the Lease" and exited 0 when none did (the API server unreachable, failing, or refusing
the Lease), so a check or a script took an API server down for a healthy standby. It says the API could not be
reached (or refused), with its error, and exits 3 as a `--once` pass that could not read the API does (the fake API
server, or no server at all, through the command as a user runs it): the Lease's read, and its write (its creation,
none there yet, or its replacement, taking a released Lease over), each answered 503 or 403."""

from __future__ import annotations

import socket

import pytest
import yaml
from fakeapi import FakeKube, node, pod

from balancer.cli import main

UNREACHABLE = 3   # balancer.cmd.schedule.EXIT_UNREACHABLE, as a pass that could not read the API exits


def schedule_once(kubeconfig: str) -> int:
    return main(["schedule", "--kubeconfig", kubeconfig, "--once", "--metrics-port", "0", "--leader-elect",
                 "--lease-namespace", "gputide"])


def a_pending_pod(kube: FakeKube) -> None:
    kube.add(node("n1", 8))
    kube.add(pod("p", "ml", gpus=1, scheduler="gputide", phase="Pending"))


def closed_port() -> int:
    with socket.socket() as s:   # bound then closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_api_server_no_one_can_reach_is_said_so_not_another_replicas_lease(tmp_path, capsys):
    kc = tmp_path / "kc.yaml"
    kc.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "f",
        "clusters": [{"name": "f", "cluster": {"server": f"http://127.0.0.1:{closed_port()}"}}],
        "users": [{"name": "f", "user": {}}], "contexts": [{"name": "f", "context": {"cluster": "f", "user": "f"}}]}))
    assert schedule_once(str(kc)) == UNREACHABLE
    out, err = capsys.readouterr()
    assert "another replica" not in out + err
    line = err.strip().splitlines()[-1]
    assert line.startswith("gputide schedule --once: the Kubernetes API could not be reached for the Lease: lease "
                           "gputide/gputide-scheduler: "), line
    assert "Connection refused" in line and line.endswith("; nothing bound"), line


LEASE = r"/leases/gputide-scheduler$"
CALLS = {"GET": LEASE, "POST": r"/leases$", "PUT": LEASE}   # the Lease's read, creation, replacement


def a_released_lease(kube: FakeKube) -> None:
    """A Lease no replica holds (its holder released it): this replica's try to take it over replaces it."""
    kube.add({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
              "metadata": {"name": "gputide-scheduler", "namespace": "gputide"},
              "spec": {"holderIdentity": "", "leaseDurationSeconds": 15}})


@pytest.mark.parametrize("method", ["GET", "POST", "PUT"],
                         ids=["reading the Lease", "creating it (none yet)", "taking a released one over"])
@pytest.mark.parametrize(("code", "how"), [(503, "could not be reached"), (403, "refused")],
                         ids=["the API server failing", "the Lease forbidden"])
def test_a_lease_the_api_fails_or_refuses_exits_3_naming_the_error(kube: FakeKube, kubeconfig, capsys, method,
                                                                   code, how):
    a_pending_pod(kube)
    if method == "PUT":
        a_released_lease(kube)
    kube.inject(method, CALLS[method], code, count=100)
    assert schedule_once(kubeconfig) == UNREACHABLE
    assert kube.calls(method, CALLS[method])   # the call answered `code` was made (not another's failure)
    out, err = capsys.readouterr()
    assert "another replica" not in out + err
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"gputide schedule --once: the Kubernetes API {how} for the Lease: lease "
                           "gputide/gputide-scheduler: "), line
    assert str(code) in line, line
    assert not kube.calls("POST", r"/binding$")
