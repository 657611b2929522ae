"""The simulator actuator: carries actions out on a `SimCluster`, the same verbs Kubernetes gets.

A migration is make-room-first, in two recorded steps: the actuator writes the intent to a *journal* (the
reservation: in Kubernetes an annotation on the target node; here a dict the caller may share between controller
"processes"), then calls `sim.migrate`, which re-checks that the target fits before it moves the pod, and finally
clears the journal entry. A controller that dies between the two steps leaves the journal entry behind and the
workload still running at its source; `recover()` (called by the loop on start) finishes or abandons every
journalled migration, so a restart converges and no workload is lost. `crash_after_reserve` injects that crash
for tests. A training scale-down is what lowering a Job's parallelism is on Kubernetes: the removed workers get
SIGTERM. A job that checkpoints on SIGTERM (`TrainingJobSpec.checkpoint_on_sigterm`, a Job's
`gputide.io/checkpoint-on-sigterm: "true"`) saves its work first and loses nothing; any other goes back to its last
checkpoint (the work since then lost, a preemption), the cost the capacity plan prices (`JobView.since_checkpoint_s`;
the simulator's training workloads show that checkpoint as a trainer's `gputide.io/last-checkpoint` does, +inf for a
job that checkpoints on SIGTERM). A migrated worker gets SIGTERM too, at the same cost: the simulator decides it on
every path that stops a worker (`SimCluster._stop_worker`), an operator's raw `scale_training` included. A power
cap is recorded on its node (`SimCluster.cap_power`, `Node.power_caps`) as the Kubernetes actuator records it in
the node's annotation, so a restarted controller sees in its snapshot what it must give back; a give-back restores
the GPU's default limit, and only on a GPU gputide capped. The hot taint expires as on Kubernetes: written (and
renewed, `TaintNode.renew`) with an expiry `HOT_TAINT_TTL_S` after the write (`SimCluster.hot_until`, in the
snapshot as `Node.hot_until`, so the planner renews the taint of a node still hot), and removed by `housekeeping`
(every cycle) and `recover` once passed: on every node, or on the `nodes` given (a shard's, `shard.ShardActuator`).
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping

from balancer.actions import HOT_TAINT_TTL_S
from balancer.actuate.base import ActionResult, Outcome
from balancer.model import (
    Action,
    ClusterSnapshot,
    Migrate,
    ScaleInference,
    ScaleTraining,
    SetPowerLimit,
    TaintNode,
)
from balancer.sim import TAINT, SimCluster

TAINT_KEY = TAINT.split("=")[0]


class ControllerCrash(RuntimeError):
    """Injected: the controller process dies here (tests only)."""


class SimActuator:
    name = "sim"

    def __init__(self, sim: SimCluster, *, journal: MutableMapping[str, dict] | None = None,
                 crash_after_reserve: bool = False) -> None:
        self.sim = sim
        self.journal: MutableMapping[str, dict] = journal if journal is not None else {}
        self.crash_after_reserve = crash_after_reserve

    def apply(self, action: Action, snapshot: ClusterSnapshot) -> ActionResult:
        try:
            return self._apply(action)
        except (KeyError, ValueError) as exc:  # the protocol: failures are results, never exceptions
            return ActionResult(action, Outcome.FAILED, f"the simulator refused it: {exc!r}")

    def _apply(self, action: Action) -> ActionResult:
        sim = self.sim
        if isinstance(action, Migrate):
            name = action.workload
            if sim.placements.get(name) != tuple(action.source_gpus):
                return ActionResult(action, Outcome.FAILED, "workload is no longer on its source GPUs")
            if not sim.fits(name, action.target_gpus):
                return ActionResult(action, Outcome.RETRY, "target no longer fits")
            self.journal[name] = {"source": list(action.source_gpus), "target": list(action.target_gpus)}
            if self.crash_after_reserve:
                raise ControllerCrash(f"injected crash after reserving {action.target_gpus} for {name}")
            ok = sim.migrate(name, action.target_gpus)
            self.journal.pop(name, None)
            return ActionResult(action, Outcome.APPLIED if ok else Outcome.RETRY,
                                "" if ok else "target filled up before the move")
        if isinstance(action, SetPowerLimit):   # recorded on the node, as the Kubernetes actuator's annotation
            applied = sim.cap_power(action.gpu, None if action.give_back else action.watts)
            return ActionResult(action, Outcome.APPLIED, f"applied {applied:.0f} W")
        if isinstance(action, TaintNode):
            return ActionResult(action, Outcome.APPLIED, self._taint(action))
        if isinstance(action, ScaleTraining):
            # the shrink's record, as on a Kubernetes Job (`k8s_jobs.shrink_patch`): written by a hotspot shrink,
            # removed by its give-back and by any other resize once the job is back at its size or the record void;
            # co-location's record likewise (`colocation_record.after`, as `k8s_jobs.colocation_patch`)
            done = action.shrunk_from is None and sim.shrink_record_done(action.job, action.workers)
            # the removed workers get SIGTERM; what that costs the job the simulator decides (`_stop_worker`)
            wrote = sim.scale_training(action.job, action.workers, shrunk_from=0 if done else action.shrunk_from,
                                       colocation=action)
            return ActionResult(action, Outcome.APPLIED, "" if wrote else "left as it is (already)",
                                unchanged=not wrote)   # as the Kubernetes actuator's: the planner forgets it
        if isinstance(action, ScaleInference):
            sim.scale_service(action.service, action.replicas)
            return ActionResult(action, Outcome.APPLIED)
        return ActionResult(action, Outcome.FAILED, f"unsupported action {action.kind}")

    def _taint(self, action: TaintNode) -> str:
        """The hot taint added, renewed (a fresh expiry) or removed; the detail the Kubernetes actuator gives."""
        if action.remove:
            self.sim.remove_taint(action.node)
            return f"removed taint {TAINT_KEY} on {action.node}"
        done = "renewed" if action.renew and self.sim.has_taint(action.node) else "added"
        until = self.sim.time + HOT_TAINT_TTL_S
        self.sim.add_taint(action.node, until=until)
        return f"{done} taint {TAINT_KEY} on {action.node} until t={until:.0f} s"

    def housekeeping(self, nodes: Iterable[str] | None = None) -> list[str]:
        """Once per cycle (the loop's hook), as the Kubernetes actuator's: hot taints whose expiry has passed are
        removed, on `nodes` only when given (a shard's own: `shard.ShardActuator`), else on every node. Returns
        notes."""
        keep = None if nodes is None else frozenset(nodes)
        notes = []
        for node in self.sim.expired_taints():
            if keep is None or node in keep:
                self.sim.remove_taint(node)
                notes.append(f"{node}: hot taint expired")
        return notes

    def recover(self, nodes: Iterable[str] | None = None) -> list[str]:
        """Finish or abandon migrations a previous controller journalled but did not complete; release the hot
        taints whose expiry has passed (a dead controller's). With `nodes` (a shard's own), only their taints and the
        migrations whose target is on one of them (where Kubernetes keeps the reservation); the others are left to
        the shard whose nodes they are."""
        keep = None if nodes is None else frozenset(nodes)
        notes = self.housekeeping(keep)
        for name, entry in list(self.journal.items()):
            target = tuple(entry["target"])
            if keep is not None and not any(self.sim.fleet.gpus[g].node in keep for g in target):
                continue
            where = self.sim.placements.get(name)
            if where == target:
                notes.append(f"{name}: migration had completed")
            elif where == tuple(entry["source"]) and self.sim.fits(name, target) and self.sim.migrate(name, target):
                notes.append(f"{name}: finished the interrupted migration to {list(target)}")
            else:
                notes.append(f"{name}: abandoned the interrupted migration (it keeps running where it is)")
            del self.journal[name]
        return notes
