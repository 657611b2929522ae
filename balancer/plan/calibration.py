"""Calibrate a service profile's `rpsPerReplica` from what the service did: load per replica against p99 latency.

The capacity planner turns demand into replicas with `rpsPerReplica`, the load one replica serves within its
latency SLO. A load test gives it once; traffic changes it (longer prompts, a new model version, another GPU).
The history a cluster already keeps answers the same question: at every sample, the load each ready replica
carried (demand / replicas) and the p99 latency the service had. `calibrate` fits, as a non-decreasing function
of the load per replica (isotonic regression, scikit-learn: no queueing model assumed), the share of samples whose
p99 was over ``margin x SLO``, and reads off the largest load where at most half of them were: the load at which
the monotone *median* p99 reaches the target. A median, not a mean: p99s are heavy-tailed, and a mean fit let a
few minutes of an incident at a light load (p99s of 30 s where the service otherwise reads 0.2 s) drag every
heavier load's fitted p99 over the target, a "measured" limit at less than half the true one. Now those minutes
count as what they are, a few samples over the target among many under it, however slow they were:

* ``bound = "measured"``: the fit crosses one half inside the observed loads, and at least ``min_over``
  samples at or beyond the crossing were over the target (one slow outlier at the highest load does not make a
  limit); the estimate is the crossing (linear between the fit's knots);
* ``bound = "lower"``: the service never got that slow (or only a handful of samples say so): the estimate is
  the largest load observed (or the crossing), and the true figure is at least that; nothing is extrapolated
  beyond the data;
* ``bound = "none"``: even the lightest observed load breaks the target (or too few samples): no estimate.

`support` counts the samples within 10% of the estimate, so a figure read off three samples is visible as such.
`curve` is, for a report, the monotone fit of log p99 (a geometric mean: one spike does not move it much).
Samples taken within ``settle_s`` after the replica count changed are dropped (`settled`): a new replica serves
nothing while it warms, so right after a scale-up the load per *counted* replica understates the load per
serving one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from sklearn.isotonic import IsotonicRegression

MIN_SAMPLES = 30
MIN_OVER = 5


@dataclass(frozen=True)
class Calibration:
    """The `rpsPerReplica` a service's history supports (None when it supports none) and the evidence."""

    rps_per_replica: float | None
    bound: str  # measured | lower | none
    target_p99_s: float
    samples: int
    support: int
    over: int  # samples at or beyond the estimate whose p99 was over the target
    load_range: tuple[float, float]
    curve: tuple[tuple[float, float], ...]  # fitted (load per replica, p99) knots, for a report
    reason: str

    def as_dict(self) -> dict:
        return asdict(self)


def settled(times: np.ndarray, replicas: np.ndarray, settle_s: float) -> np.ndarray:
    """True for samples at least `settle_s` after the last change of the replica count (vectorised). Pass every
    sample, those without a count (NaN) or at 0 replicas included: where the count is unknown (NaN, or a gap in
    time longer than 1.5 steps) it may have changed, so the first sample after counts as a change. Dropping them
    first hid a rollout's 4 -> 0 -> 4, or a scale-up during a scrape outage, and kept the warm-up samples after."""
    t = np.asarray(times, float)
    r = np.asarray(replicas, float)
    if t.size == 0:
        return np.zeros(0, bool)
    gaps = np.diff(t)
    step = float(np.median(gaps)) if gaps.size else 0.0
    changed = np.concatenate([[True], (r[1:] != r[:-1]) | (gaps > 1.5 * step)])  # NaN != NaN: unknown, a change
    last_change = np.maximum.accumulate(np.where(changed, t, -np.inf))
    return t - last_change >= settle_s  # the first sample counts as a change: its history is unknown


def _knots(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The fit at each distinct load, collapsed to the points where it changes (the curve's corners)."""
    ux, first = np.unique(x, return_index=True)
    uy = y[first]
    keep = np.concatenate([[True], uy[1:] != uy[:-1]]) | np.concatenate([uy[:-1] != uy[1:], [True]])
    return ux[keep], uy[keep]


def calibrate(load_per_replica: np.ndarray, p99_s: np.ndarray, slo_s: float, *, margin: float = 1.0,
              min_samples: int = MIN_SAMPLES, min_over: int = MIN_OVER) -> Calibration:
    """`rpsPerReplica` from paired samples of load per ready replica (req/s) and p99 latency (s); see the module."""
    if not slo_s > 0 or not 0 < margin <= 1:
        raise ValueError(f"need slo_s > 0 and 0 < margin <= 1, got {slo_s!r}, {margin!r}")
    x = np.asarray(load_per_replica, float)
    y = np.asarray(p99_s, float)
    ok = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    x, y = x[ok], y[ok]
    target = slo_s * margin
    if x.size < min_samples:
        return Calibration(None, "none", target, int(x.size), 0, 0, (0.0, 0.0), (), f"{x.size} usable samples, "
                           f"need {min_samples} (times with traffic, replicas and a p99, after a replica change "
                           "settled)")
    xs = np.sort(x)
    share = IsotonicRegression(increasing=True, out_of_bounds="clip").fit(x, (y > target).astype(float))
    kx, ky = _knots(xs, share.predict(xs))  # the share of samples over the target, non-decreasing in load
    log_p99 = IsotonicRegression(increasing=True, out_of_bounds="clip").fit(x, np.log(y))
    cx, cy = _knots(xs, np.exp(log_p99.predict(xs)))
    lo, hi = float(x.min()), float(x.max())
    curve = tuple(zip(cx.round(6).tolist(), cy.round(6).tolist(), strict=True))
    over = np.flatnonzero(ky > 0.5)  # most samples at these loads were over the target
    if over.size == 0:
        rps, bound = hi, "lower"
        reason = (f"the median p99 stayed within {target:g} s up to the highest load observed ({hi:.4g} req/s "
                  "per replica): the service can take at least that")
    elif over[0] == 0:
        light = float(np.median(y[x <= np.quantile(x, 0.1)]))
        units = "; a latency query in milliseconds? it must give seconds" if light > 100 * target else ""
        return Calibration(None, "none", target, int(x.size), 0, int(np.sum(y > target)), (lo, hi), curve,
                           f"most p99s above {target:g} s already at the lightest observed load ({lo:.4g} req/s "
                           f"per replica; median p99 at the lightest tenth of loads {light:.4g} s{units})")
    else:
        i = int(over[0])
        x0, x1, y0, y1 = kx[i - 1], kx[i], ky[i - 1], ky[i]
        rps = float(x0 + (0.5 - y0) / (y1 - y0) * (x1 - x0)) if y1 > y0 else float(x0)
        n_over = int(np.sum((x >= x0) & (y > target)))
        if n_over >= min_over:
            bound, reason = "measured", f"fitted median p99 reaches {target:g} s at {rps:.4g} req/s per replica"
        else:
            bound = "lower"
            reason = (f"fitted median p99 reaches {target:g} s at {rps:.4g} req/s per replica, but only {n_over} "
                      f"sample(s) there were over it (need {min_over}): the service can take at least that")
    support = int(np.sum(np.abs(x - rps) <= 0.1 * rps))
    over = int(np.sum((x >= rps) & (y > target)))
    return Calibration(float(rps), bound, target, int(x.size), support, over, (lo, hi), curve, reason)
