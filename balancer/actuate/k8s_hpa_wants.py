"""What the HPA scaling an inference service keeps on its own metrics, gputide's floor aside
(`capacity.ServiceView.hpa_wants`), decided from the HPA object alone (no calls here).

A loan under an HPA writes only its minReplicas (`k8s_inference.scale`): the HPA then runs max(that floor, what its
metrics ask for), so the planner lends only the replicas above both. `status.desiredReplicas` is not that count while
gputide's floor binds (it then equals the floor, and no loan would ever show a gain): the count is the HPA controller's
own algorithm run again on what its status shows (`hpa_wants`). Per metric of `spec.metrics` (none: the API's default,
80% CPU utilization), its reading in `status.currentMetrics` against its target, `ceil(currentReplicas * current /
target)` for a Utilization, AverageValue or Value target, `currentReplicas` where the ratio is within the tolerance
(`spec.behavior.scaleUp/scaleDown.tolerance`, else the controller's default 0.1); the highest over the metrics, never
below the operator's own minReplicas (`k8s_hpa.own_min_replicas`: the floor gputide writes is never under it) nor 1,
never above maxReplicas. The controller counts only the pods that report a reading (ready ones) where we count
`currentReplicas` (high: lends less); but on a scale-down it counts each running pod that reports none at 100% of
its request (a Resource utilization; the target, for a Pods metric), and the status says neither how many pods report
nor which. Pods lack readings mostly just after they start, so within `METRICS_GRACE_S` of the HPA's last scale
(`status.lastScaleTime`: new pods pulled, started and scraped twice by metrics-server) a recommendation below
`currentReplicas` reads `currentReplicas`. Pods without readings at other times (recreated by a rollout or an
eviction, or metrics-server failing for some) are not seen: the answer may then be below the controller's.

Nothing is guessed. A metric missing from the status or unreadable (an unknown target type, a zero target, a malformed
quantity) counts as `currentReplicas`, as the controller itself never scales down while a metric is unavailable, and is
named in the note: the loan then frees only what the HPA has released already. The scale-down stabilisation keeps the
highest recommendation over `spec.behavior.scaleDown.stabilizationWindowSeconds` (default 300 s) however long ago the
HPA last scaled (while gputide's floor binds it never does), and the status shows none of them: the caller remembers
the recommendations it saw (`History`, `k8s_hpa_reads`), and the answer is the highest of those within the window and
the one now; until the caller has watched the HPA a whole window (none: not at all), a recommendation below
`currentReplicas` reads `currentReplicas` (as the controller's own start does). A scale-down `selectPolicy: Disabled`
keeps `currentReplicas`; its policies (`spec.behavior.scaleDown.policies`) leave no fewer than one period allows it to
drop (`_rate_limit`): a loan counts only what the HPA gives up in its next period. The controller counts a period
from the replicas at its start (its scale-downs within it added back), and the status shows only the last scale: a
policy whose period holds `status.lastScaleTime` allows no drop from `currentReplicas`, one whose period does not
(or an HPA never scaled) counts from `currentReplicas`. An HPA that says it cannot scale (condition AbleToScale or
ScalingActive False: its target's scale unreadable, its metrics all failing, its scaling disabled) keeps
`currentReplicas`, whatever its status's older readings ask; one whose last scale failed to write (AbleToScale
False, FailedUpdateScale) tries again at each sync, and keeps the higher of `currentReplicas` and its algorithm's
answer. No `status.currentReplicas` (an HPA not yet synced): unknown (None), and the caller reads the service's own
replica count instead. An HPA object of a shape the API never serves (a field of the wrong type) is unknown too
(`safe_wants`: its `currentReplicas` where readable, else None), never an exception that stops the cycle.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

from balancer.actuate.k8s_hpa import own_min_replicas
from balancer.actuate.k8s_requests import exact_quantity
from balancer.actuate.k8s_time import parse_time
from balancer.actuate.kubernetes import KubePermanentError

Json = dict[str, Any]
TOLERANCE = 0.1   # the HPA controller's --horizontal-pod-autoscaler-tolerance default
STABILIZATION_S = 300.0   # its default scale-down stabilization window
METRICS_GRACE_S = 300.0   # after a scale, how long its new pods may run without a reading (module docstring)
DEFAULT_METRICS = ({"type": "Resource",   # autoscaling/v2's default when spec.metrics is empty
                    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}},)
_FIELD = {"Resource": "resource", "ContainerResource": "containerResource", "Pods": "pods", "Object": "object",
          "External": "external"}   # a metric's type -> the field that holds its source
_READING = {"Utilization": "averageUtilization", "AverageValue": "averageValue", "Value": "value"}
_CANNOT = ("AbleToScale", "ScalingActive")   # conditions that, False, say it scales nowhere
_RETRIES = ("AbleToScale", "FailedUpdateScale")   # ... but this (type, reason): its write failed, tried at each sync
ODD = (AttributeError, TypeError, ValueError, KeyError, IndexError, ArithmeticError)   # an object of an odd shape


class History(NamedTuple):
    """What a caller saw of one HPA: since when it has watched it, and the recommendations (`recommendation`) it
    saw, as (time, replicas)."""
    since: float
    seen: tuple[tuple[float, int], ...] = ()


# `recommendation`'s answer, or what it raised (`ODD`): made once for a caller's every use of it (`recommend`)
Recommended = tuple[int | None, str] | Exception


def recommend(hpa: Json, now: float) -> Recommended:
    """`recommendation`, what an object of an odd shape raises returned, for a caller that uses it twice (its history,
    `hpa_wants`) to compute it once (`safe_wants` says why it is unknown)."""
    try:
        return recommendation(hpa, now)
    except ODD as err:
        return err


def recommendation(hpa: Json, now: float) -> tuple[int | None, str]:
    """(what its metrics ask for now, before its window and its bounds: the recommendation the controller remembers
    for its window; a metric missing or unreadable, or pods perhaps without a reading yet: no fewer than
    `currentReplicas`, and the note that says so). None: no `status.currentReplicas`."""
    spec, status = hpa.get("spec") or {}, hpa.get("status") or {}
    current = status.get("currentReplicas")
    if not isinstance(current, int) or isinstance(current, bool) or current < 0:
        return None, "no status.currentReplicas"
    if current == 0:   # scaled to zero (or the HPA off while its target is): nothing runs, nothing to keep
        return 0, ""
    behavior = spec.get("behavior") or {}
    tolerance = (_tolerance(behavior.get("scaleDown") or {}), _tolerance(behavior.get("scaleUp") or {}))
    readings = status.get("currentMetrics") or []
    answers = [(m, _metric_wants(m, readings, current, tolerance)) for m in spec.get("metrics") or DEFAULT_METRICS]
    raw = max(current if n is None else n for _, n in answers)
    unread = [_metric_name(m) for m, n in answers if n is None]
    if unread:   # as the controller: no scale-down while a metric is unavailable, a scale-up on the others
        names = ", ".join(unread)
        return max(raw, current), f"metrics {names} missing or unreadable: no fewer than its {current} replicas"
    if raw < current and _since_scale(status, now) < METRICS_GRACE_S:   # unreadable: just now, as for the policies
        return current, f"scaled at {status['lastScaleTime']}, new pods perhaps without readings: kept at {current}"
    return raw, ""


def hpa_wants(hpa: Json, now: float, history: History | None = None,
              recommended: tuple[int | None, str] | None = None) -> tuple[int | None, str]:
    """(the replicas the HPA keeps on its own metrics, why, where that is not its algorithm's plain answer: the
    module docstring's cases; "" otherwise). None: unknown. `history`: what the caller saw of it; `recommended`: its
    `recommendation` now, where the caller made it already."""
    wants, note = recommendation(hpa, now) if recommended is None else recommended
    status = hpa.get("status") or {}
    current = status.get("currentReplicas")
    if wants is None or current == 0:
        return wants, note
    stuck = [(c.get("type"), c.get("reason")) for c in status.get("conditions") or []
             if isinstance(c, dict) and c.get("type") in _CANNOT and c.get("status") == "False"]
    if any(s != _RETRIES for s in stuck):   # it scales nowhere: what it runs is what it keeps, above its maximum too
        return current, f"it cannot scale, {_conditions(stuck)} False: kept at its {current} replicas"
    spec = hpa.get("spec") or {}
    down = ((spec.get("behavior") or {}).get("scaleDown")) or {}
    if not note and wants < current:
        wants, note = _held(wants, current, down, history, now, _since_scale(status, now))
    most = spec.get("maxReplicas")
    low = max(wants, own_min_replicas({**hpa, "spec": spec}), 1)
    wants = min(low, most) if isinstance(most, int) and most > 0 else low
    if stuck:   # its last scale failed to write; it tries again at each sync, a scale-up included
        said = _conditions([_RETRIES])
        return max(wants, current), f"{said} False, its last scale tried again: no fewer than its {current}"
    return wants, note


def _conditions(stuck: list[tuple[Any, Any]]) -> str:
    """How a note names conditions (type, reason): "AbleToScale (FailedUpdateScale)". Said only: `hpa_wants` decides
    on the pairs themselves, so a note's wording never changes which it retries."""
    return ", ".join(f"{kind} ({reason or '?'})" for kind, reason in stuck)


def _since_scale(status: Json, now: float) -> float:
    """How long since its last scale (`status.lastScaleTime`): never scaled, for ever; unreadable, just now."""
    if status.get("lastScaleTime") is None:
        return math.inf
    scaled = parse_time(status["lastScaleTime"])
    return 0.0 if scaled is None else now - scaled


def _held(wants: int, current: int, down: Json, history: History | None, now: float,
          since_scale: float) -> tuple[int, str]:
    """A scale-down as the controller makes it: none where disabled, the highest recommendation of its window, and
    none while its window is not yet watched whole."""
    if down.get("selectPolicy") == "Disabled":
        return current, "its scale-down is disabled"
    window = down.get("stabilizationWindowSeconds")
    window = float(window) if isinstance(window, int | float) and not isinstance(window, bool) else STABILIZATION_S
    if history is None or now - history.since < window:
        return current, f"its scale-down window not yet watched whole: kept at its {current} replicas"
    held = max([wants] + [n for at, n in history.seen if now - at < window])
    if held >= current:
        return current, f"a recommendation of its scale-down window: kept at its {current} replicas"
    limit = _rate_limit(down, current, since_scale)
    if limit > held:
        return limit, f"its scale-down policies: no fewer than {limit} of its {current} replicas in one period"
    return held, ("" if held == wants else "the highest recommendation of its scale-down window")


def _rate_limit(down: Json, current: int, since_scale: float) -> int:
    """The fewest replicas its scale-down policies leave one period from now (0: none set), as the controller counts
    them: a Pods policy `start - value`, a Percent one `start x (1 - value/100)` truncated; of several, the lowest
    (selectPolicy Max, the default: the biggest change) or the highest (Min). `start` is what ran when the period
    began: `current` for a period with no scale in it (`since_scale`, seconds since its last); one that holds its
    last scale is not known (the controller adds back what it removed then), and that policy allows no drop. A policy
    unread keeps `current`."""
    floors = [_policy_floor(p, current, since_scale) for p in down.get("policies") or []]
    proposed = [n for n in floors if n is not None]
    if len(proposed) < len(floors):
        return current
    if not proposed:
        return 0
    return max(proposed) if down.get("selectPolicy") == "Min" else min(proposed)


def _policy_floor(policy: Any, current: int, since_scale: float) -> int | None:
    """The fewest replicas one policy leaves (`_rate_limit`); None: unread."""
    if not isinstance(policy, dict):
        return None
    value, period = policy.get("value"), policy.get("periodSeconds")
    if any(not isinstance(x, int) or isinstance(x, bool) or x < 0 for x in (value, period)):
        return None
    if policy.get("type") not in ("Pods", "Percent"):
        return None
    if since_scale < period:   # it scaled within this period, how far from its start is not known: no drop
        return current
    return current - value if policy["type"] == "Pods" else int(current * (1 - value / 100))


def _metric_wants(metric: Json, readings: list, current: int, tolerance: tuple[float, float]) -> int | None:
    """One metric's answer, `ceil(current * reading / target)` or `current` within the tolerance; None: its reading
    missing, or it or its target unreadable."""
    field = _FIELD.get(metric.get("type", ""))
    source = (metric.get(field) or {}) if field else {}
    target = source.get("target") or {}
    key = _READING.get(target.get("type", ""))
    if key is None:
        return None
    reading = next((r.get(field) for r in readings if isinstance(r, dict) and r.get("type") == metric["type"]
                    and _identity(r.get(field) or {}) == _identity(source)), None)
    try:
        want = exact_quantity(target[key])
        got = exact_quantity(((reading or {}).get("current") or {})[key])
    except (KeyError, TypeError, KubePermanentError):
        return None
    if want <= 0 or got < 0:
        return None
    ratio = float(got / want)
    down, up = tolerance
    if 1.0 - down <= ratio <= 1.0 + up:
        return current
    return math.ceil(current * ratio - 1e-9)   # a float's dust never adds a replica


def _identity(source: Json) -> Json:
    """What names a metric in spec and status alike: its source less its target or reading."""
    return {k: v for k, v in source.items() if k not in ("target", "current")}


def _metric_name(metric: Json) -> str:
    field = _FIELD.get(metric.get("type", ""), "")
    source = metric.get(field) or {}
    name = source.get("name") or (source.get("metric") or {}).get("name") or "?"
    return f"{metric.get('type', '?')} {name}"


def _tolerance(rules: Json) -> float:
    """A direction's tolerance (`behavior.scaleUp/scaleDown.tolerance`, Kubernetes 1.33+), else the default."""
    try:
        return float(exact_quantity(rules["tolerance"]))
    except (KeyError, TypeError, KubePermanentError):
        return TOLERANCE


def wants_by_target(hpas: Mapping[str, Json], now: float, history: Mapping[str, History] | None = None,
                    recommended: Mapping[str, Recommended] | None = None) -> dict[str, tuple[int | None, str]]:
    """"namespace/target" -> `hpa_wants` of the HPA that scales it (of several, one targeting a Deployment first, as
    `k8s_hpa.service_hpa` picks the one it floors), for every HPA of a cluster-wide list by namespace/name, each with
    its `history` by the same key (none: not watched) and its `recommend` at `now` where the caller made it."""
    out: dict[str, tuple[int | None, str]] = {}
    deployment: set[str] = set()
    for key in sorted(hpas):
        h = hpas[key]
        scaled = scaled_target(h)
        if scaled is None:   # the caller finds these first (`k8s_hpa_reads`): nothing is known of whom it scales
            continue
        target, kind = scaled
        if target in out and (target in deployment or kind != "Deployment"):
            continue
        if kind == "Deployment":
            deployment.add(target)
        out[target] = safe_wants(h, now, (history or {}).get(key), (recommended or {}).get(key))
    return out


def scaled_target(hpa: Any) -> tuple[str, str] | None:
    """("namespace/name", kind) of what it scales; None: not readable (an object of an odd shape)."""
    try:
        meta, ref = hpa.get("metadata") or {}, (hpa.get("spec") or {}).get("scaleTargetRef") or {}
        ns, name, kind = meta.get("namespace", ""), ref.get("name", ""), ref.get("kind", "")
    except ODD:
        return None
    return (f"{ns}/{name}", kind) if all(isinstance(x, str) for x in (ns, name, kind)) else None


def safe_wants(hpa: Json, now: float, history: History | None = None,
               recommended: Recommended | None = None) -> tuple[int | None, str]:
    """`hpa_wants`, an HPA of an odd shape unknown (its `currentReplicas` where readable, else None), not raised;
    `recommended`: its `recommend` at `now`, where the caller made it (what it raised, raised here)."""
    try:
        if isinstance(recommended, Exception):
            raise recommended
        return hpa_wants(hpa, now, history, recommended)
    except ODD as err:
        current = (hpa.get("status") or {}).get("currentReplicas") if isinstance(hpa.get("status"), dict) else None
        ok = isinstance(current, int) and not isinstance(current, bool) and current >= 0
        return (current if ok else None), f"unreadable ({type(err).__name__}: {err}): kept at its replicas"
