"""What a pod holds of the nodes' resources, read from its spec as the API server and the kubelet count it.

Resource quantities are read as the API server reads them (`exact_quantity`, apimachinery's resource.Quantity
grammar: "2", "500m", "8Gi", "1e9", "1.5E3", "2P", "1Ei", "100n", ".5", "+1k"), exactly, as fractions: "100m" is
1/10 of a CPU, never a float's 0.1000000000000000055. `quantity` is the same number as a float, for readers that
need no more. A pod's *effective* request of each resource follows kube-scheduler's rule (`effective_requests`):
its pod-level `spec.resources` requests where set (PodLevelResources: CPU, memory, hugepages), else its containers
and sidecars summed, or its largest one-shot init container with the sidecars started before it if that is more,
plus the pod's overhead, a request defaulting to its limit. `basic_requests` reduces it to the
(gpus, cpu_milli, memory_mib) gputide's model counts, rounded up (a pod is never counted smaller than it is); a
node's allocatable is rounded down (`basic_requests(..., down=True)`). Pure: what the scheduler reads of pods and
nodes (`k8s_reads`), the workloads, training Jobs and pods the actuator reads (`k8s_workloads`, `k8s_training`,
`k8s_pods`) and Kueue's quotas (`k8s_quota`) all count the same way.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any

from balancer.actuate.kubernetes import GPU_RESOURCE, Json, KubePermanentError

# apimachinery's resource.Quantity: <signedNumber><suffix>, the suffix a decimal SI one (n u m "" k M G T P E), a
# binary one (Ki Mi Gi Ti Pi Ei) or a decimal exponent (e/E and a signed integer). As its scanner reads it: the
# digits may be absent on either side of the point ("5.", ".5", even "" or "Gi", which it reads as 0)
_QUANTITY = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[+-]?[0-9]*)")
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_EXPONENT = re.compile(r"[eE]([+-]?[0-9]+)")
_NANO = Fraction(1, 10**9)    # the finest a quantity holds: anything finer is rounded up to it
_MAX = 2**63 - 1              # the most a binary-suffixed quantity holds (it is capped there)


def _scale(suffix: str) -> tuple[int, int] | None:
    """(base, exponent) of a quantity's suffix; None for one the API server refuses."""
    if suffix in _DECIMAL:
        return 10, _DECIMAL[suffix]
    if suffix in _BINARY:
        return 2, _BINARY[suffix]
    m = _EXPONENT.fullmatch(suffix)
    if m is None or abs(int(m.group(1))) > _MAX:   # strconv.ParseInt(.., 64) refuses it
        return None
    return 10, (int(m.group(1)) + 2**31) % 2**32 - 2**31   # the exponent is kept as an int32


def exact_quantity(value: Any) -> Fraction:
    """`_exact_quantity`, remembered for the strings and numbers a cluster repeats ("100m", "16Gi": a list of 20,000
    pods reads the same few dozen values hundreds of thousands of times, and an exact parse costs ~5 us each). A
    value it refuses is refused again each time (errors are not cached)."""
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return _cached_quantity(value)
    return _exact_quantity(value)


def _exact_quantity(value: Any) -> Fraction:
    """A Kubernetes resource quantity as an exact number of base units, read as the API server reads it
    (apimachinery's ParseQuantity): every form it accepts, rounded up to a billionth as it rounds; a value it
    refuses raises `KubePermanentError` ("1.5.3", "8GB", "1e", "12 Gi")."""
    if isinstance(value, bool):
        raise KubePermanentError(f"invalid quantity {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):   # a number in hand-written YAML: as it reads in decimal
        return Fraction(repr(value)) if math.isfinite(value) else _refuse(value)
    text = str(value).strip()      # a JSON quantity is trimmed before it is parsed
    m = _QUANTITY.fullmatch(text)
    scale = _scale(m.group(4)) if m and text else None
    if m is None or scale is None:
        return _refuse(value)
    sign, whole, fraction, _ = m.groups()
    digits = (whole or "") + (fraction or "")
    mantissa = Fraction(int(digits or "0"), 10 ** len(fraction or ""))
    base, exponent = scale
    if mantissa and base == 10:   # beyond these the value is capped or rounded up all the same: no huge powers
        exponent = max(min(exponent, 40 + len(digits)), -(40 + len(digits)))
    amount = mantissa * Fraction(base) ** exponent
    if amount % _NANO:
        amount = (amount // _NANO + 1) * _NANO
    if base == 2:
        amount = min(amount, Fraction(_MAX))
    return -amount if sign == "-" else amount


def _refuse(value: Any) -> Fraction:
    raise KubePermanentError(f"invalid quantity {value!r}: not a Kubernetes resource quantity "
                             '(a number with a suffix such as "500m", "8Gi", "1e9")')


_cached_quantity = functools.lru_cache(maxsize=4096, typed=True)(_exact_quantity)


def quantity(value: Any) -> float:
    """A Kubernetes resource quantity ("2", "500m", "8Gi", "1e9") as a number of base units (`exact_quantity`)."""
    return float(exact_quantity(value))


# the resources a pod's own spec.resources may set (kube-scheduler's IsSupportedPodLevelResource)
def _pod_level(name: str) -> bool:
    return name in ("cpu", "memory") or name.startswith("hugepages-")


def _reader(pod: Json) -> Callable[[Any, str], Fraction]:
    """`exact_quantity`, its error naming the pod and the field of the value it refused."""
    meta = pod.get("metadata") or {}
    who = f"pod {meta.get('namespace', 'default')}/{meta['name']}" if meta.get("name") else "pod template"

    def read(value: Any, field: str) -> Fraction:
        try:
            return exact_quantity(value)
        except KubePermanentError as err:
            raise KubePermanentError(f"{who}: {field}: {err}") from None

    return read


def _containers(spec: Json, read: Callable[[Any, str], Fraction]) -> dict[str, Fraction]:
    """What a pod's containers hold at most (KEP-753): the sum over its containers and sidecars (init containers
    with `restartPolicy: Always`), or what its init phase holds at most if that is more: a one-shot init container
    together with the sidecars started before it (they keep running while it does). A container's request
    defaults to its limit (the API server does so)."""

    def need(c: Json, field: str) -> dict[str, Fraction]:
        res = c.get("resources") or {}
        asked = {**{k: (v, "limits") for k, v in (res.get("limits") or {}).items()},
                 **{k: (v, "requests") for k, v in (res.get("requests") or {}).items()}}
        return {k: read(v, f"{field}.resources.{kind}.{k}") for k, (v, kind) in asked.items()}

    total: dict[str, Fraction] = {}
    for i, c in enumerate(spec.get("containers") or []):
        for k, v in need(c, f"spec.containers[{i}]").items():
            total[k] = total.get(k, 0) + v
    sidecars: dict[str, Fraction] = {}   # the sidecars started so far: they run on while later init containers do
    peak: dict[str, Fraction] = {}       # the most the init phase holds at once
    for i, c in enumerate(spec.get("initContainers") or []):
        own = need(c, f"spec.initContainers[{i}]")
        if c.get("restartPolicy") == "Always":
            for k, v in own.items():
                sidecars[k] = sidecars.get(k, 0) + v
                total[k] = total.get(k, 0) + v
            at = sidecars
        else:
            at = {k: own.get(k, 0) + sidecars.get(k, 0) for k in {*own, *sidecars}}
        for k, v in at.items():
            peak[k] = max(peak.get(k, 0), v)
    for k, v in peak.items():
        total[k] = max(total.get(k, 0), v)
    return total


def _pod_level_requests(spec: Json, containers: Mapping[str, Fraction],
                        read: Callable[[Any, str], Fraction]) -> dict[str, Fraction]:
    """The pod-level requests (`spec.resources`, KEP-2837) that stand for the containers' of the same resource:
    those set, and, as the API server defaults them, a pod-level limit where no request is set and no container
    asks for that resource."""
    res = spec.get("resources") or {}
    out = {k: read(v, f"spec.resources.requests.{k}") for k, v in (res.get("requests") or {}).items() if _pod_level(k)}
    for k, v in (res.get("limits") or {}).items():
        if _pod_level(k) and k not in out and k not in containers:
            out[k] = read(v, f"spec.resources.limits.{k}")
    return out


def effective_requests(pod: Json) -> dict[str, Fraction]:
    """What a pod holds of each resource, exactly, by kube-scheduler's rule (resourcehelper.PodRequests): its
    containers' (`_containers`: containers and sidecars, or the init phase if more), the pod-level requests
    (`spec.resources`, PodLevelResources: CPU, memory, hugepages) in their stead where set, plus the pod's
    `overhead`. A request defaults to its limit, which is how GPUs and other extended resources, set as limits,
    are counted. A quantity the API server would refuse raises `KubePermanentError` naming the pod and field."""
    spec, read = pod.get("spec") or {}, _reader(pod)
    total = _containers(spec, read)
    total.update(_pod_level_requests(spec, total, read))
    for k, v in (spec.get("overhead") or {}).items():
        total[k] = total.get(k, 0) + read(v, f"spec.overhead.{k}")
    return total


def pod_requests(pod: Json) -> tuple[int, int, int]:
    """(gpus, cpu_milli, memory_mib) a pod holds (`effective_requests`), rounded up."""
    return basic_requests(effective_requests(pod))


def _exact(value: Any) -> Fraction:
    return Fraction(repr(value)) if isinstance(value, float) else Fraction(value)


def basic_requests(total: Mapping[str, Any], *, down: bool = False) -> tuple[int, int, int]:
    """(gpus, cpu_milli, memory_mib) of `effective_requests`' answer (or of a node's allocatable), each rounded
    up, as kube-scheduler's MilliValue/Value round a pod's request (a pod of 1.5 MiB takes 2: rounded to the
    nearest, pods were undercounted and a full node overcommitted); `down`: rounded down, for what a node offers."""
    whole = math.floor if down else math.ceil
    return (whole(_exact(total.get(GPU_RESOURCE, 0))), whole(_exact(total.get("cpu", 0)) * 1000),
            whole(_exact(total.get("memory", 0)) / 2**20))


__all__ = ["basic_requests", "effective_requests", "exact_quantity", "pod_requests", "quantity"]
