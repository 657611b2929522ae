"""GPU model catalogue: public spec-sheet figures that the simulator and the planner need.

Figures come from NVIDIA's product briefs and data sheets (memory, TDP / max board power, max boost clock) and
from the thresholds `nvidia-smi -q` reports on these boards (slowdown and shutdown temperature, minimum power
limit). The slowdown column is NVML's *slowdown* threshold (hardware slowdown, DCGM_FI_DEV_SLOWDOWN_TEMP), not the
lower "max operating" one: H100 SXM 87 / 89 / 92 (max operating / slowdown / shutdown), A10 91 / 98 / 101.
``model_name`` is NVML's name exactly; the A100 spells it two ways: ``NVIDIA A100-PCIE-40GB`` but
``NVIDIA A100 80GB PCIe``. Idle power and the relative throughput columns are assumptions, stated here so a user
can override them:

* ``inference_tput`` / ``training_tput`` are relative to one A100 SXM4 80GB (= 1.0) for a mid-size transformer
  (FP16/BF16; FP8 on Hopper/Ada not counted), rounded from MLPerf Inference/Training v3-v4 per-accelerator results.
* ``thermal_resistance_c_per_w`` is chosen so a well-cooled board at full TDP sits ~45-50 °C above its inlet
  (air) or ~35 °C (liquid), which is what these boards show in production; ``thermal_tau_s`` is the first-order
  time constant of die + heatsink.

The H200 row was read off a real board (bench/device/h200-2026-12-04/README.md): NVML's name, memory, power-limit
range, thresholds and clocks, idle power, and the thermal figures of a 45 s bf16 load: 38 -> 61 °C at 692 W within
about 2 s (a fast die; the few degrees still to come after 45 s are not in `thermal_tau_s`), HBM 10 °C below the die.
Its relative throughput is an assumption: 1.2x / 1.1x an H100 (its extra memory bandwidth counts for inference).

Rows without MLPerf results of their own (H100 NVL, A100 SXM4 40GB, B200) take their relative throughput from the
nearest row that has them, scaled by NVIDIA's data-sheet figures: training by the dense BF16 Tensor Core ratio,
inference by the geometric mean of the dense BF16 and memory-bandwidth ratios (prefill is compute-bound, decode
bandwidth-bound; the rule gives the H200's 1.2x an H100). Their comments name every figure no board confirmed
("Assumed"); `tests/foundation/test_catalog_vendor_values.py` pins the confirmed ones with their sources.
On Hopper and Blackwell, `nvidia-smi -q` prints the thresholds as margins to T.Limit: T.Limit = current + margin
(the H200 above: 38 + 49 = 87 °C), slowdown at margin -2 and shutdown at -8, i.e. 89 / 95 °C, which is what
dcgm-exporter read on that board.

The Alibaba v2023 trace hides three models as G1/G2/G3; `ALIBABA_MODEL_MAP` maps them to documented assumptions.

A model the catalogue does not know (a real fleet may hold any board) is planned with `generic` figures derived
from its power limit, never refused: see `generic`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from balancer.errors import InputError


@dataclass(frozen=True, slots=True)
class GpuModelSpec:
    key: str                  # catalogue key used in fleet specs, e.g. "H100-SXM"
    model_name: str           # what NVML / dcgm-exporter report as modelName
    memory_gib: float
    tdp_w: float              # default (and maximum) power limit
    idle_w: float
    min_power_limit_w: float
    slowdown_temp_c: float
    shutdown_temp_c: float
    max_sm_clock_mhz: float
    inference_tput: float
    training_tput: float
    nvlink: bool
    thermal_resistance_c_per_w: float
    thermal_tau_s: float = 90.0
    memory_temp_offset_c: float = 6.0  # HBM/GDDR runs this much above the core at full load

    @property
    def memory_mib(self) -> int:
        return int(self.memory_gib * 1024)


def _spec(key: str, model_name: str, mem: float, tdp: float, idle: float, pmin: float, slow: float, shut: float,
          clock: float, inf: float, train: float, nvlink: bool, rise_at_tdp: float = 47.0, **kw: float) -> GpuModelSpec:
    return GpuModelSpec(key, model_name, mem, tdp, idle, pmin, slow, shut, clock, inf, train, nvlink,
                        thermal_resistance_c_per_w=rise_at_tdp / tdp, **kw)


CATALOGUE: Mapping[str, GpuModelSpec] = MappingProxyType({s.key: s for s in (
    _spec("H100-SXM", "NVIDIA H100 80GB HBM3", 80, 700, 70, 200, 89, 92, 1980, 2.0, 2.5, True),
    _spec("H200-SXM", "NVIDIA H200", 143771 / 1024, 700, 80, 200, 89, 95, 1980, 2.4, 2.75, True, rise_at_tdp=26.0,
          thermal_tau_s=2.0, memory_temp_offset_c=-10.0),
    # B200 (HGX, SXM): nvidia-smi on an 8-GPU HGX board (driver 570.158.01): 183359 MiB, power cap 1000 W, ~140 W
    # idle in P0, NVLink to every GPU (NV18). Throughput from the H100 SXM row: BF16 2250 / 989 TFLOPS dense (HGX
    # B200 at 1000 W), 8 / 3.35 TB/s -> 2.5 * 2.27 = 5.7 training, 2.0 * sqrt(2.27 * 2.39) = 4.7 inference.
    # Assumed (no board's nvidia-smi -q found): minimum limit 200 W, slowdown 89 / shutdown 95 C (the H200's), max SM
    # clock 1965 MHz, the thermal figures (catalogue defaults)
    _spec("B200-SXM", "NVIDIA B200", 183359 / 1024, 1000, 140, 200, 89, 95, 1965, 4.7, 5.7, True),
    _spec("H100-PCIE", "NVIDIA H100 PCIe", 80, 350, 50, 200, 87, 92, 1755, 1.6, 1.9, False),
    # H100 NVL (PCIe, NVLink bridge pairs): nvidia-smi -q on two boards (driver 550.54.14 and 550.127.06): 95830 MiB,
    # power limit 200..400 W (one board's default 310 W, the other's 400 W; data sheet 350-400 W configurable), max
    # SM clock 1785 MHz, ~60 W idle in P0, T.Limit margins -2 / -8 at 32 + 55 = 87 C -> slowdown 89 / shutdown 95.
    # Throughput from the H100 SXM row: BF16 835 / 989 TFLOPS dense, 3.9 / 3.35 TB/s -> 2.5 * 0.84 = 2.1 training,
    # 2.0 * sqrt(0.84 * 1.16) = 2.0 inference. Assumed: the thermal figures (catalogue defaults)
    _spec("H100-NVL", "NVIDIA H100 NVL", 95830 / 1024, 400, 60, 200, 89, 95, 1785, 2.0, 2.1, True),
    _spec("A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", 80, 400, 55, 100, 89, 92, 1410, 1.0, 1.0, True),
    # A100 SXM4 40GB: nvidia-smi -q on an 8-GPU board (driver 535.129.03): 40960 MiB, 100..400 W, 85 / 89 / 92 C,
    # 1410 MHz, ~52 W idle in P0. Throughput from the 80GB SXM4 row: same 312 TFLOPS dense BF16 -> 1.0 training;
    # 1555 / 2039 GB/s -> sqrt(1.0 * 0.76) = 0.87 inference. Assumed: the thermal figures (catalogue defaults)
    _spec("A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", 40, 400, 50, 100, 89, 92, 1410, 0.87, 1.0, True),
    _spec("A100-PCIE-40GB", "NVIDIA A100-PCIE-40GB", 40, 250, 35, 150, 89, 92, 1410, 0.8, 0.85, True),
    # A100 80GB PCIe: nvidia-smi -q on one board; its relative throughput (300 W vs the SXM4's 400 W) is assumed
    _spec("A100-PCIE-80GB", "NVIDIA A100 80GB PCIe", 80, 300, 40, 150, 89, 92, 1410, 0.95, 0.9, True),
    _spec("L40S", "NVIDIA L40S", 48, 350, 35, 100, 89, 92, 2520, 0.9, 0.7, False),
    _spec("L4", "NVIDIA L4", 24, 72, 16, 40, 93, 96, 2040, 0.3, 0.2, False),
    _spec("T4", "Tesla T4", 16, 70, 10, 60, 93, 96, 1590, 0.15, 0.1, False),
    _spec("V100-SXM2-32GB", "Tesla V100-SXM2-32GB", 32, 300, 40, 150, 87, 90, 1530, 0.4, 0.45, True),
    _spec("V100-SXM2-16GB", "Tesla V100-SXM2-16GB", 16, 300, 40, 150, 87, 90, 1530, 0.38, 0.43, True),
    _spec("P100-PCIE-16GB", "Tesla P100-PCIE-16GB", 16, 250, 30, 125, 88, 93, 1329, 0.2, 0.25, False),
    _spec("A10", "NVIDIA A10", 24, 150, 20, 100, 98, 101, 1695, 0.35, 0.3, False),
)})

# Alibaba v2023 model codes -> catalogue keys. G1/G2/G3 are undisclosed in the trace; the mapping is our assumption
# from their node shapes (G2: 8 GPUs, 96 cores; G3: 8 GPUs, 128 cores, the newest and scarcest).
ALIBABA_MODEL_MAP: Mapping[str, str] = MappingProxyType({
    "V100M16": "V100-SXM2-16GB",
    "V100M32": "V100-SXM2-32GB",
    "P100": "P100-PCIE-16GB",
    "T4": "T4",
    "A10": "A10",
    "G1": "A100-PCIE-40GB",
    "G2": "A100-SXM4-80GB",
    "G3": "H100-SXM",
})


def get(key: str, *, file: str | None = None, field: str = "gpuModel") -> GpuModelSpec:
    """Look a model up by catalogue key, dcgm modelName or Alibaba code; unknown names are an InputError."""
    spec = CATALOGUE.get(key)
    if spec is not None:
        return spec
    if key in ALIBABA_MODEL_MAP:
        return CATALOGUE[ALIBABA_MODEL_MAP[key]]
    for s in CATALOGUE.values():
        if s.model_name == key:
            return s
    raise InputError(file, field, key, "one of " + ", ".join(CATALOGUE))


PRODUCT_LABEL = "nvidia.com/gpu.product"   # GPU feature discovery's node label naming the board (`key_of` reads it)


@functools.cache   # the catalogue never changes; the scheduler asks once per node per pod
def key_of(name: str) -> str:
    """The catalogue key of a GPU model named by key, dcgm modelName, Alibaba code, or GPU feature discovery's
    `nvidia.com/gpu.product` node label (the modelName with '-' for ' ', e.g. `NVIDIA-H100-80GB-HBM3`); a name
    the catalogue does not know comes back as it is (it still constrains by exact match)."""
    if not name:
        return name
    if name in CATALOGUE or name in ALIBABA_MODEL_MAP:
        return get(name).key
    for s in CATALOGUE.values():
        if name in (s.model_name, s.model_name.replace(" ", "-")):
            return s.key
    return name


def generic(name: str, power_limit_w: float) -> GpuModelSpec:
    """Figures for a board the catalogue does not know, named `name` (its NVML modelName), from the highest power
    limit seen on it, taken as its TDP (a NaN or non-positive limit counts as 300 W). The rest are rules of thumb
    from the catalogue's rows: idle 10 % of TDP, minimum limit 30 % (the driver clamps a cap to the board's true
    range anyway), 47 °C above inlet at TDP, slowdown 87 / shutdown 92 °C (the exporter's thresholds take over),
    the throughput of an A100 and no NVLink. Good enough to plan with, never to refuse a real fleet."""
    tdp = float(power_limit_w) if power_limit_w > 0 else 300.0   # NaN > 0 is False
    return _spec(name, name, 80, tdp, 0.1 * tdp, 0.3 * tdp, 87, 92, 1500, 1.0, 1.0, False)


def by_model_name(model_name: str) -> GpuModelSpec | None:
    """The spec whose NVML modelName matches, or None (a real fleet may hold boards we do not know)."""
    for s in CATALOGUE.values():
        if s.model_name == model_name:
            return s
    return None
