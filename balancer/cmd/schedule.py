"""`gputide schedule`: the optional secondary scheduler, placing pods with gputide's placement engine.

    gputide schedule [--kubeconfig PATH] [--scheduler-name gputide] [--policy gputide] [--interval 2s] [--once]
                     [--prometheus URL [--cluster NAME] [--stale-after 2m]]
                     [--leader-elect [--lease-name gputide-scheduler] [--lease-namespace NS]]
                     [--metrics-port 9837] [--no-preemption] [--starving-after 10m]
                     [--emergency-stop-file PATH] [--controller-policy FILE]

It binds the Pending pods whose `spec.schedulerName` is `--scheduler-name` (highest priority first, then oldest) to
the node the placement policy picks among those that fit (taints, node selectors, free GPUs, CPU and memory,
reservations made by gputide's migrations), through the Binding API. It follows pending pods, nodes and bound pods
by watch (balancer/actuate/k8s_scheduler.py): a pass runs as soon as a pending pod appears, half a second after a
node opens (added, uncordoned, a taint such as not-ready removed, allocatable grown, labels changed, a reservation
released; never for a status heartbeat: balancer/actuate/k8s_sched_reads.py), and at least every `--interval` (pods
that fit nowhere are tried again then). Pods of other schedulers are never touched. `--policy` is
any of `gputide place`'s policies (gputide, fgd, bestfit, ...); see balancer/app/scheduling.py. `--prometheus` adds
what the Kubernetes API does not say: each GPU's thermal headroom and which GPUs pods are on (read at most every 15
s; while Prometheus fails, pods are placed without them); a GPU whose newest reading is older than `--stale-after`
(default 2 minutes, GpuTelemetryStale's age and `gputide run`'s default; 45 s to 2 minutes, the limit logged at
start) is left out, its node placed as one Prometheus does not know. A pod that fits nowhere preempts pods of lower
priority as kube-scheduler would, evicting them through the Eviction API (a PodDisruptionBudget is never broken) and
holding the node with a reservation until they are gone (balancer/actuate/k8s_preempt.py); `--no-preemption` turns
that off, a pod's `preemptionPolicy: Never` opts it out. The controller's emergency stop holds preemption: while
`--emergency-stop-file` exists (or cannot be looked at), `--controller-policy` (the controller's policy file) says
`spec.safety.emergencyStop: true` (or cannot be read), or on a node labelled `gputide.io/emergency-stop=true`, no pod
is evicted and no node reserved for a preemption (`EmergencyStop`); pods are still bound where there is room. A pod
pending longer than `--starving-after` that fits nowhere holds the node closest to fitting it, so GPUs freed there go to
it rather than to smaller pods that keep arriving. A pod's PersistentVolumeClaims keep it where its volumes can be
attached, and an unbound WaitForFirstConsumer claim is given the pod's node before the pod is bound, as kube-scheduler's
VolumeBinding does (balancer/actuate/k8s_volumes.py). Pods labelled `scheduling.x-k8s.io/pod-group` are bound as a
group, all together or none (balancer/actuate/k8s_gang.py). With `--leader-elect` only the holder of the Lease binds:
the elector's renewer thread keeps the Lease however long a pass runs, and the pass asks it (no I/O) before each pod and
each binding, stopping once it is lost, so no pod is bound or preempted without a valid Lease (the pods of a pod
group that pass left unbound are told so by an Event, `SchedulingDeferred`). `--once`: one pass (with
`--leader-elect`, only as the holder, the Lease released at exit; a Lease another replica holds is watched for up to
its lease duration, at most the longer of this run's own (three --interval, at least 15 s) and a third of that
Lease's (balancer/actuate/k8s_leader.py's `await_lease`): taken over once nobody renewed it for its whole duration
(a crashed holder's), a standby (exit 0) if renewed meanwhile or SIGTERM ends the wait, given up (exit 3) if the wait
ends first), print each pod's node (or that none fits), exit.
However slow the API server, a pass's reads end within 2 minutes and each pod's turn within 1
(balancer/actuate/k8s_scheduler.py: a pod out of time waits for the next pass). SIGTERM / SIGINT stop the pass
before its next read, pod or binding (never in the middle of one), then the Lease is released and the process
exits: within `stop_budget_s` (100 s as deployed: the Deployment's terminationGracePeriodSeconds, 110 s, covers it
with 10 s to spare). The metrics port serves `gputide_scheduler_*` series and the probes `/healthz` (the scheduler
moved, a pass ended or its reads or a pod's turn began, within max(5 intervals, 5 min, those deadlines): 5 minutes as
deployed) and `/readyz`. Exit codes: 0 ok, 2 bad input, 3 `--once` whose pass could not read the Kubernetes API, or,
with `--leader-elect`, whose Lease could not be read or written (nothing bound; said with the API's error, not as
another replica holding it) or which gave up behind another replica's Lease longer than it waits, neither renewed nor
taken within the wait (nothing bound; said with the --interval that waits for it).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence

from balancer.app.health import LEASE_CALLS_TO_RELEASE, Health, Retries, call_budget_s, stall_limit
from balancer.app.health import serve as serve_metrics
from balancer.cmd._args import (
    add_listen_address,
    bind,
    duration_between,
    given,
    k8s_name,
    kube_client,
    lease_flags,
    loop_interval,
    parse_interval,
    stop_file,
)
from balancer.cmd.run import (
    STALE_FLOOR_S,
    cluster_name,
    lease_elector,
    lease_expires,
    lease_out_of_reach,
    prometheus_url,
    stopped_by_signals,
)
from balancer.config import BalancerPolicy
from balancer.errors import ActuationError, InputError

# --once: the pass (or the Lease) could not read the API, or the Lease was too long to wait for (`lease_out_of_reach`),
# as `gputide run --once` exits 3
EXIT_UNREACHABLE = 3

log = logging.getLogger(__name__)
LEASE_NAME = "gputide-scheduler"   # --lease-name's default
# the default spec.safety.maxTelemetryAgeS: `gputide run` holds still past it, and GpuTelemetryStale fires there
MOST_STALE_S = BalancerPolicy().safety.max_telemetry_age_s
STALE_ALLOWED = (f"a duration from {STALE_FLOOR_S:.0f}s (the rules' 15 s evaluation plus two 15 s scrapes) to "
                 f"{MOST_STALE_S:.0f}s (the age GpuTelemetryStale fires at, gputide run's default), such as 2m")


def register(subparsers) -> None:
    p = subparsers.add_parser("schedule", help="secondary scheduler: bind pending pods with schedulerName gputide")
    p.add_argument("--kubeconfig", type=given("--kubeconfig"), default=None,
                   help="kubeconfig path (default: in-cluster, then ~/.kube/config)")
    p.add_argument("--scheduler-name", type=given("--scheduler-name", "a name"), default="gputide",
                   help="the spec.schedulerName served (default gputide)")
    p.add_argument("--policy", type=given("--policy", "a name"), default="gputide", metavar="NAME",
                   help="placement policy: gputide (default), fgd, bestfit, dotprod, gpupacking, gpuclustering, random")
    p.add_argument("--interval", default="2s",
                   help="longest time between passes; a new pending pod or a node that opens starts one at once "
                        "(default 2s; 50ms to 24h)")
    p.add_argument("--once", action="store_true", help="one pass, print where each pod went, exit")
    p.add_argument("--prometheus", type=given("--prometheus", "a URL"), default=None, metavar="URL",
                   help="Prometheus with gputide's rules: per-GPU thermal headroom and which GPUs are in use")
    p.add_argument("--cluster", default=None, metavar="NAME",
                   help="with --prometheus: read only series with this `cluster` label")
    p.add_argument("--stale-after", default=None, metavar="DURATION",
                   help=f"with --prometheus: a GPU whose newest reading is older than this is placed without its "
                        f"thermal headroom (default {MOST_STALE_S:.0f}s, GpuTelemetryStale's age, gputide run's "
                        f"default; {STALE_FLOOR_S:.0f}s to {MOST_STALE_S:.0f}s); at least the scrape interval + 30s")
    p.add_argument("--leader-elect", action="store_true", help="bind only while holding the Lease")
    p.add_argument("--lease-name", type=given("--lease-name", "a name"), default=LEASE_NAME,
                   help=f"with --leader-elect: the Lease (default {LEASE_NAME}; a DNS-1123 subdomain)")
    p.add_argument("--lease-namespace", type=given("--lease-namespace", "a name"), default=None,
                   help="with --leader-elect: the Lease's namespace (default: the pod's own; a DNS-1123 label)")
    p.add_argument("--no-preemption", action="store_true",
                   help="never evict pods of lower priority to make room for a pod that fits nowhere")
    p.add_argument("--emergency-stop-file", type=given("--emergency-stop-file"), default=None, metavar="PATH",
                   help="while this file exists (gputide run's flag of the same name), no pod is evicted to make room")
    p.add_argument("--controller-policy", type=given("--controller-policy"), default=None, metavar="FILE",
                   help="the controller's policy file: while its spec.safety.emergencyStop is true, no pod is evicted "
                        "to make room (read again when it changes)")
    p.add_argument("--starving-after", default="10m", metavar="DURATION",
                   help="a pod pending this long that fits nowhere holds the node closest to fitting it (default 10m)")
    p.add_argument("--metrics-port", type=int, default=9837,
                   help="serve /metrics, /healthz and /readyz here (0: off; default 9837)")
    add_listen_address(p)
    p.set_defaults(func=run)


class SchedulerMetrics:
    """The scheduler's own series, on its own registry."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        from balancer.metrics import WatchGauges

        self.registry = r = CollectorRegistry()
        self.binds = Counter("gputide_scheduler_pods", "Pods the scheduler handled, by result: bound, or "
                             "unschedulable (no node fits; tried again next pass).", ["result"], registry=r)
        self.failed_passes = Counter("gputide_scheduler_failed_passes", "Passes the API server failed.", registry=r)
        self.pending = Gauge("gputide_scheduler_pending_pods", "Pods of this scheduler left pending by the last "
                             "pass (no node fits them).", registry=r)
        self.leader = Gauge("gputide_scheduler_leader", "1 on the replica that binds.", registry=r)
        self.watches = WatchGauges(r)
        self.facts_nodes = Gauge("gputide_scheduler_gpu_facts_nodes", "Nodes with fresh per-GPU facts (thermal "
                                 "headroom, GPUs in use) from Prometheus at the last read; 0 without --prometheus "
                                 "or while it fails.", registry=r)
        self.latency = Histogram("gputide_scheduler_binding_latency_seconds", "Time from a pod's creation to its "
                                 "binding (creationTimestamp has whole seconds).", registry=r,
                                 buckets=(0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600))
        self.oldest = Gauge("gputide_scheduler_oldest_pending_seconds", "Age of the oldest pod the last pass left "
                            "pending (0 when none).", registry=r)
        self.preempted = Counter("gputide_scheduler_preempted_pods", "Pods of lower priority evicted to make room "
                                 "for a pod that fit nowhere.", registry=r)
        self.starving = Gauge("gputide_scheduler_starving_pods", "Pods the last pass found waiting longer than "
                              "--starving-after and gave a node to hold as what they ask frees up there.", registry=r)
        self.stuck = Gauge("gputide_scheduler_holds_stuck", "Preemption holds the last pass kept past the hour for "
                           "victims stuck terminating on a node that still admits the pod (the log names them).",
                           registry=r)
        for result in ("bound", "unschedulable"):
            self.binds.labels(result)
        self.leading = False

    def lead(self, leading: bool) -> None:
        """Whether this replica binds (`gputide_scheduler_leader`). A standby reports none of the leader's figures:
        pending, oldest pending, starving and stuck go to 0 and the GPU-facts nodes read 0 (`follow_facts`), so a
        former leader's last values neither page nor hide the leader's own under a `max` or add to a `sum`."""
        self.leading = leading
        self.leader.set(1 if leading else 0)
        if not leading:
            for gauge in (self.pending, self.oldest, self.starving, self.stuck):
                gauge.set(0)

    def follow_facts(self, facts_nodes: Callable[[], int]) -> None:
        """`gputide_scheduler_gpu_facts_nodes`, read at each scrape: the placer's count while this replica leads
        (it refreshes the facts in its passes only), 0 on a standby."""
        self.facts_nodes.set_function(lambda: float(facts_nodes()) if self.leading else 0.0)

    def record(self, results: dict, latencies: Sequence[float] = (), oldest_pending_s: float = 0.0,
               preempted: int = 0, starving: int = 0, stuck: int = 0) -> None:
        self.preempted.inc(preempted)
        self.starving.set(starving)
        self.stuck.set(stuck)
        for seconds in latencies:
            self.latency.observe(seconds)
        self.oldest.set(oldest_pending_s)
        bound = sum(1 for node in results.values() if node)
        self.binds.labels("bound").inc(bound)
        self.binds.labels("unschedulable").inc(len(results) - bound)
        self.pending.set(len(results) - bound)


def build_placer(args: argparse.Namespace):
    """The EnginePlacer the arguments ask for, every argument checked before anything connects (exit 2)."""
    from balancer.app.scheduling import EnginePlacer
    from balancer.errors import InputError
    from balancer.plan.placement import POLICIES

    if args.policy not in POLICIES:
        raise InputError(None, "--policy", args.policy, "one of " + ", ".join(POLICIES))
    if not 0 <= args.metrics_port < 65536:
        raise InputError(None, "--metrics-port", args.metrics_port, "a port from 0 to 65535")
    for flag, value in (("--cluster", args.cluster), ("--stale-after", args.stale_after)):
        if value is not None and not args.prometheus:
            raise InputError(None, flag, value, "only with --prometheus (it is about Prometheus series)")
    facts = None
    if args.prometheus:
        from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource

        stale_s = stale_after(args.stale_after)
        facts = PrometheusTelemetrySource(PrometheusOptions(url=prometheus_url(args.prometheus),
                                                            cluster=cluster_name(args.cluster),
                                                            stale_after_s=stale_s)).gpu_facts
        log.info("GPU facts from %s: a GPU whose newest reading is older than %.0f s is placed without its thermal "
                 "headroom (--stale-after)", args.prometheus, stale_s)
    return EnginePlacer(args.policy, gpu_facts=facts)


def stale_after(text: str | None, field: str = "--stale-after") -> float:
    """Seconds past which a GPU's newest reading is too old to place by (the telemetry source's limit, as
    `gputide run --stale-after`: balancer/cmd/run.py): `text`, by default `MOST_STALE_S`, the default
    spec.safety.maxTelemetryAgeS, where `gputide run` holds still and GpuTelemetryStale fires; never below
    `STALE_FLOOR_S`, where a healthy scrape's readings would already count as stale."""
    return MOST_STALE_S if text is None else duration_between(text, field, STALE_FLOOR_S, MOST_STALE_S, STALE_ALLOWED)


class EmergencyStop:
    """The controller's emergency stop as the scheduler's preemption reads it, before each preemption and each
    eviction: why it holds, None when it does not. The stop file exists (`gputide run --emergency-stop-file`), or the
    controller's policy file says `spec.safety.emergencyStop: true` (read again when its inode, size or mtime
    change: the kubelet swaps a ConfigMap's link). A state that cannot be read holds (fail-safe, as the controller
    acts on nothing in a cycle where its stop file cannot be looked at); the policy file is read again at the next
    call, until it can be."""

    def __init__(self, stop_path: str | None = None, policy_path: str | None = None) -> None:
        self.stop_path, self.policy_path = stop_path, policy_path
        self._seen: tuple[int, int, int] | None = None   # the policy file's (inode, size, mtime) when last read
        self._stopped = False

    def __call__(self) -> str | None:
        if self.stop_path:
            try:
                os.stat(self.stop_path)
                return f"the emergency stop file {self.stop_path} exists"
            except (FileNotFoundError, NotADirectoryError):
                pass
            except OSError as exc:   # EACCES, EIO: not known to be absent
                return f"cannot tell whether {self.stop_path} exists ({exc.strerror or exc}): taken as set"
        return self._policy() if self.policy_path else None

    def _policy(self) -> str | None:
        from balancer import config

        path = str(self.policy_path)
        try:
            st = os.stat(path)
            if (st.st_ino, st.st_size, st.st_mtime_ns) != self._seen:
                self._stopped = config.load(path).safety.emergency_stop
                self._seen = (st.st_ino, st.st_size, st.st_mtime_ns)
        except Exception as exc:   # missing, unreadable, invalid: evictions held, not let through
            self._seen = None
            return f"spec.safety.emergencyStop cannot be read from {path} ({exc}): taken as set"
        return f"spec.safety.emergencyStop is true in {path}" if self._stopped else None


def one_pass(scheduler, metrics: SchedulerMetrics) -> None:
    """A pass of the leading replica, its results in `metrics` and the log; a pass the API server fails is
    counted and tried again next time."""
    try:
        results = scheduler.schedule_once()
    except ActuationError as err:
        metrics.failed_passes.inc()
        log.warning("scheduling pass failed: %s", err)
        return
    metrics.record(results, scheduler.latencies, scheduler.oldest_pending_s, len(scheduler.preempted),
                   len(scheduler.starving), len(scheduler.stuck_holds))
    for name, node in results.items():
        if node:
            log.info("bound %s to %s", name, node)
        else:
            log.info("%s: no node fits, retried next pass: %s", name, scheduler.reasons.get(name, ""))


def stop_budget_s(scheduler, lease_api: Retries | None) -> float:
    """How long `gputide schedule` may take from SIGTERM to exit. The pass begins no read, pod, claim write or
    binding after the stop, nor retries a failed call outside a turn's reserve (balancer/actuate/k8s_scheduler.py),
    so what is in flight ends it: one read (its try or backoff in flight; counted here as a whole call,
    `call_budget_s`, within the reads' deadline, to spare), or one pod's turn (`turn_s`, its deadline) followed by
    the Events telling the pods it left unbound (`tell_s`); then the Lease is released (after a renewal in flight).
    The Deployment's terminationGracePeriodSeconds must exceed it by about 10 s (the steps between the Lease calls
    and the interpreter's exit: tests/deploy/test_deploy_scheduler_grace.py), or the kubelet kills it with the Lease
    held and the standby waits a whole lease duration."""
    in_flight = max(min(call_budget_s(scheduler.api), scheduler.reads_s), scheduler.turn_s + scheduler.tell_s)
    return in_flight + LEASE_CALLS_TO_RELEASE * call_budget_s(lease_api)


def names(args: argparse.Namespace) -> None:
    """--scheduler-name and the Lease flags, checked before anything connects. A pod's spec.schedulerName is a DNS-1123
    subdomain (the API server refuses any other), so a scheduler named otherwise waited for pods none can name. The
    Lease flags mean something only with --leader-elect: without it they were ignored, so a replica meant to elect
    (--leader-elect dropped from its args) bound alongside its peers without a word."""
    k8s_name(args.scheduler_name, "--scheduler-name", "the spec.schedulerName of the pods to bind")
    lease_flags(args)
    if not args.leader_elect:
        for flag, value, default in (("--lease-name", args.lease_name, LEASE_NAME),
                                     ("--lease-namespace", args.lease_namespace, None)):
            if value != default:
                raise InputError(None, flag, value, "only with --leader-elect (it names the Lease elected on)")


def run(args: argparse.Namespace) -> int:
    from balancer.actuate.k8s_scheduler import SecondaryScheduler

    interval = loop_interval(args.interval)
    starving_s = parse_interval(args.starving_after, "--starving-after")
    names(args)
    placer = build_placer(args)
    emergency = emergency_stop(args)
    api_client = kube_client(args.kubeconfig)
    elector = lease_elector(api_client, args.lease_name, args.lease_namespace, interval) if args.leader_elect else None

    def leading() -> bool:   # the renewer thread's view of the Lease: no API call, asked before every binding
        return elector is None or elector.try_acquire(time.time())

    scheduler = SecondaryScheduler(api_client, args.scheduler_name, placer, watch=not args.once,
                                   preemption=not args.no_preemption, starving_s=starving_s, leading=leading,
                                   term=lambda: elector.terms if elector is not None else 0,
                                   emergency_stop=emergency)
    if elector is not None:   # SIGTERM cuts short every try of the Lease: a --once run's first, the renewer's
        elector.stop_when(lambda: scheduler.stopping)

    log.info("from SIGTERM to exit at most %.0f s (terminationGracePeriodSeconds must exceed it by about 10 s, for the "
             "steps between the Lease calls and the interpreter's exit)",
             stop_budget_s(scheduler, getattr(elector, "api", None)))
    with stopped_by_signals(scheduler.stop, "stopping before the next pod, then releasing the Lease"):
        try:
            if args.once:   # the renewer started once the Lease is held (`one_shot`)
                return one_shot(scheduler, leading, elector)
            if elector is not None:   # renewed from its own thread however long a pass runs; released on the way out
                elector.start()
            return serve(args, scheduler, placer, leading, interval)
        finally:
            if elector is not None:   # first: the next leader need not wait for the watches to close
                elector.release()
            scheduler.close()


def emergency_stop(args: argparse.Namespace) -> EmergencyStop:
    """The emergency stop the flags name, checked at start as `gputide run` checks them (exit 2): a stop file in a
    folder that exists and can be looked in, a controller policy file that loads."""
    from balancer import config

    stop_file(args.emergency_stop_file, "--emergency-stop-file")
    if args.controller_policy:
        config.load(args.controller_policy)
    return EmergencyStop(args.emergency_stop_file, args.controller_policy)


def one_shot(scheduler, leading, elector=None) -> int:
    """`--once`: one pass if this replica holds the Lease (or elects none), each pod's node printed. Not holding it
    because the Lease could not be read or written (`lease_out_of_reach`: the API unreachable, failing or refusing)
    is said so and exits as a pass that could not read the API does: it was said as another replica holding it,
    exit 0, so a script or a check took an API server down for a healthy standby. A Lease another replica holds is
    watched for up to a lease duration (`lease_expires`, as `gputide run --once` waits): a dead holder's is taken
    over, one renewed meanwhile leaves this replica a standby; SIGTERM ends the wait at once (`scheduler.stop()`
    wakes `wait_for_work`). The first try and the wait renew on demand; the renewer thread starts only once the
    Lease is held, for the pass (its bindings ask the flag it keeps, no API call each): started before, it read
    the Lease between the wait's tries and reset the failure that ended the wait before it was read."""
    if not leading() and not lease_expires(elector, lambda: scheduler.stopping, scheduler.wait_for_work):
        out_of_reach = lease_out_of_reach(elector, "schedule", "nothing bound")
        if out_of_reach is not None:
            print(out_of_reach, file=sys.stderr)
            return EXIT_UNREACHABLE
        print("not the leader: another replica holds the Lease; nothing bound")
        return 0
    if elector is not None:   # held: kept from its own thread however long the pass runs (released by `run`)
        elector.start()
    try:
        placed = scheduler.schedule_once()
    except ActuationError as exc:   # the API server unreachable or failing: said in one line, not a traceback
        print(f"gputide schedule --once: the Kubernetes API could not be read: {exc}; nothing bound", file=sys.stderr)
        return EXIT_UNREACHABLE
    for name, node in placed.items():
        print(f"{name} -> {node}" if node else f"{name}: no node fits ({scheduler.reasons.get(name, '')})")
    return 0


def serve(args: argparse.Namespace, scheduler, placer, leading, interval: float) -> int:
    """Passes until SIGTERM / SIGINT (`scheduler.stop()`: the pass in progress ends before its next pod), each as
    soon as a pending pod appears or a node opens and at least every `interval`, by the leader only; metrics and probes
    on `--metrics-port`."""
    # a pass of many pods keeps moving: a heartbeat as its reads and each pod's turn begin, each within its deadline
    metrics, health = SchedulerMetrics(), Health(stall_limit(interval, scheduler.turn_budget_s))
    scheduler.progress = health.progress
    for resource, w in scheduler.watches.items():
        metrics.watches.follow(resource, lambda w=w: w.synced, lambda w=w: w.failures)
    metrics.follow_facts(lambda: placer.facts_nodes)
    if args.metrics_port:
        bind(lambda **kw: serve_metrics(registry=metrics.registry, health=health, **kw), args.listen_address,
             args.metrics_port, "--metrics-port")
    scheduler.start()
    log.info("scheduling pods of %s with policy %s every %.1f s", args.scheduler_name, args.policy, interval)
    try:
        while not scheduler.stopping:
            is_leader = leading()
            metrics.lead(is_leader)   # a standby's figures go to 0: its last ones as leader would go stale
            if is_leader:
                one_pass(scheduler, metrics)
            health.beat()
            scheduler.wait_for_work(interval)
    finally:
        metrics.lead(False)
    return 0
