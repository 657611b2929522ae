"""Per-GPU power, clock and thermal physics, vectorised over the whole fleet.

Every function here takes and returns numpy arrays of length ``n_gpus`` (fleet order); nothing loops over GPUs.

Power. A GPU asking for SM activity ``a`` (0..1, at full clock) and memory traffic ``m`` (0..1) draws
``P_demand = idle + (tdp - idle) * (0.75 a + 0.25 m)``. The dynamic part scales with clock^3 (frequency times
voltage squared, voltage roughly following frequency), so a limit ``P < P_demand`` is met by running at
``clock_factor = ((P - idle) / (P_demand - idle)) ** (1/3)``; throughput follows the clock factor.

Limits, in the order the board applies them:

* software power cap (``power_limit_w``): clock drops until ``P <= limit``; clock event reason 0x4 (SW power cap).
* thermal slowdown: the driver holds the die at its slowdown temperature. We solve, per GPU and per step, the
  power at which the exact first-order update below ends the step at ``slowdown_temp_c``; if the workload asks for
  more, clocks drop to that power (reason 0x20, SW thermal slowdown). This regulator is stable at any step size.
* hardware thermal slowdown: if even ``MIN_CLOCK`` (60 %) cannot hold the slowdown temperature, or the die is more
  than ``HW_SLOWDOWN_MARGIN_C`` above it, the board halves its clock (``HW_CLOCK``, reason 0x40).
* at ``shutdown_temp_c`` the board shuts itself down; the cluster treats it as fallen off the bus (XID 79).

Temperature. ``dT/dt = (inlet + R * P - T) / tau`` with per-GPU ``R`` (°C/W) and ``tau`` (s) from the catalogue
(``R`` x ``LIQUID_RESISTANCE`` on liquid-cooled nodes) and the node's inlet temperature; cooling faults raise the inlet
or multiply ``R``. We use the exact solution over a step, ``T' = target + (T - target) * exp(-dt / tau)``, so 60 s steps
are as stable as 1 s steps. A little seeded Gaussian noise (``TEMP_NOISE_C``) keeps series realistic and deterministic
by seed.

Idle GPUs (no work placed) report reason 0x1 and an idle clock of ``IDLE_CLOCK`` x max; offline GPUs draw 0 W and
cool towards their inlet.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from balancer import catalog
from balancer.fleet import Fleet

# NVML clocks event reason bits (docs/metrics.md)
IDLE, APP_CLOCKS, SW_POWER_CAP, HW_SLOWDOWN = 0x1, 0x2, 0x4, 0x8
SW_THERMAL, HW_THERMAL, HW_POWER_BRAKE = 0x20, 0x40, 0x80

SM_POWER_SHARE = 0.75        # share of the dynamic power driven by SM activity; the rest by memory traffic
MIN_CLOCK = 0.6              # lowest clock factor the SW thermal / power regulators go to
HW_CLOCK = 0.5               # clock factor under HW thermal slowdown
HW_SLOWDOWN_MARGIN_C = 2.0   # die this far above slowdown: HW slowdown regardless
IDLE_CLOCK = 0.2             # idle clock as a fraction of max boost
TEMP_NOISE_C = 0.15          # std-dev of the per-step temperature noise
POWER_NOISE = 0.004          # relative std-dev of the power reading noise
LIQUID_RESISTANCE = 35.0 / 47.0  # catalogue R is for air; liquid-cooled boards sit ~35 °C (not ~47) above inlet


@dataclass(frozen=True, slots=True, eq=False)
class GpuParams:
    """Static per-GPU figures from the catalogue, as arrays in fleet order."""

    idle_w: np.ndarray
    tdp_w: np.ndarray
    min_power_limit_w: np.ndarray
    slowdown_c: np.ndarray
    shutdown_c: np.ndarray
    resistance: np.ndarray          # °C per W
    tau_s: np.ndarray
    max_clock_mhz: np.ndarray
    mem_offset_c: np.ndarray
    mem_total_mib: np.ndarray
    inference_tput: np.ndarray      # relative to A100 SXM4 80GB
    training_tput: np.ndarray
    node_index: np.ndarray          # per GPU: index of its node in fleet.nodes
    node_inlet_c: np.ndarray        # per node

    @classmethod
    def from_fleet(cls, fleet: Fleet) -> GpuParams:
        specs = [catalog.CATALOGUE[g.model] for g in fleet.gpus]

        def col(attr: str) -> np.ndarray:
            return np.array([getattr(s, attr) for s in specs], dtype=float)

        node_pos = {n.name: i for i, n in enumerate(fleet.nodes)}
        liquid = np.array([fleet.nodes[node_pos[g.node]].cooling == "liquid" for g in fleet.gpus], dtype=bool)
        return cls(
            idle_w=col("idle_w"), tdp_w=col("tdp_w"), min_power_limit_w=col("min_power_limit_w"),
            slowdown_c=col("slowdown_temp_c"), shutdown_c=col("shutdown_temp_c"),
            resistance=col("thermal_resistance_c_per_w") * np.where(liquid, LIQUID_RESISTANCE, 1.0),
            tau_s=col("thermal_tau_s"),
            max_clock_mhz=col("max_sm_clock_mhz"), mem_offset_c=col("memory_temp_offset_c"),
            mem_total_mib=np.array([s.memory_mib for s in specs], dtype=float),
            inference_tput=col("inference_tput"), training_tput=col("training_tput"),
            node_index=np.array([node_pos[g.node] for g in fleet.gpus], dtype=np.int64),
            node_inlet_c=np.array([n.inlet_c for n in fleet.nodes], dtype=float),
        )


@dataclass(frozen=True, slots=True, eq=False)
class StepResult:
    temperature_c: np.ndarray
    power_w: np.ndarray
    clock_factor: np.ndarray
    reasons: np.ndarray


def demand_power(p: GpuParams, sm: np.ndarray, mem: np.ndarray) -> np.ndarray:
    """Power (W) the placed work would draw at full clock."""
    return p.idle_w + (p.tdp_w - p.idle_w) * (SM_POWER_SHARE * sm + (1.0 - SM_POWER_SHARE) * mem)


def step(p: GpuParams, *, temperature_c: np.ndarray, inlet_c: np.ndarray, resistance: np.ndarray,
         power_limit_w: np.ndarray, sm: np.ndarray, mem: np.ndarray, busy: np.ndarray, online: np.ndarray,
         dt: float, noise: np.ndarray) -> StepResult:
    """Advance power, clocks and temperature of every GPU by `dt` seconds (see the module docstring)."""
    decay = np.exp(-dt / p.tau_s)
    p_demand = np.where(online, demand_power(p, sm, mem), 0.0)
    dyn_demand = np.maximum(p_demand - p.idle_w, 1e-9)
    # the power that would end this step exactly at the slowdown temperature
    p_thermal = ((p.slowdown_c - temperature_c * decay) / np.maximum(1.0 - decay, 1e-12) - inlet_c) / resistance

    power_capped = busy & (p_demand > power_limit_w)
    thermal = busy & (p_demand > p_thermal) & (p_thermal < power_limit_w)
    allowed = np.minimum(power_limit_w, p_thermal)
    ratio = np.clip((allowed - p.idle_w) / dyn_demand, 0.0, 1.0)
    clock = np.where(power_capped | thermal, np.cbrt(ratio), 1.0)
    hw = online & ((thermal & (clock < MIN_CLOCK)) | (temperature_c >= p.slowdown_c + HW_SLOWDOWN_MARGIN_C))
    clock = np.where(busy, np.maximum(clock, MIN_CLOCK), 1.0)
    clock = np.where(hw & busy, HW_CLOCK, clock)
    power = np.where(busy, p.idle_w + dyn_demand * clock**3, p_demand)
    power = np.where(online, power, 0.0)

    target = inlet_c + resistance * power
    new_t = target + (temperature_c - target) * decay + noise

    reasons = np.zeros(len(power), dtype=np.int64)
    reasons |= np.where(online & ~busy, IDLE, 0)
    reasons |= np.where(power_capped & ~thermal, SW_POWER_CAP, 0)
    reasons |= np.where(online & (thermal | (temperature_c >= p.slowdown_c)), SW_THERMAL, 0)
    reasons |= np.where(hw, HW_THERMAL, 0)
    return StepResult(temperature_c=new_t, power_w=power, clock_factor=np.where(online, clock, 0.0), reasons=reasons)
