"""`gputide run --once --leader-elect` with the Lease out of reach (CLI audit of session 38): it printed "cycle:
standby not the leader" and exited 0 when no other replica held the Lease (the API server unreachable, failing, or
refusing the Lease), so a check or a script took an API server cut off for a healthy standby. It says the API could
not be reached (or refused), with its error, and exits 3 as a `--once` that held still does, in the words of
`gputide schedule --once` (test_k8s_schedule_lease_unreachable.py); a Lease another replica holds, or wrote first (a
409), is still a standby, exit 0 (the fake API server, or no server at all, through the command as a user runs it)."""

from __future__ import annotations

import socket

import pytest
import yaml
from fakeapi import FakeKube

from balancer.actuate.k8s_leader import LeaseLeaderElector
from balancer.cli import main
from balancer.cmd import run as run_cmd

UNREACHABLE = 3   # balancer.cmd.run.EXIT_FAIL_STATIC, as a --once that held still exits


def run_once(kubeconfig: str, *more: str) -> int:
    # Prometheus on a closed port: a standby never reads it, and the others must not get that far
    return main(["run", "--prometheus", "http://127.0.0.1:9", "--kubeconfig", kubeconfig, "--once", "--metrics-port",
                 "0", "--leader-elect", "--lease-namespace", "gputide", *more])


def closed_port_kubeconfig(tmp_path) -> str:
    with socket.socket() as s:   # bound then closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = tmp_path / "kc.yaml"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "f",
        "clusters": [{"name": "f", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "f", "user": {}}], "contexts": [{"name": "f", "context": {"cluster": "f", "user": "f"}}]}))
    return str(path)


# how the API fails the Lease (None: no server listens at all), what the command calls it, what of the error it shows
CUT_OFF = [(None, "could not be reached", "Connection refused"), (503, "could not be reached", "503"),
           (403, "refused", "403")]


@pytest.mark.parametrize("more", [(), ("--dry-run",)], ids=["acting", "dry run"])
@pytest.mark.parametrize(("code", "how", "error"), CUT_OFF,
                         ids=["no API server", "the API server failing", "the Lease forbidden"])
def test_a_lease_the_api_cannot_give_is_said_so_with_its_error_exit_3(kube: FakeKube, kubeconfig, tmp_path, capsys,
                                                                      more, code, how, error):
    if code is None:
        kubeconfig = closed_port_kubeconfig(tmp_path)
    else:
        kube.inject("GET", r"/leases/gputide-controller$", code, count=100)
    assert run_once(kubeconfig, *more) == UNREACHABLE
    out, err = capsys.readouterr()
    assert "standby" not in out + err and "not the leader" not in out + err and "cycle:" not in out, out + err
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"gputide run --once: the Kubernetes API {how} for the Lease: lease "
                           "gputide/gputide-controller: "), line
    assert error in line and line.endswith("; nothing done"), line
    assert not kube.calls("PUT", r"/leases/") and not kube.calls("POST", r"/leases$")   # no write tried


def test_a_lease_another_replica_holds_is_still_a_standby_exit_0(kube: FakeKube, api, kubeconfig, capsys,
                                                                 monkeypatch):
    """The holder is alive: it renews while the --once run watches its Lease (test_k8s_once_lease_expired.py), and
    the run leaves as a standby at that renewal (its pause between tries taking no real time)."""
    holder = LeaseLeaderElector(api, "gputide-controller", "gputide", "replica-b")
    assert holder.try_acquire_or_renew()
    renewals, build = [], run_cmd.lease_elector

    def make(*args):
        elector = build(*args)
        elector.pause = lambda _s: renewals.append(holder.try_acquire_or_renew())
        return elector

    monkeypatch.setattr(run_cmd, "lease_elector", make)
    assert run_once(kubeconfig) == 0
    out, err = capsys.readouterr()
    assert out.strip() == "cycle: standby not the leader", out
    assert renewals == [True], "it watched the Lease until its holder renewed it"
    assert "Kubernetes API" not in err, err
    assert kube.get("leases", "gputide-controller", "gputide")["spec"]["holderIdentity"] == "replica-b"


def test_a_lease_another_replica_wrote_first_is_still_a_standby_exit_0(kube: FakeKube, kubeconfig, capsys):
    kube.inject("POST", r"/leases$", 409)   # none yet; another contender creates it between our read and our create
    assert run_once(kubeconfig) == 0
    out, err = capsys.readouterr()
    assert out.strip() == "cycle: standby not the leader", out
    assert "Kubernetes API" not in err, err
    assert kube.calls("POST", r"/leases$")
