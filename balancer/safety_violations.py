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
    reason = "max_concurrent_migrations"


class MaxUnavailable(SafetyViolation):
    reason = "max_unavailable"


class PdbViolation(SafetyViolation):
    reason = "pdb"


class EvictionBudgetExhausted(SafetyViolation):
    reason = "eviction_budget"
