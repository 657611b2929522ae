"""Tidal demand forecasting: pluggable quantile forecasters, honest backtests, demand turned into GPUs.

Modules, bottom up: `traces` (load and clean demand), `base` (protocol, registry, fallback), the models
(`naive`, `stats`, `gbm`, `auto`), `conformal` (interval calibration), `backtest` (rolling origin),
`online` (the controller's per-cycle forecaster) and `capacity` (forecast -> GPUs).
Importing the package registers every model in `MODELS`.
"""

from balancer.forecast import auto, gbm, naive, profile, stats  # noqa: F401  (register the models)
from balancer.forecast.base import MODELS, QUANTILES, Fallback, Forecaster, QuantileForecast
from balancer.forecast.traces import load_demand

__all__ = ["MODELS", "QUANTILES", "Fallback", "Forecaster", "QuantileForecast", "load_demand"]
