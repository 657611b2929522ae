"""`gputide run`: the reconcile loop against a real cluster (Prometheus in, Kubernetes or dry-run out).

    gputide run --prometheus http://prometheus:9090 [--dry-run] [--kubeconfig PATH] [--once] [--interval 30s]
                [--policy FILE] [--leader-elect --lease-name gputide-controller --lease-namespace NS]
                [--metrics-port 9402] [--audit-log PATH] [--emergency-stop-file PATH] [--action-deadline 3m]
                [--stale-after 2m] [--ledger-file PATH]

I/O objects are built here and nowhere else: the Prometheus telemetry source, the dry-run or Kubernetes actuator,
the Lease elector, the metrics HTTP server. With `--leader-elect` a thread renews the Lease every quarter of the
renew deadline, whatever the loop is doing, and the loop checks it before every action. SIGTERM / SIGINT let the
action in progress finish, skip the rest of the cycle's actions and release the Lease, so a standby takes over at
once (deploy/base/controller.yaml's terminationGracePeriodSeconds covers the longest action). `--once
--leader-elect` watches a Lease another replica holds for up to a lease duration (at most the longer of its own and
a third of that Lease's), and takes it over if nobody renews it meanwhile (a crashed holder's; `lease_expires`), else
it is a standby; SIGTERM ends that wait, however late (a standby, exit 0). Every action ends within
`--action-deadline` (its API calls, undo included: balancer/actuate/k8s_budget.py), the figure the grace period
and the liveness limit are derived from (balancer/app/health.py). Exit codes: 0 ok, 2 bad input, 3 `--once`
ended fail-static (held still) or, with `--leader-elect`, could not read or write its Lease (nothing done; said with
the API's error, not as a standby) or gave up on one of a longer lease duration than its own, not renewed
meanwhile, 4 `--once` could not save the safety ledger where the next run reads it (logged: that run inherits an
older ledger, without this one's cooldowns and evictions since its last save).

The safety ledger (cooldowns, evictions and migrations in their windows) survives a restart only where it is kept:
on the Lease with `--leader-elect`, in `--ledger-file PATH` (a restart without leader election: a crash loop,
`--once` from cron), or both (merged when the controller takes office, saved to both: balancer/ledger_handover.py).
With neither (and no `--dry-run`) every start has a full eviction budget and no cooldowns, with a warning saying so.

The Lease lives in the controller's own namespace by default (the Role in deploy/base/rbac.yaml grants leases
there only): env `POD_NAMESPACE` (the downward API), else the service account's namespace file, else `gputide`.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import signal
import socket
import sys
import threading
from collections.abc import Callable, Collection, Iterator

from balancer import config
from balancer.actuate.k8s_budget import ACTION_DEADLINE_S, least_action_deadline_s
from balancer.app.health import Health, action_budget_s, stall_limit, stop_budget_s
from balancer.app.health import serve as serve_metrics
from balancer.cmd._args import (
    add_listen_address,
    appendable_file,
    bind,
    duration_between,
    given,
    is_k8s_name,
    k8s_name,
    kube_client,
    lease_flags,
    loop_interval,
    replaceable_file,
    stop_file,
)
from balancer.cmd._run_parts import (
    MOST_FORECAST_HISTORY_D,
    bound_to_shard,
    capacity_flags,
    capacity_parts,
    check_capacity_enabled,
    hpa_source,
    keep_ledger,
    kubernetes_sources,
)
from balancer.errors import InputError, PermanentActuationError, TemporaryActuationError
from balancer.forecast.base import MODELS
from balancer.loop import JsonlAudit, NullLeaderElector, Reconciler
from balancer.metrics import ControllerMetrics
from balancer.safety import SafetyGuard

log = logging.getLogger(__name__)
EXIT_FAIL_STATIC = 3   # --once: held still, or the Lease out of reach or too long to wait for (`lease_out_of_reach`)
EXIT_LEDGER_NOT_SAVED = 4   # --once: the safety ledger's last save failed (no next cycle to try it again)
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
DEFAULT_NAMESPACE = "gputide"
MOST_ACTION_DEADLINE_S = 600.0   # the grace period and the liveness limit grow with it
# a reading's age reaches the scrape interval + the rules' 15 s evaluation + the scrape's own time (31 s or so with
# the shipped 15 s scrapes): a limit below this holds a healthy controller still whenever a scrape is slow
STALE_FLOOR_S = 45.0


def own_namespace(env: dict[str, str] | None = None, namespace_file: str = SERVICE_ACCOUNT_NAMESPACE) -> str:
    """The pod's namespace: `POD_NAMESPACE`, else the mounted service account's namespace, else `gputide`."""
    env = os.environ if env is None else env
    if env.get("POD_NAMESPACE", "").strip():
        return env["POD_NAMESPACE"].strip()
    try:
        with open(namespace_file, encoding="utf-8") as fh:
            text = fh.read().strip()
    except (OSError, UnicodeDecodeError):
        text = ""
    return text or DEFAULT_NAMESPACE


def prometheus_url(text: str, field: str = "--prometheus") -> str:
    """A Prometheus base URL, checked before anything connects (a bare host:port would fail on every query)."""
    from urllib.parse import urlsplit

    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InputError(None, field, text, "an http:// or https:// URL such as http://prometheus:9090")
    return text


def cluster_name(text: str | None, field: str = "--cluster") -> str | None:
    """A `cluster` label value to select by, checked so it cannot break (or change) the PromQL it goes into."""
    if text is not None and (not text or not re.fullmatch(r"[^\"\\\n{}]+", text)):
        raise InputError(None, field, text, 'a cluster label value without quotes, backslashes, braces or newlines')
    return text


def kueue_queues(text: str | None, field: str = "--kueue-queues") -> tuple[str, str] | None:
    """(inference ClusterQueue, training ClusterQueue) between which the actuator moves GPU quota when it scales a
    Kueue-queued training Job; checked before anything connects, since a typo would fail every such action."""
    if text is None:
        return None
    names = [n.strip() for n in text.split(",")]
    if len(names) != 2 or names[0] == names[1] or not all(map(is_k8s_name, names)):
        raise InputError(None, field, text, "two distinct ClusterQueue names (DNS subdomains), the inference "
                                            "queue first: INFERENCE_CQ,TRAINING_CQ")
    return names[0], names[1]


SHARD_NAME = "a shard's name, which ends its Lease's (<lease-name>-NAME)"


def shard_flags(args: argparse.Namespace):
    """--shard NAME's selector (`parse_selector`; None without --shard), checked with the Lease the controller elects
    on and records as its floors' writer (`floor_owner`), --lease-name or <lease-name>-NAME, before anything connects
    (`lease_flags`). A shard's name ends a Lease's name, so it is a DNS-1123 subdomain, and the two together have at
    most 253 characters: the API server refused any other at every election (a standby for ever). --selector is a
    shard's alone."""
    lease_flags(args)
    if args.selector and not args.shard:
        raise InputError(None, "--selector", args.selector, "only together with --shard NAME")
    if not args.shard:
        return None
    from balancer.telemetry.shard import parse_selector

    k8s_name(args.shard, "--shard", SHARD_NAME)
    selector = parse_selector(args.shard, args.selector)
    if len(selector.lease_name(args.lease_name)) > 253:
        raise InputError(None, "--shard", args.shard, f"{SHARD_NAME}: at most {252 - len(args.lease_name)} "
                         f"characters with --lease-name {args.lease_name} (a Lease's name has at most 253)")
    return selector


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run the reconcile loop against Prometheus and Kubernetes (or --dry-run)")
    p.add_argument("--prometheus", required=True, metavar="URL", help="Prometheus base URL")
    p.add_argument("--cluster", default=None, metavar="NAME",
                   help="read only series with this `cluster` label (required when Prometheus holds several)")
    p.add_argument("--dry-run", action="store_true", help="plan and log, change nothing")
    p.add_argument("--kubeconfig", type=given("--kubeconfig"), default=None,
                   help="kubeconfig path (default: in-cluster or ~/.kube/config)")
    p.add_argument("--once", action="store_true", help="one reconcile cycle, then exit")
    p.add_argument("--interval", default="30s", help="time between cycles (default 30s; 50ms to 24h)")
    p.add_argument("--policy", type=given("--policy"), default=None, metavar="FILE", help="BalancerPolicy YAML")
    p.add_argument("--leader-elect", action="store_true", help="act only while holding a coordination.k8s.io Lease")
    p.add_argument("--lease-name", type=given("--lease-name", "a name"), default="gputide-controller",
                   help="the Lease elected on with --leader-elect (<lease-name>-NAME with --shard NAME); with or "
                        "without it, the writer recorded on the HPA floors this controller writes")
    p.add_argument("--lease-namespace", type=given("--lease-namespace", "a name"), default=None,
                   help="namespace of the Lease (default: the pod's own namespace: POD_NAMESPACE, the service "
                        "account's namespace, else gputide)")
    p.add_argument("--metrics-port", type=int, default=9402, help="serve controller metrics here (0: off)")
    add_listen_address(p)
    p.add_argument("--audit-log", type=given("--audit-log"), default=None, metavar="PATH",
                   help="append JSON lines of every decision here")
    p.add_argument("--emergency-stop-file", type=given("--emergency-stop-file"), default=None, metavar="PATH",
                   help="while this file exists, every action is rejected (emergency stop); its folder must exist")
    p.add_argument("--fleet", type=given("--fleet"), default=None, metavar="SPEC",
                   help="FleetSpec YAML: adds NVLink islands, pools, sites and node sizes that PromQL cannot know")
    p.add_argument("--shard", type=given("--shard", "a name"), default=None, metavar="NAME",
                   help="run as one shard: act only on nodes matching --selector, elect on Lease <lease-name>-NAME")
    p.add_argument("--selector", default="", metavar="EXPR",
                   help="shard node selector, e.g. pool=H100-SXM,site=eu-1,gputide.io/shard=a (needs --shard)")
    p.add_argument("--services", type=given("--services"), default=None, metavar="FILE",
                   help="ServiceProfiles YAML: the inference services capacity shifting may resize (needs "
                        "capacity.enabled in the policy file)")
    p.add_argument("--demand-query", type=given("--demand-query", "a PromQL query"), default=None, metavar="PROMQL",
                   help="a service's demand in req/s; $service, $namespace, $cluster and $selector (the label "
                        "matchers for them; cluster only with --cluster) are filled in "
                        "(default: max(gputide_inference_demand_rps{$selector}), the higher of duplicate series "
                        "as the live reading takes it; needs --services)")
    p.add_argument("--forecast-model", type=given("--forecast-model", "a name"), default=None, metavar="NAME",
                   help=f"forecaster for capacity shifting ({', '.join(sorted(MODELS))}; default mstl; needs "
                        "--services)")
    p.add_argument("--forecast-history", type=given("--forecast-history", "a duration"), default=None,
                   metavar="DURATION",
                   help=f"demand history read from Prometheus when a service is first seen (default 14d, at most "
                        f"{MOST_FORECAST_HISTORY_D:.0f}d: the forecaster keeps no more; needs --services)")
    p.add_argument("--kueue-queues", type=given("--kueue-queues", "two ClusterQueue names"), default=None,
                   metavar="INFERENCE_CQ,TRAINING_CQ",
                   help="scaling a Kueue-queued training Job moves GPU nominalQuota between these two ClusterQueues "
                        "of one cohort, in the flavor Kueue admitted the Job under (ignored with --dry-run)")
    p.add_argument("--action-deadline", default=f"{ACTION_DEADLINE_S:.0f}s", metavar="DURATION",
                   help=f"every action's API calls, retries and undo included, end within this (default "
                        f"{ACTION_DEADLINE_S:.0f}s; {least_action_deadline_s():.0f}s "
                        f"to {MOST_ACTION_DEADLINE_S:.0f}s); "
                        "deploy/base/controller.yaml's grace period and liveness limit are derived from it")
    p.add_argument("--stale-after", default=None, metavar="DURATION",
                   help=f"hold still while a GPU's newest reading is older than this (default: the policy's "
                        f"spec.safety.maxTelemetryAgeS, 120s, the age GpuTelemetryStale fires at; "
                        f"{STALE_FLOOR_S:.0f}s to maxTelemetryAgeS); at least the scrape interval + 30s")
    p.add_argument("--ledger-file", type=given("--ledger-file"), default=None, metavar="PATH",
                   help="keep the safety ledger (cooldowns, evictions in their window) in this file, read at start "
                        "and replaced atomically after every change, so a restart without --leader-elect (a crash "
                        "loop, --once from cron) keeps the eviction budget spent; its folder must exist and be "
                        "writable; one file per controller (with --leader-elect: merged with the Lease's, saved to "
                        "both)")
    p.set_defaults(func=run)


def action_deadline(text: str, field: str = "--action-deadline") -> float:
    """Seconds every action's API calls must end within: no shorter than the longest action needs on a slow but
    healthy API server (balancer/actuate/k8s_budget.py), no longer than `MOST_ACTION_DEADLINE_S` (the grace period
    and the liveness limit grow with it, and an action out of time would hold the loop that long)."""
    least = least_action_deadline_s()
    return duration_between(text, field, least, MOST_ACTION_DEADLINE_S,
                            f"a duration from {least:.0f}s (the longest action on a slow but healthy API server) to "
                            f"{MOST_ACTION_DEADLINE_S:.0f}s, such as 3m")


def stale_after(text: str | None, policy: config.BalancerPolicy, policy_file: str | None,
                field: str = "--stale-after") -> float:
    """Seconds past which a GPU's newest reading is too old to act on (the telemetry source's limit): `text`, by
    default the policy's `spec.safety.maxTelemetryAgeS`, the limit the safety guard applies to every snapshot (so
    a larger one would change nothing) and the age GpuTelemetryStale fires at; never below `STALE_FLOOR_S`."""
    most = policy.safety.max_telemetry_age_s
    if most < STALE_FLOOR_S:
        raise InputError(policy_file, "spec.safety.maxTelemetryAgeS", most,
                         f">= {STALE_FLOOR_S:.0f} for gputide run (a reading's age reaches the scrape interval plus "
                         "the rules' 15 s evaluation: less holds a healthy controller still)")
    if text is None:
        return most
    return duration_between(text, field, STALE_FLOOR_S, most,
                            f"a duration from {STALE_FLOOR_S:.0f}s (the rules' 15 s evaluation plus two 15 s scrapes) "
                            f"to {most:.0f}s (the policy's spec.safety.maxTelemetryAgeS, past which the safety guard "
                            "holds still anyway), such as 2m")


def lease_elector(api_client, name: str, namespace: str | None, interval_s: float):
    """A Lease elector for this pod (identity `POD_NAME`, else the host name) in `namespace` (default: the pod's
    own), the lease lasting three intervals (at least 15 s) and renewed within two thirds of that."""
    from balancer.actuate.k8s_leader import LeaseLeaderElector

    identity = os.environ.get("POD_NAME") or socket.gethostname()
    duration = max(15, int(interval_s * 3))
    return LeaseLeaderElector(api_client, name, namespace or own_namespace(), identity, lease_duration_s=duration,
                              renew_deadline_s=duration * 2 / 3)


def lease_out_of_reach(elector, command: str, nothing: str) -> str | None:
    """What `gputide <command> --once` says when its last try could not read or write the Lease (the elector's
    `unreachable()`: the API unreachable or failing, or refusing it, a 403), ending in `nothing` (what it therefore
    did not do); None when the try reached the Lease (another replica holding it, a 409, included) or the elector
    keeps no such failure. Such a replica was said to be a standby, exit 0: a script or a check took an API server
    cut off, or a Role missing the Lease, for a healthy standby. So is one whose wait reached its end behind a Lease
    of a longer duration, not renewed meanwhile (`outwaited`: the wait the longer of its own lease duration and a
    third of that Lease's, two renewals of a live gputide holder): it cannot tell a live holder from a crashed one,
    whose Lease it would take only after that longer wait (a CronJob's run waited an hour behind a 3600 s one)."""
    unreachable = getattr(elector, "unreachable", None)
    failure = unreachable() if unreachable is not None else None
    if failure is not None:
        how = "could not be reached" if isinstance(failure, TemporaryActuationError) else "refused"
        return f"gputide {command} --once: the Kubernetes API {how} for the Lease: {failure}; {nothing}"
    outwaited = getattr(elector, "outwaited", None)
    found = outwaited() if outwaited is not None else None
    if found is None:
        return None
    holder, duration, most = found
    return (f"gputide {command} --once: the Lease {elector.namespace}/{elector.name} is {holder}'s, its "
            f"leaseDurationSeconds {duration} longer than this run waits ({most} s: the longer of its own lease, "
            f"three --interval and at least 15 s, and a third of that one, two renewals of a live holder); not renewed "
            f"meanwhile, so neither taken (a crashed holder's is, once unchanged for {duration} s) nor known to be a "
            f"live holder's; {nothing} (an --interval of {-(-duration // 3)}s or more waits for it)")


def build_reconciler(args: argparse.Namespace, metrics: ControllerMetrics) -> Reconciler:
    from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource

    policy = config.load(args.policy) if args.policy else config.BalancerPolicy()
    interval = loop_interval(args.interval)
    prometheus_url(args.prometheus)
    cluster_name(args.cluster)
    queues = kueue_queues(args.kueue_queues)
    deadline = action_deadline(args.action_deadline)
    stale_s = stale_after(args.stale_after, policy, args.policy)
    capacity_flags(args)
    appendable_file(args.audit_log, "--audit-log")
    stop_file(args.emergency_stop_file, "--emergency-stop-file")
    replaceable_file(args.ledger_file, "--ledger-file")
    selector = shard_flags(args)
    lease_name = args.lease_name if selector is None else selector.lease_name(args.lease_name)
    fleet = None
    if args.fleet:
        from balancer import fleet as fleet_mod

        fleet = fleet_mod.load(args.fleet)
    api_client = None
    if not args.dry_run or args.leader_elect or args.kubeconfig:
        api_client = kube_client(args.kubeconfig, "a usable Kubernetes configuration, or --dry-run")
    elif args.services:
        # a dry run of capacity shifting still needs the pods' owners (read-only); without a cluster it runs blind
        try:
            api_client = kube_client(None)
        except InputError as exc:
            log.warning("dry run without the Kubernetes API (%s): pods have no owners, so capacity shifting holds "
                        "(no service's replicas can be counted)", exc.detail)
    profiles = None
    if args.services:
        from balancer.app.capacity_run import load_profiles

        profiles = load_profiles(args.services)
    # a profiled service's pods are inference whatever runs them (a StatefulSet's too): held when its series go missing
    overrides, nodes = kubernetes_sources(api_client, interval, args.once, metrics, tuple(profiles or ()))
    # each profiled service's p99 SLO (latency pressure = p99 / SLO); others: the policy's colocation.latencySloS
    source = PrometheusTelemetrySource(PrometheusOptions(url=args.prometheus, cluster=args.cluster,
                                                         stale_after_s=stale_s), fleet=fleet,
                                       workload_overrides=overrides, node_overrides=nodes,
                                       suspended_jobs=overrides.suspended_jobs if overrides else None,
                                       disruption_budgets=overrides.disruption_budgets if overrides else None,
                                       hpa_wants=hpa_source(api_client, profiles, interval,
                                                            metrics.set_hpa_reads_unusable),
                                       slo_latency_s={n: p.slo_latency_s for n, p in (profiles or {}).items()},
                                       default_slo_latency_s=policy.colocation.latency_slo_s)
    if selector is not None:
        from balancer.telemetry.shard import ShardedSource

        source = ShardedSource(source, selector)
    if args.dry_run:
        from balancer.actuate.dryrun import DryRunActuator

        actuator = DryRunActuator()
    else:
        from balancer.actuate.k8s_actuator import KubernetesActuator

        actuator = KubernetesActuator(api_client, kueue_queues=queues, action_deadline_s=deadline,
                                      registry=metrics.registry,   # its Kueue quota corrections, counted
                                      floor_owner=floor_owner(args.lease_namespace, lease_name),
                                      **power_cap_scope(source, interval))
    elector = NullLeaderElector()
    if args.leader_elect:
        elector = lease_elector(api_client, lease_name, args.lease_namespace, interval)
        metrics.elect_on(lease_name)   # gputide_leader{lease}: shards of one job are told apart by it
    guard = SafetyGuard(policy.safety, emergency_stop_file=args.emergency_stop_file)
    audit = JsonlAudit(args.audit_log) if args.audit_log else None
    planner, forecaster = capacity_parts(args, policy, source, interval, profiles)
    reloader = None
    if args.policy and not args.once:  # a long-running controller follows edits of its policy file (ConfigMap)
        from balancer.app.policy_reload import PolicyReloader

        def refused_at_start(p: config.BalancerPolicy) -> None:   # what a restart with this file would refuse
            stale_after(args.stale_after, p, args.policy)
            check_capacity_enabled(args, p)

        reloader = PolicyReloader(args.policy, policy, registry=metrics.registry, check=refused_at_start,
                                  on_leave=floors_given_back(actuator, planner, lambda: reconciler),
                                  office=in_office(lambda: reconciler),
                                  release=floors_released(actuator, profiles if planner is not None else None,
                                                          lambda: reconciler))
    # a shard refuses actions on nodes that left it since its snapshot (`_run_parts.ShardBound`)
    reconciler = Reconciler(source=source, actuator=bound_to_shard(actuator, source), policy=policy, guard=guard,
                            elector=elector, metrics=metrics, audit=audit, forecaster=forecaster,
                            **({"planner": planner} if planner else {}),
                            policy_source=reloader.poll if reloader else None)
    keep_ledger(reconciler, args, metrics)
    return reconciler


def floor_owner(lease_namespace: str | None, lease_name: str) -> str:
    """The name this controller records on the HPA floors it writes, and gives back only those of
    (`k8s_hpa.floor_owned`): its Lease, "namespace/name" (`--lease-namespace`, else the pod's own; a shard's is
    `<lease-name>-NAME`), which every controller that may lead alone needs of its own anyway, with or without
    --leader-elect. Two controllers (shards, installs with different --services) thus no longer give back each
    other's floors as services they do not manage."""
    return f"{lease_namespace or own_namespace()}/{lease_name}"


def power_cap_scope(source: object, interval_s: float) -> dict:
    """How the Kubernetes actuator renews its power caps' expiry (`gputide.io/power-caps-until`): at least three
    reconcile intervals ahead (renewed in housekeeping once half of it is gone, so a long --interval does not let caps
    lapse between cycles), and, for a shard, only on the shard's own nodes (every shard lists every node: renewing them
    all, a live shard would keep a dead shard's caps from expiring)."""
    from balancer.actuate.k8s_nodes import POWER_CAP_TTL_S
    from balancer.telemetry.shard import ShardedSource

    scope: dict = {"power_cap_ttl_s": max(POWER_CAP_TTL_S, 3.0 * interval_s)}
    if isinstance(source, ShardedSource):
        scope["power_cap_nodes"] = lambda name: name in source.nodes
    return scope


def floors_given_back(actuator, planner,
                      reconciler: Callable[[], Reconciler]) -> Callable[[tuple[str, ...]], object] | None:
    """What the policy reloader calls for the protected namespaces whose HPA floors are owed
    (`PolicyReloader.on_leave`: those a reload newly protects, all of them whenever this replica takes office, and
    those not given back yet): the Kubernetes actuator gives back the HPA floors capacity shifting raised there
    (`KubernetesActuator.restore_floors`: this controller's, `floor_owner`), only on the leading replica (standbys
    reload the file too; only the leader writes) and only with capacity shifting on (no planner: gputide raised no
    floor). It returns the namespaces not given back (a standby's, or those whose HPAs, or recorded Deployments no HPA
    scales, could not be read or written: `restore_floors`' note), which the reloader hands it again at its next
    poll. None otherwise: nothing to give back (dry run, no capacity planner)."""
    restore = getattr(actuator, "restore_floors", None)
    if restore is None or planner is None:
        return None

    def leave(namespaces: tuple[str, ...]) -> tuple[str, ...]:
        if not leads_now(reconciler()):
            log.info("policy protects %s: HPA floors there are given back by the leading replica",
                     ", ".join(namespaces))
            return namespaces
        notes = [str(n) for n in restore(namespaces) or ()]
        return tuple(ns for ns in namespaces if any(n.startswith((f"hpa floors in {ns} not given back",
                                                                 f"deployment replicas in {ns} not given back"))
                                                    for n in notes))

    return leave


def floors_released(actuator, profiles: Collection[str] | None,
                    reconciler: Callable[[], Reconciler]) -> Callable[[], bool] | None:
    """`PolicyReloader.release`: the floors gputide recorded on HPAs whose services it no longer manages, given back
    by the leading replica at the first poll of each term (and at every poll after until done): with capacity
    shifting off (`profiles` None: no planner), every HPA carrying gputide's floor record; with it on, those whose HPA
    scales none of --services' profiles (a service taken out of the file); in both cases only the floors this
    controller wrote, or whose writer is not recorded (`floor_owner`: another shard's floors are its own). One
    cluster-wide list of HPAs, then `KubernetesActuator.restore_floors(None, profiles)` (its per-HPA rule: a
    minReplicas someone else wrote since is left, the record dropped). True once given back; False on a standby or
    when an HPA or a recorded Deployment could not be read or written (its note "hpa floors in NS not given back",
    "deployment replicas in NS not given back"; the record of Deployments' counts unread for a
    temporary error is "deployment replicas not given back", refused a note only, read again next term); a temporary
    error of the list raises (the reloader logs it and tries again at its
    next poll). A list refused for good (HTTP 403: a
    controller without --services holds no HPA rights unless components/capacity's ClusterRole stays bound) is logged
    and not tried again this term: a request refused every cycle would change nothing. None without a Kubernetes
    actuator (dry run): nothing to give back."""
    restore = getattr(actuator, "restore_floors", None)
    if restore is None:
        return None

    def release() -> bool:
        if not leads_now(reconciler()):
            return False
        try:
            notes = [str(n) for n in restore(None, tuple(profiles or ())) or ()]
        except PermanentActuationError as err:
            log.warning("HPA floors of services gputide no longer manages not given back: %s. Floors it raised earlier "
                        "(HPAs annotated gputide.io/own-min-replicas) stay until a controller allowed to list and "
                        "patch HPAs gives them back", err)
            return True
        return not any(n.startswith(("hpa floors ", "deployment replicas ")) and " not given back" in n for n in notes)

    return release


def leads_now(reconciler) -> bool:
    """Whether this replica leads now: the elector's own flag where it keeps one (the Lease elector's renewer thread
    does, no API call), else the loop's view at its last cycle; a replica without leader election always leads."""
    elector = getattr(reconciler, "elector", None)
    if isinstance(elector, NullLeaderElector):
        return True
    flag = getattr(elector, "is_leader", None)
    return bool(reconciler.leading if flag is None else flag)


def in_office(reconciler: Callable[[], Reconciler]) -> Callable[[], object]:
    """`PolicyReloader.office`: the term this replica leads in now (the elector's `terms`, the times it took the Lease;
    0 for one without), None while it does not lead. On taking office, the reloader gives the HPA floors of every
    protected namespace back: a standby at the reload that protected them, or a controller restarted with the edited
    file, would otherwise leave them raised for good."""
    def office() -> object:
        r = reconciler()
        return getattr(r.elector, "terms", 0) if leads_now(r) else None

    return office


def run(args: argparse.Namespace) -> int:
    interval = loop_interval(args.interval)
    if not 0 <= args.metrics_port < 65536:
        raise InputError(None, "--metrics-port", args.metrics_port, "a port from 0 to 65535")
    metrics = ControllerMetrics()
    reconciler = build_reconciler(args, metrics)
    # the loop may take an action to its deadline, then write the ledger, between two heartbeats: not stuck
    deadline, lease = getattr(reconciler.actuator, "action_deadline_s", 0.0), getattr(reconciler.elector, "api", None)
    health = Health(stall_limit(interval, action_budget_s(deadline, lease)))
    log.info("liveness limit %.0f s; from SIGTERM to exit at most %.0f s (terminationGracePeriodSeconds must exceed "
             "it by about 10 s, for the steps between the Lease calls and the interpreter's exit)",
             health.stall_after_s, stop_budget_s(deadline, lease))
    if args.metrics_port:  # /metrics, and the probes /healthz (the loop is not stuck) and /readyz
        bind(lambda **kw: serve_metrics(registry=metrics.registry, health=health, **kw), args.listen_address,
             args.metrics_port, "--metrics-port")
    stop = threading.Event()
    stop_when = getattr(reconciler.elector, "stop_when", None)
    if stop_when is not None:   # SIGTERM cuts short every try of the Lease: a --once run's first, the renewer's
        stop_when(stop.is_set)
    if args.once:   # SIGTERM ends the wait for another replica's Lease and the cycle after its action in progress
        with stopped_by_signals(stop.set, "finishing the action in progress (or no longer waiting for the Lease), "
                                          "then releasing the Lease"):
            return one_cycle(reconciler, stop)
    with stopped_by_signals(stop.set, "finishing the action in progress, then releasing the Lease and stopping"):
        start = getattr(reconciler.elector, "start", None)
        if start is not None:   # renew the Lease from its own thread, however long a cycle runs (released by run)
            start()
        reconciler.run(interval, stop, beat=health.beat, progress=health.progress)
    return 0


@contextlib.contextmanager
def stopped_by_signals(stop: Callable[[], None], what: str) -> Iterator[None]:
    """While the block runs, SIGTERM and SIGINT call `stop` (it only flags: no I/O, no lock, from a signal handler),
    logged with `what` it means; the handlers found are put back after it (main() run twice in one process)."""
    def _stop(signum, _frame) -> None:
        log.info("signal %s: %s", signum, what)
        stop()

    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def lease_expires(elector, stopping: Callable[[], bool], pause: Callable[[float], object]) -> bool:
    """Whether a `--once` standby takes the Lease after all: another identity's, unchanged for its lease duration
    while this replica watches (`LeaseLeaderElector.await_lease`: a crashed holder's), not renewed meanwhile. One try
    never takes it (the holder's renewTime is on another clock): a --once run was a standby for ever behind it.
    SIGTERM ends the wait at once, `pause` (what SIGTERM wakes) included: the elector heard of it from the command
    (`stop_when`, the same flag as `stopping`), and a Lease taken as it came (`stopping()`) is no lead to act on: a
    --once run had no handler, so as a container's PID 1 it ignored SIGTERM, kept waiting, might take the Lease and
    be killed in the middle of its cycle holding it. `gputide run --once` and `gputide schedule --once` both wait
    here, with no renewer thread running (`await_lease`: its tries the Lease's one reader); schedule starts one
    once the Lease is held."""
    await_lease = getattr(elector, "await_lease", None)
    return await_lease is not None and await_lease(pause) and not stopping()


def one_cycle(reconciler: Reconciler, stop: threading.Event) -> int:
    """`--once`: one cycle, the Lease let go after it, what it did printed. A standby because its Lease could not be
    read or written (`lease_out_of_reach`) says so and exits as a cycle held still does, not as a standby (exit 0).
    A standby behind another replica's Lease waits for it until `stop` (`lease_expires`). The ledger a save could not
    put on the Lease but the release did (its write carries our ledger) is saved: the hand-over asks again, the
    elector answers from that release with no call (`LeaseLeaderElector.save_state`), the other stores (a
    --ledger-file) tried again; before, such a run exited 4 saying the next run inherits an older ledger."""
    try:
        report = reconciler.run_once(stop)
        if report.status == "standby" and lease_expires(reconciler.elector, stop.is_set, stop.wait):
            report = reconciler.run_once(stop)   # a dead holder's Lease, taken over: the cycle as its leader
        # no next cycle to save it: a held budget, a reservation not replaced, this cycle's cooldowns
        saved = reconciler.handover.saved_before_exit(reconciler.ledger)
    finally:   # let the Lease go: the next replica (or --once run) takes it at once, not a lease duration later
        released = reconciler.elector.release()
    if not saved and released:   # it wrote our ledger over the Lease, which the save could not (a 409 after SIGTERM)
        saved = reconciler.handover.saved_before_exit(reconciler.ledger)   # the Lease's part: no call, said saved
    cut_off = lease_out_of_reach(reconciler.elector, "run", "nothing done") if report.status == "standby" else None
    if cut_off is not None:
        print(cut_off, file=sys.stderr)
        return EXIT_FAIL_STATIC
    print(f"cycle: {report.status} {report.reason}".rstrip())
    for note in report.plan.notes if report.plan is not None else ():
        print(f"  note: {note}")
    for res in report.results:
        print(f"  {res.outcome}: {res.action.describe()} {res.detail}".rstrip())
    for action, reason in report.rejected:
        print(f"  rejected ({reason}): {action.describe()}")
    if not saved:
        log.error("safety ledger not saved where the next run reads it (the save failed, logged above): that run "
                  "inherits an older ledger, without this run's cooldowns and evictions since its last save; "
                  "exit %d", EXIT_LEDGER_NOT_SAVED)
        return EXIT_LEDGER_NOT_SAVED
    return EXIT_FAIL_STATIC if report.status == "fail_static" else 0
