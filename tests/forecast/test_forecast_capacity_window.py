"""`gpus_needed` reads its window as the controller reads a forecast (`capacity_plan.forecast_peak`, which calls
`Forecast.window_max`): from `now`, the step holding the window's start included.

It once took the window from the forecast's issue time whatever the time (a forecast issued a step or two before
now, as the online forecaster's is, was read a step early), and rounded the window's start up where the controller
rounds it down: a peak in the step holding the start was missed, fewer GPUs than the controller would reserve."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from balancer.errors import InputError
from balancer.forecast.capacity import ServiceProfile, gpus_needed, gpus_needed_by_model
from balancer.model import Forecast
from balancer.plan.capacity_plan import forecast_peak

PROFILE = ServiceProfile("chat", rps_per_gpu={"H100": 10.0, "A100": 5.0}, min_replicas=2)
ISSUED = 1_000_000.0


def _forecast(p90, step_s=600.0):
    p90 = np.asarray(p90, float)
    return Forecast(service="chat", issued_at=ISSUED, step_s=step_s, quantiles={0.5: p90 * 0.8, 0.9: p90})


def _controller(fc, now, window_s, headroom, rps):
    """What the controller's read of the same window asks for (`forecast_peak`, `replicas_for`'s rounding)."""
    peak = max(forecast_peak(fc, 0.9, now, window_s), 0.0)
    return max(math.ceil(peak * (1.0 + headroom) / rps - 1e-9), PROFILE.min_replicas)


def test_the_step_holding_the_window_start_counts():
    # the window [900 s, 1500 s] after issue starts inside the step at 600 s (95 req/s): 10 H100s, not 3
    fc = _forecast([95, 30, 30, 30])
    assert gpus_needed(fc, PROFILE, lead_time_s=900, window_s=600, headroom=0.0, gpu_model="H100") == 10
    assert gpus_needed_by_model(fc, PROFILE, lead_time_s=900, window_s=600, headroom=0.0)["H100"] == 10


def test_the_window_starts_at_now_not_at_the_issue():
    # issued 20 minutes ago: the 95 req/s of its first step are past, the next ten minutes need 10 req/s
    fc = _forecast([95, 10, 10, 10, 10])
    now = ISSUED + 1200
    assert gpus_needed(fc, PROFILE, now=now, lead_time_s=0, window_s=600, headroom=0.0, gpu_model="H100") == 2
    assert gpus_needed_by_model(fc, PROFILE, now=now, lead_time_s=0, window_s=600, headroom=0.0) == {
        "A100": 2, "H100": 2}
    # without `now`, the window starts at the issue time (the API as documented before)
    assert gpus_needed(fc, PROFILE, lead_time_s=0, window_s=600, headroom=0.0, gpu_model="H100") == 10


@settings(max_examples=150, deadline=None)
@given(st.lists(st.floats(0, 1e4), min_size=1, max_size=40), st.floats(0, 1), st.floats(0, 1), st.floats(0, 1),
       st.floats(0, 1), st.booleans())
def test_the_same_window_rule_as_the_controller(p90, at, lead, window, headroom, given_now):
    fc = _forecast(p90)
    reach = fc.horizon * fc.step_s
    since = at * reach if given_now else 0.0          # how long after the issue `now` is
    lead_s = lead * (reach - since)
    window_s = window * (reach - since - lead_s)      # the window ends within the forecast
    now = ISSUED + since if given_now else None
    by_model = gpus_needed_by_model(fc, PROFILE, now=now, lead_time_s=lead_s, window_s=window_s, headroom=headroom)
    for gpu, rps in PROFILE.rps_per_gpu.items():
        want = _controller(fc, ISSUED + since + lead_s, window_s, headroom, rps)
        assert gpus_needed(fc, PROFILE, now=now, lead_time_s=lead_s, window_s=window_s, headroom=headroom,
                           gpu_model=gpu) == want
        assert by_model[gpu] == want


REFUSED = [
    ("a NaN in the forecast", [10, float("nan"), 10], {}, "forecast.quantiles[0.9]"),
    ("a forecast of no steps", [], {}, "forecast.quantiles[0.9]"),
    ("a negative lead time", [10, 10, 10], {"lead_time_s": -600}, "lead_time_s"),
    ("a NaN window", [10, 10, 10], {"window_s": float("nan")}, "window_s"),
]


@pytest.mark.parametrize(("case", "p90", "kwargs", "field"), REFUSED, ids=[r[0] for r in REFUSED])
def test_what_the_controller_would_not_read_is_refused(case, p90, kwargs, field):
    args = {"lead_time_s": 0, "window_s": 600, **kwargs}
    with pytest.raises(InputError, match=re.escape(f"field '{field}'")):
        gpus_needed(_forecast(p90), PROFILE, gpu_model="H100", **args)
    with pytest.raises(InputError, match=re.escape(f"field '{field}'")):
        gpus_needed_by_model(_forecast(p90), PROFILE, **args)


PAST_END = [
    # (case, steps of 10 min, now after the issue, lead, window): the window ends after the last step's time
    ("the lead alone passes the end", 4, None, 6000, 600),
    ("the window ends a second past the last step", 4, None, 1200, 1201),
    ("from now, the issue lag counted", 4, 1200, 600, 1200),
]


@pytest.mark.parametrize(("case", "steps", "since", "lead", "window"), PAST_END, ids=[c[0] for c in PAST_END])
def test_a_window_past_the_forecast_end_is_refused_saying_how_far_it_reaches(case, steps, since, lead, window):
    # it read the last step's value (or what it had) in place of a peak it cannot know, and said nothing
    fc = _forecast([10] * (steps - 1) + [40])
    now = None if since is None else ISSUED + since
    for call in (lambda: gpus_needed(fc, PROFILE, now=now, lead_time_s=lead, window_s=window, gpu_model="H100"),
                 lambda: gpus_needed_by_model(fc, PROFILE, now=now, lead_time_s=lead, window_s=window)):
        with pytest.raises(InputError, match="field 'window_s'") as err:
            call()
        assert "reaches 40 min after its issue (4 steps of 10 min)" in str(err.value), err.value
        assert f"ends {((since or 0) + lead + window) / 60:g} min after it" in str(err.value), err.value


def test_a_window_ending_on_the_last_step_is_read():
    fc = _forecast([10, 10, 10, 40])
    assert gpus_needed(fc, PROFILE, lead_time_s=1200, window_s=1200, headroom=0.0, gpu_model="H100") == 4
    assert gpus_needed(fc, PROFILE, now=ISSUED + 600, lead_time_s=600, window_s=1200, headroom=0.0,
                       gpu_model="H100") == 4


@pytest.mark.parametrize("now", [float("nan"), float("inf")])
def test_a_now_that_is_no_time_is_refused_naming_now(now):
    # a NaN now raised a bare ValueError from window_max, an infinite one was blamed on window_s
    with pytest.raises(InputError, match="field 'now'"):
        gpus_needed(_forecast([10, 10, 10]), PROFILE, now=now, lead_time_s=0, window_s=600, gpu_model="H100")


def test_a_forecast_too_old_for_the_window_is_refused_naming_now_and_its_age():
    # a day-old forecast with window 0 was blamed on window_s, and the advice never said the forecast was old
    fc = _forecast([10, 10, 10, 40])
    with pytest.raises(InputError, match="field 'now'") as err:
        gpus_needed(fc, PROFILE, now=ISSUED + 86_400, lead_time_s=0, window_s=0, gpu_model="H100")
    assert "the forecast is 1440 min old" in str(err.value) and "forecast again" in str(err.value), err.value


def test_how_far_past_the_end_is_said_in_seconds():
    # ":g" minutes hid a one-second overrun of a week-long forecast: "reaches 10080 min ... ends 10080 min"
    fc = _forecast([10] * 1008)
    with pytest.raises(InputError, match="1 s past it"):
        gpus_needed(fc, PROFILE, lead_time_s=0, window_s=1008 * 600 + 1, gpu_model="H100")


def test_the_quantile_asked_for_is_read_to_its_own_end():
    # `horizon` is the first quantile's length: a shorter p90 was read past its end, its last value silently
    fc = Forecast(service="chat", issued_at=ISSUED, step_s=600.0,
                  quantiles={0.5: np.full(6, 8.0), 0.9: np.array([10.0, 10.0, 40.0])})
    with pytest.raises(InputError, match=r"\(3 steps of 10 min\)"):
        gpus_needed(fc, PROFILE, lead_time_s=0, window_s=3000, gpu_model="H100")
