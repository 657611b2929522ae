"""The placement engine as the secondary scheduler's `place`: Kubernetes node views in, a node name out.

`SecondaryScheduler` (balancer/actuate/kubernetes.py) binds pending pods with `schedulerName: gputide` and asks
an injected `place(pod_request, nodes_view)` where each goes, in plain dicts. `EnginePlacer(policy)` answers with
the same engine, policies and score plugins `gputide place` replays the FGD protocol with and the simulator
schedules with (balancer/plan/placement/):

* the offered nodes (already filtered by taints, node selectors, free GPUs, CPU and memory and reservations)
  become a `ClusterState`: allocatable CPU and memory with what is free of them, and per node its GPUs, the
  usable ones free (1000 milli) and the others in use (Kubernetes hands out whole `nvidia.com/gpu`s);
* GPU models are compared by catalogue key on both sides (`catalog.key_of`: a node's `nvidia.com/gpu.product`
  label such as `NVIDIA-H100-80GB-HBM3`, a pod's `gputide.io/gpu-spec` such as `H100-SXM|A100-SXM4-80GB`);
* FGD's fragmentation measure needs the workload mix: here, the last `mix_window` pods this scheduler was asked
  to place (the observed mix, as the paper prescribes), the current one included.

NVLink domains come from the node label `gputide.io/nvlink-domain-size`, else from the catalogue (an SXM board is
one domain, NVLink-bridged PCIe cards pair up, other GPUs are a domain each), so the topology score keeps
multi-GPU pods inside one domain and single-GPU pods in domains already in use. The Kubernetes view has no temperatures, so the thermal score does not separate candidates.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from balancer import catalog
from balancer.plan.placement import ClusterState, PodRequest, Scheduler, WorkloadMix, get_policy
from balancer.plan.placement.state import MILLI, NO_GPU

Json = Mapping[str, Any]
DOMAIN_LABEL = "gputide.io/nvlink-domain-size"


def pod_request(req: Json) -> PodRequest:
    """The engine's PodRequest for `SecondaryScheduler.pod_request(pod)`."""
    gpus = int(req.get("num_gpu") or 0)
    milli = (MILLI if gpus > 1 else min(max(int(req.get("gpu_milli") or MILLI), 1), MILLI)) if gpus else 0
    allowed = req.get("allowed_models")
    return PodRequest(cpu_milli=max(int(req.get("cpu_milli") or 0), 0), memory_mib=max(int(req.get("memory_mib") or 0), 0),
                      num_gpu=gpus, gpu_milli=milli, name=str(req.get("name", "")),
                      allowed_models=tuple(sorted({catalog.key_of(m) for m in allowed})) if allowed else None)


def nvlink_domain_size(node: Json, model_key: str, gpus: int) -> int:
    """GPUs per NVLink domain on a node: its label `gputide.io/nvlink-domain-size` when set, else by catalogue
    model: an SXM board's GPUs are one domain (NVSwitch), a PCIe model with NVLink bridges pairs them, a model
    without NVLink (or unknown) has a domain per GPU."""
    label = str((node.get("labels") or {}).get(DOMAIN_LABEL, "")).strip()
    if label.isdigit() and int(label) > 0:
        return min(int(label), max(gpus, 1))
    spec = catalog.CATALOGUE.get(model_key)
    if spec is None or not spec.nvlink:
        return 1
    return max(gpus, 1) if "SXM" in model_key else 2


def cluster_state(nodes: Sequence[Json]) -> ClusterState:
    """A ClusterState of the offered nodes, in their order (`names`)."""
    total = np.array([max(int(n.get("gpus_total") or 0), 0) for n in nodes], dtype=np.int64)
    usable = np.clip([int(n.get("gpus_usable", n.get("gpus_free", 0)) or 0) for n in nodes], 0, total)
    width = max(int(total.max(initial=0)), 1)
    slot = np.arange(width)[None, :]
    gpu_free = np.where(slot < usable[:, None], MILLI, np.where(slot < total[:, None], 0, NO_GPU))
    keys = [catalog.key_of(n.get("gpu_model") or "") if t > 0 else "" for n, t in zip(nodes, total, strict=True)]
    models = tuple(sorted({k for k in keys if k}))
    index = {m: i for i, m in enumerate(models)}
    model = np.array([index.get(k, -1) if k else -1 for k in keys], dtype=np.int32)
    if np.any((total > 0) & (model < 0)):   # GPUs without a model label: a model of their own, "unknown"
        models = (*models, "unknown")
        model = np.where((total > 0) & (model < 0), len(models) - 1, model)

    def column(key: str, free_key: str) -> tuple[np.ndarray, np.ndarray]:
        free = np.array([max(int(n.get(free_key) or 0), 0) for n in nodes], dtype=np.int64)
        return np.maximum(np.array([int(n.get(key, 0) or 0) for n in nodes], dtype=np.int64), free), free

    cpu_total, cpu_free = column("cpu_milli_total", "cpu_milli_free")
    mem_total, mem_free = column("memory_mib_total", "memory_mib_free")
    sizes = np.array([nvlink_domain_size(n, k, int(t)) for n, k, t in zip(nodes, keys, total, strict=True)])
    domain = np.arange(width)[None, :] // np.maximum(sizes, 1)[:, None]
    return ClusterState(cpu_total, mem_total, gpu_free, model, models, cpu_free=cpu_free, mem_free=mem_free,
                        nvlink_domain=domain, names=tuple(str(n["name"]) for n in nodes))


class EnginePlacer:
    """`place(pod_request, nodes_view) -> node name | None` by a placement policy (see the module docstring)."""

    def __init__(self, policy: str = "gputide", mix_window: int = 1000, seed: int = 0) -> None:
        self.policy = get_policy(policy)
        self.seen: deque[PodRequest] = deque(maxlen=mix_window)
        self.rng = np.random.default_rng(seed)

    def __call__(self, request: Json, nodes: Sequence[Json]) -> str | None:
        pod = pod_request(request)
        self.seen.append(pod)
        if not nodes:
            return None
        state = cluster_state(nodes)
        mix = (WorkloadMix.from_pods(self.seen, include_cpu_only=self.policy.mix_cpu_only,
                                     **dict(self.policy.mix_options)) if self.policy.needs_mix else None)
        # ties go to the first offered node, so the same cluster gets the same answer (random: its own draw)
        placement = Scheduler(state, self.policy, mix, rng=self.rng if self.policy.name == "random" else None).place(pod)
        return state.names[placement.node] if placement is not None else None
