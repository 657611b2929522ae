"""Demand -> GPUs, the controller's online forecaster, and the backtest command line."""

from __future__ import annotations

import json

import numpy as np
import pytest
from forecast_synth import tidal
from hypothesis import given, settings
from hypothesis import strategies as st

from balancer.cli import main
from balancer.errors import InputError
from balancer.forecast.capacity import ServiceProfile, gpus_needed, gpus_needed_by_model
from balancer.forecast.online import DemandForecaster
from balancer.model import Forecast

PROFILE = ServiceProfile("chat", rps_per_gpu={"H100": 10.0, "A100": 5.0}, warmup_s=300, slo_latency_s=1.0,
                         min_replicas=2)


def _forecast(p90, step_s=600.0):
    p90 = np.asarray(p90, float)
    return Forecast(service="chat", issued_at=0.0, step_s=step_s,
                    quantiles={0.5: p90 * 0.8, 0.9: p90, 0.99: p90 * 1.2})


CASES = [
    ("peak inside the window decides", [10, 95, 20, 20], 600, 1200, 0.9, 0.0, "H100", 10),
    ("headroom rounds up", [10, 95, 20, 20], 600, 1200, 0.9, 0.1, "H100", 11),
    ("a peak before the lead time is ignored", [300, 20, 20, 20], 1200, 1200, 0.9, 0.1, "H100", 3),
    ("slower GPUs need more", [10, 95, 20, 20], 600, 1200, 0.9, 0.0, "A100", 19),
    ("quiet demand keeps min replicas", [1, 1, 1, 1], 0, 1800, 0.9, 0.1, "H100", 2),
    ("p99 asks for more than p90", [10, 95, 20, 20], 600, 1200, 0.99, 0.0, "H100", 12),
]


@pytest.mark.parametrize(("case", "p90", "lead", "window", "q", "headroom", "gpu", "want"), CASES,
                         ids=[c[0] for c in CASES])
def test_gpus_needed(case, p90, lead, window, q, headroom, gpu, want):
    got = gpus_needed(_forecast(p90), PROFILE, lead_time_s=lead, window_s=window, quantile=q,
                      headroom=headroom, gpu_model=gpu)
    assert got == want


def test_unknown_gpu_model_and_bad_profile_are_input_errors():
    with pytest.raises(InputError, match="rps_per_gpu"):
        gpus_needed(_forecast([1, 2]), PROFILE, lead_time_s=0, window_s=600, gpu_model="T4")
    with pytest.raises(InputError, match="rps_per_gpu.L4"):
        ServiceProfile("x", rps_per_gpu={"L4": 0.0})


@settings(max_examples=80, deadline=None)
@given(st.lists(st.floats(0, 1e4), min_size=1, max_size=40), st.floats(0, 1), st.floats(0, 1), st.floats(0, 1))
def test_vectorised_variant_agrees_and_more_headroom_never_means_fewer_gpus(p90, lead, window, headroom):
    fc = _forecast(p90)
    lead = lead * fc.horizon * fc.step_s                     # a window within the forecast (past it: refused)
    window = window * (fc.horizon * fc.step_s - lead)
    by_model = gpus_needed_by_model(fc, PROFILE, lead_time_s=lead, window_s=window, headroom=headroom)
    for gpu, n in by_model.items():
        assert n == gpus_needed(fc, PROFILE, lead_time_s=lead, window_s=window, headroom=headroom, gpu_model=gpu)
        assert n >= PROFILE.min_replicas
        more = gpus_needed(fc, PROFILE, lead_time_s=lead, window_s=window, headroom=headroom + 0.5, gpu_model=gpu)
        assert more >= n


def _feed(fc: DemandForecaster, y, every: int = 1):
    for i, (ts, v) in enumerate(y.items()):
        fc.update("chat", ts.timestamp(), float(v))
        if i % every == 0 and i >= 300:
            fc.forecast("chat", ts.timestamp() + 1, 24)


def test_online_forecaster_issues_calibrated_forecasts_and_tracks_its_error():
    y, _ = tidal(days=4, seed=7)
    fc = DemandForecaster(model="seasonal_naive_daily", step_s=600)
    _feed(fc, y, every=1)
    now = y.index[-1].timestamp() + 600
    out = fc.forecast("chat", now, 36)
    assert isinstance(out, Forecast) and out.horizon == 36 and out.step_s == 600
    assert out.issued_at == pytest.approx(now - 600)
    assert (out.quantiles[0.9] >= out.quantiles[0.5]).all()
    err1 = fc.rolling_error("chat", 1)
    assert 0 < err1 < 0.2  # noise sd 5 on a mean of 100
    assert fc.rolling_error("chat", "1h") == pytest.approx(fc.rolling_error("chat", 6))
    assert np.isnan(fc.rolling_error("other", 1))


def test_online_forecaster_refits_only_every_n_buckets(monkeypatch):
    from balancer.forecast import naive

    fits = []
    original = naive.Persistence.fit
    monkeypatch.setattr(naive.Persistence, "fit", lambda self, y: (fits.append(len(y)), original(self, y))[1])
    y, _ = tidal(days=2, seed=8)
    fc = DemandForecaster(model="persistence", step_s=600, refit_every=50)
    for ts, v in y.items():
        fc.update("chat", ts.timestamp(), float(v))
        if len(fc._svc["chat"].values) >= 12:
            fc.forecast("chat", ts.timestamp() + 1, 6)
    assert 4 <= len(fits) <= 6  # ~276 closed buckets / 50, not one fit per cycle


def test_online_forecaster_needs_some_history_first():
    fc = DemandForecaster(model="persistence", step_s=600)
    fc.update("chat", 0.0, 5.0)
    with pytest.raises(ValueError, match="history"):
        fc.forecast("chat", 700.0, 6)


def test_observe_history_seeds_a_service():
    y, _ = tidal(days=2, seed=9)
    fc = DemandForecaster(model="seasonal_naive_daily", step_s=600)
    fc.observe_history("chat", y)
    out = fc.forecast("chat", y.index[-1].timestamp() + 600, 6)
    assert out.quantiles[0.5].shape == (6,) and fc.services() == ["chat"]


def test_cli_backtest_prints_and_writes_the_table(tmp_path, capsys):
    y, _ = tidal(days=6, seed=10)
    trace = tmp_path / "demand.csv"
    y.rename("value").rename_axis("timestamp").to_csv(trace)
    out = tmp_path / "bt.json"
    rc = main(["forecast", "backtest", "--trace", str(trace), "--horizons", "1h,4h", "--models",
               "persistence,seasonal_naive_daily", "--min-train-days", "3", "--json", str(out)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "| seasonal_naive_daily | 4h |" in printed
    rows = json.loads(out.read_text())["scores"]
    assert {(r["model"], r["horizon"]) for r in rows} == {(m, h) for m in ("persistence", "seasonal_naive_daily")
                                                          for h in ("1h", "4h")}
    assert all(0 <= r["coverage_p90"] <= 1 and r["mae"] > 0 for r in rows)


BAD_ARGS = [["--models", "prophet"], ["--horizons", "soon"], ["--format", "xml"], ["--step=-5min"]]


@pytest.mark.parametrize("argv", BAD_ARGS, ids=["unknown model", "bad horizon", "bad format", "bad step"])
def test_cli_backtest_bad_input_exits_2(tmp_path, argv):
    trace = tmp_path / "d.csv"
    trace.write_text("timestamp,value\n1,1\n601,2\n")
    try:
        rc = main(["forecast", "backtest", "--trace", str(trace), *argv])
    except SystemExit as exc:  # argparse rejects choices itself, with the same exit code
        rc = exc.code
    assert rc == 2
