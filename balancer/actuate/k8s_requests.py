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


# The hot path (a list of 20,000 pods reads each one's requests): every quantity a string, an int or almost any float
# holds is a whole number of billionths (the API server rounds a string up to one), so a pod's requests are summed
# in integers of billionths and turned into a Fraction, or rounded, once. The common forms ("8", "500m", "1.5",
# "64Gi") are read by integer arithmetic; every other form, and a float, by `_exact_quantity`. A float finer than a
# billionth (1e-12) is not a whole number of them: its pod is read as fractions (`_Inexact`).
_GIGA = 10**9
_COMMON = re.compile(r"([0-9]+)(?:\.([0-9]+))?(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?)")


class _Inexact(Exception):
    """A quantity that is not a whole number of billionths (a float such as 1e-12)."""


def _common_nanos(text: str) -> int | None:
    """A quantity of a common form (digits, an optional fraction, a decimal SI or binary suffix: no sign, exponent
    or space) in billionths, rounded up and a binary one capped as `_exact_quantity` does; None for any other."""
    m = _COMMON.fullmatch(text)
    if m is None:
        return None
    whole, fraction, suffix = m.groups()
    digits, places = (int(whole + fraction), len(fraction)) if fraction else (int(whole), 0)
    if suffix in _BINARY:
        return min(-(-(digits * _GIGA << _BINARY[suffix]) // 10**places), _MAX * _GIGA)
    exponent = _DECIMAL[suffix] + 9 - places
    return digits * 10**exponent if exponent >= 0 else -(-digits // 10**-exponent)


def _nanos(value: Any) -> int | None:
    """A quantity in billionths of its unit (`_exact_quantity` times 10^9); None where that is not a whole number."""
    if type(value) is str:
        common = _common_nanos(value)
        if common is not None:
            return common
    elif type(value) is int:
        return value * _GIGA
    amount = _exact_quantity(value) * _GIGA
    return amount.numerator if amount.denominator == 1 else None


_cached_nanos = functools.lru_cache(maxsize=4096, typed=True)(_nanos)


def _read_nanos(value: Any) -> int:
    """`_nanos`, remembered as `exact_quantity` is; `_Inexact` where it is not a whole number."""
    n = _cached_nanos(value) if isinstance(value, str | int | float) and not isinstance(value, bool) else _nanos(value)
    if n is None:
        raise _Inexact
    return n


_as_fraction = functools.lru_cache(maxsize=4096)(lambda nanos: Fraction(nanos, _GIGA))


class _Refused(Exception):
    """A refused quantity and where it is: the field is spelled out only when one is refused."""

    def __init__(self, err: KubePermanentError, where: str, index: int | None, kind: str, name: str) -> None:
        super().__init__(err)
        self.err, self.where, self.index, self.kind, self.name = err, where, index, kind, name

    def field(self) -> str:
        at = self.where if self.index is None else f"{self.where}[{self.index}]"
        return f"{at}.{self.kind}.{self.name}" if self.kind else f"{at}.{self.name}"


def _need(c: Json, read: Callable[[Any], Any], where: str, i: int) -> dict[str, Any]:
    """What one container asks for, read by `read`: its requests, a request defaulting to its limit."""
    res = c.get("resources") or {}
    requests = res.get("requests") or {}
    asked = dict((res.get("limits") or {}).items())
    asked.update(requests.items())
    own = {}
    for k, v in asked.items():
        try:
            own[k] = read(v)
        except KubePermanentError as err:
            raise _Refused(err, where, i, "resources.requests" if k in requests else "resources.limits", k) from None
    return own


def _containers(spec: Json, read: Callable[[Any], Any]) -> dict[str, Any]:
    """What a pod's containers hold at most (KEP-753): the sum over its containers and sidecars (init containers
    with `restartPolicy: Always`), or what its init phase holds at most if that is more: a one-shot init container
    together with the sidecars started before it (they keep running while it does). A container's request
    defaults to its limit (the API server does so). `read`: `exact_quantity`, or `_read_nanos` (in billionths)."""
    total: dict[str, Any] = {}
    for i, c in enumerate(spec.get("containers") or []):
        for k, v in _need(c, read, "spec.containers", i).items():
            total[k] = total.get(k, 0) + v
    sidecars: dict[str, Any] = {}   # the sidecars started so far: they run on while later init containers do
    peak: dict[str, Any] = {}       # the most the init phase holds at once
    for i, c in enumerate(spec.get("initContainers") or []):
        own = _need(c, read, "spec.initContainers", i)
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


def _field(read: Callable[[Any], Any], value: Any, where: str, name: str) -> Any:
    try:
        return read(value)
    except KubePermanentError as err:
        raise _Refused(err, where, None, "", name) from None


def _pod_level_requests(spec: Json, containers: Mapping[str, Any], read: Callable[[Any], Any]) -> dict[str, Any]:
    """The pod-level requests (`spec.resources`, KEP-2837) that stand for the containers' of the same resource:
    those set, and, as the API server defaults them, a pod-level limit where no request is set and no container
    asks for that resource."""
    res = spec.get("resources") or {}
    out = {k: _field(read, v, "spec.resources.requests", k)
           for k, v in (res.get("requests") or {}).items() if _pod_level(k)}
    for k, v in (res.get("limits") or {}).items():
        if _pod_level(k) and k not in out and k not in containers:
            out[k] = _field(read, v, "spec.resources.limits", k)
    return out


def _effective(pod: Json, read: Callable[[Any], Any]) -> dict[str, Any]:
    """`effective_requests`, each quantity read by `read`; a refused one raises `KubePermanentError` naming the
    pod and the field."""
    meta = pod.get("metadata") or {}
    name = meta.get("name")
    spec = pod.get("spec") or {}
    try:
        total = _containers(spec, read)
        total.update(_pod_level_requests(spec, total, read))
        for k, v in (spec.get("overhead") or {}).items():
            total[k] = total.get(k, 0) + _field(read, v, "spec.overhead", k)
    except _Refused as refused:
        who = f"pod {meta.get('namespace', 'default')}/{meta['name']}" if name else "pod template"
        raise KubePermanentError(f"{who}: {refused.field()}: {refused.err}") from None
    return total


def effective_requests(pod: Json) -> dict[str, Fraction]:
    """What a pod holds of each resource, exactly, by kube-scheduler's rule (resourcehelper.PodRequests): its
    containers' (`_containers`: containers and sidecars, or the init phase if more), the pod-level requests
    (`spec.resources`, PodLevelResources: CPU, memory, hugepages) in their stead where set, plus the pod's
    `overhead`. A request defaults to its limit, which is how GPUs and other extended resources, set as limits,
    are counted. A quantity the API server would refuse raises `KubePermanentError` naming the pod and field."""
    try:
        nanos = _effective(pod, _read_nanos)
    except _Inexact:
        return _effective(pod, exact_quantity)
    return {k: _as_fraction(v) for k, v in nanos.items()}


def pod_requests(pod: Json) -> tuple[int, int, int]:
    """(gpus, cpu_milli, memory_mib) a pod holds (`effective_requests`), rounded up."""
    try:
        total = _effective(pod, _read_nanos)
    except _Inexact:
        return basic_requests(effective_requests(pod))
    return (-(-total.get(GPU_RESOURCE, 0) // _GIGA), -(-total.get("cpu", 0) // 10**6),
            -(-total.get("memory", 0) // (_GIGA << 20)))


def _rounded(value: Any, scale: int, per: int, down: bool) -> int:
    """`value` times `scale` over `per` (`basic_requests`), exactly, rounded up or `down`."""
    if type(value) is not Fraction and type(value) is not int:
        value = Fraction(repr(value)) if isinstance(value, float) else Fraction(value)
    top, bottom = value.numerator * scale, value.denominator * per
    return top // bottom if down else -(-top // bottom)


def basic_requests(total: Mapping[str, Any], *, down: bool = False) -> tuple[int, int, int]:
    """(gpus, cpu_milli, memory_mib) of `effective_requests`' answer (or of a node's allocatable), each rounded
    up, as kube-scheduler's MilliValue/Value round a pod's request (a pod of 1.5 MiB takes 2: rounded to the
    nearest, pods were undercounted and a full node overcommitted); `down`: rounded down, for what a node offers."""
    return (_rounded(total.get(GPU_RESOURCE, 0), 1, 1, down), _rounded(total.get("cpu", 0), 1000, 1, down),
            _rounded(total.get("memory", 0), 1, 2**20, down))


__all__ = ["basic_requests", "effective_requests", "exact_quantity", "pod_requests", "quantity"]
