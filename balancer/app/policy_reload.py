"""The policy file, re-read while the controller runs: an edit to its ConfigMap takes effect without a restart.

Kubernetes updates a mounted ConfigMap in place (the kubelet swaps the volume's `..data` link, within about a
minute of the edit), but a process that read the file at start never sees it. An operator who sets
`spec.safety.emergencyStop: true`, lowers the eviction budget or protects a namespace expects the running
controller to obey. `PolicyReloader.poll()`, called by the reconcile loop at the start of every cycle, looks at the
file (one `stat`); when it changed, it loads and validates it like at start:

* **valid**: the new policy is returned and the loop acts on it from this cycle, in the planner and the safety
  guard. The sections the controller builds long-lived parts from at start (`spec.capacity`, `spec.forecast`
  and `spec.colocation.latencySloS`: the capacity planner, the forecaster, the telemetry's SLO) keep their
  values until a restart; a change to them sets `gputide_policy_restart_required` and is logged once.
* **invalid** (bad YAML, an unknown field, a value out of range, the file missing or unreadable, or a value the
  command refuses at start: gputide run's `maxTelemetryAgeS` under 45 s): the running policy stays, the error
  names the file, the field, the value and what is allowed (as at start), and
  `gputide_policy_last_reload_successful` drops to 0 (alert `GputidePolicyReloadFailing`). It is logged once per
  content; the next change is tried again.

A service leaves gputide's management on a reload when its namespace joins `spec.safety.protectedNamespaces`
(`newly_protected`; the services capacity shifting may resize are --services' profiles, read at start only): the
capacity planner leaves it alone from then on and the guard refuses to scale it, so a predictive floor gputide had
raised on its HPA would stay for good. `on_leave(namespaces)` (gputide run: the actuator's `restore_floors`) gives
the operator's own minReplicas back from the HPA's floor record, where minReplicas is still the floor gputide wrote
(someone else's value since is left, and logged). A give-back is owed until it succeeds: one that raised, or whose
namespaces `on_leave` returns as not given back (an API error, or a standby that may not write), is tried again at
every later poll. With `office` (gputide run: the term this replica leads in, None on a standby), every namespace
the running policy protects is given back whenever the replica takes office, its first term after start included:
a standby that reloaded the file, or a controller restarted with the edited file (whose policy at start already
protects the namespace, so no reload ever "newly" protects it), would otherwise never give them back. That is one
list of HPAs per protected namespace per term; `restore_floors` only touches HPAs carrying gputide's floor record,
so giving back what is already given back changes nothing. Not on a plain shutdown, and never in a namespace gputide
still manages: a restarted controller, or the next leader, reads the record back, and dropping the floors at every
restart would shrink services under load. Not for `emergencyStop` either: that holds everything still, floors
included.

A floor also outlives its service's management where no namespace is protected: capacity shifting turned off
(`capacity.enabled: false`, which applies at the next start like the rest of `spec.capacity`), or a service taken out
of --services' profiles. With `release` (gputide run: `floors_released`), the leading replica gives those back at the
first poll of every term, and again at every later poll until it succeeds: every floor gputide recorded with capacity
shifting off, else those of HPAs that scale no profiled service. A failure is logged once per term.

Both give-backs are this controller's own: gputide run gives back only the floors it wrote (their record names its
Lease, `gputide.io/floor-owner`) or whose writer is not recorded (an older version's). Another shard, or another
controller with other --services, manages services this one does not, and its floors stay
(balancer/actuate/k8s_hpa.py).

Like Prometheus's `prometheus_config_last_reload_successful`, success is a gauge and the time of the last
successful load is `gputide_policy_last_reload_success_timestamp_seconds`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge

from balancer import config
from balancer.errors import InputError

log = logging.getLogger(__name__)

RESTART_ONLY = ("spec.capacity", "spec.forecast", "spec.colocation.latencySloS")
_ONE_TERM = "leading from start"   # the term of a PolicyReloader without `office`


def restart_only(old: config.BalancerPolicy, new: config.BalancerPolicy) -> tuple[config.BalancerPolicy, list[str]]:
    """(`new` with the `RESTART_ONLY` parts kept as in `old`, the names of those parts that differ)."""
    changed = [name for name, a, b in (
        ("spec.capacity", old.capacity, new.capacity), ("spec.forecast", old.forecast, new.forecast),
        ("spec.colocation.latencySloS", old.colocation.latency_slo_s, new.colocation.latency_slo_s)) if a != b]
    kept = replace(new, capacity=old.capacity, forecast=old.forecast,
                   colocation=replace(new.colocation, latency_slo_s=old.colocation.latency_slo_s))
    return kept, changed


def newly_protected(old: config.BalancerPolicy, new: config.BalancerPolicy) -> tuple[str, ...]:
    """The namespaces `new` protects and `old` did not: their services leave gputide's management."""
    was = set(old.safety.protected_namespaces)
    return tuple(sorted(ns for ns in set(new.safety.protected_namespaces) if ns not in was))


def changed_sections(old: config.BalancerPolicy, new: config.BalancerPolicy) -> list[str]:
    """The `spec.<section>` names whose values differ."""
    return [f"spec.{s}" for s in config.SECTIONS if getattr(old, s) != getattr(new, s)]


@dataclass
class _Gauges:
    ok: Gauge
    at: Gauge
    restart: Gauge

    @classmethod
    def on(cls, registry: CollectorRegistry | None) -> _Gauges:
        r = registry
        return cls(
            Gauge("gputide_policy_last_reload_successful",
                  "1 if the last load of the policy file succeeded (0: the previous policy is still in force).",
                  registry=r),
            Gauge("gputide_policy_last_reload_success_timestamp_seconds",
                  "When the policy file was last loaded successfully.", registry=r),
            Gauge("gputide_policy_restart_required",
                  "1 while the policy file changes a part that applies only at start (capacity, forecast, "
                  "colocation.latencySloS).", registry=r))


class PolicyReloader:
    """Re-reads `path` when it changes (see the module docstring); `poll()` returns a new policy or None."""

    def __init__(self, path: str | Path, started_with: config.BalancerPolicy, *,
                 registry: CollectorRegistry | None = None, clock: Callable[[], float] = time.time,
                 check: Callable[[config.BalancerPolicy], object] | None = None,
                 on_leave: Callable[[tuple[str, ...]], Iterable[str] | None] | None = None,
                 office: Callable[[], object] | None = None, release: Callable[[], object] | None = None) -> None:
        """`check(policy)` raises the InputError of a policy its command refuses at start beyond the file's own rules
        (gputide run: `spec.safety.maxTelemetryAgeS` under its staleness floor or below --stale-after), so that a
        file refused at start is refused at reload too. `on_leave(namespaces)` is called at the poll of a valid reload
        that protects namespaces the running policy did not (`newly_protected`), before the new policy is returned:
        the floors gputide raised there are given back (module docstring). It returns the namespaces whose floors
        were not given back (None: all were); those, or all it was handed if it raised, are handed to it again at
        every later poll until it succeeds. A failure is logged and the reload stands. Never at shutdown.
        `office()`: an identifier of the term this replica leads in now, None while it does not lead; when it
        changes to a term (the first after start included), every protected namespace is handed over, and none
        while it is None. Without it, the replica counts as leading one term from start, and only reloads hand
        namespaces over.
        `release()`: gives back the floors of the services gputide no longer manages whatever the namespace (gputide
        run: every recorded floor with capacity shifting off, those of services left out of --services' profiles);
        called at the first poll of every term (as `office` tells them, like the protected namespaces), and again at
        every later poll until it returns True (all given back); a False, or a raise, is logged once per term."""
        self.path = Path(path)
        self.check = check
        self.on_leave = on_leave
        self.office = office
        self._term: object = None if office is not None else _ONE_TERM   # office() at the last poll
        self._owed: set[str] = set()   # namespaces whose floors are still to be given back
        self._warned: frozenset[str] = frozenset()   # the owed namespaces last warned about (once per set)
        self.release = release
        self._released: bool | None = None   # this term: True once given back, False once warned, None before
        self.started_with = self.current = started_with
        self.clock = clock
        self.gauges = _Gauges.on(registry)
        # not the file's signature now: `started_with` was read earlier (gputide run builds its Kubernetes client,
        # informers and forecaster in between), and an edit landing meanwhile would pass for the running policy.
        # The first poll reads the file once more; unchanged, it changes nothing.
        self._seen: tuple[int, int, int] | None | str = "unread"
        self.gauges.ok.set(1)
        self.gauges.at.set(clock())
        self.gauges.restart.set(0)
        self.last_error: str | None = None

    def _signature(self) -> tuple[int, int, int] | None:
        """What changes when the file does: a ConfigMap update swaps the link, so the inode and mtime change."""
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def poll(self) -> config.BalancerPolicy | None:
        new = self._reload()
        self._give_back()
        return new

    def _reload(self) -> config.BalancerPolicy | None:
        sig = self._signature()
        if sig == self._seen:
            return None
        self._seen = sig
        try:
            loaded = config.load(self.path)
            if self.check is not None:
                self.check(loaded)
        except InputError as exc:
            self.gauges.ok.set(0)
            self.last_error = str(exc)
            log.error("policy file not reloaded, the running policy stays: %s", exc)
            return None
        self.gauges.ok.set(1)
        self.gauges.at.set(self.clock())
        self.last_error = None
        effective, pending = restart_only(self.started_with, loaded)
        self.gauges.restart.set(1 if pending else 0)
        if pending:
            log.warning("policy file changes %s: these apply at the next start; the rest applies now",
                        ", ".join(pending))
        sections = changed_sections(self.current, effective)
        if not sections:
            return None
        log.info("policy file reloaded: %s changed", ", ".join(sections))
        self._owed.update(newly_protected(self.current, effective))
        self.current = effective
        return effective

    def _give_back(self) -> None:
        """Hand `on_leave` the namespaces whose floors are owed (module docstring): all those protected when this
        replica takes office, those a reload newly protects, and those not given back yet; and `release()` the
        floors of services no longer managed anywhere."""
        if self.on_leave is None and self.release is None:
            return
        term = self.office() if self.office is not None else _ONE_TERM
        if term is None:   # a standby: the leader gives them back, and this replica too once it takes office
            self._term = None
            return
        if term != self._term:
            self._term, self._released = term, None
            self._owed.update(self.current.safety.protected_namespaces)
        self._release_unmanaged()
        self._owed &= set(self.current.safety.protected_namespaces)   # one managed again keeps its floors
        if not self._owed or self.on_leave is None:
            return
        owed = tuple(sorted(self._owed))
        try:
            self._owed = set(self.on_leave(owed) or ()) & self._owed
        except Exception as exc:   # the new policy applies whatever the give-back met; tried again at the next poll
            failure: Exception | None = exc
        else:
            failure = None
        if self._owed and frozenset(self._owed) != self._warned:   # said once while the same ones stay owed
            log.warning("namespaces %s protected: their HPA floors were not given back (tried again at every poll)",
                        ", ".join(sorted(self._owed)), exc_info=failure)
        self._warned = frozenset(self._owed)

    def _release_unmanaged(self) -> None:
        """`release()` until it succeeds once this term (`__init__`); a failure is logged once per term."""
        if self.release is None or self._released:
            return
        try:
            done, failure = bool(self.release()), None
        except Exception as exc:   # tried again at the next poll
            done, failure = False, exc
        if not done and self._released is None:
            log.warning("HPA floors of services gputide no longer manages were not all given back (tried again at "
                        "every poll)", exc_info=failure)
        self._released = done
