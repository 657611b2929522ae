"""The safety guard's memory between cycles: when each target was last acted on, the evictions and migrations
still inside their windows. Immutable; `SafetyGuard.record` (balancer/safety.py, which re-exports it) returns the
next one. A successor controller inherits it as compact JSON (`to_json` / `from_json`, the Lease annotation the
loop writes), and `merged` joins two controllers' memories.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True)
class SafetyLedger:
    last_action: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    evictions: tuple[float, ...] = ()
    migrations: tuple[tuple[float, str, str, str], ...] = ()   # (time, source node, target node, owner)

    def to_json(self) -> str:
        """The ledger as compact JSON, for a successor to inherit (the Lease annotation, see the loop)."""
        return json.dumps({"last_action": dict(self.last_action), "evictions": list(self.evictions),
                           "migrations": [list(m) for m in self.migrations]}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> SafetyLedger:
        """The ledger `to_json` wrote; ValueError naming what is wrong for anything else."""
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise ValueError("a JSON object with last_action, evictions, migrations")
        last = doc.get("last_action", {})
        if not isinstance(last, dict) or not all(map(_is_time, last.values())):
            raise ValueError("last_action: an object of target -> time")
        ev = doc.get("evictions", [])
        if not isinstance(ev, list) or not all(map(_is_time, ev)):
            raise ValueError("evictions: a list of times")
        mig = doc.get("migrations", [])
        if not isinstance(mig, list) or not all(isinstance(m, list) and len(m) == 4 and _is_time(m[0])
                                                and all(isinstance(x, str) for x in m[1:]) for m in mig):
            raise ValueError("migrations: a list of [time, source node, target node, owner]")
        return cls(MappingProxyType({str(k): float(t) for k, t in last.items()}), tuple(float(t) for t in ev),
                   tuple((float(m[0]), m[1], m[2], m[3]) for m in mig))

    def merged(self, other: SafetyLedger) -> SafetyLedger:
        """Both ledgers' memory: the later time per target, every eviction and migration once. Entries are counted,
        not just present: one action that stopped 8 pods is 8 evictions at one time, so an entry both ledgers hold
        n and m times is kept max(n, m) times (a set kept it once, and a successor could evict 7 more pods than the
        budget allows)."""
        last = dict(self.last_action)
        for k, t in other.last_action.items():
            last[k] = max(t, last.get(k, t))
        return SafetyLedger(MappingProxyType(last), _union(self.evictions, other.evictions),
                            _union(self.migrations, other.migrations))


def _is_time(t: object) -> bool:
    """A finite number of seconds: JSON's `true` is no time, and an infinite one (Python's json reads `Infinity`)
    never leaves any window, so it would hold a cooldown or spend an eviction for good, for every later leader."""
    return isinstance(t, int | float) and not isinstance(t, bool) and math.isfinite(t)


def _union(a: tuple, b: tuple) -> tuple:
    """The multiset union of `a` and `b` (each entry as many times as the one holding it more), sorted."""
    return tuple(sorted((Counter(a) | Counter(b)).elements()))
