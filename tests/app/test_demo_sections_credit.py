"""The demo's forecasting and placement sections name the data sets they used in the report's credits, caption
their figures in words, and quote p90 coverage as a percentage, as the plots do. The work behind each section is
stubbed (no backtest, no placement run): only what the report says is checked."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from balancer.app import demo as demo_mod
from balancer.app import demo_plots, demo_tidal
from balancer.app.demo import ALIBABA_CREDIT, Demo


def png(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def test_placement_credits_the_alibaba_trace(tmp_path, monkeypatch) -> None:
    def fake_run(argv, check, stdout):   # the `gputide place` child process: its --json, as it writes it
        out = Path(argv[argv.index("--json") + 1])
        out.write_text(json.dumps({"levels_pct": [0, 100], "median_unallocated_gpu_pct": [0.0, 5.0],
                                   "unallocated_gpu_pct_at_100": 5.0}))

    monkeypatch.setattr(demo_mod.subprocess, "run", fake_run)
    monkeypatch.setattr(demo_plots, "placement_curves", lambda curves, out: png(out / "curves.png"))
    demo = Demo(tmp_path, quick=True, say=lambda _: None)
    demo.place()
    assert ALIBABA_CREDIT in demo.report.credits


def test_forecasting_credits_servegen_captions_in_words_and_quotes_coverage_in_percent(tmp_path,
                                                                                      monkeypatch) -> None:
    from balancer.forecast import backtest as backtest_mod
    from balancer.forecast import traces

    idx = pd.date_range("2024-01-01", periods=4, freq="10min", tz="UTC")
    path = {"actual": pd.Series(np.ones(4), idx), 0.5: pd.Series(np.ones(4), idx), 0.9: pd.Series(np.ones(4), idx)}
    score = type("Score", (), {"model": "auto", "horizon": "1h", "mae": 10.0, "mase_seasonal": 0.8,
                               "mase_persistence": 0.9, "coverage_p90": 0.8736, "as_dict": lambda self: {}})()
    monkeypatch.setattr(traces, "load_demand", lambda *_a, **_k: idx)
    monkeypatch.setattr(backtest_mod, "backtest", lambda *_a, **_k: ([score], {
        "origins": 1, "paths": {("auto", "1h"): path, ("auto", "4h"): path}}))
    monkeypatch.setattr(demo_plots, "forecast_vs_actual", lambda *_a, name, **_k: png(tmp_path / "forecast" / name))
    demo = Demo(tmp_path, quick=True, say=lambda _: None)
    demo.forecast()
    html = "".join(demo.report.parts)
    assert demo_tidal.SERVEGEN_CREDIT in demo.report.credits
    assert "87.4%" in html and "0.8736" not in html
    assert "<figcaption>forecast_vs_actual_1h</figcaption>" not in html
    assert "demand and the auto forecast made 4h earlier" in html
