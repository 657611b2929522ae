"""The demo report read as a first-time user reads it: figures whose axes say what and in which unit, scales that
can be read, numbers rounded as a person quotes them, no "nan", and the data it used credited. Small made-up data,
each figure caught at savefig (no PNG, no Prometheus, no simulation)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from balancer.app import demo_plots, demo_text, demo_tidal
from balancer.app.plots import plot_timeseries
from balancer.app.report import Report, fmt
from balancer.plan.calibration import Calibration
from tests.app.test_demo_report import _fleet


@pytest.fixture
def saved(monkeypatch) -> list[Figure]:
    """The figures the plots save, caught at savefig: their axes, labels and ticks are read, no PNG is written."""
    figures: list[Figure] = []
    monkeypatch.setattr(Figure, "savefig", lambda self, *_a, **_k: figures.append(self))
    return figures


def _shown_ticks(ax) -> list[float]:
    lo, hi = sorted(ax.get_ylim())
    return [t for t in ax.yaxis.get_majorticklocs() if lo <= t <= hi]


# ---- numbers ---------------------------------------------------------------------------------------------------
ROUNDED = [
    (float("nan"), "-"),              # a MASE against a baseline with no error: was "nan"
    (float("inf"), "-"),
    (4_968_123.4, "4,968,123"),       # SLO-violating requests: was "4.97e+06"
    (170_700.0, "170,700"),           # GPU-seconds above slowdown: was "170,700.00"
    (10_526.89, "10,527"),            # A100-GPU-hours: was "10,526.89"
    (600.0, "600"),
    (210.99, "211.0"),                # MAE in req/s, as the demo's progress line prints it
    (np.int64(2474), "2,474"),
    (89.0, "89"),                     # a slowdown temperature: was "89.00"
    # unchanged
    (89.54, "89.54"),
    (np.float32(0.5), "0.5"),
    (0.9669, "0.9669"),
    (0.01668, "0.01668"),
    (1.0, "1.00"),                    # a MASE of exactly 1 in a column of 1.31 and 0.85
]


def test_figures_are_rounded_as_a_person_would_quote_them():
    assert [fmt(value) for value, _ in ROUNDED] == [shown for _, shown in ROUNDED]


def test_a_rendered_report_says_no_nan_none_or_exponent_and_credits_its_data(tmp_path):
    r = Report("t")
    r.mapping_table({"static": {"a": {"x": float("nan"), "y": 4.97e6, "z": None}},
                     "gputide": {"a": {"x": 0.85, "y": 12.0}}},
                    [("MASE", "a.x"), ("violating requests", "a.y"), ("missing", "a.z")])
    r.table(["model", "MASE"], [["mstl", float("nan")], ["auto", np.float64("nan")]])
    r.credit(demo_tidal.SERVEGEN_CREDIT)
    r.credit(demo_tidal.SERVEGEN_CREDIT)   # two sections citing it: credited once
    doc = r.write(tmp_path / "report.html").read_text()
    cells = re.findall(r"<td>(.*?)</td>", doc)
    assert not [c for c in cells if c.lower() in ("nan", "none", "inf") or re.search(r"\de[+-]\d", c)], cells
    assert doc.count("Data and credits") == 1 and doc.count("ServeGen</b>") == 1
    assert "2505.09999" in doc and "Apache-2.0" in doc
    assert "gputide demo" in doc
    assert "Data and credits" not in Report("t").write(tmp_path / "bare.html").read_text()   # none used: none said


def test_the_tidal_text_says_which_part_of_the_trace_it_replayed():
    assert demo_text.trace_window({"window_start": "2024-01-13T00:00:00+00:00", "days": 2.0}) == \
        " (2024-01-13 00:00 to 2024-01-15 00:00 UTC of the trace)"
    assert demo_text.trace_window({"window_start": "2024-01-13T02:00:00+02:00", "days": 0.5}) == \
        " (2024-01-13 00:00 to 2024-01-13 12:00 UTC of the trace)"
    assert demo_text.trace_window({}) == ""


def test_a_gpu_just_under_slowdown_is_not_printed_at_it_beside_a_count_of_none():
    # 88.97 °C printed "89.0" next to "slowdown temperature 89" and "0 GPUs at/above slowdown"
    fleet = _fleet()
    slowdown = np.full(fleet.n_gpus, 89.0)
    peak = np.full(fleet.n_gpus, 60.0)
    peak[2] = 88.97
    res = SimpleNamespace(fleet=fleet, fault_node="n0", temperature_before=np.full(fleet.n_gpus, 66.15),
                          temperature_peak=peak, temperature_after=np.full(fleet.n_gpus, 83.5), hot_gpu_cycles=[0],
                          holds=[], alerts_seen={})
    rows = dict(demo_text.live_rows(res, slowdown, {}))
    assert rows["hottest GPU on n0 (°C): before the fault / worst / end"] == "66.1 / 88.9 / 83.5"
    assert fmt(rows["slowdown temperature of n0's GPUs (°C)"]) == "89"
    assert rows["GPUs at/above slowdown, most in any one cycle"] == 0


# ---- figures ---------------------------------------------------------------------------------------------------
def test_the_node_grids_name_both_axes_and_the_colour_scale_unit(saved, tmp_path):
    fleet = _fleet()
    temps = np.linspace(40.0, 90.0, fleet.n_gpus)
    demo_plots.node_grids(fleet, {"before": temps, "after": temps}, tmp_path,
                          slowdown=np.full(fleet.n_gpus, 89.0), highlight="n1")
    fig = saved[0]
    data_axes = [ax for ax in fig.axes if ax.images]
    assert data_axes[0].get_ylabel() == "node"
    assert all(ax.get_xlabel() == "GPU" and ax.get_title() for ax in data_axes)
    colourbar = [ax for ax in fig.axes if not ax.images]
    assert len(colourbar) == 1 and "°C" in colourbar[0].get_ylabel()


def _cal(rps: float, slo: float) -> Calibration:
    curve = tuple((x, 0.5 * np.exp((x - 10.0) / 5.0)) for x in np.linspace(10.0, 30.0, 9))
    return Calibration(rps_per_replica=rps, bound="measured", target_p99_s=slo, samples=50, support=10, over=6,
                       load_range=(10.0, 30.0), curve=curve, reason="")


def test_the_calibration_latency_axis_has_enough_labelled_ticks_to_read(saved, tmp_path):
    # a p99 range of 0.5 s to 8 s on a log axis labelled its decades only: one tick, "1.0"
    load = np.linspace(10.0, 30.0, 40)
    p99 = 0.5 * np.exp((load - 10.0) / 5.0)
    demo_plots.calibration_curves({"svc": (load, p99, _cal(23.5, 2.0))}, 2.0, tmp_path)
    ax = saved[0].axes[0]
    saved[0].canvas.draw()   # tick labels are formatted at draw time
    shown = _shown_ticks(ax)
    assert len(shown) >= 3, shown
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert len(labels) >= 3 and "2" in labels, labels
    assert "(s," in ax.get_ylabel() and "req/s" in ax.get_xlabel()


def test_count_panels_tick_whole_gpus_and_the_p99_panel_marks_the_slo(saved, tmp_path):
    t0 = 1_000_000.0
    frame = pd.DataFrame({"time": t0 + 60.0 * np.arange(6), "allocated_gpus": [55.0, 55, 54, 54, 54, 55],
                          "p99_over_slo_max": [0.8, 1.2, 1.9, 0.7, 0.9, 1.1]})
    demo_plots.policy_timeseries({"none": frame, "gputide": frame},
                                 [("allocated_gpus", "GPUs allocated"), ("p99_over_slo_max", "worst p99 / SLO")],
                                 tmp_path, name="x.png", title="t", origin=t0)
    gpus, ratio = saved[0].axes[:2]
    assert all(float(t).is_integer() for t in _shown_ticks(gpus)), _shown_ticks(gpus)   # was 54.25 GPUs
    assert [line.get_ydata()[0] for line in ratio.get_lines() if line.get_linestyle() == "--"] == [1.0]
    assert any("SLO" in t.get_text() for t in ratio.texts)


def test_the_per_policy_timeseries_ticks_whole_gpus_too(saved, tmp_path):
    rows = [{"time": 60.0 * i, "temperature_max_c": 60.0 + i, "gpus_at_slowdown": 0, "throttled_gpus": i % 2,
             "p99_over_slo_max": 0.5 + 0.1 * i, "allocated_gpus": 54 + (i > 2), "power_kw": 18.0 + 0.01 * i}
            for i in range(6)]
    plot_timeseries(rows, tmp_path, title="hotspot / gputide")
    axes = {ax.get_ylabel(): ax for ax in saved[0].axes}
    assert all(float(t).is_integer() for t in _shown_ticks(axes["GPUs allocated"]))
    assert any("SLO" in t.get_text() for t in axes["worst p99 / SLO"].texts)
    assert all(ax.get_ylabel() for ax in saved[0].axes) and "hours" in saved[0].axes[-1].get_xlabel()


def test_the_capacity_split_has_a_title_and_says_which_days_of_the_trace(saved, tmp_path):
    t = 1_705_104_000.0 + 600.0 * np.arange(4)   # 2024-01-13 00:00 UTC on
    runs = {"static": pd.DataFrame({"time": t, "inference_gpus": [10.0] * 4, "training_gpus": [5.0] * 4})}
    demo_plots.capacity_split(runs, tmp_path, inference_cols=["inference_gpus"], training_cols=["training_gpus"])
    fig = saved[0]
    assert fig.get_suptitle()
    assert "2024-01-13 00:00 to 2024-01-13 00:30" in fig.axes[-1].get_xlabel()
    assert fig.axes[0].get_ylabel() == "GPUs"
    assert {t.get_text() for leg in fig.legends for t in leg.get_texts()} == {"inference GPUs", "training GPUs"}
