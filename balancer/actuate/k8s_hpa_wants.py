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
never above maxReplicas. Where this differs from the controller it errs high (lends less): the controller counts only
ready pods for a Resource or Pods metric; we count `currentReplicas`.

Nothing is guessed. A metric missing from the status or unreadable (an unknown target type, a zero target, a malformed
quantity) counts as `currentReplicas`, as the controller itself never scales down while a metric is unavailable, and is
named in the note: the loan then frees only what the HPA has released already. The scale-down stabilisation is the
highest recommendation over `spec.behavior.scaleDown.stabilizationWindowSeconds` (default 300 s), which the status does
not show: within that window of the HPA's last scale (`status.lastScaleTime`; none known: within it) a recommendation
below `currentReplicas` reads `currentReplicas` (the recommendations of the window may all have been that high);
after it, the recommendation now (those of the window are not known to have been higher: a loan made while the
metrics fall may count a few replicas the HPA holds a while longer, and the next cycle sees them still placed). A
scale-down `selectPolicy: Disabled` keeps `currentReplicas`. No `status.currentReplicas` (an HPA not yet synced):
unknown (None), and the caller reads the service's own replica count instead.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from balancer.actuate.k8s_hpa import own_min_replicas
from balancer.actuate.k8s_requests import exact_quantity
from balancer.actuate.k8s_time import parse_time
from balancer.actuate.kubernetes import KubePermanentError

Json = dict[str, Any]
TOLERANCE = 0.1   # the HPA controller's --horizontal-pod-autoscaler-tolerance default
STABILIZATION_S = 300.0   # its default scale-down stabilization window
DEFAULT_METRICS = ({"type": "Resource",   # autoscaling/v2's default when spec.metrics is empty
                    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}},)
_FIELD = {"Resource": "resource", "ContainerResource": "containerResource", "Pods": "pods", "Object": "object",
          "External": "external"}   # a metric's type -> the field that holds its source
_READING = {"Utilization": "averageUtilization", "AverageValue": "averageValue", "Value": "value"}


def hpa_wants(hpa: Json, now: float) -> tuple[int | None, str]:
    """(the replicas the HPA keeps on its own metrics, why, where that is not simply its algorithm's answer: a metric
    missing or unreadable, the stabilisation window, a disabled scale-down; "" otherwise). None: unknown (module
    docstring)."""
    spec, status = hpa.get("spec") or {}, hpa.get("status") or {}
    current = status.get("currentReplicas")
    if not isinstance(current, int) or isinstance(current, bool) or current < 0:
        return None, "no status.currentReplicas"
    if current == 0:   # scaled to zero (or the HPA off while its target is): nothing runs, nothing to keep
        return 0, ""
    down = ((spec.get("behavior") or {}).get("scaleDown")) or {}
    up = ((spec.get("behavior") or {}).get("scaleUp")) or {}
    readings = status.get("currentMetrics") or []
    answers = [(m, _metric_wants(m, readings, current, (_tolerance(down), _tolerance(up))))
               for m in spec.get("metrics") or DEFAULT_METRICS]
    raw = max(current if n is None else n for _, n in answers)
    unread = [_metric_name(m) for m, n in answers if n is None]
    wants, note = raw, ""
    if unread:   # as the controller: no scale-down while a metric is unavailable, a scale-up on the others
        wants = max(raw, current)
        note = f"metrics {', '.join(unread)} missing or unreadable: no fewer than its {current} replicas"
    elif raw < current and down.get("selectPolicy") == "Disabled":
        wants, note = current, "its scale-down is disabled"
    elif raw < current and _within_window(status, down, now):
        wants, note = current, f"within its scale-down window after its last scale: kept at its {current} replicas"
    most = spec.get("maxReplicas")
    low = max(wants, own_min_replicas({**hpa, "spec": spec}), 1)
    return (min(low, most) if isinstance(most, int) and most > 0 else low), note


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


def _within_window(status: Json, down: Json, now: float) -> bool:
    """Whether `now` is within the scale-down stabilization window of the HPA's last scale (none known: within)."""
    window = down.get("stabilizationWindowSeconds")
    window = float(window) if isinstance(window, int | float) and not isinstance(window, bool) else STABILIZATION_S
    at = parse_time(status.get("lastScaleTime"))
    return at is None or now - at < window


def wants_by_target(hpas: Mapping[str, Json], now: float) -> dict[str, tuple[int | None, str]]:
    """"namespace/target" -> `hpa_wants` of the HPA that scales it (of several, one targeting a Deployment first, as
    `k8s_hpa.service_hpa` picks the one it floors), for every HPA of a cluster-wide list by namespace/name."""
    out: dict[str, tuple[int | None, str]] = {}
    deployment: set[str] = set()
    for key in sorted(hpas):
        h = hpas[key]
        ref = (h.get("spec") or {}).get("scaleTargetRef") or {}
        target = f"{(h.get('metadata') or {}).get('namespace', '')}/{ref.get('name', '')}"
        if target in out and (target in deployment or ref.get("kind") != "Deployment"):
            continue
        if ref.get("kind") == "Deployment":
            deployment.add(target)
        out[target] = hpa_wants(h, now)
    return out
