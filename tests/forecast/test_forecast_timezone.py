"""Time-zone-aware calendars: across a DST change, "same time yesterday / last week" and the hour of day are read in
local wall-clock time, so a 09:00 peak of human-driven demand is forecast at 09:00, not an hour off."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from forecast_synth import tidal

from balancer import config
from balancer.cli import main
from balancer.errors import InputError
from balancer.forecast import MODELS
from balancer.forecast.auto import Auto
from balancer.forecast.base import make
from balancer.forecast.gbm import QuantileGBM
from balancer.forecast.naive import SeasonalNaive, local_back, seasonal_naive_path
from balancer.forecast.online import DemandForecaster
from balancer.forecast.profile import TidalProfile

NY = "America/New_York"
STEP = 600
DAY = 86400
SPRING = "2024-03-10"   # clocks go 02:00 EST -> 03:00 EDT: a 23-hour day
AUTUMN = "2024-11-03"   # clocks go 02:00 EDT -> 01:00 EST: a 25-hour day


def peaked(start_local: str, days: float) -> pd.Series:
    """Noise-free demand with a sharp peak at 09:00 New York wall-clock time, every day; UTC index."""
    start = pd.Timestamp(start_local, tz=NY).tz_convert("UTC")
    idx = pd.date_range(start, periods=int(days * DAY / STEP), freq=pd.Timedelta(seconds=STEP))
    local = idx.tz_convert(NY)
    hour = local.hour + local.minute / 60.0
    return pd.Series(100.0 + 400.0 * np.exp(-0.5 * ((hour - 9.0) / 0.5) ** 2), index=idx)


def day_of_change(change: str, weeks: int = 2) -> tuple[pd.Series, pd.Series]:
    """(history up to local midnight starting `change`'s day, truth of the next 24 hours)."""
    y = peaked(str(pd.Timestamp(change) - pd.Timedelta(days=7 * weeks)), 7 * weeks + 2)
    cut = pd.Timestamp(change, tz=NY).tz_convert("UTC")
    hist = y[y.index < cut]
    return hist, y[y.index >= cut].iloc[: DAY // STEP]


def peak_local_hour(index: pd.DatetimeIndex, values: np.ndarray) -> float:
    at = index[int(np.argmax(values))].tz_convert(NY)
    return at.hour + at.minute / 60.0


@pytest.mark.parametrize("change", [SPRING, AUTUMN])
@pytest.mark.parametrize("period", [DAY, 7 * DAY], ids=["daily", "weekly"])
def test_seasonal_naive_in_local_time_keeps_the_0900_peak_across_a_dst_change(change, period):
    hist, truth = day_of_change(change)
    utc = SeasonalNaive(period).fit(hist).predict(len(truth))
    local = SeasonalNaive(period, tz=NY).fit(hist).predict(len(truth))
    local_mae = np.mean(np.abs(local.quantiles[0.5] - truth.to_numpy()))
    utc_mae = np.mean(np.abs(utc.quantiles[0.5] - truth.to_numpy()))
    # the only local error: the skipped spring hour, read at 03:00 the day before, a few req/s at most
    assert local_mae < 0.5, local_mae
    assert utc_mae > 20 * max(local_mae, 1.0), (utc_mae, local_mae)
    assert peak_local_hour(truth.index, local.quantiles[0.5]) == 9.0
    # UTC's "same time yesterday" is an hour off in wall-clock time: the peak moves by the shift
    assert peak_local_hour(truth.index, utc.quantiles[0.5]) == (10.0 if change == SPRING else 8.0)


def test_local_seasons_are_23_and_25_hours_long_across_the_changes():
    for change, hours in ((SPRING, 23), (AUTUMN, 25)):
        target = pd.DatetimeIndex([pd.Timestamp(f"{change} 09:00", tz=NY).tz_convert("UTC")])
        back = local_back(target, STEP, DAY, NY, 2)
        assert back[0, 0] * STEP == hours * 3600
        assert back[1, 0] * STEP == (24 + hours) * 3600


def test_in_utc_a_local_season_is_the_fixed_one_and_the_path_is_unchanged():
    rng = np.random.default_rng(3)
    v = rng.normal(100, 10, 3000)
    v[rng.random(3000) < 0.2] = np.nan
    targets = pd.date_range("2024-03-09", periods=400, freq="10min", tz="UTC")
    back = local_back(targets, STEP, DAY, "UTC", 7)
    assert (back == (np.arange(1, 8) * 144)[:, None]).all()
    assert np.array_equal(seasonal_naive_path(v, 144, 400, 4, back[:7]), seasonal_naive_path(v, 144, 400),
                          equal_nan=True)


def test_a_zone_without_dst_change_in_the_window_gives_the_utc_forecast():
    hist, truth = day_of_change("2024-06-10")
    utc = SeasonalNaive(DAY).fit(hist).predict(len(truth)).quantiles[0.5]
    local = SeasonalNaive(DAY, tz=NY).fit(hist).predict(len(truth)).quantiles[0.5]
    assert np.array_equal(utc, local)


def test_gbm_reads_hour_of_day_and_day_of_week_in_local_time():
    y, _ = tidal(days=9, step_s=STEP, start="2024-03-02T00:00:00Z")
    model = make("gbm", NY)
    assert isinstance(model, QuantileGBM) and model.tz == NY
    model.fit(y)
    times = pd.DatetimeIndex(pd.to_datetime(["2024-03-09 13:00", "2024-03-10 13:00", "2024-03-11 03:30"], utc=True))
    t = np.full(3, len(y) - 1)
    X, _ = model._features(t, np.ones(3, dtype=int), times)
    # 08:00 EST, 09:00 EDT, 23:30 EDT of the Sunday before (UTC: 13:00, 13:00, 03:30 Monday)
    assert X[:, 1].tolist() == [8.0, 9.0, 23.5]
    assert X[:, 2].tolist() == [5.0, 6.0, 6.0]
    utc_X, _ = make("gbm").fit(y)._features(t, np.ones(3, dtype=int), times)
    assert utc_X[:, 1].tolist() == [13.0, 13.0, 3.5]


def test_the_profile_model_keeps_the_0900_peak_in_local_time():
    hist, truth = day_of_change(SPRING)
    local = TidalProfile(tz=NY).fit(hist).predict(len(truth)).quantiles[0.5]
    utc = TidalProfile().fit(hist).predict(len(truth)).quantiles[0.5]
    assert peak_local_hour(truth.index, local) == 9.0
    assert peak_local_hour(truth.index, utc) == 10.0


def test_make_hands_the_zone_to_every_model_with_a_calendar_and_auto_to_its_candidates():
    with_tz = {name for name in MODELS if hasattr(MODELS[name](), "tz")}
    assert {"seasonal_naive_daily", "seasonal_naive_weekly", "gbm", "profile", "auto"} <= with_tz
    for name in with_tz:
        assert make(name, NY).tz == NY and make(name).tz == "UTC"
    models = Auto(tz=NY)._models()
    assert all(m.model.tz == NY for m in models if hasattr(m.model, "tz"))


def test_the_online_forecaster_forecasts_in_its_time_zone():
    hist, truth = day_of_change(SPRING)
    mae = {}
    for tz in ("UTC", NY):
        online = DemandForecaster(model="seasonal_naive_daily", step_s=STEP, timezone=tz)
        online.observe_history("chat", hist)
        fc = online.forecast("chat", hist.index[-1].timestamp() + STEP, len(truth))
        # (the history is cleaned before fitting: the peak's top is clipped at the trailing day's p99, alike in both)
        mae[tz] = np.mean(np.abs(fc.quantiles[0.5] - truth.to_numpy()))
    assert mae[NY] < mae["UTC"] / 10, mae


def test_the_online_forecaster_refuses_an_unknown_zone_naming_the_policy_field():
    with pytest.raises(InputError) as err:
        DemandForecaster(timezone="Mars/Olympus_Mons")
    assert err.value.field == "forecast.timezone" and "IANA" in err.value.allowed


POLICY = "apiVersion: gputide/v1alpha1\nkind: BalancerPolicy\nmetadata: {name: p}\nspec:\n  forecast: {timezone: %s}\n"


def test_the_policy_sets_the_zone_and_refuses_a_bad_one_naming_field_value_and_allowed(tmp_path, capsys):
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(POLICY % "Europe/Berlin")
    assert config.load(good).forecast.timezone == "Europe/Berlin"
    assert config.BalancerPolicy().forecast.timezone == "UTC"
    for value in ("Europe/Berlinn", "'+01:00'", "5", "''", "../../etc/passwd"):
        bad.write_text(POLICY % value)
        with pytest.raises(InputError) as err:
            config.load(bad)
        assert err.value.field == "spec.forecast.timezone"
        assert "IANA time zone" in err.value.allowed
    bad.write_text(POLICY % "Europe/Berlinn")
    assert main(["check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "spec.forecast.timezone" in err and "'Europe/Berlinn'" in err and "IANA time zone" in err


def test_backtest_refuses_a_bad_timezone_flag_with_exit_2_before_reading_the_trace(tmp_path, capsys):
    rc = main(["forecast", "backtest", "--trace", str(tmp_path / "missing.csv"), "--timezone", "Europe/Berlinn"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--timezone" in err and "'Europe/Berlinn'" in err and "IANA time zone" in err


def test_backtest_runs_in_a_time_zone(tmp_path, capsys):
    y = peaked(str(pd.Timestamp(SPRING) - pd.Timedelta(days=8)), 10)
    path = tmp_path / "demand.csv"
    y.to_frame("value").rename_axis("timestamp").to_csv(path)
    out = tmp_path / "bt.json"
    rc = main(["forecast", "backtest", "--trace", str(path), "--horizons", "1h", "--models",
               "seasonal_naive_daily", "--timezone", NY, "--stride", "6", "--json", str(out)])
    assert rc == 0
    assert f"calendar in {NY}" in capsys.readouterr().out
    assert f'"timezone": "{NY}"' in out.read_text()
