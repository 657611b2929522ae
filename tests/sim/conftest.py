from __future__ import annotations

import pytest

from balancer import fleet as fleet_mod
from balancer.model import Node, Workload, WorkloadClass


def small_fleet(model: str = "A100-SXM4-80GB", nodes: int = 2, gpus: int = 4, inlet: float = 25.0):
    return fleet_mod.build("t", [Node(name=f"n{i}", gpu_model=model, gpu_count=gpus, inlet_c=inlet)
                                 for i in range(nodes)])


def batch(name: str, *, gpus: int = 1, milli: int = 1000, mem: int = 1024, models=None, priority: int = 0):
    return Workload(name=f"batch/{name}", workload_class=WorkloadClass.BATCH, namespace="batch", gpus=gpus,
                    gpu_milli=milli, gpu_memory_mib=mem, allowed_models=models, priority=priority)


@pytest.fixture
def fleet():
    return small_fleet()
