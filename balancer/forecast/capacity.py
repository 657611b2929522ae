"""From forecast demand to GPUs: how many GPUs each inference service needs, early enough to act.

A GPU taken back from training needs `warmup_s` (plus the controller's own lead time) before it serves, so the
decision made now must cover the demand of the window ``[now + lead_time, now + lead_time + window]``, read as the
controller reads its forecasts (`Forecast.window_max`: the steps holding the window's two ends count). A window
that ends past the forecast's last step is refused (`InputError`): the demand there is unknown, and the last step's
value, read in its place before, is no bound on it. The rule:

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


def _window_peak(forecast, quantile: float, now: float | None, lead_time_s: float, window_s: float) -> float:
    """The largest `quantile` forecast over [now + lead_time_s, now + lead_time_s + window_s] (`now` None: the
    forecast's issue time), read as the controller reads it (`capacity_plan.forecast_peak`: `Forecast.window_max`,
    the steps covering the window's two ends included). It once counted from the issue time whatever the time, a
    forecast issued a step or two before now (the online forecaster's is) read a step early; and it rounded the
    window's start up where the controller rounds it down, so a peak in the step holding the start was missed. A
    window past the forecast's last step is refused (the controller cuts its checkpoint-timed reclaim window there
    and says so in the reason: `capacity_plan.reclaim_window`; a library caller asked for the window it named)."""
    if quantile not in forecast.quantiles:
        raise InputError(None, "quantile", quantile, ", ".join(str(q) for q in sorted(forecast.quantiles)))
    for name, value in (("lead_time_s", lead_time_s), ("window_s", window_s)):
        if not (math.isfinite(value) and value >= 0):
            raise InputError(None, name, value, "seconds >= 0")
    arr = forecast.quantiles[quantile]
    if not (np.size(arr) and np.isfinite(arr).all()):   # the controller plans without such a forecast
        raise InputError(None, f"forecast.quantiles[{quantile:g}]", "NaN or infinite values" if np.size(arr)
                         else "no steps", "finite req/s for at least one step")
    if now is not None and not (math.isfinite(now) and math.isfinite(forecast.issued_at)):
        raise InputError(None, "now", now, f"finite epoch seconds, as the forecast's issue time "
                         f"({forecast.issued_at:g})")
    age = 0.0 if now is None else max(now - forecast.issued_at, 0.0)
    start = lead_time_s + age
    end = start + window_s
    steps = int(np.size(arr))   # this quantile's own steps: `horizon` is the first quantile's
    reach = steps * forecast.step_s
    if end > reach * (1 + 1e-9):   # past the last step a peak is unknown: not the last step's value, nor none
        field, value, fix = ("now", now, "forecast again") if age > reach else (
            "window_s", window_s, "forecast further ahead, or shorten the lead time or the window")
        raise InputError(None, field, value, (
            f"a window ending within the forecast, which reaches {reach / 60:g} min after its issue "
            f"({steps} steps of {forecast.step_s / 60:g} min); this one ends {end / 60:g} min after it, "
            f"{end - reach:g} s past it" + (f" (the forecast is {age / 60:g} min old)" if age else "")
        ), detail=fix)
    return forecast.window_max(quantile, start, end)


def gpus_needed(forecast, profile: ServiceProfile, *, lead_time_s: float, window_s: float,
                quantile: float = 0.9, headroom: float = 0.1, gpu_model: str, now: float | None = None) -> int:
    """GPUs of `gpu_model` that `profile`'s service needs over [now+lead, now+lead+window]; `now` (epoch seconds,
    as the forecast's `issued_at`) defaults to the forecast's issue time."""
    if gpu_model not in profile.rps_per_gpu:
        raise InputError(None, f"services.{profile.name}.rps_per_gpu", gpu_model,
                         ", ".join(sorted(profile.rps_per_gpu)) or "a GPU model with a measured capacity")
    if headroom < 0:
        raise InputError(None, "headroom", headroom, "a share >= 0, e.g. 0.1")
    peak = max(_window_peak(forecast, quantile, now, lead_time_s, window_s), 0.0)
    need = math.ceil(peak * (1.0 + headroom) / profile.rps_per_gpu[gpu_model] - 1e-9)
    return max(int(need), profile.min_replicas)


def gpus_needed_by_model(forecast, profile: ServiceProfile, *, lead_time_s: float, window_s: float,
                         quantile: float = 0.9, headroom: float = 0.1, now: float | None = None) -> dict[str, int]:
    """`gpus_needed` for every GPU model the profile knows, in one vectorised division."""
    peak = max(_window_peak(forecast, quantile, now, lead_time_s, window_s), 0.0)
    models = sorted(profile.rps_per_gpu)
    rps = np.array([profile.rps_per_gpu[m] for m in models], float)
    need = np.maximum(np.ceil(peak * (1.0 + headroom) / rps - 1e-9), profile.min_replicas).astype(int)
    return dict(zip(models, need.tolist()))
