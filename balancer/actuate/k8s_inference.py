"""`ScaleInference` and its give-back: how the actuator floors an HPA or scales a Deployment no HPA scales, records
the operator's count of such a Deployment (`k8s_deploy_record`, the ConfigMap "gputide-replicas"), and gives the
operator's minReplicas and counts back where their services left gputide's management (`restore_floors`).

What is decided lives in `k8s_hpa` (the floor, its record on the HPA, whose floors are this controller's) and
`k8s_deploy_record` (the Deployment record's entries): no calls there. Here are the calls, through the actuator's
gateway (`_Api`), under the deadline `KubernetesActuator.apply` opens for an action (`restore_floors` opens its own,
one per namespace and Deployment). The rules each path keeps are the actuator's module docstring's (ScaleInference).

`InferenceScaling` is held by `KubernetesActuator` (its `inference`), which resolves the service's namespace from
the snapshot and dispatches ScaleInference to `scale`, and hands `restore_floors` on as its own (gputide run gives it
to the policy reloader). The refusals it logs at WARNING once (`_refuse`) and the floor caps (`_floor_clamp`) go into
the actuator's one set of messages told (`refusals`), and its log is the actuator's, as before it split off.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import NoReturn

from balancer.actuate.k8s_budget import ACTION_DEADLINE_S
from balancer.actuate.k8s_deploy_record import (
    Entry,
    entries,
    record_body,
    record_key,
    record_name,
    replicas,
    replicas_told,
    restore_change,
    scaled_entry,
    to_give_back,
)
from balancer.actuate.k8s_hpa import (
    FIELD_MANAGER,
    controller_name,
    floor_managed,
    floor_restore_patch,
    floored_namespaces,
    hpa_controller,
    hpa_floor,
    hpa_floor_patch,
    service_hpa,
)
from balancer.actuate.k8s_training import Applied
from balancer.actuate.kubernetes import (
    MERGE_PATCH,
    ConflictError,
    Json,
    KubeTemporaryError,
    NotFoundError,
    _Api,
)
from balancer.errors import ActuationError, PermanentActuationError, TemporaryActuationError

log = logging.getLogger("balancer.actuate.k8s_actuator")   # the actuator's log, as before this module split off


class InferenceScaling:
    """HPA floors and Deployment scales for ScaleInference, the operator's counts recorded and given back (the
    module docstring). `floor_owner`: the writer named on the floors and record entries this controller writes, the
    only one whose it gives back besides those naming none (`KubernetesActuator`'s); `refusals`: the messages logged
    at WARNING once, the actuator's own set (one set, shared)."""

    def __init__(self, api: _Api, floor_owner: str | None, refusals: set[str], *,
                 action_deadline_s: float = ACTION_DEADLINE_S) -> None:
        self.api, self.floor_owner, self.refusals = api, floor_owner, refusals
        self.action_deadline_s = action_deadline_s
        self.untracked: set[str] = set()   # "ns/name" of the Deployments `_log_untracked` logged

    def _log_untracked(self, deployment: Json) -> None:
        """Log, once per Deployment, that the API server tracks no owner of its spec.replicas
        (`k8s_deploy_record.replicas_told`), so whether the count is still gputide's is told from the record's count,
        a weaker answer (a hand scale to the count gputide wrote last is taken for gputide's)."""
        meta = deployment["metadata"]
        if replicas_told(deployment) or (key := f"{meta['namespace']}/{meta['name']}") in self.untracked:
            return
        self.untracked.add(key)
        log.info("deployment %s: the API server tracks no owner of its spec.replicas (no managedFields entry owns "
                 "them: none kept, or applied server-side without replicas), so whether its count is still gputide's "
                 "is told from the record (gputide's while it is the count gputide wrote last)", key)

    # ---- ScaleInference: HPA floor or Deployment scale ----

    def scale(self, ns: str, name: str, want: int, planned: int) -> str | Applied:
        """Scale service `ns/name` to `want` replicas, `planned` the count the plan saw: the floor of the HPA that
        scales it, else its Deployment's scale (`_scale_deployment`). Returns the detail (`Applied` with the floor's
        cap, `_floor_clamp`); raises ActuationError (a refusal: `_refuse`)."""
        hpas = self.api(f"list HPAs in {ns}", self.api.autoscaling.list_namespaced_horizontal_pod_autoscaler, ns)
        hpa = service_hpa(hpas, name)   # whatever it scales: a Deployment, a StatefulSet, a Rollout
        if hpa is None:
            return self._scale_deployment(ns, name, want, planned)
        hname, floor, owner = hpa["metadata"]["name"], {}, hpa_controller(hpa)
        if owner is not None:   # its controller writes its spec back (KEDA): a floor there would not hold
            self._refuse(f"hpa {ns}/{hname} is generated and kept by {owner}, which writes its minReplicas back: not "
                         "floored (set the floor on the owner, or leave the service out of the profiles)")

        def change(h: Json) -> Json | None:
            floored, own = hpa_floor(h, want)
            floor.update(value=floored, most=int(h["spec"]["maxReplicas"]))
            return hpa_floor_patch(h, floored, own, self.floor_owner)

        what = f"hpa {ns}/{hname}"
        self.api.update(
            what, lambda: self.api(what, self.api.autoscaling.read_namespaced_horizontal_pod_autoscaler, hname, ns),
            lambda body: self.api(what, self.api.autoscaling.patch_namespaced_horizontal_pod_autoscaler, hname, ns,
                                  body, _content_type=MERGE_PATCH, field_manager=FIELD_MANAGER), change)
        note, capped_to = self._floor_clamp(what, want, **floor)
        return Applied(f"{what} minReplicas = {floor['value']}{note}", capped_to=capped_to)

    def _floor_clamp(self, what: str, asked: int, value: int, most: int) -> tuple[str, int | None]:
        """What the HPA made of a floor of `asked` replicas (`value` written, `most` its maxReplicas): for the
        result's detail (nothing when it stands as asked), and its cap (None: none). One capped at maxReplicas says so,
        with the replicas that will never start, and is logged at WARNING once per HPA and bound, whatever floor was
        asked (the planner's ask moves with demand; what the operator must change is the bound): the result is still
        APPLIED (the floor written stands), but the plan that asked for it counted replicas the HPA will not create
        and may have shrunk training for them: the result carries the cap (`ActionResult.capped_to`, from
        `Applied.capped_to`), and the capacity planner asks no more of the service, and lends those GPUs back, while
        it believes it."""
        if value >= asked:
            return ("" if value == asked else f" (asked {asked}, clamped up to the operator's own minReplicas or 1)",
                    None)
        why = (f"{what}: a floor of {asked} replicas capped at its maxReplicas {most}: {asked - value} replicas asked "
               f"will not start (raise the HPA's maxReplicas, or set the service profile's maxReplicas to {most})")
        if (told := f"{what}: capped at its maxReplicas {most}") not in self.refusals:
            self.refusals.add(told)
            log.warning("%s", why)
        return (f" (asked {asked}, clamped to the HPA's maxReplicas {most}: {asked - value} replicas will not "
                "start)", most)

    def _scale_deployment(self, ns: str, name: str, want: int, planned: int) -> str:
        """Set the replicas of a Deployment no HPA scales through its scale subresource, only while they are still
        the `planned` count the action was made from: read the Deployment (refused when another controller keeps
        it), then write the scale with its resourceVersion. A lower count than now, when someone else set the count
        since the snapshot (an operator's scale-up for a spike), is not written: that count is theirs, the plan is
        stale (RETRY, code 409, nothing written; the next cycle plans from the count as it is), and so is one set
        between the read and the write (409, read again). A higher count than now is written whatever the plan saw
        (a reclaim: the SLO first, and it lowers no one's count).
        A count already at `want` (the same action tried again after a write that got no answer) is left as it is.
        With `floor_owner`, the operator's count is recorded before each write (`_keep_record`): a lowering whose
        record cannot be written is not made, a raise is made anyway; one back at the operator's own count drops its
        record after.
        No Deployment of that name (a StatefulSet's service, an operator's, profiled: `k8s_pods.servable` makes its
        pods inference) is refused: gputide scales no other kind but through an HPA's floor."""
        what, seen = f"deployment {ns}/{name}", {}

        def read() -> Json:
            try:
                return self.api(what, self.api.apps.read_namespaced_deployment, name, ns)
            except NotFoundError:   # a 404 said only "not found", every cooldown: say what gputide scales
                self._refuse(f"no HPA targets {ns}/{name} and there is no Deployment {ns}/{name}: not scaled "
                             "(gputide scales a Deployment or floors an HPA: give a StatefulSet's or an operator's "
                             "service an HPA, or leave it out of the profiles)")

        def change(d: Json) -> Json | None:
            owner = controller_name(d)
            if owner is not None:   # its controller writes spec.replicas back (KServe, an operator): flapping
                self._refuse(f"deployment {ns}/{name} is kept by {owner}, which writes its replicas back: not scaled "
                             "(scale it through the owner, or leave the service out of the profiles)")
            seen["now"] = current = replicas(d)
            if current == want:
                return None
            # a raise is written whatever the count now (a reclaim waits on no one's bookkeeping: the plan's count may
            # be a lagging kube-state-metrics reading, or the placed pods with some pending), but never below it
            if want < current and current != planned:
                raise ConflictError(f"{what} has {current} replicas, not the {planned} the plan saw (set by someone "
                                    f"else since): not scaled to {want}, the plan is stale", 409)
            if self.floor_owner is not None:
                seen["own"] = self._keep_record(d, want)
            return {"spec": {"replicas": want}}

        self.api.update(what, read, lambda body: self._patch_scale(what, ns, name, body), change)
        if seen.get("own") == want:   # the operator's own count again: nothing of gputide's to give back
            self._forget_record(ns, name, want)
        return f"{ns}/{name} replicas = {want}" + (" (already)" if seen["now"] == want else "")

    def _patch_scale(self, what: str, ns: str, name: str, body: Json) -> Json:
        return self.api(f"{what} scale", self.api.apps.patch_namespaced_deployment_scale, name, ns, body,
                        _content_type=MERGE_PATCH, field_manager=FIELD_MANAGER)

    def _keep_record(self, deployment: Json, want: int) -> int | None:
        """Record the operator's count of `deployment` (as read) before gputide scales it to `want`
        (`k8s_deploy_record.scaled_entry`: the entry's own kept while the API server names gputide the manager of
        its replicas, else the count read); the operator's count recorded. Not written, a lowering is not made
        either (RETRY), as it would lose the operator's count; a raise (the morning's reclaim) is made anyway, logged
        (None): the SLO waits on no bookkeeping; where managedFields tell, the raised count is gputide's (its field
        manager's), so the entry's own still goes back (the one recorded before: stale where someone else set the
        count since); where they do not, it is not the entry's "scaled", so the operator's, and nothing goes back. Its
        unanswered writes are not the action's (`_Api.writes`): nothing was scaled."""
        ns, name = deployment["metadata"]["namespace"], deployment["metadata"]["name"]
        key, kept, current = record_key(ns, name), {}, replicas(deployment)
        self._log_untracked(deployment)

        def change(recorded: dict[str, Entry]) -> Mapping[str, Entry | None]:
            kept["entry"] = scaled_entry(recorded.get(key), deployment, want, self.floor_owner)
            return {key: kept["entry"]}

        try:
            with self.api.writes():
                self._write_record(change)
        except ActuationError as err:
            if want > current:
                log.warning("deployment %s/%s: raised to %d without the record of its operator's count (%s): a "
                            "give-back restores the count recorded before, if any, and only where the API server "
                            "names gputide the manager of its replicas", ns, name, want, err)
                return None
            raise KubeTemporaryError(f"deployment {ns}/{name} not scaled: the record of its operator's count could "
                                     f"not be written ({err})", getattr(err, "status", 0)) from err
        return kept["entry"].own

    def _forget_record(self, ns: str, name: str, want: int) -> None:
        """Drop the record of deployment `ns/name`, scaled back to its operator's `want`, while it still says so
        (best effort: a record left at the operator's count gives nothing back)."""
        key = record_key(ns, name)

        def change(recorded: dict[str, Entry]) -> Mapping[str, Entry | None]:
            entry = recorded.get(key)
            return {key: None} if entry is not None and entry.own == entry.scaled == want else {}

        try:
            with self.api.writes():
                self._write_record(change)
        except ActuationError as err:
            log.debug("deployment %s/%s: record of its operator's count kept: %s", ns, name, err)

    def _read_record(self) -> Json | None:
        """The record ConfigMap of this controller's namespace (`k8s_deploy_record.record_name`); None: there is none
        yet."""
        ns, name = record_name(str(self.floor_owner))
        try:
            return self.api(f"configmap {ns}/{name}", self.api.core.read_namespaced_config_map, name, ns)
        except NotFoundError:
            return None

    def _write_record(self, changes: Callable[[dict[str, Entry]], Mapping[str, Entry | None]]) -> None:
        """Read-modify-write of the record ConfigMap with its resourceVersion (`_Api.update`: a 409
        reads again), `changes` made to the records as read; created when missing (one created meanwhile: read
        again)."""
        ns, name = record_name(str(self.floor_owner))
        what = f"configmap {ns}/{name}"
        for attempt in range(self.api.max_retries + 1):
            try:
                self.api.update(
                    what, lambda: self.api(what, self.api.core.read_namespaced_config_map, name, ns),
                    lambda body: self.api(what, self.api.core.replace_namespaced_config_map, name, ns, body),
                    lambda cm: record_body(cm, ns, name, changes(entries(cm))))
                return
            except NotFoundError:
                body = record_body(None, ns, name, changes({}))
                if body is None:
                    return
                try:
                    self.api(what, self.api.core.create_namespaced_config_map, ns, body)
                    return
                except ConflictError:   # created by another writer since: read it again
                    if attempt == self.api.max_retries:
                        raise

    def _refuse(self, why: str) -> NoReturn:
        """Refuse the action (FAILED, code "refused"), logging `why` at WARNING the first time only: the loop reports
        every FAILED result already (its log line, the audit, gputide_actuation_errors_total{code="refused"})."""
        if why not in self.refusals:
            self.refusals.add(why)
            log.warning("%s", why)
        else:
            log.debug("%s", why)
        raise PermanentActuationError(why)

    # ---- the give-back: HPA floors, the recorded Deployments ----

    def restore_floors(self, namespaces: Iterable[str] | None = None, managed: Collection[str] = ()) -> list[str]:
        """Give the operator's own minReplicas back to every HPA of `namespaces` that carries gputide's floor
        record (`k8s_hpa.floor_restore_patch`): their services left gputide's management (a policy reload protected
        the namespaces; balancer/app/policy_reload.py). Only while minReplicas is still the floor gputide wrote; one
        someone else wrote since is left as it is and logged. Returns a note per HPA changed or left; a namespace
        whose HPAs cannot be read or written is a note too, the rest go on.
        `namespaces` None: every namespace holding such an HPA that scales none of the `managed` services (one
        cluster-wide list, `k8s_hpa.floored_namespaces`), and only those HPAs: capacity shifting off (no `managed`),
        or services left out of its profiles. That list failing raises its ActuationError (nothing given back).
        Either way only floors this controller wrote (`floor_owner`) or whose writer is not recorded: another
        shard's, or another controller's with other --services, are left to it (`k8s_hpa.floor_owned`).
        The Deployments no HPA scales get their operator's count back by the same rules, from this controller's
        record (`_restore_deployments`): those of `namespaces`, or, None, every recorded one scaling none of
        `managed`. A record that cannot be read is a note only (the HPA floors still go back).

        Not called on a plain shutdown: a restarted controller (or the next leader) reads the record back and keeps
        the floors the load still needs; dropping them at each restart would shrink services under load."""
        notes: list[str] = []
        asked = None if namespaces is None else tuple(namespaces)
        if asked is None:
            with self.api.deadline(self.action_deadline_s, reserve_s=0.0):
                namespaces = floored_namespaces(self.api(
                    "list HPAs", self.api.autoscaling.list_horizontal_pod_autoscaler_for_all_namespaces), managed,
                    self.floor_owner)
        for ns in sorted(set(namespaces if asked is None else asked)):
            try:
                with self.api.deadline(self.action_deadline_s, reserve_s=0.0):
                    notes += self._restore_namespace(ns, managed)
            except ActuationError as err:
                notes.append(f"hpa floors in {ns} not given back: {err}")
        if self.floor_owner is not None:
            notes += self._restore_deployments(asked, managed)
        for note in notes:
            log.info("%s", note)
        return notes

    def _restore_namespace(self, ns: str, managed: Collection[str] = ()) -> list[str]:
        hpas = self.api(f"list HPAs in {ns}", self.api.autoscaling.list_namespaced_horizontal_pod_autoscaler, ns)
        notes = []
        for item in hpas.get("items", []):
            hname, said = item["metadata"]["name"], {}
            if floor_restore_patch(item, self.floor_owner)[0] is None or floor_managed(item, managed):
                continue

            def change(h: Json, said: dict = said) -> Json | None:
                body, said["what"] = floor_restore_patch(h, self.floor_owner)
                return body

            what = f"hpa {ns}/{hname}"
            self.api.update(
                what, lambda w=what, n=hname: self.api(
                    w, self.api.autoscaling.read_namespaced_horizontal_pod_autoscaler, n, ns),
                lambda body, w=what, n=hname: self.api(
                    w, self.api.autoscaling.patch_namespaced_horizontal_pod_autoscaler, n, ns, body,
                    _content_type=MERGE_PATCH, field_manager=FIELD_MANAGER), change)
            if "what" in said:
                notes.append(f"{what}: service left gputide's management: {said['what']}")
        return notes

    def _restore_deployments(self, namespaces: tuple[str, ...] | None, managed: Collection[str]) -> list[str]:
        """The operator's own count back to the Deployments the record holds for this controller (written by it, or
        by a writer not recorded), of `namespaces` (None: any) and scaling none of `managed`
        (`k8s_deploy_record.to_give_back`), through the scale subresource with the resourceVersion read, only while
        their count is still gputide's (`restore_change`: the API server names gputide the manager of their replicas,
        or, where it names no one, the count is the one gputide last wrote; one someone else set since is left and
        logged); their keys dropped once done (a Deployment gone too). One
        that cannot be read or scaled keeps its key and says so ("deployment replicas in NS not given back"), the
        rest go on. The record unread for a temporary error says so for each namespace asked (None: "deployment
        replicas not given back"), so the reloader and its release try again; refused (403), or not rewritten after,
        it is a note only."""
        what = "record of deployment replicas {}/{}".format(*record_name(str(self.floor_owner)))
        try:
            with self.api.deadline(self.action_deadline_s, reserve_s=0.0):
                recorded = entries(self._read_record())
        except TemporaryActuationError as err:   # tried again: the reloader's next poll, release's
            where = [""] if namespaces is None else [f" in {ns}" for ns in namespaces]
            return [f"deployment replicas{w} not given back: {what} not read: {err}" for w in where]
        except ActuationError as err:   # refused (403): asked again every poll it would change nothing
            return [f"{what} not read: deployment replicas not given back: {err}"]
        notes, done = [], []
        for key in to_give_back(recorded, namespaces, managed, self.floor_owner):
            ns, name = recorded[key].namespace, recorded[key].name
            try:
                with self.api.deadline(self.action_deadline_s, reserve_s=0.0):
                    notes.append(self._give_back_deployment(ns, name, recorded[key]))
            except NotFoundError:
                notes.append(f"deployment {ns}/{name}: gone, its record dropped")
            except ActuationError as err:
                notes.append(f"deployment replicas in {ns} not given back: {err}")
                continue
            done.append(key)
        if done:
            try:
                with self.api.deadline(self.action_deadline_s, reserve_s=0.0):
                    self._write_record(lambda _recorded: dict.fromkeys(done))
            except ActuationError as err:
                notes.append(f"{what}: given back, but its keys not dropped: {err}")
        return notes

    def _give_back_deployment(self, ns: str, name: str, entry: Entry) -> str:
        what, said = f"deployment {ns}/{name}", {}

        def change(d: Json) -> Json | None:
            self._log_untracked(d)
            body, said["what"] = restore_change(entry, d)
            return body

        self.api.update(what, lambda: self.api(what, self.api.apps.read_namespaced_deployment, name, ns),
                        lambda body: self._patch_scale(what, ns, name, body), change)
        return f"{what}: service left gputide's management: {said['what']}"

