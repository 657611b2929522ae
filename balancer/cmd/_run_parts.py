"""The parts `gputide run` builds from the Kubernetes API and for tidal capacity shifting (split from run.py).

`kubernetes_sources`: what the metrics cannot say of pods and nodes, listed once and followed by watches;
`capacity_parts`: the capacity planner and the demand forecaster, when the policy turns capacity shifting on;
`capacity_flags` / `forecast_history_days`: the checks of the forecaster's flags (exit 2 naming the flag), and
`history_short` the warning for a --forecast-history shorter than the forecast model needs;
`keep_ledger`: where the safety ledger survives a restart (`--ledger-file`, the Lease), or a warning that it does not;
`bound_to_shard`: a shard's actuator, which refuses actions on nodes that left the shard since they were planned and
keeps its housekeeping and recovery to the shard's own nodes.
"""

from __future__ import annotations

import argparse
import inspect
import logging
import math
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from balancer import config
from balancer.actuate.base import ActionResult
from balancer.cmd._args import duration_between
from balancer.errors import InputError
from balancer.ledger_handover import LedgerHandover
from balancer.metrics import ControllerMetrics
from balancer.model import Action, ClusterSnapshot

if TYPE_CHECKING:
    from balancer.telemetry.shard import ShardedSource

log = logging.getLogger("balancer.cmd.run")   # `gputide run`'s log

# the forecaster keeps this much of a service's demand and drops anything older: more history is read and fitted
# for nothing (a 1400d typo read years at a coarse step), so --forecast-history stops here
MOST_FORECAST_HISTORY_D = 28.0
DEFAULT_FORECAST_HISTORY = "14d"   # --forecast-history's default
CAPACITY_FLAGS = (("--forecast-model", "forecast_model"), ("--forecast-history", "forecast_history"),
                  ("--demand-query", "demand_query"))


def capacity_flags(args: argparse.Namespace) -> None:
    """The forecaster's flags mean something only with --services: without it, refuse them rather than ignore them
    (a --forecast-model typo or a --demand-query that would never be read), and check their values up front."""
    if not args.services:
        for flag, name in CAPACITY_FLAGS:
            if getattr(args, name) is not None:
                raise InputError(None, flag, getattr(args, name), "only with --services FILE (capacity shifting "
                                                                  "is all that reads it)")
        return
    from balancer.forecast.base import MODELS

    if args.forecast_model is not None and args.forecast_model not in MODELS:
        raise InputError(None, "--forecast-model", args.forecast_model, ", ".join(sorted(MODELS)))
    if args.forecast_history is not None:
        forecast_history_days(args.forecast_history)


def forecast_history_days(text: str, field: str = "--forecast-history") -> float:
    """Days of demand history to read when a service is first seen: a finite positive duration, no more than the
    forecaster keeps (`MOST_FORECAST_HISTORY_D`)."""
    most = MOST_FORECAST_HISTORY_D * 86400.0
    return duration_between(text, field, 0.0, most, f"a finite positive duration up to {MOST_FORECAST_HISTORY_D:.0f}d "
                            "(the forecaster keeps no more of a service's demand), such as 14d") / 86400.0


def kubernetes_sources(api_client, interval: float, once: bool, metrics: ControllerMetrics,
                       services: Collection[str] = ()):
    """(workload overrides, node overrides) from the Kubernetes API: what the metrics cannot say of pods (owners,
    priorities, elastic bounds, node rules) and of nodes (labels, taints); (None, None) without an API client. A
    long-running controller lists once and follows the watches; `--once` lists once and exits. `services`: the names
    of --services' profiles, whose pods are inference whatever controller runs them (a StatefulSet's too) unless
    their label says otherwise (`KubernetesWorkloads`)."""
    if api_client is None:
        return None, None
    from balancer.actuate.k8s_nodes import KubernetesNodes
    from balancer.actuate.k8s_workloads import KubernetesWorkloads

    ttl = max(interval, 30.0)
    overrides = KubernetesWorkloads(api_client, ttl_s=ttl, watch=not once, services=services)
    nodes = KubernetesNodes(api_client, ttl_s=ttl, watch=not once)
    for what, lw in (("pods", overrides.watch), ("nodes", nodes.watch), ("jobs", overrides.jobs.watch),
                     ("poddisruptionbudgets", overrides.budgets.watch),
                     ("namespaces", overrides.namespaces.watch),
                     # followed only once a running GPU pod mounts a claim: 0 synced until then
                     ("persistentvolumeclaims", overrides.claims.watch), ("persistentvolumes", overrides.volumes.watch),
                     # pods that ran to their end (dropped from the GPU attribution), Jobs' failure budgets
                     ("finished_pods", overrides.finished.watch), ("job_facts", overrides.jobs_facts.watch)):
        if lw is not None:
            metrics.follow_watch(what, lambda lw=lw: lw.synced, lambda lw=lw: lw.failures)
    return overrides, nodes


def hpa_source(api_client, profiles, interval: float, report=None):
    """What the HPA scaling each profiled service keeps on its own metrics (`k8s_hpa_reads.KubernetesHpaWants`,
    listed at most once per half `interval`, so every cycle reads it fresh), for the capacity planner's loans; None
    without --services (no right to list HPAs then: components/capacity) or without an API client. `report`: told at
    each read why the reads are unusable for loans (the controller's `set_hpa_reads_unusable`)."""
    if api_client is None or not profiles:
        return None
    from balancer.actuate.k8s_hpa_reads import KubernetesHpaWants

    return KubernetesHpaWants(api_client, ttl_s=interval / 2, report=report)


def check_capacity_enabled(args: argparse.Namespace, policy: config.BalancerPolicy) -> None:
    """`capacity.enabled` must agree with --services: InputError otherwise (at start, and for a reloaded file, which
    would otherwise pass and be refused at the next restart)."""
    if not policy.capacity.enabled and args.services:
        raise InputError(args.policy, "capacity.enabled", False, "true when --services is given")
    if policy.capacity.enabled and not args.services:
        raise InputError(args.policy, "capacity.enabled", True,
                         "false, or --services FILE naming the inference services capacity shifting may resize")


def capacity_parts(args: argparse.Namespace, policy: config.BalancerPolicy, source, interval: float,
                   profiles: dict | None = None):
    """(planner, forecaster) for tidal capacity shifting, or (None, None) when the policy leaves it off."""
    check_capacity_enabled(args, policy)
    if not policy.capacity.enabled:
        return None, None
    from balancer.app.capacity_run import (
        DEFAULT_DEMAND_QUERY,
        CapacityLoopPlanner,
        PrometheusDemandHistory,
        load_profiles,
    )
    from balancer.forecast.online import DemandForecaster
    from balancer.forecast.service import ServiceForecaster
    from balancer.plan.capacity import CapacityPolicy
    from balancer.plan.capacity_plan import reclaim_horizon_s

    profiles = profiles if profiles is not None else load_profiles(args.services)
    cap = CapacityPolicy.from_config(policy.capacity)
    step = policy.forecast.step_s
    history_text = args.forecast_history or DEFAULT_FORECAST_HISTORY
    history_d = forecast_history_days(history_text)
    history = PrometheusDemandHistory(source, args.demand_query or DEFAULT_DEMAND_QUERY, history_d, step,
                                      cluster=args.cluster)
    # the planner reads the forecast over the loan horizon and over each service's warm-up + margin lead. Not over
    # the wait for a job's next checkpoint a reclaim may add: that period is learned at run time and bounded by
    # nothing, so the planner cuts the window where the forecast ends and says so (`capacity_plan.reclaim_window`)
    horizon = max([policy.forecast.horizon_s, cap.loan_horizon_s]
                  + [reclaim_horizon_s(p, cap) for p in profiles.values()])
    model = args.forecast_model or "mstl"
    calendar_unread(model, policy.forecast.timezone)
    online = DemandForecaster(model=model, step_s=step, history_days=MOST_FORECAST_HISTORY_D,
                              timezone=policy.forecast.timezone,   # the calendar the demand follows (DST)
                              max_stale_steps=stale_steps(interval, step))
    forecaster = ServiceForecaster(online, horizon, history=history)
    # persistence: 12 buckets, no tide
    history_short(history_text, history_d, model, online.tide_need_s(forecaster.steps))
    return CapacityLoopPlanner(profiles, cap, interval, history=history, sharded=bool(args.shard)), forecaster


def history_short(text: str, history_d: float, model: str, need_s: float) -> bool:
    """Warn (and say True) when --forecast-history (`text`, `history_d` days) reads less demand than `model` needs
    for a forecast (`need_s`: its `tide_history_s` plus the horizon asked for): each service then waits for the rest
    in live cycles, held from lending, and as that history is kept in memory only, a controller restarted more often
    than that never forecasts. A warning, not a refusal: an operator may accept the wait."""
    if history_d * 86400.0 >= need_s:
        return False
    log.warning("--forecast-history %s reads less demand history than the %s forecast model needs (%.3g h: its daily "
                "season plus the forecast horizon): each service gets no forecast, and lends none of its replicas, "
                "until the rest is watched live, and history is not kept across a restart", text, model,
                need_s / 3600)
    return True


def stale_steps(interval_s: float, step_s: float) -> int:
    """How many forecast steps old a service's latest demand may be for a forecast (`DemandForecaster`'s
    `max_stale_steps`): the steps one cycle spans, plus the 3 a short telemetry gap may leave. A bucket gets a
    sample only once a cycle, so with a cycle longer than ~4 steps a fixed 3 refused every forecast, for ever."""
    return math.ceil(interval_s / step_s) + 3


def calendar_unread(model: str, timezone: str) -> bool:
    """Warn (and say True) when `spec.forecast.timezone` names a zone other than UTC that `model` cannot read: only
    the models with a calendar (`balancer.forecast.base.make` sets their ``tz``) follow local time across DST."""
    from balancer.forecast.base import MODELS, make

    if timezone == "UTC" or hasattr(make(model), "tz"):
        return False
    readers = ", ".join(sorted(m for m in MODELS if hasattr(make(m), "tz")))
    log.warning("spec.forecast.timezone %s is not read by the %s forecast model, which has no calendar: its daily "
                "season is a fixed 24 h, so after a DST change its daily shape is an hour off in local time until it "
                "re-learns it; the models that read the zone: %s (--forecast-model)", timezone, model, readers)
    return True


class ShardBound:
    """The actuator of one shard (`gputide run --shard`). An action the shard must not carry out now
    (`balancer.telemetry.shard.refused`: a node it names was relabelled into another shard between the snapshot it
    was planned on and now, or the shard's GPUs were renumbered) comes back failed with code `refused`, logged as a
    warning, and never reaches `inner`: the same refusal as the simulator's `shard.ShardActuator`. Any other action
    is `inner`'s as it is; so are its other hooks and attributes (`keep_power_caps`, whose power caps are scoped by
    `run.power_cap_scope`, `action_deadline_s`). `housekeeping` and `recover` are `inner`'s on the shard's own nodes
    only (`own_nodes`): the Kubernetes actuator's `release_expired` would otherwise remove every shard's expired hot
    taints and reservations, as `shard.ShardActuator` keeps the simulator's to its shard."""

    def __init__(self, inner: Any, source: ShardedSource) -> None:
        self.inner, self.source = inner, source
        self.name = getattr(inner, "name", "shard")

    def apply(self, action: Action, snapshot: ClusterSnapshot) -> ActionResult:
        from balancer.telemetry.shard import refused

        no = refused(action, self.source, log)
        return self.inner.apply(action, snapshot) if no is None else no

    def own_nodes(self) -> frozenset[str]:
        """The nodes this shard's hooks keep: `ShardedSource.nodes` (those of its latest reading, and a dark one it held
        last or the node list labels for it, whose power caps it renews too). Before its first reading (the loop calls
        `recover` only after a good reading, so only for a caller of its own), the node list's (`ShardedSource.listed`):
        the GPU nodes its selector matches as the Kubernetes API labels them, or the fleet file's; none while the API's
        nodes are not listed yet (the cycle's housekeeping after the first reading keeps the shard's nodes). GPU nodes
        only, as a reading's are: a node without GPUs carries no hot taint, reservation or power cap of gputide's, and
        the same set is the one the shard reports (`shard_nodes`) and renews power caps on before a reading."""
        if self.source.last_full is not None:
            return frozenset(self.source.nodes)
        return self.source.listed()

    def housekeeping(self) -> list[str]:
        """The loop's per-cycle hook, `inner`'s on this shard's nodes only (`own_nodes`): the Kubernetes actuator's
        releases their expired hot taints and reservations and renews their caps' expiry; another shard's are left
        to that shard. Its Kueue quota upkeep is the cohort's, as before."""
        return self._scoped("housekeeping")

    def recover(self) -> list[str]:
        """The loop's first cycle as leader, `inner`'s on this shard's nodes only (`own_nodes`)."""
        return self._scoped("recover")

    def _scoped(self, name: str) -> list[str]:
        """`inner`'s hook `name` on `own_nodes`; one that takes no `nodes` (nothing on nodes to keep: a dry run)
        called as it is; none: nothing to do."""
        hook = getattr(self.inner, name, None)
        if hook is None:
            return []
        if "nodes" not in inspect.signature(hook).parameters:
            return list(hook() or ())
        return list(hook(nodes=self.own_nodes()) or ())

    def __getattr__(self, name: str) -> Any:
        if name in ("inner", "source"):   # not set yet (copy, unpickling): no recursion through __getattr__
            raise AttributeError(name)
        return getattr(self.inner, name)


def keep_ledger(reconciler: Any, args: argparse.Namespace, metrics: ControllerMetrics) -> None:
    """Where `reconciler`'s safety ledger survives a restart (for `build_reconciler`, balancer/cmd/run.py): with
    `--ledger-file`, its hand-over reads and saves that file too, besides the Lease with `--leader-elect`
    (balancer/ledger_handover.py); with neither, a warning that every start has a full eviction budget (not for a
    dry run: it spends none)."""
    if args.ledger_file:
        from balancer.ledger_file import LedgerFile

        reconciler.handover = LedgerHandover(reconciler.elector, metrics.registry, file=LedgerFile(args.ledger_file))
    elif not args.leader_elect and not args.dry_run:
        log.warning("safety budgets do not survive a restart: without --leader-elect or --ledger-file PATH every "
                    "start has a full eviction budget and no cooldowns (a crash loop or a --once run from cron may "
                    "evict more than spec.safety.evictionBudget per window)")


def bound_to_shard(actuator: Any, source: object) -> Any:
    """`actuator` as `source`'s shard must use it (`ShardBound`) when `source` is a `ShardedSource`, else as it is.
    For `build_reconciler` (balancer/cmd/run.py), once its actuator and source are both built."""
    from balancer.telemetry.shard import ShardedSource

    return ShardBound(actuator, source) if isinstance(source, ShardedSource) else actuator
