"""GPU series -> one wide frame: the recording rules the controller reads and the checks every reading passes.

The pure half of `balancer.telemetry.prometheus` (which queries): `gpu_frame` turns the instant-vector rows of the
normalised GPU series (rules/gputide-recording.yaml) into one row per GPU, `arrays` into the snapshot's arrays,
and `check_once` / `check_not_nan` / `check_not_frozen` / `check_values` refuse what the controller must not act on
(`InvalidTelemetry`, `StaleTelemetry`), on the GPUs they are told to check: all of them, or a shard's (`checked`, from
the source's `base.NodeScope`), so one node's broken exporter holds still the controllers of that node alone (one GPU
reported by two exporters: those of both its hosts). No I/O here.

A required field a board never has is not missing telemetry: gputide's exporter declares each field NVML answers
NotSupported for in ``gputide_exporter_unsupported_field_info{UUID,field}`` (`UNKNOWABLE` names the fields where
that is allowed), `declared_unsupported` reads those rows, and the snapshot carries NaN (unknown) for that GPU.
dcgm-exporter declares nothing: under it a missing field stays missing telemetry.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np
import pandas as pd

from balancer import catalog
from balancer.errors import InvalidTelemetry, StaleTelemetry
from balancer.model import MAY_BE_UNKNOWN

# snapshot field -> (recording rule, scale to the snapshot's unit)
FIELDS: Mapping[str, tuple[str, float]] = {
    "temperature_c": ("gpu:temperature:celsius", 1.0),
    "memory_temperature_c": ("gpu:memory_temperature:celsius", 1.0),
    "slowdown_temp_c": ("gpu:slowdown_temperature:celsius", 1.0),
    "power_w": ("gpu:power:watts", 1.0),
    "power_limit_w": ("gpu:power_limit:watts", 1.0),
    "sm_active": ("gpu:sm_active:ratio", 1.0),
    "mem_used_mib": ("gpu:memory_used:bytes", 1 / 1048576),
    "mem_free_mib": ("gpu:memory_free:bytes", 1 / 1048576),
    "sm_clock_mhz": ("gpu:sm_clock:hertz", 1e-6),
    "clock_event_reasons": ("gpu:clock_event_reasons:bitmask", 1.0),
    "xid": ("gpu:xid_last:code", 1.0),
    "last_sample": ("gpu:last_sample:timestamp_seconds", 1.0),
}
# Flags: 0/1 series that only some GPUs have, read with the fields; a GPU without one is not flagged. Memory
# health: a board that does not report ECC or row remapping (GeForce, ECC off, before Ampere), or an exporter
# not configured for those fields, leaves it out, and that GPU counts healthy, never as missing telemetry.
FLAGS: Mapping[str, tuple[str, float]] = {
    "memory_unhealthy": ("gpu:memory_unhealthy:bool", 1.0),
    # the exporter serves values that have not changed for 2 minutes with fresh timestamps: stale (fail-static)
    "readings_frozen": ("gpu:readings_frozen:bool", 1.0),
}
_SERIES: Mapping[str, tuple[str, float]] = {**FIELDS, **FLAGS}
# Optional fields: a dcgm-exporter that is not configured for them leaves them out; the snapshot then uses the
# catalogue's figure (slowdown temperature) or NaN-free neutral values that the planner never acts on alone.
# Flags are optional and NaN-free too (absent or NaN: 0).
OPTIONAL = {"memory_temperature_c", "slowdown_temp_c", "sm_clock_mhz", "clock_event_reasons", "xid", *FLAGS}
# (lowest, highest) physically possible values; outside means a broken sensor or exporter
BOUNDS: Mapping[str, tuple[float, float]] = {
    "temperature_c": (-20, 150), "memory_temperature_c": (-20, 150), "slowdown_temp_c": (40, 150),
    "power_w": (0, 3000), "power_limit_w": (1, 3000), "sm_active": (0, 1.05), "mem_used_mib": (0, 1 << 22),
    "mem_free_mib": (0, 1 << 22), "sm_clock_mhz": (0, 5000), "clock_event_reasons": (0, 1 << 16),
    "xid": (0, 1 << 16), "memory_unhealthy": (0, 1),
}
# A management limit below 1 W (0 W) is no limit a board enforces (NVML's lowest minimum limits are tens of watts):
# one that has none (NotSupported) has no series, missing telemetry. And no board draws `POWER_OVER_LIMIT` times the
# larger of its limit and its default limit (the catalogue's TDP for its modelName: `default_limits`) for a sample:
# the limiter acts within milliseconds, and a board never draws much above the highest limit it may be set to (a
# loaded H200 at its 700 W limit read 705 W instant, 692 W averaged over 1 s). The limit alone refused real readings:
# DCGM_FI_DEV_POWER_USAGE is a 1 s average or an instant sample (`exporters.backends.nvml`: nvmlDeviceGetPowerUsage
# averages over 1 s on Ampere, except GA100, and newer; GA100 and older return instantaneous power), and the
# average still holds what a loaded board drew before a lower limit for up to that second: 692-705 W against an
# operator's `nvidia-smi -pl 200` on an H200, 3.5x (auditor a7); the controller's own caps go down to
# min_power_fraction of the TDP, 0.25 allowed, 4x on an A100. Against the default limit no real reading comes near
# 3x; beyond it the two are not one board's readings (a broken sensor, a unit read wrong) and the reading is refused.
# A board the catalogue does not know is judged by its limit alone: a cap below a third of what it drew can then read
# so for the one sample in that second, and the controller holds still until the next.
POWER_OVER_LIMIT = 3.0
GPU_KEY = ("hostname", "gpu", "UUID")
# per GPU with a NaN sample of a required field (`gpu_frame`, only when there is one): the position in the answer of
# its first such sample, how many it has and the rule of the first (`check_not_nan`)
NAN_FIRST, NAN_COUNT, NAN_RULE = "_nan_first", "_nan_count", "_nan_rule"
# per GPU row (`gpu_frame`, only when there is one): its UUID is kept under several keys, none alone fresh
# (`drop_leftovers`), for `check_once` to refuse where any of those keys is on a GPU checked
TWICE = "_twice"
# Required fields a board may lack for good -> the exporter's fields it comes from (the `field` label of
# UNSUPPORTED_INFO), all of which must be declared: gpu:sm_active:ratio is SM activity, else utilisation, so a GPU
# lacks it for good only where both are unsupported: an A100 or A30 in MIG mode under gputide's exporter (no GPM
# before Hopper, no utilisation in MIG mode). SM activity alone declared (no GPM, before Hopper) excuses nothing: its
# utilisation stands in, and a GPU without that is missing telemetry. Temperature and power stay required.
UNKNOWABLE: Mapping[str, tuple[str, ...]] = {"sm_active": ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_GPU_UTIL")}
UNSUPPORTED_INFO = "gputide_exporter_unsupported_field_info"
# Health series: a GPU without one is not missing telemetry, but neither is it healthy where other GPUs of the
# fleet publish that series (its exporter lost the field, an XID event stream that failed on that board): its health
# is unknown, and it is kept from new work as a GPU with bad memory is. A series no GPU publishes (an exporter not
# configured for XIDs or memory health) leaves every GPU healthy, as before. A GPU whose exporter declares every field
# a health series comes from unsupported (`HEALTH_UNSUPPORTED`: no ECC, no row remapper; XID events NVML does not
# deliver for that board) has none for good: healthy. An XID stream that failed otherwise is a collect error,
# retried by the exporter: unknown until it reports.
HEALTH = ("xid", "memory_unhealthy")
HEALTH_UNSUPPORTED: Mapping[str, tuple[str, ...]] = {
    "xid": ("DCGM_FI_DEV_XID_ERRORS",),   # NVML delivers no XID events for that board (NotSupported)
    "memory_unhealthy": ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ROW_REMAP_PENDING",
                         "DCGM_FI_DEV_ROW_REMAP_FAILURE")}
assert set(UNKNOWABLE) <= set(MAY_BE_UNKNOWN)


def gpu_frame(rows: list[dict], on_clusters: Callable[[set[str]], None], fresh_since: float = math.inf,
              on_leftovers: Callable[[list[tuple[str, ...]]], None] | None = None) -> pd.DataFrame:
    """Instant-vector rows of the GPU series -> one row per GPU: `GPU_KEY`, modelName and one column per field
    seen (NaN where a GPU lacks it). `on_clusters` is shown the `cluster` labels met before any other check (the
    source refuses several). A UUID under several keys is resolved by `drop_leftovers` (with `fresh_since`, the
    oldest last-sample time still fresh); `on_leftovers` is shown the keys dropped. A NaN sample of a required field
    is not refused here but marked on its GPU (`NAN_FIRST`...), for `check_not_nan` to refuse on the GPUs checked; a
    UUID left under several keys likewise (`TWICE`, for `check_once`)."""
    rule_to_field = {rule: name for name, (rule, _) in _SERIES.items()}
    field_names = list(_SERIES)
    column = {name: i for i, name in enumerate(field_names)}
    # one pass over the rows into plain lists (120,000 rows at 10,000 GPUs: no per-row pandas)
    keys, cols, values, clusters = [], [], [], set()
    for r in rows:
        m, value = sample(r)
        clusters.add(m.get("cluster", ""))
        name = rule_to_field.get(m.get("__name__", ""))
        host, gpu, uuid = m.get("hostname", ""), m.get("gpu", ""), m.get("UUID", "")   # GPU_KEY
        if name is None or not (host and uuid and str(gpu).isdigit()):
            raise InvalidTelemetry(f"series {dict(m)} lacks a known rule name or the labels hostname, gpu "
                                   "(an integer) and UUID that the recording rules guarantee")
        keys.append((host, gpu, uuid, m.get("modelName", "")))
        cols.append(column[name])
        values.append(value)
    on_clusters(clusters)
    codes, uniques = pd.factorize(pd.Index(keys, tupleize_cols=False), sort=False)
    cols_a, values_a = np.asarray(cols, dtype=np.int64), np.asarray(values, dtype=float)
    keep = drop_leftovers(list(uniques), codes, values_a, cols_a == column["last_sample"], fresh_since)
    if not keep.all():
        if on_leftovers is not None:
            on_leftovers([u for u, k in zip(uniques, keep, strict=True) if not k])
        rows_kept = keep[codes]
        codes = (np.cumsum(keep) - 1)[codes[rows_kept]]
        uniques = [u for u, k in zip(uniques, keep, strict=True) if k]
        keys = [k for k, r in zip(keys, rows_kept, strict=True) if r]
        cols_a, values_a = cols_a[rows_kept], values_a[rows_kept]
    optional = np.isin(cols_a, [column[n] for n in OPTIONAL])
    nan = np.flatnonzero(np.isnan(values_a) & ~optional)
    # max over duplicates (e.g. MIG instances that slipped past the rules); a field never seen stays NaN
    table = np.full((len(uniques), len(field_names)), np.nan)
    np.fmax.at(table, (codes, cols_a), values_a)
    seen = np.zeros(table.shape, dtype=bool)
    seen[codes, cols_a] = True
    wide = pd.DataFrame(list(uniques), columns=[*GPU_KEY, "modelName"])
    for j, name in enumerate(field_names):
        if seen[:, j].any():
            wide[name] = table[:, j]
    twice = pd.Index([u[2] for u in uniques], dtype=object).duplicated(keep=False)
    if twice.any():
        wide[TWICE] = twice
    if len(nan):   # kept for `check_not_nan`: a NaN a good duplicate would hide in `table` still counts
        first = np.full(len(uniques), np.inf)
        np.minimum.at(first, codes[nan], nan.astype(float))
        count = np.zeros(len(uniques), dtype=np.int64)
        np.add.at(count, codes[nan], 1)
        wide[NAN_FIRST], wide[NAN_COUNT] = first, count
        wide[NAN_RULE] = [_SERIES[field_names[cols_a[int(f)]]][0] if c else ""
                          for f, c in zip(first, count, strict=True)]
    return wide


def drop_leftovers(uniques: list[tuple[str, ...]], codes: np.ndarray, values: np.ndarray, is_last_sample: np.ndarray,
                   fresh_since: float) -> np.ndarray:
    """Which of the (hostname, gpu, UUID, modelName) keys to keep. A UUID under one key keeps it. Under several,
    a key whose newest `gpu:last_sample:timestamp_seconds` is older than `fresh_since` (or that has none) is what
    the GPU left behind when it moved (a renamed node, a board moved to another host or slot, old series that
    linger without staleness markers after a Prometheus restart or through federation) and goes, as long as
    another key of that UUID is fresh. Two fresh keys are two exporters disagreeing about one GPU (which host holds
    it?): both are kept, for `check_once` to refuse on the GPUs checked."""
    uuids = pd.Index([k[2] for k in uniques], dtype=object)
    keep = np.ones(len(uniques), dtype=bool)
    if uuids.is_unique:
        return keep
    newest = np.full(len(uniques), np.nan)
    np.fmax.at(newest, codes[is_last_sample], values[is_last_sample])
    fresh = newest >= fresh_since
    shared = uuids.duplicated(keep=False)
    has_fresh = pd.Series(fresh).groupby(uuids.to_numpy()).transform("any").to_numpy(dtype=bool)
    keep &= ~(shared & ~fresh & has_fresh)
    return keep


def check_once(wide: pd.DataFrame, checked: np.ndarray | None = None) -> None:
    """A GPU kept under several keys (`TWICE`: none alone fresh, two exporters disagree about where it is) where
    any of them is on a GPU `checked` (None: every GPU) is `InvalidTelemetry`, naming what each key says: each of
    its hosts' controllers holds still (an action on it could reach either host), and no other."""
    if TWICE not in wide:
        return
    twice = wide[TWICE].to_numpy(dtype=bool)
    uuids = wide["UUID"].to_numpy(dtype=object)
    mine = tuple(dict.fromkeys(uuids[twice if checked is None else twice & checked]))
    if not mine:
        return
    keys = wide.loc[wide["UUID"].isin(mine[:3]), [*GPU_KEY, "modelName"]].itertuples(index=False, name=None)
    seen: dict[str, list[str]] = {u: [] for u in mine[:3]}
    for host, slot, uuid, model in keys:
        seen[uuid].append(f"{host} gpu {slot} ({model or 'no modelName'})")
    raise InvalidTelemetry(f"{len(mine)} GPU(s) reported under several hostname, gpu or modelName labels: "
                           + "; ".join(f"{u} as {' and '.join(v)}" for u, v in seen.items())
                           + " (none alone is fresh: two exporters disagree about where the GPU is?)",
                           subjects=mine)


def declared_unsupported(rows: list[dict], fields: Mapping[str, tuple[str, ...]] = UNKNOWABLE
                         ) -> set[tuple[str, str]]:
    """Rows of `UNSUPPORTED_INFO` -> the (UUID, snapshot field) pairs of `fields` (`UNKNOWABLE`, `HEALTH_UNSUPPORTED`)
    a GPU does not have: those whose every exported field is declared for that GPU. Rows without a UUID declare
    nothing."""
    declared: dict[str, set[str]] = {}
    for r in rows:
        m, _ = sample(r)
        if m.get("UUID"):
            declared.setdefault(m["UUID"], set()).add(m.get("field", ""))
    return {(uuid, name) for uuid, got in declared.items() for name, names in fields.items() if got.issuperset(names)}


def health_unknown(wide: pd.DataFrame, declared: Callable[[str, pd.Series], set[str]]) -> np.ndarray:
    """Per GPU of `wide`: whether its health is unknown (`HEALTH`): a health series other GPUs publish and it lacks
    (or reads NaN), unless `declared(name, uuids lacking it)` (the exporter's `UNSUPPORTED_INFO`, asked only then)
    names it. A series no GPU publishes leaves every GPU healthy (an exporter without those fields, as before)."""
    unknown = np.zeros(len(wide), dtype=bool)
    for name in HEALTH:
        if name not in wide:
            continue
        lacks = wide[name].isna().to_numpy()
        if lacks.any() and name in HEALTH_UNSUPPORTED:
            lacks = lacks & ~wide["UUID"].isin(list(declared(name, wide["UUID"][lacks]))).to_numpy()
        unknown |= lacks
    return unknown


def arrays(wide: pd.DataFrame, slowdown_default: np.ndarray) -> dict[str, np.ndarray]:
    def col(name: str, default: np.ndarray | float) -> np.ndarray:
        if name in wide:
            values = wide[name].to_numpy(dtype=float)
            return np.where(np.isnan(values), default, values) if name in OPTIONAL else values
        return np.broadcast_to(np.asarray(default, dtype=float), (len(wide),)).copy()

    used = col("mem_used_mib", 0.0)
    return {
        "temperature_c": col("temperature_c", 0.0),
        "memory_temperature_c": col("memory_temperature_c", col("temperature_c", 0.0)),
        "slowdown_temp_c": col("slowdown_temp_c", slowdown_default),
        "power_w": col("power_w", 0.0),
        "power_limit_w": col("power_limit_w", 0.0),
        "sm_active": col("sm_active", np.nan),   # NaN only where declared unsupported (never 0: not idle)
        "mem_used_mib": used,
        "mem_total_mib": used + col("mem_free_mib", 0.0),
        "sm_clock_mhz": col("sm_clock_mhz", 0.0),
        "clock_event_reasons": col("clock_event_reasons", 0.0).astype(np.int64),
        "xid": col("xid", 0.0),
        "memory_unhealthy": col("memory_unhealthy", 0.0),
    }


def with_unknown(arrays_: Mapping[str, np.ndarray], unknown: np.ndarray) -> dict[str, np.ndarray]:
    """`arrays_` with memory unhealthy also where health is `unknown` (`health_unknown`): kept from new work as bad
    memory is. The snapshot applies it after `check_values`, so a flag outside 0..1 is refused, never hidden."""
    return {**arrays_, "memory_unhealthy": np.maximum(arrays_["memory_unhealthy"], unknown)}


def check_not_nan(wide: pd.DataFrame, checked: np.ndarray | None = None) -> None:
    """A NaN sample of a required field (`gpu_frame` marks its GPU) on a GPU `checked` (None: every GPU) is a broken
    exporter: `InvalidTelemetry`, naming the first such sample in the answer."""
    if NAN_COUNT not in wide:
        return
    count = wide[NAN_COUNT].to_numpy() * (True if checked is None else checked)
    if not count.any():
        return
    first = np.where(count > 0, wide[NAN_FIRST].to_numpy(), np.inf)
    order = np.argsort(first, kind="stable")[:int(np.count_nonzero(count))]
    i = int(order[0])
    raise InvalidTelemetry(f"NaN in {wide[NAN_RULE][i]} on {wide['UUID'][i]} ({wide['hostname'][i]}) and "
                           f"{int(count.sum()) - 1} more", subjects=tuple(wide["UUID"].to_numpy()[order]))


def check_values(arrays: Mapping[str, np.ndarray], wide: pd.DataFrame, checked: np.ndarray | None = None) -> None:
    """Values outside `BOUNDS` (a broken sensor or exporter), or no board could report together (`_together`), on a
    GPU `checked` (None: every GPU): `InvalidTelemetry`, naming the first such GPU and its values."""
    for bad, said in (*_outside(arrays), *_together(arrays, default_limits(wide))):
        if checked is not None:
            bad = bad & checked
        if bad.any():
            i = int(np.argmax(bad))
            raise InvalidTelemetry(said(i, f"{wide['UUID'][i]} ({wide['hostname'][i]})"),
                                   subjects=tuple(wide["UUID"][bad]))


Verdict = tuple[np.ndarray, Callable[[int, str], str]]   # per GPU: bad; what to say of GPU i, named as given


def _outside(arrays: Mapping[str, np.ndarray]) -> list[Verdict]:
    out: list[Verdict] = []
    for name, arr in arrays.items():
        lo, hi = BOUNDS.get(name, (-math.inf, math.inf))
        # NaN in a MAY_BE_UNKNOWN field got here only declared unsupported (`_check_complete`): unknown, not bad
        bad = (np.isinf(arr) if name in MAY_BE_UNKNOWN else ~np.isfinite(arr)) | (arr < lo) | (arr > hi)
        rule = _SERIES.get(name, (name,))[0]
        out.append((bad, lambda i, gpu, rule=rule, arr=arr, lo=lo, hi=hi:
                    f"{rule} = {arr[i]!r} on {gpu} is outside [{lo}, {hi}]"))
    return out


def _together(arrays: Mapping[str, np.ndarray], default: np.ndarray) -> list[Verdict]:
    """What `BOUNDS`, one field at a time, cannot see. Free memory: `arrays` folds it into the total (used + free),
    so its bound is checked here, on what the snapshot carries (total - used: exact at 0, never below it for a free
    figure of 0 or more), and a GPU using more memory than it has is refused. Power above `POWER_OVER_LIMIT` times
    the larger of the GPU's limit and its `default` limit likewise (MIG: both are the whole GPU's)."""
    used, total = arrays["mem_used_mib"], arrays["mem_total_mib"]
    free, (lo, hi) = total - used, BOUNDS["mem_free_mib"]
    power, limit = arrays["power_w"], arrays["power_limit_w"]
    ref = np.maximum(limit, default)   # a NaN limit (unknown) stays NaN: not judged, as before

    def over(i: int, gpu: str) -> str:
        of = (f"its {FIELDS['power_limit_w'][0]} ({limit[i]:g} W)" if limit[i] >= default[i] else
              f"its default limit ({default[i]:g} W, its model's TDP; {FIELDS['power_limit_w'][0]} {limit[i]:g} W)")
        return (f"{FIELDS['power_w'][0]} = {power[i]:g} W on {gpu} is over {POWER_OVER_LIMIT:g} times {of}: not a "
                "reading of one board")
    return [((free < lo) | (free > hi), lambda i, gpu: (
                f"{FIELDS['mem_free_mib'][0]} = {free[i]:g} MiB on {gpu} is outside [{lo}, {hi}] MiB: {used[i]:g} "
                f"MiB used of {total[i]:g} MiB (used + free)")),
            (power > POWER_OVER_LIMIT * ref, over)]


def default_limits(wide: pd.DataFrame) -> np.ndarray:
    """Per GPU row, the default power limit of its modelName's board (the catalogue's TDP), 0 where the catalogue
    does not know it (or no modelName): the power check's floor under the limit (`_together`)."""
    if "modelName" not in wide:
        return np.zeros(len(wide))
    codes, names = pd.factorize(wide["modelName"])   # each model looked up once; a missing name is code -1
    tdp = np.array([s.tdp_w if (s := catalog.by_model_name(n)) else 0.0 for n in names] + [0.0], dtype=float)
    return tdp[codes]


def check_not_frozen(wide: pd.DataFrame, checked: np.ndarray | None = None) -> None:
    """Fresh timestamps on old values are stale telemetry too (`gpu:readings_frozen:bool`), on a GPU `checked`
    (None: every GPU)."""
    if "readings_frozen" not in wide:
        return
    frozen = wide["readings_frozen"].to_numpy(dtype=float) == 1.0
    if checked is not None:
        frozen &= checked
    if frozen.any():
        hosts = sorted(set(wide["hostname"][frozen]))
        raise StaleTelemetry(f"{int(frozen.sum())} GPU(s) on {', '.join(hosts[:5])} report the same energy reading "
                             "as 2 minutes ago: their exporter serves frozen values (DCGM host engine restarted "
                             "or hung?)", subjects=tuple(wide["UUID"][frozen]))


def sample(r: object) -> tuple[Mapping[str, str], float]:
    """One instant-vector element -> (labels, value); a malformed element is InvalidTelemetry, not a traceback."""
    try:
        metric, value = r["metric"], float(r["value"][1])  # type: ignore[index]
        if type(metric) is not dict and not isinstance(metric, Mapping):  # dict first: the ABC check is slow
            raise TypeError(f"labels are a {type(metric).__name__}")
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise InvalidTelemetry(f"malformed sample {str(r)[:160]} from Prometheus: {exc!r}") from exc
    return metric, value


def natural_key(value: object) -> object:
    text = str(value)
    return int(text) if text.isdigit() else text
