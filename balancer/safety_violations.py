"""Why the safety guard refuses an action: one `SafetyViolation` per limit, its `reason` the label of
gputide_actions_rejected_total (`balancer.safety`, which re-exports them; `balancer.safety_groups` adds its own)."""

from __future__ import annotations

from balancer.errors import SafetyViolation


class EmergencyStop(SafetyViolation):
    reason = "emergency_stop"


class ProtectedWorkload(SafetyViolation):
    reason = "protected"


class PlacementRefused(SafetyViolation):
    reason = "placement_rules"


class MinGainNotMet(SafetyViolation):
    reason = "min_gain"


class CooldownActive(SafetyViolation):
    reason = "cooldown"


class MaxActionsPerCycle(SafetyViolation):
    reason = "max_actions_per_cycle"


class MaxConcurrentMigrations(SafetyViolation):
    """`target_only`: refused for its target node alone, its source having room and its owner's limits allowing the
    move: the pod may move elsewhere at once (the loop keeps it off the full nodes only, `planner.refuse(...,
    targets=...)`); a full source node is the pod's own, whatever the target: it is not moved for a while.
    `full_nodes`: every node that replacements still landing past `migrationSettleS` alone hold at the limit in this
    review (a node full only with migrations settling frees within that window): the planner does not see them, and
    kept off the target alone the pod was proposed the next-best full node each cycle, its hot GPU unthrottled until
    every one had been refused."""

    reason = "max_concurrent_migrations"

    def __init__(self, message: str, *, target_only: bool = False, full_nodes: frozenset[str] = frozenset()) -> None:
        super().__init__(message)
        self.target_only = target_only
        self.full_nodes = full_nodes


class MaxUnavailable(SafetyViolation):
    reason = "max_unavailable"


class PdbViolation(SafetyViolation):
    reason = "pdb"


class EvictionBudgetExhausted(SafetyViolation):
    reason = "eviction_budget"
