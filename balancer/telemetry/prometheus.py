"""PromQL -> ClusterSnapshot: the only module that talks to Prometheus (through prometheus-api-client).

The source reads the *normalised* recording-rule series (rules/gputide-recording.yaml, docs/metrics.md §2) with
one instant query per cycle, so every GPU's fields come from the same evaluation, and turns them into an
immutable `ClusterSnapshot`. It refuses to hand the controller anything it must not act on:

* Prometheus unreachable after retries (urllib3 Retry with backoff)  -> `TelemetryUnavailable`
* an answer with warnings (Thanos's partial response, a failed remote read: series may be missing,
  `promapi.refuse_warnings`)                                             -> `MissingTelemetry`
* no GPU series at all, a GPU seen before that vanished (or a GPU node the Kubernetes API lists with no GPU in
  telemetry, seen or not: `vanished.Absences`), or a GPU missing a field -> `MissingTelemetry`; except
  a field its exporter declares unsupported (``gputide_exporter_unsupported_field_info``, `gpu_frame.UNKNOWABLE`:
  SM activity and utilisation both, an A100/A30 in MIG mode): NaN, unknown, in the snapshot. dcgm-exporter declares
  nothing
* a sample older than `stale_after_s` (default `stale_after_intervals` x the scrape interval) -> `StaleTelemetry`
* a GPU whose exporter's kubelet PodResources API did not answer (`gputide_pod_resources_up` 0: its pods are
  dropped, the GPU would read idle; a node named by that series' `cluster` and `Hostname`) -> `MissingTelemetry`
* an energy counter that has not moved for 2 minutes (`gpu:readings_frozen:bool`: the exporter serves frozen
  values with fresh timestamps)                                              -> `StaleTelemetry`
* NaN, negative or physically impossible values                              -> `InvalidTelemetry`
* a last sample stamped in the future, past a scrape interval + 5 s of Prometheus's evaluation time (a clock running
  ahead: its age is unknown; not checked where ages are read on the controller's clock)
                                                                             -> `InvalidTelemetry`
* GPU series of several `cluster` labels while no `cluster` is chosen         -> `InvalidTelemetry`
* one UUID under two hosts or slots, both fresh (two exporters that disagree)  -> `InvalidTelemetry`; where only
  one is fresh, the other is what a GPU left behind when it moved (a renamed node, a board moved, series that
  linger without staleness markers) and is dropped (`gpu_frame.drop_leftovers`)

Not refused: an inference service with serving series but no finite demand (`serving.read_services`) is left out of
the services and named, with why, in `ClusterSnapshot.demand_unknown`: capacity shifting holds, thermal relief goes on.

A sharded controller reads through `snapshot_for(scope)` (`base.ScopedSource`, from `shard.ShardedSource`): the
per-GPU refusals above (vanished, missing a field, stale, frozen, NaN or impossible values, pods unknown) then
concern the GPUs of the nodes the scope owns alone, so one dark exporter holds still its node's shard, not the whole
fleet. One UUID
under two hosts, both fresh, concerns a scope that owns either host (`gpu_frame.check_once`: the GPU may be on either,
an action on it could reach either). A service without finite demand is in the `demand_unknown` of a scope with a
replica of it on its nodes (`_running`: a shard plans only those; one with no replica placed anywhere is no shard's,
and left out of the statuses and of `demand_unknown`). The others refuse the reading whatever nodes they concern:
Prometheus unreachable or its answer not a vector, no GPU series at all, a malformed series, several clusters (a
misconfiguration every controller reading that Prometheus shares: hostnames are unique within a cluster only, so no
row can be told to be the scope's), and a partial answer (its warnings do not say which series are missing: a
scope's own GPUs, pods or serving series may be among them). `snapshot()` checks every node.

Optional fields and flags are not missing telemetry: the snapshot uses the catalogue's figure or a neutral value; a
GPU lacking a health series (XID, memory health) others publish has unknown health (`gpu_frame.HEALTH`: no new work,
`health_unknown`). Never zeros in place of data: the loop catches these and holds still (fail-static).
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType

import numpy as np
import pandas as pd
import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect

from balancer.errors import InvalidTelemetry, MissingTelemetry, StaleTelemetry, TelemetryUnavailable
from balancer.fleet import Fleet
from balancer.model import (
    ClusterSnapshot,
    DisruptionBudget,
    Gpu,
    Node,
    NodeGpuFacts,
    NodeMeta,
    ServiceStatus,
    SuspendedJob,
    Workload,
)
from balancer.telemetry import promapi
from balancer.telemetry.attribution import attributed, attribution_query
from balancer.telemetry.base import NodeScope
from balancer.telemetry.gpu_frame import (
    _SERIES,
    BOUNDS,
    FIELDS,
    FLAGS,
    HEALTH_UNSUPPORTED,
    OPTIONAL,
    UNKNOWABLE,
    UNSUPPORTED_INFO,
    arrays,
    check_not_frozen,
    check_not_nan,
    check_once,
    check_values,
    declared_unsupported,
    gpu_frame,
    health_unknown,
    with_unknown,
)
from balancer.telemetry.gpu_frame import natural_key as _natural_key
from balancer.telemetry.gpu_frame import sample as _sample
from balancer.telemetry.node_facts import HEALTH_RULES, health_frame, node_facts, unhealthy
from balancer.telemetry.serving import SERVING_SERIES, read_services, with_hpa_wants
from balancer.telemetry.topology import Topology
from balancer.telemetry.vanished import DARK, Absences

log = logging.getLogger(__name__)
# a series gputide's exporter publishes for each of its GPUs, joined to its `gputide_pod_resources_up` by target
_ATTRIBUTED_BY = "DCGM_FI_DEV_GPU_TEMP"
# the same join recorded per GPU (rules/gputide-recording.yaml): what a global view keeping gpu:* series holds
_ATTRIBUTION_DOWN = "gpu:pod_attribution_down:bool"
_DOWN_BY_UUID = (_ATTRIBUTED_BY, _ATTRIBUTION_DOWN)
# gputide's exporter's own health: 0 while the kubelet's PodResources API does not answer it
_KUBELET_UP = "gputide_pod_resources_up"
__all__ = ["BOUNDS", "FIELDS", "FLAGS", "OPTIONAL", "PrometheusOptions", "PrometheusTelemetrySource",
           "attribution_query", "connect"]


@dataclass(frozen=True)
class PrometheusOptions:
    url: str
    timeout_s: float = 5.0
    retries: int = 3
    backoff_s: float = 0.5
    bearer_token: str | None = None
    basic_auth: tuple[str, str] | None = None
    ca_file: str | None = None
    insecure_skip_verify: bool = False
    scrape_interval_s: float = 15.0
    stale_after_intervals: float = 4.0
    stale_after_s: float | None = None   # the limit in seconds when set (`gputide run --stale-after`), else the above
    # a GPU gone from telemetry (or a GPU node the Kubernetes API lists with none in telemetry: `vanished.Absences`)
    # holds still for this long, then is forgotten, loudly (`gputide_gpus_forgotten{node}` while its node is listed):
    # one dark exporter must not stop the whole fleet for good. Forgotten at once when its node leaves the API
    forget_vanished_after_s: float = 600.0
    cluster: str | None = None          # restrict to series with this `cluster` label
    extra_headers: Mapping[str, str] = field(default_factory=dict)


def _running(workloads: tuple[Workload, ...], placements: Mapping[str, tuple[int, ...]],
             checked: np.ndarray | None) -> Callable[[str], bool] | None:
    """Whether a service (a workload's `owner`) has a replica placed on a GPU `checked` (None: every service is the
    caller's): the services whose unknown demand concerns a shard. A shard plans only the services with a replica on
    its nodes (`shard.restrict`, the capacity planner's `sharded`), so one with none there, or none placed anywhere,
    is no business of its. The owners are gathered only when first asked: a service without finite demand is rare,
    and the gathering walks every workload."""
    if checked is None:
        return None

    @functools.cache
    def owners() -> frozenset[str]:
        return frozenset(w.owner for w in workloads
                         if w.owner and any(checked[g] for g in placements.get(w.name, ())))

    # a namespace-qualified name (`serving.read_services`) concerns the shard running its bare name's pods
    return lambda service: service in owners() or service.partition("/")[2] in owners()


def _down_query(selector: str) -> str:
    """The GPUs, and the hosts, whose exporter says the kubelet's PodResources API did not answer its last scrape
    (`gputide_pod_resources_up` 0; `_split_down` tells them apart), read with the pods
    (`PrometheusTelemetrySource._workloads`, `gpu_facts`): the recording rule `gpu:pod_attribution_down:bool`, the raw
    join it records, and the up series by its `Hostname` label, whichever is there. A global view (federation,
    remote write) keeps the recorded `gpu:*` and the `gputide_*` series, not the raw `DCGM_FI_*` ones that tie an
    exporter's target (`cluster`, `job`, `instance`: its GPU temperature, `_ATTRIBUTED_BY`) to its GPUs; a Prometheus
    whose rules are older than this controller has the raw series only. The record alone lags: a global view (remote
    write) gets the raw series as they are scraped, the record at the next rule evaluation (up to 15 s on), so a
    scrape that reads the kubelet down and drops the pods showed the pods gone while the record still said 0. The
    exporter keeps the pods 60 s from its first silent collection and drops them only after a collection that said
    0, so a scraper's first scrape to read 0 drops them only where it scrapes less often than every 60 s, no
    collection ran for 2 minutes before the kubelet fell silent, or the exporter restarted while the kubelet was
    down (and the few other cases `exporters.podresources` names). The up series comes with the scrape that drops
    the pods (through remote write with several shards, within `batch_send_deadline` of it: `_workloads`): the shipped
    PodMonitor sets `Hostname` on every series of the target, so it names the node there as well (a scrape without
    that label is read by the raw join, where it is local), with its `cluster`: host names are unique within a
    cluster only, and another cluster's exporters may send `gputide_*` series to this view before its GPU series are
    read here (rules not loaded yet), which `_one_cluster` cannot see."""
    hosts = 'Hostname!=""' + (f",{selector}" if selector else "")
    return (f"{_ATTRIBUTED_BY}{{{selector}}} and on (cluster, job, instance) "
            f"({_KUBELET_UP}{{{selector}}} == 0) or {_ATTRIBUTION_DOWN}{{{selector}}} == 1 "
            f"or {_KUBELET_UP}{{{hosts}}} == 0")


def _split_down(rows: list[dict]) -> tuple[list[dict], set[str], set[tuple[str, str]]]:
    """The rows of a query `or`-ed with `_down_query` -> (the other rows, the UUIDs down, the hosts down as
    (`cluster`, `Hostname`) pairs: '' where the series has no `cluster`, matching GPU series without one), told
    apart by `__name__` (comparisons and `and` keep the left side's name)."""
    rest: list[dict] = []
    uuids: set[str] = set()
    hosts: set[tuple[str, str]] = set()
    for r in rows:
        m, _ = _sample(r)
        name = m.get("__name__")
        if name in _DOWN_BY_UUID:
            uuids.add(m.get("UUID", ""))
        elif name == _KUBELET_UP:
            if m.get("Hostname"):
                hosts.add((m.get("cluster", ""), m["Hostname"]))
        else:
            rest.append(r)
    return rest, uuids - {""}, hosts


def connect(opts: PrometheusOptions) -> PrometheusConnect:
    """A PrometheusConnect with auth, TLS and retries with exponential backoff configured, which refuses answers
    carrying warnings (`promapi.session`)."""
    headers = dict(opts.extra_headers)
    if opts.bearer_token:
        headers["Authorization"] = f"Bearer {opts.bearer_token}"
    session, retry = promapi.session(retries=opts.retries, backoff_s=opts.backoff_s, ca_file=opts.ca_file,
                                     insecure_skip_verify=opts.insecure_skip_verify)
    return PrometheusConnect(url=opts.url, headers=headers or None, disable_ssl=opts.insecure_skip_verify,
                             retry=retry, auth=opts.basic_auth, session=session, timeout=opts.timeout_s)


class PrometheusTelemetrySource:
    """TelemetrySource backed by Prometheus. `fleet` (optional) adds what PromQL cannot know: NVLink islands,
    CPU and memory, cooling. `workload_overrides` (optional) adds priority / movable / protected per pod;
    `node_overrides` (optional: `KubernetesNodes`) gives each node its labels and taints as the Kubernetes API has
    them (they replace the fleet file's), or None until it has listed them, when the snapshot cannot be taken:
    without labels, an emergency-stop label would go unseen. `suspended_jobs` (optional) lists the jobs gputide
    suspended, which no metric shows (no pods); without it the snapshot says it cannot see them
    (`suspended_jobs=None`) and the capacity planner never suspends a job. `disruption_budgets` (optional) lists the
    PodDisruptionBudgets the safety guard checks migrations against. `hpa_wants` (optional: `KubernetesHpaWants`)
    says what the HPA scaling each service keeps on its own metrics (`serving.with_hpa_wants`); without it every
    `ServiceStatus.hpa_wants` is None (no HPA known)."""

    def __init__(self, opts: PrometheusOptions, *, fleet: Fleet | None = None,
                 workload_overrides: Callable[[], Mapping[str, Workload]] | None = None,
                 node_overrides: Callable[[], Mapping[str, NodeMeta] | None] | None = None,
                 suspended_jobs: Callable[[], tuple[SuspendedJob, ...] | None] | None = None,
                 disruption_budgets: Callable[[], tuple[DisruptionBudget, ...] | None] | None = None,
                 hpa_wants: Callable[[], Mapping[str, tuple[int | None, str]] | None] | None = None,
                 slo_latency_s: Mapping[str, float] | None = None, default_slo_latency_s: float = 0.5,
                 clock: Callable[[], float] = time.time, client: PrometheusConnect | None = None) -> None:
        self.opts = opts
        self.fleet = fleet
        self.workload_overrides = workload_overrides
        self.node_overrides = node_overrides
        self.suspended_jobs = suspended_jobs
        self.disruption_budgets = disruption_budgets
        self.hpa_wants = hpa_wants
        self.slo_latency_s = dict(slo_latency_s or {})
        self.default_slo_latency_s = default_slo_latency_s
        self.clock = clock
        self.client = client or connect(opts)
        self.absences = Absences(opts.forget_vanished_after_s)   # GPUs seen, gone, forgotten (`vanished.Absences`)
        self._known_from: tuple[Gpu, ...] | None = None   # the topology `absences.known` was last updated from
        self._evaluated_at = math.nan                # Prometheus's clock at the last GPU query
        self._topology = Topology()                  # nodes and GPUs from the series' labels, with its caches
        self._leftovers: set[tuple[str, ...]] = set()   # stale keys of moved GPUs last dropped (logged once)
        self._unknown: dict[str, set[str]] = {}   # field -> GPUs declared without it, last logged
        self.health_unknown: frozenset[str] = frozenset()   # GPUs whose health series are missing (`_health_unknown`)
        self.oldest_sample_age_s = math.nan   # of the last reading, even one refused (the loop's staleness gauge)

    # ---- queries --------------------------------------------------------------------------------------------
    def _selector(self) -> str:
        return f",cluster={promapi.promql_string(self.opts.cluster)}" if self.opts.cluster else ""

    def _query(self, promql: str) -> list[dict]:
        try:
            result = self.client.custom_query(promql)
        except promapi.PartialResponse as exc:
            raise MissingTelemetry(f"Prometheus at {self.opts.url} answered {promql!r} in part: {exc}") from exc
        # KeyError, TypeError: a 200 answer without `data.result` (a proxy's own JSON): no answer, not a traceback
        except (requests.RequestException, PrometheusApiClientException, ValueError, KeyError, TypeError) as exc:
            raise TelemetryUnavailable(f"Prometheus at {self.opts.url} did not answer {promql!r}: {exc!r}") from exc
        if not isinstance(result, list):
            raise InvalidTelemetry(f"Prometheus answered {promql!r} with {type(result).__name__}, "
                                   "not an instant vector")
        return result

    def _one_cluster(self, clusters: set[str]) -> None:
        """One Prometheus for several clusters (a `cluster` label per cluster) and none chosen: acting on every
        cluster's GPUs from here would be wrong, so refuse."""
        if len(clusters) > 1:
            named = ", ".join(sorted(c or "(no cluster label)" for c in clusters))
            raise InvalidTelemetry(f"GPU series of {len(clusters)} clusters in Prometheus at {self.opts.url} "
                                   f"({named}): pick this cluster's with --cluster NAME")

    def _gpu_frame(self) -> tuple[pd.DataFrame, str]:
        """Every GPU series with all its labels, one instant query, and their one `cluster` label ('' where they
        have none; `_one_cluster` refuses several). Measured and not shipped: asking for 11 of the
        12 fields by `max by (__name__, UUID)` makes the answer a third smaller at 10,000 GPUs (26.5 -> 17.1 MiB)
        and saves the controller 220-340 ms of CPU a snapshot, but Prometheus 2.42's own evaluation of the query
        grew by 170-590 ms in every run (537 -> 1,129 ms in one), and a NaN with a good duplicate would be hidden
        by `max`: the cost moves to a shared server rather than going away (defe488, reverted)."""
        names = "|".join(rule for rule, _ in _SERIES.values())
        rows = self._query(f'{{__name__=~"{names}"{self._selector()}}}')
        if not rows:
            raise MissingTelemetry(f"no GPU series in Prometheus at {self.opts.url} (are the recording rules loaded "
                                   "and the exporter scraped?)")
        try:   # every sample of an instant query carries the evaluation time: Prometheus's clock, not ours
            self._evaluated_at = float(rows[0]["value"][0])
        except (KeyError, IndexError, TypeError, ValueError):
            self._evaluated_at = math.nan
        now = self._evaluated_at if math.isfinite(self._evaluated_at) else self.clock()
        clusters: set[str] = set()

        def one_cluster(seen: set[str]) -> None:
            self._one_cluster(seen)
            clusters.update(seen)

        wide = gpu_frame(rows, one_cluster, fresh_since=now - self._stale_limit(), on_leftovers=self._log_leftovers)
        return wide, next(iter(clusters), "")

    def _ahead_limit(self) -> float:
        """How far ahead of the evaluation time a last sample may be stamped and still be read (`_check_not_ahead`)."""
        return self.opts.scrape_interval_s + 5.0

    def _stale_limit(self) -> float:
        opts = self.opts
        return (opts.stale_after_s if opts.stale_after_s is not None
                else opts.scrape_interval_s * opts.stale_after_intervals)

    def _log_leftovers(self, keys: list[tuple[str, ...]]) -> None:
        """Once per key: the stale series a GPU left behind where it was before (`gpu_frame.drop_leftovers`)."""
        for host, slot, uuid, _ in (k for k in keys if k not in self._leftovers):
            log.info("GPU %s is also reported as gpu %s on %s, by stale series only: read where it is now, that "
                     "is what it left behind (a renamed node, a moved board)", uuid, slot, host)
        self._leftovers = set(keys)

    # ---- snapshot -------------------------------------------------------------------------------------------
    def snapshot(self) -> ClusterSnapshot:
        return self.snapshot_for(None)

    def snapshot_for(self, scope: NodeScope | None) -> ClusterSnapshot:
        """The snapshot, refused (`TelemetryError`) for what is wrong on the GPUs of the nodes `scope` owns (None:
        every node; `base.ScopedSource`). Every GPU read is in it, those outside the scope unchecked."""
        now, self.oldest_sample_age_s = self.clock(), math.nan   # the age this reading measured, if it gets so far
        wide, cluster = self._gpu_frame()
        # the Kubernetes API's nodes asked once a reading: the vanished-GPU check and the topology see the same answer
        # (a list that fails for one and answers the other would let a reading through half blind)
        listed = None if self.node_overrides is None else functools.cache(self.node_overrides)
        vanished = self.absences.reading(set(wide["UUID"]), self.clock(), listed, set(wide["hostname"]))
        wide = self._sorted(wide)
        nodes, gpus = self._topology.build(wide, self.fleet, listed)
        checked = self._checked(wide, nodes, scope)
        check_once(wide, checked)
        check_not_nan(wide, checked)
        self._check_complete(wide, checked, self._owned(vanished, nodes, scope))
        for name, (_, scale) in _SERIES.items():
            if name in wide and scale != 1.0:
                wide[name] = wide[name] * scale
        age = self._check_ages(wide, checked, now)
        check_not_frozen(wide, checked)
        arrays_ = arrays(wide, self._topology.slowdown_defaults(gpus))
        check_values(arrays_, wide, checked)
        arrays_ = with_unknown(arrays_, self._health_unknown(wide))
        workloads, placements = self._workloads(wide, cluster, checked, {g.uuid: g.index for g in gpus})
        if gpus is not self._known_from:   # a new topology: remember its GPUs (the same one costs nothing)
            self.absences.known.update((g.uuid, g.node) for g in gpus)
            self._known_from = gpus
        services, demand_unknown = self._services(workloads, _running(workloads, placements, checked))
        if self.hpa_wants is not None:
            services = with_hpa_wants(services, workloads, self.hpa_wants())
        return ClusterSnapshot(time=now, nodes=nodes, gpus=gpus, sample_age_s=np.clip(age, 0, None),
                               workloads=workloads, placements=placements, services=services,
                               demand_unknown=demand_unknown,
                               suspended_jobs=self.suspended_jobs() if self.suspended_jobs else None,
                               disruption_budgets=self.disruption_budgets() if self.disruption_budgets else None,
                               forgotten_nodes=self._forgotten_gpus(listed), **arrays_)

    def _sorted(self, wide: pd.DataFrame) -> pd.DataFrame:
        """`wide` in the snapshot's GPU order: the fleet's, so snapshots from any source line up GPU by GPU, else by
        host and slot (natural order)."""
        if self.fleet is not None:
            order = {g.uuid: g.index for g in self.fleet.gpus}
            wide["_order"] = wide["UUID"].map(order).fillna(len(order)).astype(int)
            # a host's GPUs stay together even when one of them is new to the fleet spec (a replaced board)
            wide["_node_order"] = wide.groupby("hostname", sort=False)["_order"].transform("min")
            wide = wide.sort_values(["_node_order", "hostname", "gpu"], key=lambda s: s.map(_natural_key))
        else:
            wide = wide.sort_values(["hostname", "gpu"], key=lambda s: s.map(_natural_key))
        return wide.reset_index(drop=True)

    @staticmethod
    def _checked(wide: pd.DataFrame, nodes: tuple[Node, ...], scope: NodeScope | None) -> np.ndarray | None:
        """Per GPU of `wide`: whether its node is `scope`'s, whose checks refuse the reading (None: every GPU's)."""
        if scope is None:
            return None
        owned = [n.name for n in nodes if scope(n.name, n)]
        return wide["hostname"].isin(owned).to_numpy(dtype=bool)

    def _owned(self, vanished: list[str], nodes: tuple[Node, ...], scope: NodeScope | None) -> list[str]:
        """The GPUs of `vanished` on `scope`'s nodes: their node as this reading shows it, or (the whole node dark)
        by its name alone."""
        if scope is None or not vanished:
            return vanished
        shown = {n.name: n for n in nodes}
        node = {u: self.absences.known.get(u, "") for u in vanished}
        return [u for u in vanished if scope(node[u], shown.get(node[u]))]

    def _check_ages(self, wide: pd.DataFrame, checked: np.ndarray | None, now: float) -> np.ndarray:
        """Each GPU's sample age on Prometheus's clock, refused (`StaleTelemetry`, `InvalidTelemetry` for a last
        sample that is not a time) where a GPU `checked` is too old; the oldest checked is kept for the gauge."""
        sampled = wide["last_sample"].to_numpy(dtype=float)
        mine = np.ones(len(wide), dtype=bool) if checked is None else checked
        bad_time = ~np.isfinite(sampled) & mine
        if bad_time.any():
            i = int(np.argmax(bad_time))
            raise InvalidTelemetry(f"{FIELDS['last_sample'][0]} = {sampled[i]!r} on {wide['UUID'][i]} is not a time",
                                   subjects=tuple(wide["UUID"][bad_time]))
        # sample age on Prometheus's clock: the controller's own may be skewed against it (a minute ahead would
        # read every sample as stale, behind would hide real staleness)
        age = (self._evaluated_at if math.isfinite(self._evaluated_at) else now) - sampled
        if mine.any():
            self.oldest_sample_age_s = max(float(age[mine].max()), 0.0)
        if math.isfinite(self._evaluated_at):   # ages on the controller's clock: a skew, not a sample, would be ahead
            self._check_not_ahead(wide, age, mine)
        limit = self._stale_limit()
        stale = (age > limit) & mine
        if stale.any():
            worst = int(np.argmax(np.where(stale, age, -np.inf)))
            raise StaleTelemetry(f"{int(stale.sum())} GPU(s) have samples older than {limit:.0f}s "
                                 f"(worst: {wide['UUID'][worst]} on {wide['hostname'][worst]}, {age[worst]:.0f}s old)",
                                 subjects=tuple(wide["UUID"][stale]))
        return age

    def _check_not_ahead(self, wide: pd.DataFrame, age: np.ndarray, mine: np.ndarray) -> None:
        """Refuse (`InvalidTelemetry`) GPUs `mine` whose last sample is stamped ahead of the evaluation time by more
        than a scrape interval and 5 s. A query at T selects no sample stamped after T, so on one Prometheus an age is
        never below 0; one that is comes from a store that breaks that (not checked where the answer had no
        evaluation time: ages then read on the controller's clock, whose skew behind Prometheus's would refuse every
        fresh sample), and a sample stamped by a clock running ahead (an exporter's own timestamps,
        `honor_timestamps`, remote write, federation) is older than it reads by as much: clipped to 0 it read fresh,
        so the staleness limit never fired. Its age is unknown, not old: invalid, like a last sample not a time.
        The margin is what rounding (milliseconds) and one scrape's jitter could give; Prometheus's own scrape
        takes samples up to 10 minutes ahead of its clock, so it does not stop them."""
        ahead = (age < -self._ahead_limit()) & mine
        if ahead.any():
            worst = int(np.argmin(np.where(ahead, age, np.inf)))
            raise InvalidTelemetry(f"{int(ahead.sum())} GPU(s) have samples stamped in the future, up to "
                                   f"{-age[worst]:.0f}s ahead of Prometheus's evaluation time (worst: "
                                   f"{wide['UUID'][worst]} on {wide['hostname'][worst]}): a clock running ahead "
                                   "(the exporter's, a remote-write or federation agent's) hides how old they are",
                                   subjects=tuple(wide["UUID"][ahead]))

    def _check_complete(self, wide: pd.DataFrame, checked: np.ndarray | None, vanished: list[str]) -> None:
        """`vanished` (the known GPUs absent from this reading, held for) and the required fields missing on a GPU
        `checked` (None: every GPU) refuse the reading (`MissingTelemetry`)."""
        if vanished:
            dark = [self.absences.known[u] for u in vanished if u.startswith(DARK)]
            gpus = [u for u in vanished if not u.startswith(DARK)]
            said = ([f"{len(gpus)} GPU(s) vanished from telemetry: {', '.join(gpus[:5])}"] if gpus else []) + (
                [f"{len(dark)} GPU node(s) the Kubernetes API lists have no GPU in telemetry (exporter dark): "
                 f"{', '.join(dark[:5])}"] if dark else [])
            raise MissingTelemetry("; ".join(said), subjects=tuple(gpus + dark))
        mine = wide["UUID"] if checked is None else wide["UUID"][checked]
        required = [n for n in FIELDS if n not in OPTIONAL]
        for name in required:
            if name not in wide:
                wide[name] = np.nan
            lacks = wide[name].isna() if checked is None else wide[name].isna() & checked
            missing = wide["UUID"][lacks]
            if len(missing) and name in UNKNOWABLE:   # asked only then: no cost while every GPU reports it
                missing = missing[~missing.isin(list(self._declared_unsupported(name, missing)))]
            if len(missing) and len(missing) == len(mine):
                raise MissingTelemetry(f"series {FIELDS[name][0]} is missing for every GPU")
            if len(missing):
                raise MissingTelemetry(f"{FIELDS[name][0]} missing for {len(missing)} GPU(s): "
                                       f"{', '.join(missing[:5])}", subjects=tuple(missing))

    def _declared_unsupported(self, name: str, missing: pd.Series, by: Mapping[str, tuple[str, ...]] = UNKNOWABLE,
                              read_as: str = "unknown, not missing") -> set[str]:
        """Of the GPUs without `name`, those whose exporter declares its fields (`by[name]`) unsupported
        (`UNSUPPORTED_INFO`): the board never has it, read as `read_as`. Logged when that set changes."""
        fields = "|".join(by[name])
        rows = self._query(f'{UNSUPPORTED_INFO}{{field=~"{fields}"{self._selector()}}}')
        declared = {uuid for uuid, field_name in declared_unsupported(rows, by) if field_name == name} & set(missing)
        if declared != self._unknown.get(name, set()):
            log.info("%d GPU(s) have no %s (their exporter declares %s unsupported), read as %s: %s", len(declared),
                     _SERIES[name][0], fields, read_as, ", ".join(sorted(declared)[:5]))
            self._unknown[name] = declared
        return declared

    def _health_unknown(self, wide: pd.DataFrame) -> np.ndarray:
        """`gpu_frame.health_unknown`, kept in `health_unknown` (UUIDs) and logged when that set changes."""
        unknown = health_unknown(wide, lambda name, lacks: self._declared_unsupported(
            name, lacks, HEALTH_UNSUPPORTED, "healthy (a board without them)"))
        uuids = frozenset(wide["UUID"][unknown])
        if uuids != self.health_unknown:
            log.warning("%d GPU(s) lack XID or memory-health series that the rest of the fleet publishes: health "
                        "unknown, kept from new work (never a migration target, never lent): %s", len(uuids),
                        ", ".join(sorted(uuids)[:5]))
            self.health_unknown = uuids
        return unknown

    @property
    def forgotten(self) -> Mapping[str, str]:
        """GPUs forgotten after `forget_vanished_after_s` gone from telemetry while the Kubernetes API still lists
        their node -> that node, until they report again or the node goes (`vanished.Absences`; the loop's gauge)."""
        return self.absences.forgotten

    def _forgotten_gpus(self, listed: Callable[[], Mapping[str, object] | None] | None) -> Mapping[str, int]:
        """`ClusterSnapshot.forgotten_nodes`: per node forgotten while listed, its GPUs forgotten. A node known by name
        only (`vanished.DARK`: its GPUs never seen) counts what the fleet spec or its `nvidia.com/gpu.count` label
        (GPU feature discovery) says it has, else 0 (unknown)."""
        counts: dict[str, int] = {}
        spec = {n.name: n.gpu_count for n in self.fleet.nodes} if self.fleet is not None else {}
        for uuid, node in self.absences.forgotten.items():
            if not uuid.startswith(DARK):
                counts[node] = counts.get(node, 0) + 1
                continue
            meta = ((listed() if listed is not None else None) or {}).get(node)
            label = str((getattr(meta, "labels", None) or {}).get("nvidia.com/gpu.count", ""))
            counts[node] = counts.get(node, 0) + (spec.get(node) or (int(label) if label.isdigit() else 0))
        return MappingProxyType(counts)

    def _check_attributed(self, wide: pd.DataFrame, cluster: str, checked: np.ndarray | None, uuids: set[str],
                          hosts: set[tuple[str, str]]) -> None:
        """Refuse (`MissingTelemetry`) the GPUs `checked` (None: every GPU) whose exporter says the kubelet's
        PodResources API did not answer its last scrape (`uuids`, or on `hosts` of the GPUs' `cluster`:
        `_down_query`): it publishes them without the pods a minute later (the last answer kept until then holds no
        pod placed since), so they would read idle (`gpu_milli_used` 0): lent by the capacity planner, counted free
        by migrations. An exporter without the series (the simulator's, NVML without ``--pod-resources-socket``,
        dcgm-exporter) is not down; nor is a node of the same name in another cluster."""
        here = {host for c, host in hosts if c == cluster}
        lacks = ((wide["UUID"].isin(uuids) | wide["hostname"].isin(here)).to_numpy(dtype=bool)
                 & (True if checked is None else checked))
        if lacks.any():
            hosts_ = sorted(set(wide["hostname"][lacks]), key=_natural_key)
            uuids_ = tuple(wide["UUID"][lacks])
            raise MissingTelemetry(f"the kubelet PodResources API is not answering gputide's exporter on "
                                   f"{len(hosts_)} node(s) ({', '.join(hosts_[:5])}; gputide_pod_resources_up 0): "
                                   f"their {len(uuids_)} GPU(s) are published without their pods, which would read "
                                   f"idle: {', '.join(uuids_[:5])}", subjects=uuids_)

    def _workloads(self, wide: pd.DataFrame, cluster: str, checked: np.ndarray | None, index: Mapping[str, int],
                   ) -> tuple[tuple[Workload, ...], dict[str, tuple[int, ...]]]:
        """The pods on the GPUs (`attribution.attributed`), read in one query with the GPUs and hosts whose kubelet
        did not answer (`_down_query`, the rows told apart by `__name__`), which refuse the reading where `checked`
        (`_check_attributed`; `cluster`: the GPUs' own, `_gpu_frame`). One query: Prometheus evaluates it at one
        instant over one view, so where that view is one Prometheus scraping the exporter itself, a scrape that
        drops a node's pods as it reads the kubelet down (a Prometheus scraping the exporter less often than every
        60 s, the exporter's grace from its first silent collection: `_down_query`) is seen whole or not at all.
        Not so through remote write with several shards: the staleness markers of the dropped
        `gputide_gpu_workload_info` series and the `gputide_pod_resources_up` 0 sample of that scrape may travel in
        different shards and land up to `batch_send_deadline` (5 s by default) apart, so a query between them can
        read the pods gone and the kubelet still up; the next snapshot reads it down. The check asked apart, before
        the pods and again after them, cost two more queries a snapshot, each reading every GPU's temperature and
        record series, and would not close that gap either."""
        sel = self._selector().lstrip(",")
        rows, uuids, hosts = _split_down(self._query(f"{attribution_query(sel)} or ({_down_query(sel)})"))
        self._check_attributed(wide, cluster, checked, uuids, hosts)
        overrides = self.workload_overrides
        finished = getattr(overrides, "finished_pods", None)   # KubernetesWorkloads: pods Succeeded or Failed
        return attributed(rows, index, dict(overrides()) if overrides else {},
                          (finished() if finished else None) or frozenset())

    def _services(self, workloads: tuple[Workload, ...] = (),
                  concerned: Callable[[str], bool] | None = None) -> tuple[dict[str, ServiceStatus], dict[str, str]]:
        """Serving series per `service`, and the services whose demand is unknown with why (`serving.read_services`;
        `concerned`: the services whose unknown demand is the caller's, None: all)."""
        rows = self._query(f'{{__name__=~"{"|".join(SERVING_SERIES)}"{self._selector()}}}')
        return read_services(rows, workloads, self.slo_latency_s, self.default_slo_latency_s, concerned)

    # ---- for the secondary scheduler ------------------------------------------------------------------------
    def gpu_facts(self) -> dict[str, NodeGpuFacts]:
        """Per node (`hostname` label): each GPU's thermal headroom, from readings fresher than the staleness
        limit, stamped no further ahead than the snapshot takes (`_check_not_ahead`: a clock running ahead hides
        their age) and not frozen (`gpu:readings_frozen:bool`: fresh timestamps on values the exporter stopped
        reading); such a GPU is left out, never guessed, as the snapshot refuses it. Also the GPUs a pod is
        attributed to (`attribution_query`) and the unhealthy ones, those the reconcile loop keeps from new work
        (`ClusterSnapshot.healthy`: a fatal XID, bad memory, health unknown; `node_facts.unhealthy`). The GPUs of
        an exporter whose kubelet did not answer (`_down_query`: the snapshot refuses them) count busy too:
        their pods are not published, so none is known free, and the scheduler fills free slots first; a host down
        is matched in the GPU's own `cluster` (host names are unique within a cluster only). In the same query as
        the pods, so a scrape that drops the pods as it reads the kubelet down is never read half from one
        Prometheus scraping the exporter (through remote write with several shards it may be, for up to
        `batch_send_deadline`: `_workloads`). Raises
        `TelemetryError` subclasses like `snapshot()`; the caller decides what to do without the facts (the
        scheduler places as if it had none)."""
        sel = self._selector().lstrip(",")
        on, ages = "on (cluster, hostname, gpu, UUID)", f"< {self._stale_limit():g} > {-self._ahead_limit():g}"
        rows = self._query(f"gpu:temperature_headroom:celsius{{{sel}}} and {on} "
                           f"(time() - gpu:last_sample:timestamp_seconds{{{sel}}} {ages}) "
                           f"unless {on} (gpu:readings_frozen:bool{{{sel}}} == 1)")
        pods, down, hosts = _split_down(self._query(f"count by (UUID) ({attribution_query(sel)}) "
                                                    f"or ({_down_query(sel)})"))
        busy = {_sample(r)[0].get("UUID") for r in pods} | down | {
            m.get("UUID") for m, _ in map(_sample, rows) if (m.get("cluster", ""), m.get("hostname")) in hosts}
        health = health_frame(self._query(f'{{__name__=~"{"|".join(HEALTH_RULES)}"{self._selector()}}}'),
                              (_sample(r)[0].get("UUID", "") for r in rows))
        self._one_cluster({_sample(r)[0].get("cluster", "") for r in rows})
        return node_facts(rows, busy, unhealthy(health, self._health_unknown(health)))

    # ---- history --------------------------------------------------------------------------------------------
    def demand_history(self, promql: str, start: float, end: float, step_s: float) -> pd.Series:
        """A demand series (e.g. `sum(rate(http_requests_total{service="x"}[5m]))`) for the forecaster:
        UTC DatetimeIndex at `step_s`, NaN where Prometheus has no data (never zeros). `start` is taken in whole
        seconds: prometheus-api-client sends round(start), and an index built from int(start) sat one second off
        every answer whenever the fraction was .5 or more, so half of all restarts got no history at all."""
        start = float(math.floor(start))
        try:
            result = self.client.custom_query_range(
                promql, start_time=datetime.fromtimestamp(start, UTC), end_time=datetime.fromtimestamp(end, UTC),
                step=f"{int(step_s)}s")
        except promapi.PartialResponse as exc:
            raise MissingTelemetry(f"range query {promql!r} answered in part: {exc}") from exc
        except (requests.RequestException, PrometheusApiClientException, ValueError, KeyError, TypeError) as exc:
            raise TelemetryUnavailable(f"range query {promql!r} failed: {exc!r}") from exc
        # Prometheus evaluates a range query at start + k * step, so the same grid holds every answer
        index = pd.date_range(pd.Timestamp(int(start), unit="s", tz="UTC"), pd.Timestamp(end, unit="s", tz="UTC"),
                              freq=f"{int(step_s)}s")
        if not result:
            return pd.Series(np.nan, index=index, name="demand")
        got = _range_floats(promql, result)
        got = got[np.isfinite(got.to_numpy())]
        return got.groupby(level=0).max().reindex(index)


def _range_floats(promql: str, result: object) -> pd.Series:
    """Every (time, float) pair of a range query's `result`, read as the demand; `InvalidTelemetry` naming `promql`
    and what is wrong where the answer is not series of float samples: native histogram samples (a custom
    ``--demand-query`` over a native histogram, whose series carry ``histograms`` and no ``values``) or a body of a
    proxy's own. Raised from here, not as the KeyError it was, it is a failed query the callers catch
    (`capacity_run.PrometheusDemandHistory`, `forecast.service.HistorySeeds`): a KeyError ended every reconcile cycle
    with an error, thermal relief included. Several series (an HA pair read without deduplication, a template that
    does not aggregate) are all kept: the caller takes the higher reading at each step, never the first series
    listed (a lagging copy would shed the service's capacity)."""
    if not isinstance(result, list):
        raise InvalidTelemetry(f"range query {promql!r} answered {type(result).__name__}, not a range vector")
    times: list[int] = []
    values: list[float] = []
    for series in result:
        if isinstance(series, dict) and "histograms" in series:
            raise InvalidTelemetry(f"range query {promql!r} answered native histogram samples "
                                   f"(series {series.get('metric', {})}): a demand is a float per step, e.g. "
                                   "sum(histogram_count(rate(...[5m])))")
        try:
            for t, v in series["values"]:
                times.append(int(float(t)))
                values.append(float(v))
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidTelemetry(f"range query {promql!r} answered a series that is not [time, value] pairs "
                                   f"({exc!r}): {str(series)[:200]}") from exc
    return pd.Series(values, index=pd.to_datetime(times, unit="s", utc=True), name="demand")
