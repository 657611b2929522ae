"""The safety ledger between leaders (`LedgerHandover`): what a new leader inherits, and what the leader hands on.

A restart or a fail-over must never reset the safety budgets. The leader saves its ledger where a successor reads
it (the elector's `save_state`, e.g. an annotation on the Lease) after every change, and a new leader merges what it
finds there (`load_state`) into its own (cooldowns and evictions only restrain: `SafetyLedger.merged`). A save that
fails is tried again every cycle until one succeeds, not only after the next action: a leader change in a quiet
spell would otherwise hand on a ledger without the last actions' evictions. Neither failure stops the controller.
"""

from __future__ import annotations

import logging
from typing import Any

from balancer.safety_ledger import SafetyLedger

log = logging.getLogger(__name__)


class LedgerHandover:
    """Inherits and hands on the safety ledger through `elector` (its optional `load_state` / `save_state`)."""

    def __init__(self, elector: Any) -> None:
        self.elector = elector
        self.unsaved = False   # the ledger changed since a successor could last inherit it

    def inherit(self, ledger: SafetyLedger) -> SafetyLedger:
        """`ledger` merged with the one the previous leader left, if its elector kept one that reads."""
        load = getattr(self.elector, "load_state", None)
        text = load() if load is not None else None
        if not text:
            return ledger
        try:
            inherited = SafetyLedger.from_json(text)
        except ValueError as exc:
            log.warning("inherited safety ledger unreadable, starting from this replica's own: %s", exc)
            return ledger
        log.info("inherited safety ledger: %d cooldowns, %d evictions in the window", len(inherited.last_action),
                 len(inherited.evictions))
        return ledger.merged(inherited)

    def changed(self, ledger: SafetyLedger) -> None:
        """`ledger` has what this cycle's actions spent: hand it on now (and until a save succeeds)."""
        self.unsaved = True
        self.hand_on(ledger)

    def hand_on(self, ledger: SafetyLedger) -> None:
        """Save `ledger` for a successor; on failure it stays `unsaved` and the loop calls again next cycle."""
        save = getattr(self.elector, "save_state", None)
        try:
            if save is not None:
                save(ledger.to_json())
            self.unsaved = False
        except Exception as exc:
            log.warning("safety ledger not saved for a successor (tried again next cycle): %s", exc)
