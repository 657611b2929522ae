"""A safety ledger too big for the Lease annotation (128 KiB) is cut to fit and handed on, not skipped. `save_state`
logged a warning and returned: the hand-over counted it saved, the Lease kept an older ledger (or none), and a
successor after a fail-over started with budgets and cooldowns reset: a burst of actions right after it."""

from __future__ import annotations

import json
import logging

import pytest
from fakeapi import FakeKube
from kubernetes import client as k8s

from balancer.actuate.k8s_leader import LEDGER_ANNOTATION, MAX_LEDGER_BYTES, LeaseLeaderElector
from balancer.ledger_fit import fit, size
from balancer.ledger_handover import LedgerHandover
from balancer.safety_ledger import SafetyLedger

UUID = "GPU-00000000-0000-0000-0000-{:012d}"
T0 = 1_700_000_000.0


def elector(api: k8s.ApiClient, clock, identity: str) -> LeaseLeaderElector:
    return LeaseLeaderElector(api, "gputide-controller", "gputide", identity, lease_duration_s=15,
                              renew_deadline_s=10, clock=clock)


def big_ledger(caps: int = 3000) -> SafetyLedger:
    """Power-cap cooldowns on `caps` GPUs (about 190 KiB for 3000), a cycle's worth a second, and a full hour's
    evictions and migrations."""
    last = {f"set_power_limit:{UUID.format(i)}": T0 + i / 20 for i in range(caps)}
    last["training/job"] = T0
    return SafetyLedger(last_action=last, evictions=tuple(T0 + i for i in range(30)),
                        migrations=tuple((T0 + i, "n0", "n1", f"svc-{i}") for i in range(5)))


def annotation(kube: FakeKube) -> str | None:
    lease = kube.get("leases", "gputide-controller", "gputide")
    return (lease["metadata"].get("annotations") or {}).get(LEDGER_ANNOTATION)


def test_an_oversized_ledger_reaches_the_successor_cut_to_fit(kube: FakeKube, api, clock, caplog) -> None:
    a, b = elector(api, clock, "replica-a"), elector(api, clock, "replica-b")
    assert a.try_acquire_or_renew()
    full = big_ledger()
    assert size(full.to_json()) > MAX_LEDGER_BYTES
    handover = LedgerHandover(a)
    with caplog.at_level(logging.WARNING, logger="balancer.actuate.k8s_leader"):
        handover.changed(full)
    assert not handover.unsaved
    assert "left out of what a successor inherits" in caplog.text
    saved = annotation(kube)
    assert saved is not None and size(saved) <= MAX_LEDGER_BYTES
    assert a.release()
    clock.advance(0.1)
    assert b.try_acquire_or_renew()
    inherited = LedgerHandover(b).inherit(SafetyLedger())
    # the whole budget and every migration in flight go on; of the cooldowns, the newest
    assert inherited.evictions == full.evictions and inherited.migrations == full.migrations
    kept = set(inherited.last_action)
    assert kept and kept < set(full.last_action)
    dropped = set(full.last_action) - kept
    assert max(full.last_action[k] for k in dropped) <= min(full.last_action[k] for k in kept)


def test_a_ledger_that_cannot_be_cut_fails_loudly_and_is_tried_again(kube: FakeKube, api, clock) -> None:
    a = elector(api, clock, "replica-a")
    assert a.try_acquire_or_renew()
    a.save_state(SafetyLedger(evictions=(T0,)).to_json())
    handover = LedgerHandover(a)
    handover.changed(SafetyLedger(evictions=(T0, T0 + 1)))
    assert not handover.unsaved
    with pytest.raises(ValueError):
        a.save_state("x" * (MAX_LEDGER_BYTES + 1))
    assert json.loads(annotation(kube))["evictions"] == [T0, T0 + 1]   # the last good one stays


def test_fit_drops_the_fewest_entries_cooldowns_oldest_first_evictions_last() -> None:
    full = big_ledger()
    text, dropped = fit(full.to_json(), MAX_LEDGER_BYTES)
    cut = SafetyLedger.from_json(text)
    assert dropped == len(full.last_action) - len(cut.last_action) > 0
    oldest_first = sorted(full.last_action, key=full.last_action.get)
    one_fewer = SafetyLedger(last_action={k: full.last_action[k] for k in oldest_first[dropped - 1:]},
                             evictions=full.evictions, migrations=full.migrations)
    assert size(one_fewer.to_json()) > MAX_LEDGER_BYTES
    small = SafetyLedger(last_action={"job": T0}, evictions=(T0, T0 + 1), migrations=((T0, "n0", "n1", "svc"),))
    limit = size(SafetyLedger(evictions=(T0 + 1,)).to_json())
    assert SafetyLedger.from_json(fit(small.to_json(), limit)[0]) == SafetyLedger(evictions=(T0 + 1,))
    assert fit(small.to_json(), MAX_LEDGER_BYTES) == (small.to_json(), 0)   # one that fits is left as it is
    with pytest.raises(ValueError):
        fit(small.to_json(), 10)
