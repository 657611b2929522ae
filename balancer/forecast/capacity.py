"""From forecast demand to GPUs: how many GPUs each inference service needs, early enough to act.

A GPU taken back from training needs `warmup_s` (plus the controller's own lead time) before it serves, so the
decision made now must cover the demand of the window ``[now + lead_time, now + lead_time + window]``. The rule:

    gpus = max(min_replicas, ceil( max_{window} q-quantile of demand * (1 + headroom) / rps_per_gpu[gpu_model] ))

`ServiceProfile` holds what a service sustains: requests per second one GPU of each model serves within the
latency SLO (measured by the operator, e.g. from a load test), the warm-up time and the SLO itself.
`gpus_needed_by_model` is the vectorised variant that answers for every GPU model at once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from balancer.errors import InputError


@dataclass(frozen=True)
class ServiceProfile:
    name: str
    rps_per_gpu: Mapping[str, float] = field(default_factory=dict)  # GPU model name -> req/s within SLO
    warmup_s: float = 300.0
    slo_latency_s: float = 1.0
    min_replicas: int = 1

    def __post_init__(self) -> None:
        for model, rps in self.rps_per_gpu.items():
            if not (isinstance(rps, int | float) and math.isfinite(rps) and rps > 0):
                raise InputError(None, f"services.{self.name}.rps_per_gpu.{model}", rps, "a positive number (req/s)")
        if self.warmup_s < 0:
            raise InputError(None, f"services.{self.name}.warmup_s", self.warmup_s, "seconds >= 0")
        if self.min_replicas < 0:
            raise InputError(None, f"services.{self.name}.min_replicas", self.min_replicas, "an integer >= 0")


def _window_peak(forecast, quantile: float, lead_time_s: float, window_s: float) -> float:
    if quantile not in forecast.quantiles:
        raise InputError(None, "quantile", quantile, ", ".join(str(q) for q in sorted(forecast.quantiles)))
    arr = np.asarray(forecast.quantiles[quantile], float)
    step = forecast.step_s
    # array index i holds step i+1, i.e. time issued_at + (i+1)*step
    lo = max(int(math.ceil(lead_time_s / step)) - 1, 0)
    hi = max(int(math.ceil((lead_time_s + window_s) / step)), lo + 1)
    window = arr[lo:hi]
    window = window[np.isfinite(window)]
    if not window.size:  # the forecast does not reach that far: its last finite value is the best guess
        finite = arr[np.isfinite(arr)]
        return float(finite[-1]) if finite.size else 0.0
    return float(window.max())


def gpus_needed(forecast, profile: ServiceProfile, *, lead_time_s: float, window_s: float,
                quantile: float = 0.9, headroom: float = 0.1, gpu_model: str) -> int:
    """GPUs of `gpu_model` that `profile`'s service needs over [now+lead, now+lead+window]."""
    if gpu_model not in profile.rps_per_gpu:
        raise InputError(None, f"services.{profile.name}.rps_per_gpu", gpu_model,
                         ", ".join(sorted(profile.rps_per_gpu)) or "a GPU model with a measured capacity")
    if headroom < 0:
        raise InputError(None, "headroom", headroom, "a share >= 0, e.g. 0.1")
    peak = max(_window_peak(forecast, quantile, lead_time_s, window_s), 0.0)
    need = math.ceil(peak * (1.0 + headroom) / profile.rps_per_gpu[gpu_model] - 1e-9)
    return max(int(need), profile.min_replicas)


def gpus_needed_by_model(forecast, profile: ServiceProfile, *, lead_time_s: float, window_s: float,
                         quantile: float = 0.9, headroom: float = 0.1) -> dict[str, int]:
    """`gpus_needed` for every GPU model the profile knows, in one vectorised division."""
    peak = max(_window_peak(forecast, quantile, lead_time_s, window_s), 0.0)
    models = sorted(profile.rps_per_gpu)
    rps = np.array([profile.rps_per_gpu[m] for m in models], float)
    need = np.maximum(np.ceil(peak * (1.0 + headroom) / rps - 1e-9), profile.min_replicas).astype(int)
    return dict(zip(models, need.tolist()))
