"""The PNG renderer against a fake Prometheus HTTP API: every panel is queried with its variables resolved,
heatmaps become GPUs x time matrices, and errors map to the CLI's exit codes."""

from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from balancer import cli
from balancer import dashboards_draw as dd
from balancer import dashboards_render as dr
from balancer.errors import InputError, TelemetryUnavailable

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
GPUS = [("node-a", "0"), ("node-a", "1"), ("node-b", "0"), ("node-b", "10"), ("node-b", "2")]


class FakePrometheus:
    """Answers query_range with one series per fake GPU for per-GPU queries and one series otherwise."""

    def __init__(self, empty: bool = False, missing: tuple[str, ...] = (), failing: tuple[str, ...] = ()) -> None:
        self.queries: list[dict[str, str]] = []
        self.missing = missing   # queries containing any of these answer no series
        self.failing = failing   # queries containing any of these answer HTTP 422, as Prometheus refuses one
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                url = urllib.parse.urlparse(self.path)
                params = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
                owner.queries.append({"path": url.path, **params})
                if any(f in params.get("query", "") for f in owner.failing):
                    body = json.dumps({"status": "error", "errorType": "execution", "error": "too many samples"})
                    self.send_response(422)
                    self.end_headers()
                    self.wfile.write(body.encode())
                    return
                if url.path == "/api/v1/query_range":
                    none = empty or any(m in params["query"] for m in owner.missing)
                    data = {"resultType": "matrix", "result": [] if none else owner.result(params)}
                elif url.path == "/api/v1/query":   # an instant query: each series' sample at `time`
                    at = float(params["time"])   # (at + 1e-9 is at: a range from it to it + 1 holds one step)
                    data = {"resultType": "vector", "result": [
                        {"metric": r["metric"], "value": r["values"][0]}
                        for r in owner.result({"query": params["query"], "start": at, "end": at + 1, "step": 60})]}
                elif url.path.startswith("/api/v1/label/"):
                    data = ["1h"]
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                body = json.dumps({"status": "success", "data": data}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @staticmethod
    def result(params: dict[str, str]) -> list[dict]:
        start, end, step = float(params["start"]), float(params["end"]), float(params["step"])
        times = np.arange(start, end + 1e-9, step)
        query = params["query"]
        per_gpu = query.startswith(("gpu:", "topk", "bottomk"))
        labels = ([{"hostname": h, "gpu": g, "namespace": "team-a", "modelName": "H100"} for h, g in GPUS]
                  if per_gpu else [{"service": "chat", "namespace": "team-a", "reason": "hotspot"}])
        return [{"metric": lab, "values": [[t, str(40 + i + (t - start) / 600)] for t in times]}
                for i, lab in enumerate(labels)]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake_prometheus():
    fake = FakePrometheus()
    yield fake
    fake.close()


def test_render_writes_one_png_per_dashboard_with_every_panel_filled(fake_prometheus, tmp_path):
    report = dr.render(fake_prometheus.url, tmp_path, range_s=3600, end=1_700_000_000)
    assert sorted(p.name for p in report.written) == [
        "balancer.png", "fragmentation-utilisation.png", "gpu-fleet.png", "tidal-capacity.png",
        "usage-chargeback.png"]
    for path in report.written:
        assert path.read_bytes()[:8] == PNG_MAGIC
    assert all(not panels for panels in report.empty_panels.values())
    assert report.series["gpu-fleet"]["GPU temperature"] == len(GPUS)


def test_queries_reach_prometheus_fully_interpolated(fake_prometheus, tmp_path):
    dr.render(fake_prometheus.url, tmp_path, uid="gputide-balancer", range_s=3600, end=1_700_000_000, step=60)
    sent = [q["query"] for q in fake_prometheus.queries if q["path"] == "/api/v1/query_range"]
    assert sent and all("$" not in q for q in sent)
    assert any("[75s]" in q for q in sent)  # $__rate_interval = max(4 x 15s, 60s + 15s)
    assert all(q["step"] == "60" for q in fake_prometheus.queries if q["path"] == "/api/v1/query_range")


def test_panels_without_data_are_reported(tmp_path):
    fake = FakePrometheus(empty=True)
    try:
        report = dr.render(fake.url, tmp_path, uid="gputide-chargeback", range_s=3600, end=1_700_000_000)
    finally:
        fake.close()
    assert "GPU-hours per namespace per day" in report.empty_panels["usage-chargeback"]


MIG_PANEL = "SM activity per MIG instance"


@pytest.mark.parametrize(("missing", "expected_empty", "hidden"), [
    (("gpu_instance:",), False, []), (("gpu_instance:sm_active",), True, []),
    (("gpu_instance:",), False, [{"expr": "gpu:temp", "hide": True}])],
    ids=["no MIG GPU at all: not applicable, --require-data passes", "MIG GPUs but no per-instance series: empty",
         "no MIG GPU, a hidden per-GPU query beside the per-instance ones: still not applicable (audit a7)"])
def test_the_mig_panel_counts_as_empty_only_when_the_fleet_has_mig_gpus(tmp_path, capsys, missing, expected_empty,
                                                                        hidden):
    """A query Grafana does not run (hidden) is not one of the panel's: it does not make the MIG panel per-GPU."""
    boards = tmp_path / "boards"
    boards.mkdir()
    fleet = json.loads((dr.DEFAULT_DASHBOARDS_DIR / "gpu-fleet.json").read_text())
    mig = next(p for _, p in dr.layout(fleet["panels"])[0] if p.get("title") == MIG_PANEL)
    mig["targets"].extend(hidden)   # the panel itself: layout copies a moved panel, not its targets
    (boards / "gpu-fleet.json").write_text(json.dumps(fleet))
    fake = FakePrometheus(missing=missing)
    try:
        report = dr.render(fake.url, tmp_path, dashboards_dir=boards, range_s=3600, end=1_700_000_000)
        code = cli.main(["dashboards", "render", "--prometheus", fake.url, "--out", str(tmp_path), "--dashboards-dir",
                         str(boards), "--range", "1h", "--require-data"])
    finally:
        fake.close()
    assert (MIG_PANEL in report.empty_panels["gpu-fleet"]) is expected_empty
    assert (MIG_PANEL in report.not_applicable.get("gpu-fleet", [])) is not expected_empty
    assert report.empty_panels["gpu-fleet"] == ([MIG_PANEL] if expected_empty else [])
    assert code == (1 if expected_empty else 0)
    assert ("as expected here (no MIG GPU in this Prometheus)" in capsys.readouterr().err) is not expected_empty


def test_heatmap_matrix_puts_each_gpu_on_its_row_and_each_sample_in_its_column():
    def series(values, times):
        return dr.Series({}, np.array(times, dtype=float), np.array(values, dtype=float))

    data = [("node-b/10", series([1, 2], [0, 60])), ("node-b/2", series([3], [120])), ("node-a/0", series([5], [0]))]
    names, grid, image = dd.heatmap_matrix(data, 0, 120, 60)
    assert names == ["node-a/0", "node-b/2", "node-b/10"]
    assert grid.tolist() == [0, 60, 120]
    np.testing.assert_array_equal(image, [[5, np.nan, np.nan], [np.nan, np.nan, 3], [1, 2, np.nan]])


def test_a_heatmaps_rows_are_counted_as_what_its_y_axis_names():
    fleet = {p["title"]: p for p in json.loads((dr.DEFAULT_DASHBOARDS_DIR / "gpu-fleet.json").read_text())["panels"]}
    assert dd.heatmap_rows(fleet["GPU temperature"], 5) == "5 GPUs"
    assert dd.heatmap_rows(fleet["SM activity per MIG instance"], 21) == "21 MIG instances"
    assert dd.heatmap_rows({"type": "heatmap"}, 3) == "3 GPUs"


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ('rate(x{cluster=~"$cluster"}[$__rate_interval])', 'rate(x{cluster=~".*"}[120s])'),
        ("avg_over_time(x[$__range]) * $__range_s", "avg_over_time(x[3600s]) * 3600"),
        ('x{model=~"${model}"}', 'x{model=~"H100"}'),
        ('x{model=~"[[model]]"}', 'x{model=~"H100"}'),
        ('x{m=~"$models", c=~"$cluster_id"}', 'x{m=~"$models", c=~"$cluster_id"}'),
        ("x / $__interval_ms * ${__range_ms} / $__interval", "x / 105000 * 3600000 / 105s"),
    ],
    ids=["rate interval and All variable", "range and range_s", "braced variable", "double-bracket variable",
         "a longer name is not a variable", "interval and range in ms, as Grafana fills them"],
)
def test_interpolate(expr, expected):
    assert dr.interpolate(expr, {"cluster": ".*", "model": "H100"}, step=105, range_s=3600) == expected


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [(0.5, "percentunit", "50.0%"), (3 * 2**30, "bytes", "3.0 GiB"), (71.0, "celsius", "71 °C"),
     (12.5, "suffix: GPU-h", "12.5 GPU-h"), (float("nan"), "watt", "-")],
    ids=["ratio as percent", "bytes as GiB", "celsius", "custom suffix", "NaN as a dash"],
)
def test_format_value(value, unit, text):
    assert dd.format_value(value, unit) == text


def test_unreachable_prometheus_raises_telemetry_unavailable(tmp_path):
    with pytest.raises(TelemetryUnavailable):
        dr.render("http://127.0.0.1:9", tmp_path, uid="gputide-balancer")


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["--range", "forever"], 2),
        (["--dashboard", "no-such-uid"], 2),
        (["--end", "yesterday-ish"], 2),
        (["--prometheus", "http://127.0.0.1:9"], 1),
    ],
    ids=["a bad range is an input error", "an unknown uid is an input error", "a bad end is an input error",
         "an unreachable Prometheus exits 1"],
)
def test_cli_exit_codes(fake_prometheus, tmp_path, argv, code):
    base = {"--prometheus": fake_prometheus.url, "--out": str(tmp_path)}
    for flag, value in zip(argv[::2], argv[1::2]):
        base[flag] = value
    args = ["dashboards", "render", *[x for kv in base.items() for x in kv]]
    assert cli.main(args) == code


def test_cli_render_one_dashboard(fake_prometheus, tmp_path, capsys):
    assert cli.main(["dashboards", "render", "--prometheus", fake_prometheus.url, "--out", str(tmp_path),
                     "--dashboard", "gputide-gpu-fleet", "--range", "30m", "--require-data"]) == 0
    assert capsys.readouterr().out.strip().endswith("gpu-fleet.png")


def test_parse_duration_rejects_zero():
    with pytest.raises(InputError):
        dr.parse_duration("0h")


def test_every_annotation_is_drawn_in_its_own_colour(fake_prometheus, tmp_path):
    dashboard = json.loads((dr.DEFAULT_DASHBOARDS_DIR / "gpu-fleet.json").read_text())
    annotations = [a for a in dashboard["annotations"]["list"] if a.get("expr")]
    assert len(annotations) > 3, "more annotations than the renderer once drew"
    report = dr.render(fake_prometheus.url, tmp_path, uid="gputide-gpu-fleet", range_s=3600, end=1_700_000_000)
    drawn = report.markers["gpu-fleet"]
    assert [(name, colour) for name, colour, _ in drawn] == [
        (a["name"], dr.annotation_colour(a["iconColor"], i)) for i, a in enumerate(annotations)]
    assert len({colour for _, colour, _ in drawn}) == len(drawn) and all(events for *_, events in drawn)


def _vertical_lines(ax) -> list[tuple[float, str]]:
    """(x, colour) of every vertical line drawn on `ax`, as a line of its own or as a segment of a collection."""
    from matplotlib.collections import LineCollection
    from matplotlib.colors import to_hex

    out = [(float(line.get_xdata()[0]), to_hex(line.get_color())) for line in ax.get_lines()
           if len(set(np.asarray(line.get_xdata(), dtype=float))) == 1]
    for lines in (c for c in ax.collections if isinstance(c, LineCollection)):
        colours = lines.get_colors()
        out += [(float(seg[0, 0]), to_hex(colours[i % len(colours)])) for i, seg in enumerate(lines.get_segments())
                if len(seg) and (seg[:, 0] == seg[0, 0]).all()]
    return out


def test_each_annotation_s_events_are_vertical_lines_in_its_colour():
    from matplotlib.colors import to_hex
    from matplotlib.figure import Figure

    ax = Figure().add_subplot()
    data = [("temp", dr.Series({}, np.array([0.0, 60.0, 120.0]), np.array([1.0, 2.0, 3.0])))]
    marks = [(f"marker {i}", np.array([60.0 * i]), dr.annotation_colour(c, i))
             for i, c in enumerate(["purple", "red", "yellow", "green", "blue"])]
    marks.append(("many events", np.array([0.0, 60.0, 120.0]), "#123456"))
    dd._draw_timeseries(ax, {}, data, "", marks)
    assert sorted(_vertical_lines(ax)) == sorted((t / 86400, to_hex(c)) for _, times, c in marks for t in times)


@pytest.mark.parametrize(
    ("icon", "index", "colour"),
    [("purple", 0, "#B877D9"), ("dark-red", 0, "#F2495C"), ("semi-dark-green", 0, "#73BF69"),
     ("#73BF69", 0, "#73bf69"), ("rgba(0, 211, 255, 1)", 0, "#00d3ff"), ("rgb(255,0,0)", 0, "#ff0000"),
     (None, 3, "C3"), ("not-a-colour", 11, "C1"), ("rgb(300, 0, 0)", 0, "C0")],
    ids=["Grafana's purple", "a dark shade as its base colour", "a semi-dark shade", "hex", "Grafana's default rgba",
         "rgb", "none: the colour cycle", "unknown: the cycle, wrapped", "an rgb out of range"],
)
def test_annotation_colour(icon, index, colour):
    assert dr.annotation_colour(icon, index) == colour


def _series(*rows: list[float], step: float = 60.0) -> list[tuple[str, dr.Series]]:
    """One series per row on the steps 0, step, ...; NaN in a row = no sample at that step (left out)."""
    out = []
    for i, row in enumerate(rows):
        values = np.array(row, dtype=float)
        times = np.arange(len(values)) * step
        there = ~np.isnan(values)
        out.append((f"s{i}", dr.Series({}, times[there], values[there])))
    return out


def test_a_stack_adds_a_missing_series_as_zero_and_is_a_gap_where_every_series_is_missing():
    nan = np.nan
    data = _series([32, 256, nan, nan, 32], [112, nan, nan, nan, 112], [112, nan, nan, nan, 112])
    _, values = dd.on_grid(data, 0, 240, 60)
    stacked = dd.stack_values(values)
    np.testing.assert_array_equal(stacked[:, [0, 1, 4]], [[32, 256, 32], [112, 0, 112], [112, 0, 112]])
    assert np.isnan(stacked[:, [2, 3]]).all()


def test_a_stacked_panel_never_reads_more_than_its_series_hold_at_one_step():
    """The demo's exporter outage: one evaluation recorded every GPU idle (256) while the classes (112 + 112) were
    already gone. Interpolated across the outage, the stack read 256 + 112 + 112 = 480 on a 256-GPU fleet."""
    from matplotlib.figure import Figure

    nan = np.nan
    data = _series([32, 256, nan, nan, 32], [112, nan, nan, nan, 112], [112, nan, nan, nan, 112])
    ax = Figure().add_subplot()
    dd._draw_timeseries(ax, {"fieldConfig": {"defaults": {"custom": {"stacking": {"mode": "normal"}}}}}, data,
                        "none", [], (0, 240, 60))
    assert ax.dataLim.y1 == 256


def test_a_line_is_broken_where_its_series_has_no_sample():
    from matplotlib.figure import Figure

    nan = np.nan
    ax = Figure().add_subplot()
    dd._draw_timeseries(ax, {}, _series([224, 224, nan, nan, 224, 224]), "none", [], (0, 300, 60))
    (line,) = [ln for ln in ax.get_lines() if ln.get_label() == "s0"]
    y = np.asarray(line.get_ydata(), dtype=float)
    assert np.isnan(y[2:4]).all() and (y[[0, 1, 4, 5]] == 224).all()


def test_a_table_panel_lists_the_labels_that_differ_and_maps_values():
    data = [(n, dr.Series({"__name__": "gpu:xid_last:code", "cluster": "c", "UUID": u, "hostname": "n0"},
                          np.array([0.0]), np.array([v]))) for n, u, v in (("a", "GPU-1", 79), ("b", "GPU-2", 0))]
    mappings = [{"type": "value", "options": {"0": {"text": "none", "color": "green"}}}]
    assert dd.table_rows(data, "none", mappings) == (["UUID", "Value"], [["GPU-1", "79"], ["GPU-2", "none"]])


def test_no_panel_draws_into_another_panel(monkeypatch, tmp_path):
    """The XID table was drawn as bars named by every label of each series; the names ran left across the 'GPUs with
    an XID error' stat beside it. Everything a panel draws (its tight box: tick labels, texts, tables) stays off the
    other panels' boxes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figures = []
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: figures.append(self))
    plain = FakePrometheus.result

    def with_uuids(params):
        out = plain(params)
        for i, item in enumerate(out):
            item["metric"]["UUID"] = f"GPU-0000f00{i}-dfa0-400f-a00{i}-0000000f000{i}"
        return out

    fake = FakePrometheus()
    fake.result = with_uuids
    try:
        dr.render(fake.url, tmp_path, uid="gputide-gpu-fleet", range_s=3600, end=1_700_000_000)
    finally:
        fake.close()
    (fig,) = figures
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    panels = [ax for ax in fig.axes if ax.get_title(loc="left")]
    spills = [(ax.get_title(loc="left"), other.get_title(loc="left")) for ax in panels for other in panels
              if other is not ax and ax.get_tightbbox(renderer).overlaps(other.get_window_extent(renderer))]
    assert not spills


def test_hidden_queries_are_not_run_and_a_panel_with_every_query_hidden_is_without_data(tmp_path, capsys):
    """Grafana runs neither a query hidden in the editor (`hide: true`) nor one without an expression: both were sent
    to Prometheus, a hidden query's series drawn and counted (audit s39); a target without `expr` at all (a leftover
    refId, a server-side expression) had the dashboard refused, exit 2 (review r3). A panel whose every query is
    hidden is blank in Grafana: "No data", counted under --require-data (audit s39)."""
    grid = {"x": 0, "y": 0, "w": 12, "h": 8}
    panels = [{"type": "timeseries", "title": "Temperature", "gridPos": grid,
               "targets": [{"expr": "gpu:temp", "hide": False}, {"expr": "gpu:hidden_helper", "hide": True},
                           {"expr": ""}, {"refId": "D"}, {"refId": "E", "type": "math", "expression": "$A / 2"}]},
              {"type": "stat", "title": "All hidden", "gridPos": grid | {"x": 12},
               "targets": [{"expr": "count(hidden)", "hide": True}]}]
    (tmp_path / "board.json").write_text(json.dumps({"title": "t", "panels": panels}))
    fake = FakePrometheus()
    try:
        report = dr.render(fake.url, tmp_path / "png", dashboards_dir=tmp_path, end=1_700_000_000)
        code = cli.main(["dashboards", "render", "--prometheus", fake.url, "--out", str(tmp_path / "png"),
                         "--dashboards-dir", str(tmp_path), "--require-data"])
    finally:
        fake.close()
    sent = [q["query"] for q in fake.queries if q["path"] == "/api/v1/query_range"]
    assert sent == ["gpu:temp", "gpu:temp"], "one render each, the hidden, empty and expr-less queries not sent"
    assert report.series == {"board": {"Temperature": len(GPUS), "All hidden": 0}}
    assert report.empty_panels == {"board": ["All hidden"]}
    assert code == 1 and "board: no data for All hidden" in capsys.readouterr().err


EXPR_REF = {"type": "__expr__", "uid": "__expr__"}


@pytest.mark.parametrize(("panel_type", "datasource"), [
    pytest.param("stat", EXPR_REF, id="a stat"),
    pytest.param("grafana-polystat-panel", EXPR_REF, id="a plugin's panel"),
    pytest.param("stat", "__expr__", id="the expression data source by name (older Grafana)"),
    pytest.param("stat", {"uid": "__expr__"}, id="the expression data source by uid only"),
])
def test_a_panel_drawing_a_server_side_expression_of_a_hidden_query_is_not_a_panel_without_data(
        fake_prometheus, tmp_path, capsys, panel_type, datasource):
    """Grafana runs a hidden query a server-side expression refers to (grafana/grafana#84977) and draws the
    expression's result: a stat of `$A * 2`, its query A hidden, shows data in Grafana. It was "No data", counted,
    --require-data exiting 1 (audit a10). The expression is not evaluated here: listed apart, not counted."""
    grid = {"x": 0, "y": 0, "w": 12, "h": 8}
    doubled = {"type": panel_type, "title": "Doubled", "gridPos": grid | {"x": 12},
               "targets": [{"refId": "A", "expr": "gpu:temp_hidden", "hide": True},
                           {"refId": "B", "datasource": datasource, "type": "math", "expression": "$A * 2"}]}
    panels = [{"type": "stat", "title": "Temperature", "gridPos": grid, "targets": [{"expr": "gpu:temp"}]}, doubled]
    (tmp_path / "board.json").write_text(json.dumps({"title": "t", "panels": panels}))
    args = ["--prometheus", fake_prometheus.url, "--out", str(tmp_path / "png"), "--dashboards-dir", str(tmp_path)]
    assert cli.main(["dashboards", "render", *args, "--require-data"]) == 0, capsys.readouterr().err
    err = capsys.readouterr().err   # said with its own reason, not "as expected without MIG GPUs"
    assert "board: no data, as expected here (server-side expression, not evaluated here), for Doubled" in err, err
    assert "MIG" not in err, err
    report = dr.render(fake_prometheus.url, tmp_path / "again", dashboards_dir=tmp_path, end=1_700_000_000)
    assert report.empty_panels == {"board": []} and report.not_applicable == {"board": ["Doubled"]}
    assert report.series == {"board": {"Temperature": len(GPUS), "Doubled": 0}}
    asked = [q.get("query") for q in fake_prometheus.queries]
    assert "gpu:temp" in asked and "gpu:temp_hidden" in asked, "the hidden query is run, its series not drawn"


def _render_board(tmp_path, panels: list[dict], missing: tuple[str, ...]) -> tuple[int, dr.RenderReport]:
    """`panels` as one dashboard, "board", against a fake Prometheus without `missing`: the exit status of
    `dashboards render --require-data` and the report of a render."""
    (tmp_path / "board.json").write_text(json.dumps({"title": "t", "panels": panels}))
    fake = FakePrometheus(missing=missing)
    try:
        code = cli.main(["dashboards", "render", "--prometheus", fake.url, "--out", str(tmp_path / "png"),
                         "--dashboards-dir", str(tmp_path), "--require-data"])
        return code, dr.render(fake.url, tmp_path / "again", dashboards_dir=tmp_path, end=1_700_000_000)
    finally:
        fake.close()


@pytest.mark.parametrize("leftover", [
    pytest.param([], id="only the expression's hidden input"),
    pytest.param([{"refId": "C"}], id="and a leftover target without expr"),
    pytest.param([{"refId": "C", "datasource": {"type": "prometheus", "uid": "prom"}}],
                 id="and a Prometheus target without expr"),
])
def test_a_server_side_expression_whose_hidden_input_returns_nothing_is_a_panel_without_data(tmp_path, capsys,
                                                                                              leftover):
    """B = $A * 2 with A a missing series: Grafana shows "No data", so --require-data fails (audit a14). It was
    excused as "server-side expression, not evaluated here" whatever its input returned, exit 0."""
    grid = {"x": 0, "y": 0, "w": 12, "h": 8}
    doubled = {"type": "stat", "title": "Doubled", "gridPos": grid | {"x": 12},
               "targets": [{"refId": "A", "expr": "gpu:temp_missing", "hide": True},
                           {"refId": "B", "datasource": EXPR_REF, "type": "math", "expression": "$A * 2"},
                           *leftover]}
    panels = [{"type": "stat", "title": "Temperature", "gridPos": grid, "targets": [{"expr": "gpu:temp"}]}, doubled]
    code, report = _render_board(tmp_path, panels, ("gpu:temp_missing",))
    err = capsys.readouterr().err
    assert code == 1 and "board: no data for Doubled" in err and "server-side expression" not in err, err
    assert report.empty_panels == {"board": ["Doubled"]} and report.not_applicable == {}
    assert report.not_applicable_why == {}


def test_a_server_side_expression_of_another_data_source_s_query_is_not_a_panel_without_data(fake_prometheus,
                                                                                              tmp_path):
    """An expression over a query this renderer cannot run (a SQL target, no `expr`) may well have data in Grafana:
    listed apart with the expression's reason, not counted."""
    grid = {"x": 0, "y": 0, "w": 12, "h": 8}
    targets = [{"refId": "A", "datasource": {"type": "postgres", "uid": "pg"}, "rawSql": "SELECT 1", "hide": True},
               {"refId": "B", "datasource": EXPR_REF, "type": "math", "expression": "$A * 2"}]
    (tmp_path / "board.json").write_text(json.dumps(
        {"title": "t", "panels": [{"type": "stat", "title": "Doubled", "gridPos": grid, "targets": targets}]}))
    report = dr.render(fake_prometheus.url, tmp_path / "png", dashboards_dir=tmp_path, end=1_700_000_000)
    assert report.empty_panels == {"board": []} and report.not_applicable == {"board": ["Doubled"]}
    assert report.not_applicable_why == {"board": [("Doubled", dr.EXPRESSION_WHY)]}


def test_an_expression_over_a_query_of_its_panels_data_source_is_not_a_panel_without_data(fake_prometheus, tmp_path):
    """An older dashboard keeps the data source on the panel, its SQL target naming none: the expression over it may
    well have data in Grafana, so it is listed apart, not counted (it was counted: audit a15)."""
    grid = {"x": 0, "y": 0, "w": 12, "h": 8}
    targets = [{"refId": "A", "rawSql": "SELECT 1", "hide": True},
               {"refId": "B", "datasource": EXPR_REF, "type": "math", "expression": "$A * 2"}]
    panel = {"type": "stat", "title": "Doubled", "gridPos": grid, "targets": targets,
             "datasource": {"type": "postgres", "uid": "pg"}}
    (tmp_path / "board.json").write_text(json.dumps({"title": "t", "panels": [panel]}))
    report = dr.render(fake_prometheus.url, tmp_path / "png", dashboards_dir=tmp_path, end=1_700_000_000)
    assert report.empty_panels == {"board": []} and report.not_applicable == {"board": ["Doubled"]}


def test_two_panels_sharing_a_title_are_each_said_with_their_own_reason(tmp_path, capsys):
    """A MIG panel and a server-side expression's, both titled "X": each is listed with its own reason. The reasons
    were kept by title, so the second overwrote the first and both were said with one reason (audit a14)."""
    grid = {"x": 0, "y": 0, "w": 12, "h": 8}
    mig = {"type": "stat", "title": "X", "gridPos": grid, "targets": [{"expr": "gpu_instance:sm_active"}]}
    expression = {"type": "stat", "title": "X", "gridPos": grid | {"x": 12},
                  "targets": [{"refId": "A", "expr": "gpu:temp", "hide": True},
                              {"refId": "B", "datasource": EXPR_REF, "type": "math", "expression": "$A * 2"}]}
    code, report = _render_board(tmp_path, [mig, expression], ("gpu_instance:",))
    err = capsys.readouterr().err
    assert code == 0, err
    assert "board: no data, as expected here (no MIG GPU in this Prometheus), for X" in err, err
    assert f"board: no data, as expected here ({dr.EXPRESSION_WHY}), for X" in err, err
    assert report.not_applicable == {"board": ["X", "X"]}
    assert report.not_applicable_why == {"board": [("X", "no MIG GPU in this Prometheus"), ("X", dr.EXPRESSION_WHY)]}
