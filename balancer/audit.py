"""How the controller writes down what it did: one JSON line per action in the audit log (`JsonlAudit`,
`action_record`) and a low-cardinality reason label for `gputide_actions_total{reason}` (`reason_label`). The
reconcile loop (balancer/loop.py, which re-exports `JsonlAudit` and `reason_label`) does the writing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from balancer.actions import Action, Migrate, ScaleTraining, SetPowerLimit, TaintNode


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


def reason_label(action: Action) -> str:
    """A low-cardinality reason for `gputide_actions_total{reason}` (the free text goes to the audit log)."""
    if isinstance(action, SetPowerLimit):
        return "throttle" if action.is_throttle else "unthrottle"
    if isinstance(action, TaintNode):
        return "cooled" if action.remove else "renew" if action.renew else "hot_node"
    if isinstance(action, ScaleTraining):
        if action.workers >= action.previous_workers:
            return "give_back"
        return "colocation_slo" if "SLO" in action.reason else "hotspot"
    if isinstance(action, Migrate):
        return "hotspot"
    return action.kind


def action_record(a: Action, outcome: str, detail: str = "") -> dict:
    return {"action": a.kind, "target": a.target, "reason": a.reason, "expected_gain": a.expected_gain,
            "outcome": outcome, "detail": detail}
