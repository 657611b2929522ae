"""MIG partitions: which GPU instance profiles each catalogue model offers, and whether a partition fits a GPU.

A MIG GPU is cut into GPU instances, each of a profile named ``<compute slices>g.<memory>gb`` (``3g.40gb``: 3 of
the GPU's 7 compute slices and half its memory), as NVIDIA's MIG user guide lists them per board; ``+me`` marks the
one instance that may own the media engines. A fleet spec's node group may declare the partition of its GPUs
(``mig: [3g.40gb, 2g.20gb, 2g.20gb]``, `balancer.fleet`); `check_partition` accepts it when every profile is one
the model offers, the compute slices sum to at most the model's 7 and the memory slices to at most its 8, and at
most one instance has ``+me``. NVIDIA's placement table forbids a few more combinations whose sums fit; those are
not modelled.

The simulated exporter (`exporters.backends.sim`) publishes a partitioned GPU's SM activity per GPU instance, as
dcgm-exporter does, numbering the instances 1, 2, ... in the declared order (a real GPU numbers them by
placement); the recording rules weigh each by its compute slices (`gpu_instance:gpu_share:ratio`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from balancer.errors import InputError

COMPUTE_SLICES = 7   # every catalogue model with MIG (A100, H100, H200); an A30 would have 4
MEMORY_SLICES = 8


def _profiles(memory_gb: Sequence[int]) -> Mapping[str, tuple[int, int]]:
    """profile -> (compute slices, memory slices), from the memory of the 1-slice, 2-memory-slice, 2g, 3g/4g
    and 7g profiles of one board (NVIDIA's table has this shape on A100, H100 and H200)."""
    one, two, half, full = memory_gb
    return MappingProxyType({
        f"1g.{one}gb": (1, 1), f"1g.{one}gb+me": (1, 1), f"1g.{two}gb": (1, 2), f"2g.{two}gb": (2, 2),
        f"3g.{half}gb": (3, 4), f"4g.{half}gb": (4, 4), f"7g.{full}gb": (7, 8),
    })


# catalogue key -> the GPU instance profiles it offers; models not listed have no MIG
PROFILES: Mapping[str, Mapping[str, tuple[int, int]]] = MappingProxyType({
    "A100-SXM4-80GB": _profiles((10, 20, 40, 80)),
    "A100-PCIE-40GB": _profiles((5, 10, 20, 40)),
    "A100-PCIE-80GB": _profiles((10, 20, 40, 80)),
    "H100-SXM": _profiles((10, 20, 40, 80)),
    "H100-PCIE": _profiles((10, 20, 40, 80)),
    "H200-SXM": _profiles((18, 35, 71, 141)),
    "A100-SXM4-40GB": _profiles((5, 10, 20, 40)),   # the user guide's A100 table is the SXM4-40GB's
    "H100-NVL": _profiles((12, 24, 47, 94)),        # the guide's 94 GB H100 (H100 NVL)
    # the guide lists B200 (180 GB, 7 instances); profile names as AWS's p6-b200 publishes them
    # (mig-1g.23gb ... mig-7g.180gb, aws/sagemaker-hyperpod-cli)
    "B200-SXM": _profiles((23, 45, 90, 180)),
})


def compute_slices(profile: str) -> int:
    """The compute slices of a GPU instance profile: its leading number (``3g.40gb``: 3), as the rules read it."""
    return int(profile.split("g.", 1)[0])


def check_partition(model: str, value: Any, file: str | None, field: str) -> tuple[str, ...]:
    """`value` (a fleet spec's ``mig`` list) as a tuple of profiles that fit one GPU of `model`; else InputError."""
    offered = PROFILES.get(model)
    if offered is None:
        raise InputError(file, field, value,
                         f"no mig field: {model} has no MIG (models with MIG: {', '.join(PROFILES)})")
    if not isinstance(value, list) or not value:
        raise InputError(file, field, value, "a non-empty list of GPU instance profiles, e.g. [3g.40gb, 2g.20gb]")
    for i, profile in enumerate(value):
        if not isinstance(profile, str) or profile not in offered:
            raise InputError(file, f"{field}[{i}]", profile, f"a MIG profile of {model}: {', '.join(offered)}")
    compute = sum(offered[p][0] for p in value)
    memory = sum(offered[p][1] for p in value)
    if compute > COMPUTE_SLICES or memory > MEMORY_SLICES:
        raise InputError(file, field, value, f"profiles that fit one {model}: at most {COMPUTE_SLICES} compute "
                         f"slices (the leading number) and {MEMORY_SLICES} memory slices in all; these take "
                         f"{compute} and {memory}")
    if sum(p.endswith("+me") for p in value) > 1:
        raise InputError(file, field, value, "at most one instance with media extensions (+me)")
    return tuple(value)
