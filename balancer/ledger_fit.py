"""A safety ledger cut to the size of where it is handed on (the Lease annotation takes 128 KiB), pure.

What a successor inherits is what restrains it after a fail-over, so a ledger too big to hand on must not go
unsaved (the successor would start with the budgets and cooldowns of an older ledger, or none). `fit` keeps all of it
that fits and drops the entries that restrain least first:

1. cooldowns (`last_action`), oldest first: they are what grows with the fleet (a power cap per GPU), each holds
   back one target only, and the oldest ends soonest;
2. then migrations, oldest first: kept for the longer of `migrationSettleS` and `cooldownS`; those within
   `migrationSettleS` count against the per-node and per-owner limits; the older ones still count on their target
   node while their owner has replicas not running (its replacement may still be landing there: `safety._in_flight`),
   mark their owner as moving (a forgotten node does not excuse its missing replicas: `safety._migrated`), and tell a
   migrated pod's replacement from a pod started since (`safety._first_migration`);
3. evictions last, oldest first: each one dropped is one more eviction the successor's hourly budget allows.

Entries past their windows never reach it: `SafetyGuard.record` forgets each once its window or cooldown has passed.
"""

from __future__ import annotations

from types import MappingProxyType

from balancer.safety_ledger import SafetyLedger

_COOLDOWN, _MIGRATION, _EVICTION = range(3)   # the order entries are dropped in


def size(text: str) -> int:
    """Bytes `text` takes on the wire (UTF-8)."""
    return len(text.encode())


def fit(text: str, limit: int) -> tuple[str, int]:
    """`text` (a `SafetyLedger.to_json`) in at most `limit` bytes, and how many entries were dropped for it: as it is
    when it fits, else without the fewest entries, in the order of the module docstring, that make it fit.
    ValueError when it does not fit and is no ledger (`SafetyLedger.from_json` says why), or fits not even empty."""
    if size(text) <= limit:
        return text, 0
    ledger = SafetyLedger.from_json(text)
    entries = sorted([(_COOLDOWN, t, k) for k, t in ledger.last_action.items()]
                     + [(_MIGRATION, m[0], m) for m in ledger.migrations]
                     + [(_EVICTION, t, t) for t in ledger.evictions], key=lambda e: (e[0], e[1]))
    lo, hi = 0, len(entries)   # the fewest dropped that fits is in [lo, hi] (0: written compactly, it may fit)
    if size(_without(entries, hi)) > limit:
        raise ValueError(f"an empty safety ledger does not fit in {limit} bytes")
    while lo < hi:
        mid = (lo + hi) // 2
        if size(_without(entries, mid)) <= limit:
            hi = mid
        else:
            lo = mid + 1
    return _without(entries, lo), lo


def _without(entries: list[tuple], dropped: int) -> str:
    """The ledger of `entries` but the first `dropped`, as JSON."""
    kept = entries[dropped:]
    last = {e[2]: e[1] for e in kept if e[0] == _COOLDOWN}
    migrations = tuple(sorted(e[2] for e in kept if e[0] == _MIGRATION))
    evictions = tuple(sorted(e[2] for e in kept if e[0] == _EVICTION))
    return SafetyLedger(MappingProxyType(last), evictions, migrations).to_json()
