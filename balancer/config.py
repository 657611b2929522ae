"""The BalancerPolicy: a versioned YAML file that tunes the controller, with defaults and validation.

A policy document looks like this (every field is optional; omitted fields keep their defaults)::

    apiVersion: gputide/v1alpha1
    kind: BalancerPolicy
    metadata: {name: production}
    spec:
      hotspots:   {marginC: 5, hotReadings: 2, coolReadings: 5}
      throttling: {enabled: true, minPowerFraction: 0.5}
      colocation: {sloPressure: 0.8, sloSlack: 0.5}
      safety:     {maxActionsPerCycle: 20, maxConcurrentMigrationsPerNode: 2, cooldownS: 600}
      forecast:   {horizonS: 3600, quantile: 0.9}
      capacity:   {enabled: false}
      placement:  {thermal: 1.0, binpack: 0.5}
      defrag:     {enabled: false, fragmentationThreshold: 0.3}

Each section is its own frozen dataclass; a field's metadata carries its allowed range (or choices) and a help
line, so validation, defaults and the reference table in the README come from one place. YAML keys are the
camelCase spelling of the field names. A new section (e.g. for capacity shifting) is one more dataclass and one
more entry in `SECTIONS`; nothing else changes. Errors are `InputError`s naming the file, the field path
(`spec.safety.cooldownS`), the value and what is allowed.
"""

from __future__ import annotations

import functools
import math
import re
import zoneinfo
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from balancer.errors import InputError
from balancer.yamlfile import API_VERSION as API_VERSION  # re-exported: documents name it
from balancer.yamlfile import document_name, expect_kind, read_yaml

KIND = "BalancerPolicy"


def _f(default: Any, help: str, lo: float | None = None, hi: float | None = None,
       choices: tuple[str, ...] | None = None) -> Any:
    return field(default=default, metadata={"help": help, "range": (lo, hi), "choices": choices})


@dataclass(frozen=True)
class HotspotPolicy:
    margin_c: float = _f(5.0, "a reading is hot at or above slowdown temperature minus this", 0, 40)
    release_margin_c: float = _f(12.0, "a reading is cool below slowdown temperature minus this", 0, 60)
    pool_imbalance_c: float = _f(0.0, "also hot when this far above the pool mean (0 disables)", 0, 60)
    thermal_bits: bool = _f(True, "a GPU reporting thermal slowdown (0x20/0x40) reads hot")
    power_capping: bool = _f(True, "a GPU power-capped (0x04/0x80) at its default limit reads hot")
    hot_readings: int = _f(2, "N: consecutive hot readings before acting", 1, 100)
    cool_readings: int = _f(5, "M: consecutive cool readings before releasing", 1, 1000)
    migrate: bool = _f(True, "move movable workloads off hot GPUs")
    refused_retry_s: float = _f(300.0, "after a migration was refused or failed, throttle instead of proposing it "
                                       "again for this long", 0, 86400)
    refused_target_retry_s: float = _f(600.0, "after the actuator refused a migration's target (the pod's topology "
                                              "spread, a hold on the node, its rules there), or the safety guard "
                                              "found it at maxConcurrentMigrationsPerNode (then every node that "
                                              "replacements still landing hold at that limit too), move that "
                                              "workload elsewhere but not there for this long at most; nodes the "
                                              "guard found full, with replacements still landing or migrations "
                                              "settling, only until it no longer counts them full",
                                       0, 86400)
    target_headroom_c: float = _f(15.0, "a migration target must be at least this far below slowdown", 0, 60)
    taint_hot_nodes: bool = _f(True, "taint a node with a hot GPU so new work lands elsewhere")


@dataclass(frozen=True)
class ThrottlePolicy:
    enabled: bool = _f(True, "lower power limits of hot GPUs that cannot be relieved by migration")
    min_power_fraction: float = _f(0.5, "never throttle below this fraction of TDP (and the GPU's minimum)", 0, 1)
    shrink_training: bool = _f(True, "shrink low-priority elastic training that throttling cannot cool")
    max_priority_to_shrink: int = _f(50, "training at or below this priority may be shrunk", 0, 1_000_000)


# A p99 latency SLO's bounds in seconds, one range for the policy's `latencySloSeconds` default, a services file's
# `latencySloSeconds` (balancer.app.capacity_run) and `calibrate --slo` (balancer.cmd.calibrate): the three copies
# could drift apart. The low is a real one: p99 / SLO is a latency pressure, and `--slo 1e-320` put every sample over
# the SLO.
SLO_RANGE_S = (1e-3, 3600.0)


@dataclass(frozen=True)
class ColocationPolicy:
    enabled: bool = _f(True, "protect inference latency on GPUs shared with training")
    slo_pressure: float = _f(0.8, "act when p99 latency exceeds this fraction of the SLO", 0.05, 5)
    slo_slack: float = _f(0.5, "give training back when p99 is below this fraction of the SLO", 0, 5)
    slack_readings: int = _f(5, "consecutive slack readings before giving back", 1, 1000)
    latency_slo_s: float = _f(0.5, "p99 latency SLO of services without their own (ServiceProfiles "
                                   "latencySloSeconds)", *SLO_RANGE_S)


@dataclass(frozen=True)
class SafetyPolicy:
    max_actions_per_cycle: int = _f(20, "actions the controller may take in one cycle (a reclaim for inference "
                                         "counts, but is never refused)", 0, 100_000)
    max_concurrent_migrations_per_node: int = _f(2, "migrations in flight touching one node", 0, 1000)
    max_unavailable_per_workload: int = _f(1, "replicas of one service/job disrupted at once", 0, 1000)
    migration_settle_s: float = _f(60.0, "a migration counts as in flight for this long", 0, 86400)
    cooldown_s: float = _f(600.0, "no second migrate/scale of the same workload within this", 0, 86400 * 7)
    power_cooldown_s: float = _f(120.0, "no second power-limit/taint change of the same target within this",
                                 0, 86400)
    min_expected_gain: float = _f(0.05, "drop actions whose expected gain is below this", 0, 1e9)
    eviction_budget: int = _f(30, "evictions (migrations, scale-downs) allowed per window", 0, 1_000_000)
    eviction_window_s: float = _f(3600.0, "the eviction budget's window", 1, 86400 * 7)
    max_telemetry_age_s: float = _f(120.0, "fail-static when any sample is older than this", 1, 86400)
    protected_namespaces: tuple[str, ...] = _f(("kube-system",), "namespaces never touched")
    emergency_stop: bool = _f(False, "hold still: reject every action")


@dataclass(frozen=True)
class ForecastPolicy:
    enabled: bool = _f(True, "use the demand forecaster when one is configured")
    horizon_s: float = _f(3600.0, "how far ahead to forecast", 60, 86400 * 7)
    step_s: float = _f(300.0, "forecast resolution", 10, 86400)
    quantile: float = _f(0.9, "the forecast quantile planners size capacity for", 0.5, 0.999)
    timezone: str = _f("UTC", "time zone of the demand's day and week for the models with a calendar (auto, "
                              "gbm, profile, seasonal_naive_daily/weekly): same time yesterday / last week and the "
                              "hour of day are read in its local time, across DST changes; mstl (the default), "
                              "holt_winters and persistence ignore it (`gputide run` warns at start)")


@dataclass(frozen=True)
class CapacityPolicy:
    enabled: bool = _f(False, "shift GPUs between inference and training ahead of the tide")
    headroom: float = _f(0.15, "spare inference capacity above the forecast", 0, 5)
    reclaim_quantile: float = _f(0.9, "the demand forecast quantile a service's replicas cover over the warm-up "
                                      "lead (reclaims); 0.99 holds spare for rises a p90 misses and lends less",
                                 0.5, 0.999)
    keep_quantile: float = _f(0.9, "a loan keeps what this quantile needs over the loan horizon (with the reclaim "
                                   "headroom and the burst floor); 0.99 lends less and is taken back less often",
                              0.5, 0.999)
    home_margin: float = _f(0.05, "share of a service's home allotment (homeReplicas) its spare for bursts and "
                                  "the forecast may hold beyond it: lending at night costs a little SLO, and "
                                  "holding more than static at the peak is what can pay it back", 0, 1)


@dataclass(frozen=True)
class DefragPolicy:
    enabled: bool = _f(False, "consolidate shared GPUs when fragmentation crosses the threshold (migrations)")
    fragmentation_threshold: float = _f(0.3, "act when this share of a GPU model's idle capacity is fragmented", 0, 1)
    min_unallocatable_gpus: float = _f(1.0, "... and at least this many of its idle GPUs are", 0, 1e6)
    max_moves_per_cycle: int = _f(2, "consolidation migrations per cycle at most", 1, 100)


@dataclass(frozen=True)
class PlacementWeights:
    thermal: float = _f(1.0, "prefer cool targets", 0, 100)
    binpack: float = _f(0.5, "prefer partly used GPUs (keeps whole GPUs free)", 0, 100)
    spread: float = _f(0.0, "prefer empty nodes", 0, 100)


SECTIONS: Mapping[str, type] = {
    "hotspots": HotspotPolicy, "throttling": ThrottlePolicy, "colocation": ColocationPolicy,
    "safety": SafetyPolicy, "forecast": ForecastPolicy, "capacity": CapacityPolicy, "placement": PlacementWeights,
    "defrag": DefragPolicy,
}


@dataclass(frozen=True)
class BalancerPolicy:
    name: str = "default"
    hotspots: HotspotPolicy = field(default_factory=HotspotPolicy)
    throttling: ThrottlePolicy = field(default_factory=ThrottlePolicy)
    colocation: ColocationPolicy = field(default_factory=ColocationPolicy)
    safety: SafetyPolicy = field(default_factory=SafetyPolicy)
    forecast: ForecastPolicy = field(default_factory=ForecastPolicy)
    capacity: CapacityPolicy = field(default_factory=CapacityPolicy)
    placement: PlacementWeights = field(default_factory=PlacementWeights)
    defrag: DefragPolicy = field(default_factory=DefragPolicy)

    def with_section(self, section: str, **changes: Any) -> BalancerPolicy:
        """A copy with some fields of one section changed (tests, scenarios)."""
        return replace(self, **{section: replace(getattr(self, section), **changes)})


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _convert(cls: type, key: str, f: Any, value: Any, path: str, file: str | None) -> Any:
    lo, hi = f.metadata["range"]
    default = f.default
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise InputError(file, path, value, "true or false")
        return value
    if isinstance(default, str):
        return check_timezone(value, path, file)
    if isinstance(default, tuple):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            # YAML 1.1 reads a bare on/off/yes/no as a boolean and 123 as a number: [on] arrives as [True]
            raise InputError(file, path, value, "a list of strings (quote a name YAML reads as a boolean or a "
                                                "number: 'on', 'no', '123')")
        return _names(value, path, file)
    if isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
        kind = "an integer"
    else:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        kind = "a number"
    # `not lo <= value <= hi` (not `value < lo or value > hi`): NaN compares false both ways and must fail
    if not ok or (lo is not None and not value >= lo) or (hi is not None and not value <= hi):
        raise InputError(file, path, value, f"{kind} from {lo:g} to {hi:g}",
                         number_as_text(value, integer=kind == "an integer"))
    return type(default)(value)


def number_as_text(value: Any, *, integer: bool = False) -> str:
    """A hint for a number YAML read as text: YAML 1.1 (PyYAML) takes `1e-3` (no dot, or no sign in the exponent)
    for a string, so `minExpectedGain: 1e-3` was refused as 'invalid value '1e-3'' with no word why. '' for any
    other value."""
    try:
        number = float(value) if isinstance(value, str) else math.nan
    except ValueError:
        return ""
    if not math.isfinite(number):
        return ""
    written = f"{int(number)}" if integer and number.is_integer() else _yaml_float(number)
    return f"YAML reads {value} as text, not a number: write {written}"


def _yaml_float(number: float) -> str:
    """`number` as YAML 1.1 reads a float: a mantissa with a dot where there is an exponent (Python's `5e-06` is
    text to PyYAML too, so the hint told the user to write what had just been refused)."""
    text = repr(number)
    mantissa, e, exponent = text.partition("e")
    return f"{mantissa}.0e{exponent}" if e and "." not in mantissa else text


TIMEZONE_ALLOWED = "an IANA time zone name such as UTC, Europe/Berlin or America/New_York"


def check_timezone(value: Any, field: str, file: str | None = None) -> str:
    """`value` if it names a zone of the IANA tz database (`Area/City`, or UTC), else an InputError naming `field`.
    The forecasters read local wall-clock time in it (balancer.forecast)."""
    if isinstance(value, str) and value in _zones():
        return value
    raise InputError(file, field, value, TIMEZONE_ALLOWED)


@functools.cache
def _zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def _names(value: list[str], path: str, file: str | None) -> tuple[str, ...]:
    """Kubernetes namespace names (DNS labels), each once: a typo such as `Kube-System` protects nothing."""
    for i, name in enumerate(value):
        if not _DNS_LABEL.fullmatch(name):
            raise InputError(file, f"{path}[{i}]", name, "a namespace name: 1 to 63 lower-case letters, digits "
                             "and '-', starting and ending with a letter or digit")
        if name in value[:i]:
            raise InputError(file, f"{path}[{i}]", name, "each namespace once")
    return tuple(value)


def _section(cls: type, doc: Any, path: str, file: str | None) -> Any:
    if doc is None:
        return cls()
    if not isinstance(doc, Mapping):
        raise InputError(file, path, doc, "a mapping")
    by_key = {camel(f.name): f for f in fields(cls)}
    values = {}
    for key, value in doc.items():
        f = by_key.get(key)
        if f is None:
            raise InputError(file, f"{path}.{key}", value, "one of the fields " + ", ".join(by_key))
        values[f.name] = _convert(cls, key, f, value, f"{path}.{key}", file)
    return cls(**values)


def from_dict(doc: Any, file: str | None = None) -> BalancerPolicy:
    doc = expect_kind(doc, file, KIND)
    name = document_name(doc, "policy")
    spec = {} if doc.get("spec") is None else doc["spec"]   # `spec: false` or `spec: 0` is not "no spec"
    if not isinstance(spec, Mapping):
        raise InputError(file, "spec", spec, "a mapping of sections: " + ", ".join(SECTIONS))
    unknown = sorted(set(spec) - set(SECTIONS), key=str)  # keys may be ints or None in hand-written YAML
    if unknown:
        raise InputError(file, f"spec.{unknown[0]}", spec[unknown[0]], "one of the sections " + ", ".join(SECTIONS))
    sections = {k: _section(cls, spec.get(k), f"spec.{k}", file) for k, cls in SECTIONS.items()}
    hs = sections["hotspots"]
    if hs.release_margin_c < hs.margin_c:
        raise InputError(file, "spec.hotspots.releaseMarginC", hs.release_margin_c,
                         f"a margin at least marginC ({hs.margin_c:g}), so hot and cool never overlap")
    co = sections["colocation"]
    if co.slo_slack >= co.slo_pressure:
        raise InputError(file, "spec.colocation.sloSlack", co.slo_slack,
                         f"a fraction below sloPressure ({co.slo_pressure:g})")
    return BalancerPolicy(name=name, **sections)


def load(path: str | Path) -> BalancerPolicy:
    return from_dict(read_yaml(path, "BalancerPolicy"), str(path))


def reference_markdown() -> str:
    """The policy file reference (every field, default and allowed values) as a markdown table."""
    rows = ["| field | default | allowed | meaning |", "|---|---|---|---|"]
    for sec, cls in SECTIONS.items():
        for f in fields(cls):
            lo, hi = f.metadata["range"]
            d = f.default
            allowed = ("true/false" if isinstance(d, bool) else "list of strings" if isinstance(d, tuple)
                       else "IANA time zone" if isinstance(d, str) else f"{lo:g} .. {hi:g}")
            shown = str(d).lower() if isinstance(d, bool) else list(d) if isinstance(d, tuple) else d
            rows.append(f"| `spec.{sec}.{camel(f.name)}` | `{shown}` | {allowed} | {f.metadata['help']} |")
    return "\n".join(rows)
