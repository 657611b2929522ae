"""A 409 on the takeover write of a `--once --leader-elect` run that waited out a crashed holder's Lease (review of
session 40). Every 409 ended the wait a standby, exit 0, nothing done, though only the Lease's metadata had changed
since the try read it (an annotation or label edited, kubectl or a tool: a new resourceVersion), its holder record
the one judged expired. As client-go's elector does, the run reads the Lease again after the 409 and writes the
takeover again if that record (holderIdentity, renewTime, acquireTime, leaseDurationSeconds, leaseTransitions) is
unchanged, at most `TAKEOVER_CONFLICT_RETRIES` more times in that try; changed (another contender took it, or any of
it edited), or still conflicting after those, it stays a standby. The elector, the clock and the pauses are
test_k8s_once_lease_expired.py's (no real waiting); the edits are made just before a takeover write lands."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from test_k8s_once_lease_expired import (  # noqa: F401 (waits: the fixture)
    ME,
    a_pending_pod,
    dead_holders_lease,
    run_once,
    schedule_once,
    waits,
)

from balancer.actuate.k8s_leader import TAKEOVER_CONFLICT_RETRIES, LeaseLeaderElector

NAMES = {"schedule": "gputide-scheduler", "run": "gputide-controller"}


def edits_before_takeover_writes(kube, name: str, *edits: dict) -> None:
    """Merge-patch the Lease with each of `edits` in turn, each just before one of our next writes of it lands: the
    write, made over the Lease as read before, gets a 409."""
    left = list(edits)
    kube.before("PUT", rf"/leases/{name}$", lambda: kube.mutate("leases", name, "gputide", left.pop(0)),
                count=len(edits))


def annotated(n: int) -> dict:
    return {"metadata": {"annotations": {"example.com/note": f"edit {n}"}}}


def writes(kube, name: str) -> list[str]:
    """The holderIdentity of each write we sent the Lease (a 409's included), the release at exit left out."""
    return [r.body["spec"]["holderIdentity"] for r in kube.calls("PUT", rf"/leases/{name}$")
            if r.body["spec"]["holderIdentity"]]


def standby(command: str, code: int, out: str, err: str) -> None:
    assert code == 0, out + err
    assert ("not the leader: another replica holds the Lease" in out if command == "schedule"
            else out.strip() == "cycle: standby not the leader"), out + err
    assert "could not be reached" not in err and "refused" not in err, err


def once(command: str, kubeconfig: str) -> int:
    return schedule_once(kubeconfig) if command == "schedule" else run_once(kubeconfig)


def once_behind_a_dead_holder(kube, kubeconfig: str, capsys, command: str,
                              stage: Callable[[str], object]) -> tuple[str, int, str, str]:
    """`command --once` behind a crashed holder's Lease, a pending pod to place, `stage(name of the Lease)` done
    first: the Lease's name, the exit code, stdout and stderr."""
    name = NAMES[command]
    a_pending_pod(kube)
    kube.add(dead_holders_lease(name))
    stage(name)
    code = once(command, kubeconfig)
    out, err = capsys.readouterr()
    return name, code, out, err


@pytest.mark.parametrize("command", ["schedule", "run"])
def test_a_409_for_an_annotation_edited_alone_takes_the_lease_on_a_second_write(
        kube, kubeconfig, waits, capsys, command):  # noqa: F811 (the fixture imported above)
    name, code, out, err = once_behind_a_dead_holder(
        kube, kubeconfig, capsys, command, lambda name: edits_before_takeover_writes(kube, name, annotated(1)))
    assert code == (0 if command == "schedule" else 3), out + err   # run's cycle holds still (no Prometheus)
    assert "ml/p -> n1" in out if command == "schedule" else out.startswith("cycle: fail_static"), out + err
    # written again after the 409 (was: a standby, exit 0, nothing done); run's cycle then renews it as it goes
    assert writes(kube, name)[:2] == [ME, ME], writes(kube, name)
    lease = kube.get("leases", name, "gputide")
    assert lease["spec"]["leaseTransitions"] == 3 and lease["spec"]["holderIdentity"] == "", "taken, released at exit"
    assert lease["metadata"]["annotations"]["example.com/note"] == "edit 1", "the second write kept the edit read"


STAMP = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@pytest.mark.parametrize("change", [
    pytest.param({"spec": {"holderIdentity": "replica-c", "renewTime": STAMP, "acquireTime": STAMP,
                           "leaseTransitions": 3}}, id="another contender took it"),
    pytest.param({"spec": {"acquireTime": STAMP}}, id="its acquireTime alone edited"),
])
@pytest.mark.parametrize("command", ["schedule", "run"])
def test_a_holder_record_changed_by_the_second_write_leaves_a_standby(kube, kubeconfig, waits, capsys,  # noqa: F811
                                                                      command, change):
    name, code, out, err = once_behind_a_dead_holder(
        kube, kubeconfig, capsys, command, lambda name: edits_before_takeover_writes(kube, name, annotated(1), change))
    standby(command, code, out, err)
    assert writes(kube, name) == [ME, ME], "one write again after the annotation's 409, none after the change's"
    spec = kube.get("leases", name, "gputide")["spec"]
    assert {k: spec[k] for k in change["spec"]} == change["spec"], "the Lease as the other writer left it"
    assert not kube.calls("POST", r"/binding$")


@pytest.mark.parametrize("command", ["schedule", "run"])
def test_metadata_edited_before_every_write_leaves_a_standby_after_a_few(kube, kubeconfig, waits, capsys,  # noqa: F811
                                                                         command):
    name, code, out, err = once_behind_a_dead_holder(kube, kubeconfig, capsys, command, lambda name: (
        edits_before_takeover_writes(kube, name, *(annotated(n) for n in range(TAKEOVER_CONFLICT_RETRIES + 1)))))
    standby(command, code, out, err)
    assert writes(kube, name) == [ME] * (TAKEOVER_CONFLICT_RETRIES + 1), "bounded: a standby after those"
    assert kube.get("leases", name, "gputide")["spec"]["holderIdentity"] == "crashed-replica"
    assert not kube.calls("POST", r"/binding$")


def test_release_begun_during_the_takeover_ends_it_at_its_409(kube, api, clock):
    """SIGTERM's `release()` first stops the renewer, then waits for its try in flight: the time to exit counts that
    try a read and a write (`LEASE_CALLS_TO_RELEASE`), so a release begun meanwhile ends it at the 409, not after
    `TAKEOVER_CONFLICT_RETRIES` more reads and writes (and a Lease taken only to be released)."""
    name = NAMES["run"]
    kube.add(dead_holders_lease(name))
    elector = LeaseLeaderElector(api, name, "gputide", ME, clock=clock)
    assert elector.try_acquire_or_renew() is False
    clock.advance(15)   # unchanged for its lease duration: the next try takes it over

    def edited_while_released() -> None:
        kube.mutate("leases", name, "gputide", annotated(1))
        elector._halt.set()   # what release() does before it waits for the try in flight (the lock it holds)

    kube.before("PUT", rf"/leases/{name}$", edited_while_released)
    assert elector.try_acquire_or_renew() is False and not elector.is_leader
    assert writes(kube, name) == [ME], "no write again once released"
    assert kube.get("leases", name, "gputide")["spec"]["holderIdentity"] == "crashed-replica"
