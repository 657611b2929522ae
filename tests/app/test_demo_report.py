"""The demo report's figures and words, on small made-up data (no Prometheus, no simulation): each figure is
caught at savefig and inspected, so these run in well under a second each."""

from __future__ import annotations

from types import SimpleNamespace

import matplotlib.dates as mdates
import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from balancer import fleet as fleet_mod
from balancer.app import demo_plots, demo_text
from balancer.app.report import fmt
from balancer.model import Node


@pytest.fixture
def saved(monkeypatch):
    """Every Figure the plots save, in order, instead of a PNG on disk."""
    figures: list[Figure] = []
    monkeypatch.setattr(Figure, "savefig", lambda self, *_a, **_k: figures.append(self))
    return figures


def _fleet(nodes: int = 2, gpus: int = 4):
    return fleet_mod.build("t", [Node(name=f"n{i}", gpu_model="A100-SXM4-80GB", gpu_count=gpus, inlet_c=25.0)
                                 for i in range(nodes)])


def _texts(fig: Figure) -> str:
    return " | ".join(t.get_text() for ax in fig.axes for t in ax.texts)


# ---- numbers in the tables ----------------------------------------------------------------------------------
def test_an_attainment_just_under_one_is_not_printed_as_one():
    # four significant digits printed 0.99995 and 0.9999 alike... and 0.99996 as "1", beside a count of
    # SLO-violating requests that says it was not
    assert fmt(0.99995) == "0.99995"
    assert fmt(0.99996) != fmt(1.0) and fmt(0.99996) != "1"
    assert fmt(1.0 - 1.7e-10) == "1 − 1.7e-10"
    assert fmt(0.9669) == "0.9669" and fmt(None) == "-"


def test_the_live_table_counts_the_end_on_the_frame_the_end_grid_draws():
    fleet = _fleet()
    slowdown = np.full(fleet.n_gpus, 89.0)
    after = np.full(fleet.n_gpus, 60.0)
    after[[0, 1]] = 90.0   # two GPUs still at slowdown in the frame drawn as "end"
    peak = np.full(fleet.n_gpus, 60.0)
    peak[:4] = 88.5
    res = SimpleNamespace(fleet=fleet, fault_node="n0", temperature_before=np.full(fleet.n_gpus, 70.0),
                          temperature_peak=peak, temperature_after=after, hot_gpu_cycles=[0, 3, 1],
                          holds=[{"cycle": 5}], alerts_seen={"GpuTemperatureHigh": 1.0})
    rows = dict((k, v) for k, v in demo_text.live_rows(res, slowdown, {"migrate": 2}))
    assert rows["GPUs at/above slowdown at the end"] == 2 == demo_text.hot_count(after, slowdown)
    assert rows["GPUs at/above slowdown, most in any one cycle"] == 3
    assert rows["hottest GPU on n0 (°C): before the fault / worst / end"] == "70.0 / 88.5 / 90.0"
    assert rows["cycles held still (fail-static)"] == 1


def test_the_outage_sentence_says_what_the_controller_did():
    assert "in all of them" in demo_text.outage_sentence(4, [{}] * 4)
    assert "in 2 of them" in demo_text.outage_sentence(4, [{}] * 2)
    assert "not" in demo_text.outage_sentence(4, [])
    assert demo_text.outage_sentence(0, []) == ""


def test_tidal_findings_come_from_the_summaries_and_a_zero_static_has_no_ratio():
    assert demo_text.progress_ratio(5.0, 0.0) is None
    results = {"static": {"inference": {"slo_attainment": 1.0}, "training": {"progress": 0.0}},
               "gputide": {"inference": {"slo_attainment": 0.99995, "slo_violating_requests": 12.0},
                           "training": {"progress": 7.0, "preemptions": 3},
                           "vs_static": {"training_progress_ratio": None}}}
    text = demo_text.tidal_findings(results)
    assert "<code>gputide</code>: - static's" in text and "0.99995" in text and "3 training preemptions" in text


# ---- figures ------------------------------------------------------------------------------------------------
def test_timeline_columns_sit_on_their_sample_times_and_marks_do_not_overwrite_the_axes():
    fleet = _fleet()
    start, step = 1_700_000_000.0, 2.0
    series = [SimpleNamespace(labels={"UUID": fleet.gpus[1].uuid}, times=np.array([start - step, start, start + 4,
                                                                                    start + 20]),
                              values=np.array([1.0, 50.0, 60.0, 2.0]))]
    grid = demo_plots.temperature_grid(series, fleet, start, start + 10, step)
    assert grid.shape == (fleet.n_gpus, 6)
    # samples before the window or after it are dropped, not piled onto its first and last column
    assert grid[1, 0] == 50.0 and grid[1, 2] == 60.0 and np.isnan(grid[1, [1, 3, 4, 5]]).all()
    fig = demo_plots.timeline_figure(grid, fleet, start, step, fault_wall=start + 3, fault_node="n1",
                                     action_walls=[start + 5], outage=(start + 6, start + 8))
    ax = fig.axes[0]
    left, right = ax.images[0].get_extent()[:2]
    first = mdates.date2num(np.datetime64(int(start), "s"))
    assert left == pytest.approx(first - 1 / 86400) and right == pytest.approx(first + 11 / 86400)
    assert not ax.texts, "labels written over the heatmap or its tick labels"
    labels = {t.get_text() for leg in fig.legends for t in leg.get_texts()}
    assert {"cooling fault on n1", "exporter down: the controller holds still", "a controller action"} <= labels
    assert "UTC" in ax.get_xlabel()
    assert [t.get_color() for t in ax.get_yticklabels() if t.get_text() == "n1"] == ["tab:red"]


def test_a_timeline_without_samples_says_so():
    fleet = _fleet()
    grid = demo_plots.temperature_grid([], fleet, 0.0, 10.0, 2.0)
    fig = demo_plots.timeline_figure(grid, fleet, 0.0, 2.0, fault_wall=0.0, fault_node="n0", action_walls=[],
                                     outage=(0.0, 0.0))
    assert demo_plots.NO_DATA in _texts(fig)


def test_forecast_past_the_traces_end_is_not_drawn_as_a_streak_on_its_last_step(saved, tmp_path):
    idx = pd.date_range("2024-01-01", periods=6, freq="10min", tz="UTC")
    idx = idx.append(pd.DatetimeIndex([idx[-1]] * 3))   # the backtest clips targets past the end onto it
    actual = pd.Series([1.0, 2, 3, 4, 5, 6, np.nan, np.nan, np.nan], index=idx)
    p50 = pd.Series([1.0, 2, 3, 4, 5, 6, 9, 0, 7], index=idx)
    p90 = p50 + 1.0
    demo_plots.forecast_vs_actual(actual, {0.5: p50, 0.9: p90}, tmp_path, title="t")
    ax = saved[0].axes[0]
    for line in ax.get_lines():
        x = np.asarray(line.get_xdata())
        assert len(x) == len(np.unique(x)) == 6
    assert "UTC" in ax.get_xlabel()
    assert any("100.0% of the time" in t.get_text() for t in ax.get_legend().get_texts())


def test_capacity_split_is_on_the_traces_clock_with_shared_axes_and_its_means(saved, tmp_path):
    t = 1_704_067_200.0 + 60.0 * np.arange(4)   # 2024-01-01 00:00 UTC on
    runs = {"static": pd.DataFrame({"time": t, "inference_gpus": [10.0] * 4, "training_gpus": [5.0] * 4}),
            "gputide": pd.DataFrame({"time": t, "inference_gpus": [4.0, 6, 8, 6], "training_gpus": [11.0] * 4}),
            "empty": pd.DataFrame({"time": [], "inference_gpus": [], "training_gpus": []})}
    demo_plots.capacity_split(runs, tmp_path, inference_cols=["inference_gpus"], training_cols=["training_gpus"])
    fig = saved[0]
    axes = fig.axes
    assert axes[0].get_shared_y_axes().joined(axes[0], axes[1])
    assert axes[1].get_title(loc="left") == "gputide: inference 6 GPUs, training 11 GPUs on average"
    assert "UTC" in axes[-1].get_xlabel()
    assert mdates.num2date(np.mean(axes[0].get_xlim())).date().isoformat() == "2024-01-01"   # not hours from 0
    assert demo_plots.NO_DATA in " ".join(t.get_text() for t in axes[2].texts)


def test_policies_overlay_on_shared_axes_with_the_fault_in_hours_since_the_start(saved, tmp_path):
    t0 = 1_000_000.0
    frame = pd.DataFrame({"time": t0 + 60.0 * np.arange(1, 5), "temperature_max_c": [60.0, 70, 80, 70]})
    demo_plots.policy_timeseries({"none": frame, "gputide": frame}, [("temperature_max_c", "°C"), ("gone", "x")],
                                 tmp_path, name="x.png", title="t", origin=t0, events=[(t0 + 7200.0, "fault")])
    top, bottom = saved[0].axes[:2]
    data = [line for line in top.get_lines() if line.get_label() in ("none", "gputide")]
    assert len(data) == 2 and np.asarray(data[0].get_xdata())[0] == pytest.approx(1 / 60)
    assert [np.asarray(line.get_xdata())[0] for line in top.get_lines() if line.get_linestyle() == ":"] == [2.0]
    assert demo_plots.NO_DATA in " ".join(t.get_text() for t in bottom.texts)


def test_placement_and_calibration_figures_survive_no_data(saved, tmp_path):
    demo_plots.placement_curves({}, tmp_path)
    demo_plots.calibration_curves({}, 2.0, tmp_path)
    assert all(demo_plots.NO_DATA in _texts(fig) for fig in saved)
    demo_plots.placement_curves({"random": ([0.0, 60.0, 100.0], [100.0, 55.0, 30.0])}, tmp_path)
    ax = saved[-1].axes[0]
    assert ax.get_ylim()[1] == 55.0   # a line above 40% from 60% arrived on is not cut off, 0% arrived is not shown
    assert ax.get_legend().get_texts()[0].get_text() == "random: 30.00% at 100%"


def test_the_timeseries_plot_closes_its_figure_when_a_row_lacks_a_column(tmp_path):
    import matplotlib.pyplot as plt

    from balancer.app.plots import plot_timeseries

    before = set(plt.get_fignums())
    with pytest.raises(KeyError):
        plot_timeseries([{"time": 0.0, "temperature_max_c": 50.0}], tmp_path)
    assert set(plt.get_fignums()) == before
