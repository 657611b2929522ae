"""How the controller writes down what it did: one JSON line per action in the audit log (`JsonlAudit`,
`action_record`) and a low-cardinality reason label for `gputide_actions_total{reason}` (`reason_label`, decided
in balancer/action_labels.py). The reconcile loop (balancer/loop.py, which re-exports `JsonlAudit` and
`reason_label`) does the writing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from balancer.action_labels import reason_label
from balancer.actions import Action

__all__ = ["JsonlAudit", "action_record", "reason_label"]


class JsonlAudit:
    """Appends one JSON object per line to a file (or any text stream)."""

    def __init__(self, target: str | Path | IO[str]) -> None:
        self._own = not hasattr(target, "write")
        self._fh: IO[str] = open(target, "a", encoding="utf-8") if self._own else target  # type: ignore[arg-type]  # noqa: SIM115

    def write(self, record: Mapping[str, Any]) -> None:
        self._fh.write(json.dumps(record, sort_keys=True, default=str) + "\n")
        self._fh.flush()

    def close(self) -> None:
        if self._own:
            self._fh.close()


def action_record(a: Action, outcome: str, detail: str = "") -> dict:
    return {"action": a.kind, "target": a.target, "reason": a.reason, "expected_gain": a.expected_gain,
            "outcome": outcome, "detail": detail}
