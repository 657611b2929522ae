"""Upkeep: what gputide leaves on the cluster, renewed while a live leader wants it and released once it expires.

The actuator's writes outlive the action that made them, and a controller can die, lose its lease or be uninstalled
at any moment after one. So what it leaves on a node carries its own expiry, what it leaves on a ClusterQueue is
settled by the next leader, and nothing relies on a clean shutdown:

    hot taint       `gputide.io/hot=true:NoSchedule` with its expiry `gputide.io/hot-until`, put on a hot node by a
                    TaintNode or on a Migrate's source. The planner renews it (TaintNode `renew`) while the node stays
                    hot; upkeep removes it once the expiry has passed.
    reservation     `gputide.io/reserved-for`, {owner: {"expires": ...}} on a Migrate's target (`k8s_migrate`; a
                    later move of the same owner writes it afresh); upkeep removes the entries whose expiry has passed
                    (an entry that is no such map is nobody's: expired).
    power caps      `gputide.io/power-caps` with `gputide.io/power-caps-until` (`power_cap_ttl_s`), written with each
                    SetPowerLimit. Upkeep renews the expiry once less than half the TTL is left, or when it is missing
                    or passed (`k8s_nodes.power_caps_renewal`); the node's agent gives the caps back once it has passed.
    quota moves     a Kueue quota shift's record on the lending ClusterQueue (`k8s_transfer`): a move a restart or a
                    failure left half done (a shrink's give-back whose raise failed among them) is completed or
                    rolled back (`KueueQuota.settle_all`), the journal's recovery; and each queue's net loan, of
                    which the part training's Jobs no longer hold is given back to inference
                    (`KueueQuota.reconcile`, counted in `gputide_kueue_quota_corrections_total`).

When, and under which holds (balancer/loop.py calls the hooks; `KubernetesActuator` delegates them here):

* `housekeeping`, once per cycle that plans: expired taints and reservations released, caps' expiry renewed when due,
  quota moves settled, then quota lent beyond need given back (a capacity move: here only, never in `recover`);
* `recover`, on a new leader's first cycle that plans (never one that holds still): the same, for what a previous
  leader left, after the quota's time-based memories are restarted (`KueueQuota.new_term`: what this process saw in
  an earlier term says nothing about now, as another leader may have moved quota meanwhile);
* `keep_power_caps`, while the loop holds still for fail-static (telemetry it does not trust): only the renewal of
  an expiry still to come (`k8s_nodes.power_caps_kept`), counted in
  `gputide_power_caps_renewed_holding_still_total`; no cap written or re-applied, no taint, reservation or quota
  touched (opening a node once judged hot is a change made blind);
* under the emergency stop, nothing: the loop calls no hook, so the caps lapse as a stopped controller's do. A node
  labelled `gputide.io/emergency-stop=true` has its caps renewed by no hook (`k8s_nodes.node_stopped`, judged on the
  node as listed and as the write reads it), logged once per node and stop; its expired taint and reservations are
  still released (their expiry running out is no action).

Per shard: `release_expired`, `housekeeping` and `recover` take the nodes to keep (`nodes`, a shard's own:
`_run_parts.ShardBound`; None: every node), and caps are renewed only on `power_cap_nodes` (None: every node), so a
live shard neither releases another's expiries nor keeps a dead shard's caps alive.

Every release judges the expiry on the node as listed, then again on the node the write reads
(`k8s_nodes.expired_taint_removal`, `expired_reservations`), under that read's resourceVersion (a 409 reads again): a
renewal that lands after the list is kept, never undone. The hooks run under the action deadline with no reserve;
an API failure becomes a note and what is left waits for the next cycle.

The quota's settles of one cycle read each ClusterQueue once, and again only after one of them patched it
(`KueueQuota.reads_once`): not once per step, each read an API GET every cycle and shard. The drift check reads them
afresh (`KueueQuota.reconcile`: its decision has no fence of its own against a peer's correction since).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection

from prometheus_client import CollectorRegistry
from prometheus_client import Counter as PromCounter

from balancer.actuate.k8s_nodes import (
    annotation_map_change,
    caps_until,
    expired_reservations,
    expired_taint_removal,
    node_stopped,
    power_caps_kept,
    power_caps_renewal,
)
from balancer.actuate.k8s_quota import KueueQuota, corrections_counter, unsettled_gauge
from balancer.actuate.kubernetes import Json, NotFoundError, _Api, read_power_caps, rfc3339
from balancer.errors import ActuationError

log = logging.getLogger("balancer.actuate.k8s_actuator")   # the actuator's log, as before this module split off


class Upkeep:
    """The expiries of what the actuator left on nodes and ClusterQueues: released, renewed or settled (module doc)."""

    def __init__(
        self,
        api: _Api,
        kueue: KueueQuota,
        clock: Callable[[], float],
        *,
        action_deadline_s: float,
        hot_taint_key: str,
        reservation_annotation: str,
        power_cap_annotation: str,
        power_cap_ttl_s: float,
        power_cap_nodes: Callable[[str], bool] | None,
        kueue_queues: tuple[str, str] | None,
        registry: CollectorRegistry | None,
    ) -> None:
        self.api, self.kueue, self.clock = api, kueue, clock
        self.action_deadline_s = action_deadline_s
        self.hot_taint_key = hot_taint_key
        self.reservation_annotation = reservation_annotation
        self.power_cap_annotation = power_cap_annotation
        self.power_cap_ttl_s = power_cap_ttl_s
        # the nodes whose caps this controller renews (a shard's own: another shard's controller renews, or not, its
        # own); None: every node's
        self.power_cap_nodes = power_cap_nodes
        self.kueue_queues = kueue_queues
        self.quota_corrections = corrections_counter(registry, kueue_queues)   # on the controller's metrics registry
        self.quota_unsettled = unsettled_gauge(registry, kueue_queues)   # a refused settle (`KueueQuota.unsettled`)
        self.caps_kept = PromCounter(   # `keep_power_caps`' renewals, on the controller's registry
            "gputide_power_caps_renewed_holding_still", "Renewals of a node's power caps' expiry made while the "
            "controller held still for fail-static (nothing else is written then).",
            registry=registry if registry is not None else CollectorRegistry())
        self._caps_lapsing: set[str] = set()   # nodes under their stop label whose caps' lapse was logged

    def recover(self, nodes: Collection[str] | None = None) -> list[str]:
        """The loop's first cycle as leader that plans: what a previous leader left behind is released once expired.

        Migrations are make-room-first and level-triggered here (the reservation and the taint carry their own
        expiry; an eviction either happened or did not), so recovering is `release_expired`, on `nodes` only when
        given (a shard's own: `_run_parts.ShardBound`), and the quota moves left open settled; an API failure becomes
        a note, the expiries stay and the next cycle's housekeeping tries again. Never while the loop holds still (it
        waits for the first cycle that plans): it renews caps whose expiry has passed, which an agent may have given
        back, and releases taints and reservations; under fail-static only `keep_power_caps` runs, under an emergency
        stop nothing. First, the quota memories that count time restart (`KueueQuota.new_term`): they are about this
        controller's last term, if it led before.
        """
        self.kueue.new_term()
        return self._release_expired_noting("recover", nodes) + self._quota_noting("recover", reconcile=False)

    def housekeeping(self, nodes: Collection[str] | None = None) -> list[str]:
        """Once per planning cycle (the loop's duck-typed hook): `release_expired` (on `nodes` only when given, a
        shard's own), Kueue quota moves settled and quota lent to training beyond what its Jobs hold given back
        (`KueueQuota.reconcile`), API failures as a note. The give-back is a capacity move: here only, which a cycle
        that holds still never reaches, not in `recover`."""
        return self._release_expired_noting("housekeeping", nodes) + self._quota_noting("housekeeping", reconcile=True)

    def keep_power_caps(self) -> list[str]:
        """The loop's hook while it holds still for fail-static (telemetry it does not trust): the caps this controller
        set stay as they are, their expiry renewed when due lest the agents give them back on a reading nobody trusts
        (`power_caps_kept`: only an expiry still to come; no cap written, changed or re-applied, no taint,
        reservation or quota touched). Each renewal counted; an API failure becomes a note, the next cycle tries again.
        Never under an emergency stop (the loop does not call it then): the operator said stop, so nothing is written
        and the caps lapse as a stopped controller's do; nor on a node under its own stop label
        (`_renew_power_caps`)."""
        now, renewed, failed = self.clock(), [], []
        try:
            with self.api.deadline(self.action_deadline_s, reserve_s=0.0):
                for node in self.api("list nodes", self.api.core.list_node).get("items", []):
                    renewed += self._renew_power_caps(node, now, power_caps_kept)   # one note per node renewed
        except ActuationError as err:
            failed.append(f"could not renew the power caps' expiry: {err}")
        self.caps_kept.inc(len(renewed))
        return renewed + failed

    def _release_expired_noting(self, what: str, nodes: Collection[str] | None) -> list[str]:
        try:
            with self.api.deadline(self.action_deadline_s, reserve_s=0.0):   # what is left waits for next cycle
                notes = self.release_expired(nodes)
        except ActuationError as err:
            notes = [f"{what}: could not release expired taints and reservations: {err}"]
        return notes

    def _quota_noting(self, what: str, *, reconcile: bool) -> list[str]:
        """The quota moves settled (`_settle_quota_noting`), on one read of each ClusterQueue (`KueueQuota.reads_once`:
        read again only once a settle wrote it), not one per step; then, with `reconcile`, the loans checked
        (`_reconcile_quota_noting`, on its own fresh reads), each under its own deadline."""
        with self.kueue.reads_once():
            notes = self._settle_quota_noting(what)
        return notes + (self._reconcile_quota_noting(what) if reconcile else [])

    def _settle_quota_noting(self, what: str) -> list[str]:
        """A Kueue quota move a previous leader (or this one) left half done - the lender lowered, the borrower not
        yet raised - finished or rolled back (`KueueQuota.settle_all`), so a restart between the two writes loses
        no quota from the cohort; failures are a note and the record stays for the next cycle."""
        notes = []
        for queue in self.kueue_queues or ():
            try:
                with self.api.deadline(self.action_deadline_s, reserve_s=0.0):
                    notes += self.kueue.settle_all((queue,))
            except NotFoundError:   # no queue, no move left open on it (a quota shift names the missing queue itself):
                self.kueue.unsettled.discard(queue)   # nor one whose settle is refused (its gauge back to 0)
            except ActuationError as err:
                notes.append(f"{what}: could not settle kueue quota moves of {queue}: {err}")
            self.quota_unsettled.labels(queue=queue).set(1 if queue in self.kueue.unsettled else 0)
        return notes

    def _reconcile_quota_noting(self, what: str) -> list[str]:
        """Quota lent to training beyond what its Jobs hold given back to inference (`KueueQuota.reconcile`), each
        correction counted; a failure is a note, and the next cycle looks again."""
        if not self.kueue_queues:
            return []
        try:
            with self.api.deadline(self.action_deadline_s, reserve_s=0.0):
                cuts = self.kueue.reconcile(self.kueue_queues)
        except NotFoundError:
            return []   # a queue missing: nothing lent to it (a quota shift names the missing queue itself)
        except ActuationError as err:
            return [f"{what}: could not check the kueue quota lent to {self.kueue_queues[1]}: {err}"]
        self.quota_corrections.labels(queue=self.kueue_queues[1]).inc(len(cuts))
        return [cut.note(*reversed(self.kueue_queues)) for cut in cuts]

    def release_expired(self, nodes: Collection[str] | None = None) -> list[str]:
        """Remove hot taints and reservations whose expiry has passed, renew the power caps' expiry when due (not on a
        node under its stop label: `_renew_power_caps`); call once per reconcile. With `nodes`, on those nodes only (a
        shard's own: another shard's expiries are that shard's to release, and its renewals its own); None: every
        node. Returns notes.

        The expiry is judged on the node as listed, then again on the node the write reads (`expired_taint_removal`,
        `expired_reservations`), and the write carries that read's resourceVersion (a 409 reads again): a taint or a
        reservation renewed after the list, or between the read and the write, is kept, never removed as expired."""
        now, notes = self.clock(), []
        for node in self.api("list nodes", self.api.core.list_node).get("items", []):
            name = node["metadata"]["name"]
            if nodes is not None and name not in nodes:
                continue
            notes += self._release_taint(node, now) + self._release_reservations(node, now)
            notes += self._renew_power_caps(node, now)
        return notes

    def _release_taint(self, node: Json, now: float) -> list[str]:
        """`node`'s hot taint removed if its expiry has passed, on the node as listed and as written."""
        name, key = node["metadata"]["name"], self.hot_taint_key
        if expired_taint_removal(node, key, now) is None \
                or self.api.update_node(name, lambda n: expired_taint_removal(n, key, now)) is None:
            return []   # not expired, or renewed since the list
        return [f"{name}: hot taint expired"]

    def _release_reservations(self, node: Json, now: float) -> list[str]:
        """`node`'s reservations whose expiry has passed removed, judged on the node as listed and as written. An entry
        that is not {"expires": ...} is nobody's: gone as expired, never an error that would stop the nodes after this
        one from being cleaned."""
        name, key, gone = node["metadata"]["name"], self.reservation_annotation, {}

        def change(n: Json) -> Json | None:
            gone.clear()
            gone.update(expired_reservations(n, key, now))   # renewed since the list: no longer among them
            return annotation_map_change(n, key, gone) if gone else None

        if not expired_reservations(node, key, now) or self.api.update_node(name, change) is None:
            return []
        return [f"{name}: reservations expired: {sorted(gone)}"]

    def _renew_power_caps(self, node: Json, now: float,
                          due: Callable[[Json, str, float, float], Json | None] = power_caps_renewal) -> list[str]:
        """The expiry of `node`'s power caps moved `power_cap_ttl_s` ahead when `due` says so (`power_caps_renewal`;
        `power_caps_kept` while the loop holds still). Never on a node that carries the emergency-stop label, on the
        node as listed or as the write reads it (`node_stopped`): the label stops every action touching the node, so
        its caps lapse as under the global stop (`_stopped_caps_lapse` logs it once)."""
        def renewal(n: Json) -> Json | None:
            return None if node_stopped(n) else due(n, self.power_cap_annotation, now, self.power_cap_ttl_s)

        name, was = node["metadata"]["name"], caps_until(node, self.power_cap_annotation)
        if (self.power_cap_nodes is not None and not self.power_cap_nodes(name)) or self._stopped_caps_lapse(node) \
                or (patch := renewal(node)) is None or self.api.update_node(name, renewal) is None:
            return []
        if next(iter(patch["metadata"]["annotations"].values())) is None:
            return [f"{name}: power caps expiry removed (no cap left)"]
        until = rfc3339(now + self.power_cap_ttl_s)
        if was is not None and was <= now:
            return [f"{name}: power caps had expired at {rfc3339(was)} (not renewed in time): renewed until {until}; "
                    "the node's agent applies again any it gave back"]
        return [f"{name}: power caps renewed until {until}"]

    def _stopped_caps_lapse(self, node: Json) -> bool:
        """Whether `node` carries the emergency-stop label (`node_stopped`), its caps then left to lapse; said once per
        node and stop (WARNING) while it holds caps, so the GputidePowerCapsExpired that follows is no surprise."""
        name = node["metadata"]["name"]
        if not node_stopped(node):
            self._caps_lapsing.discard(name)
            return False
        if name not in self._caps_lapsing and read_power_caps(node, self.power_cap_annotation):
            self._caps_lapsing.add(name)
            until = caps_until(node, self.power_cap_annotation)
            log.warning("%s carries the emergency-stop label: the power caps gputide set on it are not renewed "
                        "while it does; %s", name,
                        "they carry no expiry (an older controller's), so they stay" if until is None
                        else f"they lapse once their expiry {rfc3339(until)} passes and its agent gives them back")
        return True
