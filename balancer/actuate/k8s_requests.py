"""What a pod holds of the nodes' resources, read from its spec as the API server and the kubelet count it.

Resource quantities ("2", "500m", "8Gi") are read as numbers of base units (`quantity`); a pod's *effective*
request of each resource follows Kubernetes' rule (`effective_requests`: its containers and sidecars summed, or its
largest one-shot init container with the sidecars started before it if that is more, plus the pod's overhead, a request defaulting to its limit), and
`basic_requests` reduces it to the (gpus, cpu_milli, memory_mib) gputide's model counts. Pure: what the scheduler
reads of pods and nodes (`k8s_reads`), the workloads, training Jobs and pods the actuator reads (`k8s_workloads`,
`k8s_training`, `k8s_pods`) and Kueue's quotas (`k8s_quota`) all count the same way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from balancer.actuate.kubernetes import GPU_RESOURCE, Json, KubePermanentError

_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "m": 1e-3}  # fmt: skip


def quantity(value: Any) -> float:
    """A Kubernetes resource quantity ("2", "500m", "8Gi") as a number of base units."""
    if isinstance(value, int | float):
        return float(value)
    m = re.fullmatch(r"\s*([0-9.]+)\s*([a-zA-Z]*)\s*", str(value))
    if not m or m.group(2) not in _UNITS:
        raise KubePermanentError(f"invalid quantity {value!r}")
    return float(m.group(1)) * _UNITS[m.group(2)]


def effective_requests(pod: Json) -> dict[str, float]:
    """What a pod holds of each resource, by Kubernetes' rule for the effective request (KEP-753): the sum over its
    containers and sidecars (init containers with `restartPolicy: Always`), or what its init phase holds at most if
    that is more: a one-shot init container together with the sidecars started before it (they keep running while
    it does), plus the pod's `overhead`. A container's request defaults to its limit (the API server does so),
    which is how GPUs and other extended resources, set as limits, are counted."""
    spec = pod.get("spec") or {}

    def need(c: Json) -> dict[str, float]:
        res = c.get("resources") or {}
        return {k: quantity(v) for k, v in {**(res.get("limits") or {}), **(res.get("requests") or {})}.items()}

    total: dict[str, float] = {}
    for c in spec.get("containers") or []:
        for k, v in need(c).items():
            total[k] = total.get(k, 0.0) + v
    sidecars: dict[str, float] = {}   # the sidecars started so far: they run on while the later init containers do
    peak: dict[str, float] = {}       # the most the init phase holds at once
    for c in spec.get("initContainers") or []:
        own = need(c)
        if c.get("restartPolicy") == "Always":
            for k, v in own.items():
                sidecars[k] = sidecars.get(k, 0.0) + v
                total[k] = total.get(k, 0.0) + v
            at = sidecars
        else:
            at = {k: own.get(k, 0.0) + sidecars.get(k, 0.0) for k in {*own, *sidecars}}
        for k, v in at.items():
            peak[k] = max(peak.get(k, 0.0), v)
    for k, v in peak.items():
        total[k] = max(total.get(k, 0.0), v)
    for k, v in (spec.get("overhead") or {}).items():
        total[k] = total.get(k, 0.0) + quantity(v)
    return total


def pod_requests(pod: Json) -> tuple[int, int, int]:
    """(gpus, cpu_milli, memory_mib) a pod holds (`effective_requests`)."""
    return basic_requests(effective_requests(pod))


def basic_requests(total: Mapping[str, float]) -> tuple[int, int, int]:
    """(gpus, cpu_milli, memory_mib) of `effective_requests`' answer."""
    return (int(total.get(GPU_RESOURCE, 0)), int(round(total.get("cpu", 0) * 1000)),
            int(round(total.get("memory", 0) / 2**20)))


__all__ = ["basic_requests", "effective_requests", "pod_requests", "quantity"]
