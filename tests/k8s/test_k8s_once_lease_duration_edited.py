"""A crashed holder's Lease whose leaseDurationSeconds alone is edited (kubectl patch) while a `--once --leader-elect`
run waits for it (audit a8 of session 39). The duration was not in the record the wait watches, so the edit neither
restarted the takeover rule's count nor the wait, whose end was fixed from the duration first seen while
`outwaited()` judged from the latest: 120 s patched to 3600 s ended the wait as a 120 s Lease's (run: 105 s) and
left a standby, exit 0 (the Lease neither taken nor renewed: the docs say exit 3); 3600 s patched to 1500 s waited
1215 s (run) and said it waits 500 s; 3600 s patched to 15 s was taken at the next try, 15 s not yet passed since
the edit. The duration is now part of the record compared (holder, renewTime, transitions and leaseDurationSeconds;
not acquireTime): an edit that changes it alone (no renewal: a holder's write always dates renewTime) restarts the
watch, judged by the duration it sets. The elector,
the clock and the pauses are test_k8s_once_lease_expired.py's (no real waiting)."""

from __future__ import annotations

import logging

import pytest
from test_k8s_once_lease_expired import a_pending_pod, taken_by_me, waits  # noqa: F401 (waits: the fixture)
from test_k8s_once_lease_long import NAMES, STEP, long_dead_lease, once

AFTER = {3600: 1200, 1500: 500}   # the duration edited to -> how long it is watched from the edit (both commands)


def edit_after(kube, waits, name: str, seconds: float, duration: int) -> list[float]:  # noqa: F811 (the fixture's)
    """Patch the Lease's leaseDurationSeconds (nothing else) in the pause that ends `seconds` into the wait; the
    list gets how far into the wait that was."""
    edited: list[float] = []

    def meanwhile() -> None:
        if not edited and sum(waits.asked) >= seconds:
            kube.mutate("leases", name, "gputide", {"spec": {"leaseDurationSeconds": duration}})
            edited.append(sum(waits.asked))

    waits.meanwhile = meanwhile
    return edited


@pytest.mark.parametrize(("first", "at", "edited_to"), [(120, 30, 3600), (3600, 100, 1500)])
@pytest.mark.parametrize("command", ["schedule", "run"])
def test_a_duration_edited_alone_restarts_the_wait_judged_by_the_new_one_then_said_exit_3(
        kube, kubeconfig, waits, caplog, capsys, command, first, at, edited_to):  # noqa: F811 (the fixture)
    name, most = NAMES[command], AFTER[edited_to]
    a_pending_pod(kube)
    kube.add(long_dead_lease(name, first))
    edited = edit_after(kube, waits, name, at, edited_to)
    with caplog.at_level(logging.WARNING, logger="balancer.actuate.k8s_leader"):
        code = once(command, kubeconfig)
    out, err = capsys.readouterr()
    assert code == 3, out + err   # was, 120 s -> 3600 s: exit 0, a standby
    assert edited, "edited during the wait"
    # the figure said is the one waited for, from the edit (was, 3600 s -> 1500 s: 1215 s waited, 500 s said); the
    # wait ends at the first try from a pause after that, the tries' phase the first Lease's (up to two pauses)
    assert edited[0] + most <= sum(waits.asked) <= edited[0] + most + 2 * STEP[command], (edited, waits.asked)
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"gputide {command} --once: the Lease gputide/{name} is crashed-replica's, its "
                           f"leaseDurationSeconds {edited_to} longer than this run waits ({most} s"), line
    assert line.endswith(f"(an --interval of {edited_to // 3}s or more waits for it)"), line
    assert (f"its leaseDurationSeconds {edited_to} is longer than a --once run waits for it ({most} s"
            in caplog.text), "the restarted wait's cut is logged as it begins"
    assert not taken_by_me(kube, name) and not kube.calls("POST", r"/binding$")
    assert kube.get("leases", name, "gputide")["spec"]["holderIdentity"] == "crashed-replica"


@pytest.mark.parametrize("command", ["schedule", "run"])
def test_a_duration_edited_down_is_taken_once_unchanged_for_the_new_one_since_the_edit(
        kube, kubeconfig, waits, capsys, command):  # noqa: F811 (the fixture imported above)
    name = NAMES[command]
    a_pending_pod(kube)
    kube.add(long_dead_lease(name))   # 3600 s
    edited = edit_after(kube, waits, name, 100, 15)   # not longer than either command's own lease: waited whole
    code = once(command, kubeconfig)
    out, err = capsys.readouterr()
    assert code == (0 if command == "schedule" else 3), out + err   # run's cycle holds still (no Prometheus)
    assert taken_by_me(kube, name)
    # was: taken at the try right after the edit, the 100 s before it counted for the new 15 s; a pause is now 2.5 s
    assert edited[0] + 15 <= sum(waits.asked) <= edited[0] + 15 + 2 * 2.5, (edited, waits.asked)
    assert "ml/p -> n1" in out if command == "schedule" else out.startswith("cycle: fail_static"), out + err
