"""Serving series -> `ServiceStatus` per inference service: the pure half of the source's serving read.

The controller reads, per `service` label, the offered load `gputide_inference_demand_rps`, the p99
`gputide_inference_latency_p99_seconds` and the replicas asked for `gputide_inference_replicas`
(rules/serving/vllm.yaml records them from vLLM and kube-state-metrics; the simulated fleet's exporter publishes
them itself), and, to say why a demand is unknown, the ready replicas and the pods reporting and stalled. No I/O
here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace

from balancer.errors import InvalidTelemetry
from balancer.model import ServiceStatus, Workload, WorkloadClass
from balancer.telemetry.gpu_frame import sample

P99_BEYOND_BUCKETS_S = 3600.0   # a +Inf p99: beyond the highest bucket of any serving latency histogram
LATENCY_UNKNOWN = math.nan   # a p99 absent or NaN while requests arrive: no latency evidence, never 0 (calm)
# a demand unknown that no count explains: its series absent or NaN (`_why_unknown`)
UNTOLD = ("gputide_inference_demand_rps absent or NaN; check the scrape of the service's metrics, its vLLM servers "
          "and the rule that records its demand (rules/serving/)")
SERVING_SERIES = ("gputide_inference_demand_rps", "gputide_inference_latency_p99_seconds",
                  "gputide_inference_replicas", "gputide_inference_replicas_ready", "gputide_inference_pods_reporting",
                  "gputide_inference_pods_stalled")


def read_services(rows: list[dict], workloads: tuple[Workload, ...], slo_latency_s: Mapping[str, float],
                  default_slo_latency_s: float, concerned: Callable[[str], bool] | None = None
                  ) -> tuple[dict[str, ServiceStatus], dict[str, str]]:
    """Instant-vector rows of `SERVING_SERIES` -> one status per service. Without a `gputide_inference_replicas`
    series (the replicas asked for: the sim exporter's, or a recording rule over kube-state-metrics'
    `kube_deployment_spec_replicas` or `kube_statefulset_replicas`), a service counts the inference pods it owns on
    GPUs (pending ones are invisible then; never 0 while pods run). A `service` label found with two `namespace`
    labels names two services: both become `namespace/service`, as `KubernetesWorkloads` names such owners, instead
    of one overwriting the other. Each keeps the namespace its series carry (where to scale it while no pod of it runs).
    A service with serving series but no finite demand has no status: it is in the second mapping, with why where
    its series tell (`ClusterSnapshot.demand_unknown`). Read as 0 it would look idle, and the capacity planner would
    lend its GPUs away while its traffic is only unseen; so the capacity planner holds while a profiled one is
    unknown, co-location holds for it, and thermal relief goes on (before, `MissingTelemetry` held the whole loop:
    one hung vLLM pod stopped every throttle and migration of the fleet), and consolidation leaves its pods alone.
    Only where it `concerned` the caller (None: every service), though: a shard names in `demand_unknown` the services
    with a replica on its nodes (`prometheus._running`), and leaves the others out of both, unplanned (never read as
    0). A p99 absent or NaN (histogram_quantile over a window without requests) reads 0 only while the demand is 0:
    no request waited. With demand it is unknown and reads NaN (`LATENCY_UNKNOWN`), never 0: a service whose latency
    series is lost (a scrape down, a renamed vLLM histogram) would look perfectly calm, and co-location would give
    training its GPUs back; every consumer reads NaN as no latency evidence (its comparisons are False: neither slack
    nor pressure). A +Inf p99 (beyond the highest bucket) reads `P99_BEYOND_BUCKETS_S`: under pressure, never calm
    (finite, so the planner's arithmetic stays finite). A series found twice for one service (an HA pair, two
    scrape jobs) reads its higher value. `replicas_from_spec` says which replicas a status has: a count of its pods
    includes a rolling update's surge pods, the spec never does (the capacity planner reads a raised cap from it)."""
    samples = []
    spaces: dict[str, set[str]] = {}
    for r in rows:
        m, value = sample(r)
        if "__name__" not in m or value < 0:
            raise InvalidTelemetry(f"serving series {dict(m)} = {value!r}: need a metric name and a value >= 0",
                                   subjects=(m.get("service", "?"),))
        samples.append((m, value))
        spaces.setdefault(m.get("service", "?"), set()).add(m.get("namespace", ""))
    by: dict[str, dict[str, float]] = {}
    namespace: dict[str, str] = {}
    for m, value in samples:
        name = m.get("service", "?")
        if len(spaces[name]) > 1 and m.get("namespace"):
            name = f"{m['namespace']}/{name}"
        namespace[name] = m.get("namespace", "")
        if value == math.inf and m["__name__"] == "gputide_inference_latency_p99_seconds":
            value = P99_BEYOND_BUCKETS_S   # the quantile fell in the +Inf bucket: slower than any bucket tells
        got = by.setdefault(name, {})
        if math.isfinite(value):  # NaN (no request in a histogram_quantile's window) is absent, as the exporter does
            # a series repeated (an HA pair read without deduplication, two scrape jobs): the higher reading, never
            # whichever the answer lists last (a low demand read would lend the service's GPUs away)
            got[m["__name__"]] = max(value, got.get(m["__name__"], value))
    unknown = sorted(s for s, v in by.items() if "gputide_inference_demand_rps" not in v)
    if concerned is not None:   # another shard's service, or no shard's: left out, never read as 0
        by = {s: v for s, v in by.items() if s not in unknown or concerned(s)}
        unknown = [s for s in unknown if s in by]
    why = {s: _why_unknown(by.pop(s)) for s in unknown}
    pods: dict[str, int] = {}
    if any("gputide_inference_replicas" not in v for v in by.values()):
        for w in workloads:
            if w.workload_class is WorkloadClass.INFERENCE and w.owner:
                pods[w.owner] = pods.get(w.owner, 0) + 1
    return {s: ServiceStatus(name=s, demand_rps=v["gputide_inference_demand_rps"],
                             p99_latency_s=_p99(v),
                             slo_latency_s=slo_latency_s.get(s, default_slo_latency_s),
                             replicas=int(v["gputide_inference_replicas"]) if "gputide_inference_replicas" in v
                             else pods.get(s, 0), namespace=namespace.get(s, ""),
                             replicas_from_spec="gputide_inference_replicas" in v)
            for s, v in by.items()}, why


def _why_unknown(series: Mapping[str, float]) -> str:
    """Why a service's demand is unknown, where its series tell: rules/serving/vllm.yaml records the demand NaN
    where a pod is stalled (requests in hand, no token generated, request finished nor prompt read over the window: a
    hung vLLM's flat counters would read 0) or where fewer pods report vLLM metrics than the Deployment had ready
    over the last 3 min (the sum of those that do would read low), and records both counts beside it so the hold
    names which. Else only that the demand series is absent or NaN."""
    why = []
    stalled = series.get("gputide_inference_pods_stalled", 0.0)
    if stalled > 0:
        why.append(f"stalled: {stalled:g} pod(s) with requests in hand and no progress (tokens, finished requests, "
                   "prompts read) over the window")
    reporting, ready = series.get("gputide_inference_pods_reporting"), series.get("gputide_inference_replicas_ready")
    if reporting is not None and ready is not None and reporting < ready:
        why.append(f"{reporting:g} of {ready:g} ready pods reporting vLLM metrics")
    return "; ".join(why) if why else UNTOLD


def _p99(series: Mapping[str, float]) -> float:
    """A service's p99 from its finite series: 0 when it has neither a p99 nor demand (idle: no request waited),
    `LATENCY_UNKNOWN` when requests arrive and no p99 says how long they waited."""
    p99 = series.get("gputide_inference_latency_p99_seconds")
    if p99 is not None:
        return p99
    return 0.0 if series["gputide_inference_demand_rps"] == 0 else LATENCY_UNKNOWN


def with_hpa_wants(services: Mapping[str, ServiceStatus], workloads: tuple[Workload, ...],
                   wants: Mapping[str, tuple[int | None, str]] | None) -> dict[str, ServiceStatus]:
    """Each status with what the HPA that scales it keeps on its own metrics (`ServiceStatus.hpa_wants`), from
    `wants` by "namespace/target" (`k8s_hpa_reads`). A service's HPA is the one in its namespace (its qualified
    name's, else that of its pods and serving series, as the actuator finds where to scale it) targeting its bare
    name; a service whose namespace is not one (no pod, no label; or two) takes any HPA of that name. Unknown is
    never None (which says no HPA: every replica above the floor lendable) but the service's own replicas, so a loan
    frees nothing the HPA has not released: an HPA without status yet, two HPAs for one name, or `wants` None (the
    HPAs not read yet: every service)."""
    spaces: dict[str, set[str]] = {}
    for w in workloads:
        if w.owner:
            spaces.setdefault(w.owner, set()).add(w.namespace)
    by_name: dict[str, list[tuple[str, int | None]]] = {}   # bare target name -> (namespace, wants): one scan
    for target, (n, _) in (wants or {}).items():
        namespace, _, bare = target.rpartition("/")
        by_name.setdefault(bare, []).append((namespace, n))
    out = {}
    for name, st in services.items():
        if wants is None:
            out[name] = replace(st, hpa_wants=st.replicas)
            continue
        ns, _, bare = name.rpartition("/")
        where = {ns} if ns else spaces.get(name, set()) | ({st.namespace} if st.namespace else set())
        found = [n for namespace, n in by_name.get(bare, ()) if len(where) != 1 or namespace in where]
        if not found:
            out[name] = st
            continue
        n = found[0] if len(found) == 1 else None
        out[name] = replace(st, hpa_wants=st.replicas if n is None else n)
    return out
