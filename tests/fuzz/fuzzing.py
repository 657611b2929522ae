"""How many examples a fuzz test draws: its own number, times GPUTIDE_FUZZ_SCALE (1 in `make test`, 10 in
`make fuzz`, which also draws new random examples instead of the repeatable ones; see tests/conftest.py)."""

from __future__ import annotations

import os


def examples(n: int) -> int:
    return n * max(int(os.environ.get("GPUTIDE_FUZZ_SCALE", "1")), 1)
