"""`unavailable._entry` reads the snapshot last counted afresh (`_last`) once: its basis matched, the entry it shares
is that basis's own. Read again for the entry, a thread counting another snapshot afresh between the two reads gave
the derived snapshot that other snapshot's counts, were the counts asked from threads."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from balancer import unavailable
from tests.planner.test_short_shared_s37 import A, B, base


def test_a_snapshot_counted_afresh_meanwhile_does_not_hand_its_counts_to_one_reading_the_last(
        monkeypatch: pytest.MonkeyPatch) -> None:
    orig = base()
    assert unavailable.short_now(orig) == {"svc-a": 1}   # counted afresh: `_last`
    derived = orig.replace(demand_unknown={"inference/unseen": "no series"})   # reads the same
    other = orig.replace(placements=MappingProxyType({A.name: (0,), B.name: ()}))   # reads otherwise
    real, interleaved = unavailable._same, []

    def same(a: tuple, b: tuple) -> bool:
        """The match, with `other` counted afresh right after it (another thread's), once."""
        matched = real(a, b)
        if not interleaved:
            interleaved.append(True)
            assert unavailable.short_now(other) == {"svc-a": 1, "svc-b": 1}
        return matched

    monkeypatch.setattr(unavailable, "_same", same)
    assert unavailable.short_now(derived) == {"svc-a": 1}   # before: {"svc-a": 1, "svc-b": 1}, other's
    assert interleaved and unavailable._counts(derived) is unavailable._counts(orig)
