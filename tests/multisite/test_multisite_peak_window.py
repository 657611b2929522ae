"""`run_multisite`'s peak attainment counts the hours within 2 of the peak on the clock face: a peak at or near
midnight (a site whose users peak at 00:00 UTC) has its window on both sides of it. The window was the hours h with
|h - peak_hour| <= 2, so for a peak at 0:00 the two hours before midnight (22-24) were left out, and a run that spent
all its time there reported the attainment of its last 5-minute cycle alone."""

from __future__ import annotations

import pytest

from balancer.app.multisite import run_multisite


@pytest.mark.parametrize("peak_hour, start_hour", [(0.0, 22.0), (23.0, 23.0), (12.0, 10.0)],
                         ids=["midnight, the hours before it", "23:00, the hours after it", "noon"])
def test_a_run_inside_the_peak_window_measures_all_of_it(peak_hour, start_hour):
    run = run_multisite(overflow=False, peak_hour=peak_hour, start_hour=start_hour, hours=2.0, seed=2)
    # the day's figure also counts the minute both sites step before the first cycle
    assert run.peak_attainment == pytest.approx(run.day_attainment, abs=0.01)
