"""Decisions as data: an `Action` is frozen, carries a `reason` and an `expected_gain`, prints and compares well;
its `target` names what it touches (for cooldowns and budgets). A `Plan` is a tuple of actions plus the objective
before and after, as simulated. The snapshot they are decided on is in `balancer.model` (which re-exports these).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

# why a planner resized a training job, low-cardinality (`gputide_actions_total{reason}`, balancer.action_labels):
# the tide's loan of idle inference GPUs (a grow) and its reclaim (a shrink, `reclaim=True`), co-location's shrink for
# a service near its SLO and its give-back once the service has slack again. A hotspot shrink and its give-back carry
# none: `shrunk_from` tells them apart.
TrainingCause = Literal["loan", "reclaim", "colocation_slo", "colocation_slack"]


@dataclass(frozen=True, kw_only=True)
class Action:
    """A decision as data. `kind` names the type; `target` names what it touches (for cooldowns and budgets)."""

    kind: ClassVar[str] = "action"
    reason: str
    expected_gain: float = 0.0

    @property
    def target(self) -> str:
        raise NotImplementedError

    def describe(self) -> str:
        return f"{self.kind} {self.target}: {self.reason} (gain {self.expected_gain:.3g})"


@dataclass(frozen=True, kw_only=True)
class Migrate(Action):
    """Move a workload to `target_gpus`; the actuator reserves the target before evicting the source. Moves that
    only pay together (those emptying one GPU) share a `group`: the safety guard takes all of them or none. A move
    off a hot node taints it (`taint_source`) so nothing new lands there while it cools; a consolidation's source is
    not hot, and its freed GPUs are for the next pod that needs them whole."""

    kind: ClassVar[str] = "migrate"
    workload: str
    source_gpus: tuple[int, ...]
    target_gpus: tuple[int, ...]
    target_node: str
    group: str = ""
    taint_source: bool = True

    @property
    def target(self) -> str:
        return self.workload


@dataclass(frozen=True, kw_only=True)
class SetPowerLimit(Action):
    """Throttle one GPU's power limit to `watts` (clamped to the GPU's allowed range), or give it back.

    A give-back (`give_back=True`) returns the GPU to its *default* limit, whatever that is on the board: `watts`
    is then only the planner's estimate of it (the catalogue TDP), which the simulation projects and no actuator
    writes (a board's default can differ from the catalogue)."""

    kind: ClassVar[str] = "power_limit"
    gpu: int
    uuid: str
    node: str
    watts: float
    previous_watts: float
    give_back: bool = False

    @property
    def target(self) -> str:
        return self.uuid

    @property
    def is_throttle(self) -> bool:
        return self.watts < self.previous_watts


@dataclass(frozen=True, kw_only=True)
class ScaleTraining(Action):
    """Resize an elastic training job to `workers` (0 suspends it)."""

    kind: ClassVar[str] = "scale_training"
    job: str
    workers: int
    previous_workers: int
    reclaim: bool = False  # a shrink that gives loaned GPUs back to inference (exempt from the cooldown)
    # the record of a hotspot shrink kept on the job with the resize (`gputide.io/shrunk`), so a restarted controller or
    # a new leader gives the workers back: the workers before the shrink; 0 (its give-back) clears it; None: untouched
    shrunk_from: int | None = None
    cause: TrainingCause | None = None  # set by the planner that resizes for a reason of its own (TrainingCause)
    service: str = ""   # a co-location shrink: the inference services it makes room for, comma-separated (given
    #                     back once each has slack); a capacity reclaim: the latency-net steps it frees GPUs for,
    #                     where no idle GPU served them (forgotten when none of their shrinks goes out:
    #                     `capacity_loop.unsent`); a tide growth: the loans whose GPUs it takes (`loop._on_loans`)
    # a tide growth that takes a loan's GPUs: the workers of it that GPUs idle already hold, and their gain alone
    # (`capacity_pools.grow_gain`); sent alone where its loans did not go (`loop._idle_part`). 0: none, or worth nothing
    idle_workers: int = 0
    idle_gain: float = 0.0

    @property
    def target(self) -> str:
        return self.job


@dataclass(frozen=True, kw_only=True)
class ScaleInference(Action):
    """Set an inference service's replica floor (HPA minReplicas / Deployment replicas)."""

    kind: ClassVar[str] = "scale_inference"
    service: str
    replicas: int
    previous_replicas: int

    @property
    def target(self) -> str:
        return self.service


# how long gputide's hot taint holds once written (`gputide.io/hot-until`), unless renewed: the safety net for a
# controller that dies while a node is tainted
HOT_TAINT_TTL_S = 900.0


@dataclass(frozen=True, kw_only=True)
class TaintNode(Action):
    """Keep new work off a hot node until it cools (`remove=True` takes the taint away). `renew=True` writes a fresh
    expiry on a node that already carries the taint and is still hot: it changes nothing for any workload.
    `kept_open=True` (with `remove=True` only) marks the removal that keeps the last node open to GPU work in a heat
    wave (`hotspot_detect.kept_open`): the node is still hot, and `gputide_actions_total` counts it as `kept_open`, not
    `cooled` (`balancer.action_labels`). A field, not the reason's wording: read from the free text, any removal whose
    reason happened to begin alike was counted as one."""

    kind: ClassVar[str] = "taint_node"
    node: str
    remove: bool = False
    renew: bool = False
    kept_open: bool = False

    def __post_init__(self) -> None:
        if self.kept_open and not self.remove:
            raise ValueError(f"TaintNode {self.node}: kept_open is a removal's (remove=True), not a taint's")

    @property
    def target(self) -> str:
        return self.node


@dataclass(frozen=True, kw_only=True)
class Plan:
    actions: tuple[Action, ...] = ()
    notes: tuple[str, ...] = ()
    objective_before: float = 0.0
    objective_after: float = 0.0

    def __len__(self) -> int:
        return len(self.actions)
