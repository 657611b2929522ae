"""Bad input to `gputide dashboards build|render` exits 2 with one line naming the file or flag, the field, the value
and what is allowed (audit s38): `{"title": 5}` in --dashboards-dir was drawn to a PNG, exit 0; `build --out /nope
--check` said every dashboard was "out of date", exit 1; a panel's bad key, a non-UTF-8 JSON file in `build --out`,
a proxy's HTML error page were tracebacks; a --range or --step Prometheus cannot answer was blamed on it (exit 1)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from balancer.cli import main

PROM = "http://127.0.0.1:1"   # nothing answers there: every refusal comes before a query
GRID = {"x": 0, "y": 0, "w": 12, "h": 8}
STAT = {"type": "stat", "title": "GPUs", "gridPos": GRID, "targets": [{"expr": "count(up)"}]}


def _one_error(capsys, code: int) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("gputide: error: "), err
    return lines[0]


def _render(tmp_path: Path, dashboard: object, *extra: str) -> int:
    boards = tmp_path / "boards"
    boards.mkdir()
    (boards / "board.json").write_text(json.dumps(dashboard))
    return main(["dashboards", "render", "--prometheus", PROM, "--out", str(tmp_path / "png"),
                 "--dashboards-dir", str(boards), *extra])


def test_a_json_object_that_is_not_a_dashboard_is_refused_naming_file_field_value_and_allowed(tmp_path, capsys):
    line = _one_error(capsys, _render(tmp_path, {"title": 5}))
    assert line == (f"gputide: error: {tmp_path / 'boards' / 'board.json'}: field 'title': invalid value 5; "
                    "allowed: a string")
    assert not (tmp_path / "png").exists(), "nothing is written for a refused dashboard"


@pytest.mark.parametrize(("dashboard", "field", "value", "allowed"), [
    pytest.param({"title": "t"}, "panels", "None", "a list (missing)", id="no panels"),
    pytest.param({"title": "t", "panels": {"a": STAT}}, "panels", "'(an object)'", "a list", id="panels an object"),
    pytest.param({"title": "t", "panels": ["stat"]}, "panels[0]", "'stat'", "an object", id="a panel not an object"),
    pytest.param({"title": "t", "panels": [{"type": "row"}, {"type": "stat"}]}, "panels[1].gridPos", "None",
                 "an object with x, y, w, h (missing)", id="a panel off the grid (a row needs none)"),
    pytest.param({"title": "t", "panels": [STAT | {"gridPos": GRID | {"x": 20}}]}, "panels[0].gridPos.w", "12",
                 "an integer from 1 to 4 (Grafana's grid is 24 columns wide)", id="a panel past the 24 columns"),
    pytest.param({"title": "t", "panels": [STAT | {"gridPos": GRID | {"y": 5000}}]}, "panels[0].gridPos.y", "5000",
                 "an integer from 0 to 1599 (a PNG holds at most 1600 grid rows)", id="a panel past the PNG's height"),
    pytest.param({"title": "t", "panels": [STAT | {"gridPos": GRID | {"h": 8.5}}]}, "panels[0].gridPos.h", "8.5",
                 "an integer", id="a fractional height"),
    pytest.param({"title": "t", "panels": [STAT | {"title": 7}]}, "panels[0].title", "7", "a string",
                 id="a panel title not a string"),
    pytest.param({"title": "t", "panels": [STAT | {"targets": [{"expr": "up", "hide": "true"}]}]},
                 "panels[0].targets[0].hide", "'true'", "true or false, 0 or 1, or null",
                 id="a query hidden by a string"),
    pytest.param({"title": "t", "panels": [STAT | {"targets": [{"expr": "up", "hide": 2}]}]},
                 "panels[0].targets[0].hide", "2", "true or false, 0 or 1, or null",
                 id="a query hidden by a number other than 0 or 1"),
    pytest.param({"title": "t", "panels": [STAT | {"targets": [{"expr": "up", "hide": 0.5}]}]},
                 "panels[0].targets[0].hide", "0.5", "true or false, 0 or 1, or null",
                 id="a query hidden by a fraction"),
    pytest.param({"title": "t", "panels": [STAT | {"fieldConfig": {"defaults": {"unit": ["watt"]}}}]},
                 "panels[0].fieldConfig.defaults.unit", "'(a list)'", "a string", id="a unit not a string"),
    pytest.param({"title": "t", "panels": [STAT | {"transformations": [{"id": "groupingToMatrix",
                                                                        "options": {"rowField": "hostname"}}]}]},
                 "panels[0].transformations[0].options", "'(an object)'",
                 "an object naming the rowField and the columnField of the grid (groupingToMatrix)",
                 id="a grid without its column field"),
    pytest.param({"title": "t", "panels": [], "templating": {"list": [{"type": "query", "query": "up"}]}},
                 "templating.list[0].name", "None", "a string (missing)", id="a variable without a name"),
    pytest.param({"title": "t", "panels": [{"id": 3, "gridPos": GRID, "libraryPanel": "gpu-temp"}]},
                 "panels[0].libraryPanel", "'gpu-temp'", "an object",
                 id="a library panel whose reference is not an object"),
    pytest.param({"title": "t", "panels": [STAT | {"type": "table", "fieldConfig": {"defaults": {"mappings": [
        {"type": "value", "options": {"0": "none"}}]}}}]},
                 "panels[0].fieldConfig.defaults.mappings[0].options.0", "'none'", "an object or null",
                 id="a value mapping whose result is not an object"),
])
def test_a_dashboard_without_what_the_renderer_reads_exits_2(tmp_path, capsys, dashboard, field, value, allowed):
    line = _one_error(capsys, _render(tmp_path, dashboard))
    assert line == (f"gputide: error: {tmp_path / 'boards' / 'board.json'}: field '{field}': invalid value {value}; "
                    f"allowed: {allowed}")


def test_an_unknown_uid_among_dashboards_whose_uid_is_not_a_string_exits_2(tmp_path, capsys):
    """The list of the uids there was a TypeError traceback (str.join of an int)."""
    line = _one_error(capsys, _render(tmp_path, {"title": "t", "uid": 5, "panels": []}, "--dashboard", "x"))
    assert line.endswith("board.json: field 'uid': invalid value 5; allowed: a string")


@pytest.mark.parametrize(("flags", "field", "allowed"), [
    pytest.param(["--range", "99999999w"], "--range", "a positive duration such as 30m, 6h, 7d, at most 366d",
                 id="a range of two million years"),
    pytest.param(["--range", "7d", "--step", "1s"], "--step",
                 "at least 55s for --range 7d (Prometheus answers at most 11,000 steps, 11,001 points a series)",
                 id="more steps than Prometheus answers"),
    pytest.param(["--range", "22001s", "--step", "1s"], "--step",
                 "at least 2s for --range 22001s (Prometheus answers at most 11,000 steps, 11,001 points a series)",
                 id="the least step Prometheus answers, its division truncating (not 3s)"),
])
def test_a_range_prometheus_cannot_answer_exits_2_not_1(tmp_path, capsys, flags, field, allowed):
    code = main(["dashboards", "render", "--prometheus", PROM, "--out", str(tmp_path / "png"), *flags])
    line = _one_error(capsys, code)
    assert f"field '{field}'" in line and line.endswith(f"allowed: {allowed}")


def test_a_step_prometheus_answers_after_its_truncating_division_is_accepted(tmp_path, capsys):
    """Prometheus refuses only when int((end - start) / step) > 11000 (Go's Duration division): 22001s / 2s is
    11000.5 points, answered; it was refused, exit 2. Accepted, it goes on to query (nothing answers: exit 1)."""
    code = _render(tmp_path, {"title": "t", "panels": [STAT]}, "--range", "22001s", "--step", "2s")
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("gputide: error: cannot reach Prometheus at http://127.0.0.1:1"), err


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc, where no folder can be made")
@pytest.mark.parametrize("action", [["render", "--prometheus", PROM], ["build"]])
def test_an_out_folder_that_cannot_be_made_exits_2(capsys, action):
    """mkdir's FileNotFoundError was a traceback (root makes folders anywhere else; /proc refuses even root)."""
    line = _one_error(capsys, main(["dashboards", *action, "--out", "/proc/gputide-no-such/png"]))
    assert "field '--out': invalid value '/proc/gputide-no-such/png'" in line and "No such file" in line


class _Proxy:
    """A reverse proxy in front of a Prometheus that is down: HTTP 502 with an HTML page."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                self.send_response(502)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(b"<html><body><h1>502 Bad Gateway</h1></body></html>")

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_an_html_error_page_from_a_proxy_exits_1_quoting_it(tmp_path, capsys):
    """Its JSON parse, in the handler of the HTTP error, was a JSONDecodeError traceback."""
    proxy = _Proxy()
    try:
        code = main(["dashboards", "render", "--prometheus", proxy.url, "--out", str(tmp_path),
                     "--dashboard", "gputide-balancer"])
    finally:
        proxy.close()
    err = capsys.readouterr().err
    assert code == 1, err
    assert err.startswith("gputide: error: /api/v1/query_range: HTTP 502: <html><body><h1>502 Bad Gateway"), err


def test_build_check_against_a_missing_folder_exits_2_saying_so(tmp_path, capsys):
    out = tmp_path / "nope"
    line = _one_error(capsys, main(["dashboards", "build", "--out", str(out), "--check"]))
    assert line == (f"gputide: error: field '--out': invalid value {str(out)!r}; allowed: an existing folder: --check "
                    "compares the dashboards' JSON files there with what the Python sources generate "
                    "(no such folder)")
    assert not out.exists()


@pytest.mark.parametrize("check", [["--check"], []], ids=["--check", "build"])
def test_build_where_a_dashboard_file_cannot_be_read_or_written_exits_2(tmp_path, capsys, check):
    """A folder in the place of gpu-fleet.json was an IsADirectoryError traceback, reading it (--check) or writing."""
    pytest.importorskip("grafana_foundation_sdk")
    (tmp_path / "gpu-fleet.json").mkdir()
    line = _one_error(capsys, main(["dashboards", "build", "--out", str(tmp_path), *check]))
    assert f"field '--out': invalid value {str(tmp_path)!r}" in line and "Is a directory" in line


def test_build_check_with_a_json_file_not_utf8_exits_2(tmp_path, capsys):
    pytest.importorskip("grafana_foundation_sdk")
    (tmp_path / "gpu-fleet.json").write_bytes(b"\xff\xfe{}")
    line = _one_error(capsys, main(["dashboards", "build", "--out", str(tmp_path), "--check"]))
    assert "field '--out'" in line and "can't decode byte 0xff" in line


def _require_data(tmp_path: Path, panels: list[dict]) -> int:
    """`panels` on one dashboard in `tmp_path`, rendered against a Prometheus with data, --require-data: the exit."""
    from test_dashboards_render import FakePrometheus

    (tmp_path / "board.json").write_text(json.dumps({"title": "t", "panels": panels}))
    fake = FakePrometheus()
    try:
        return main(["dashboards", "render", "--prometheus", fake.url, "--out", str(tmp_path / "png"),
                     "--dashboards-dir", str(tmp_path), "--require-data"])
    finally:
        fake.close()


def _render_with_data(tmp_path: Path, capsys, panels: list[dict]) -> None:
    """`panels` on one dashboard, rendered against a Prometheus with data, --require-data: exit 0 and a PNG."""
    code = _require_data(tmp_path, panels)
    assert code == 0, capsys.readouterr().err
    assert (tmp_path / "png" / "board.png").read_bytes()[:4] == b"\x89PNG"


def _rendered(tmp_path: Path):
    """The dashboards in `tmp_path` rendered against a Prometheus with data: the report and the queries it was sent."""
    from test_dashboards_render import FakePrometheus

    from balancer import dashboards_render as dr

    fake = FakePrometheus()
    try:
        report = dr.render(fake.url, tmp_path / "again", dashboards_dir=tmp_path, end=1_700_000_000)
    finally:
        fake.close()
    return report, [q.get("query") for q in fake.queries]


@pytest.mark.parametrize("panel_type", ["stat", "timeseries", "heatmap", "table", "bargauge"])
def test_a_panel_one_column_wide_and_one_row_high_is_drawn(tmp_path, capsys, panel_type):
    """Grafana's least panel (w 1, h 1) was a negative axes size, a matplotlib ValueError traceback."""
    _render_with_data(tmp_path, capsys, [{"type": panel_type, "title": "tiny", "gridPos": {"x": 3, "y": 2, "w": 1,
                                                                                          "h": 1},
                                          "targets": [{"expr": "gpu:temp"}]}])


@pytest.mark.parametrize("panel_type", ["table", "stat"])
@pytest.mark.parametrize("mapping", [
    pytest.param({"type": "range", "options": {"from": 0, "to": 50, "result": {"text": "cool", "index": 0}}},
                 id="range"),
    pytest.param({"type": "regex", "options": {"pattern": "^4.*", "result": {"text": "forties", "index": 1}}},
                 id="regex"),
    pytest.param({"type": "special", "options": {"match": "null", "result": {"text": "N/A", "index": 2}}},
                 id="special"),
])
def test_grafana_range_regex_and_special_value_mappings_are_drawn(tmp_path, capsys, mapping, panel_type):
    """Their options hold scalars (from, to, pattern, match), not value -> {text}: checked as a `type: value`
    mapping's, every such dashboard was refused, exit 2. The renderer reads `type: value` mappings only."""
    value = {"type": "value", "options": {"40": {"text": "forty", "index": 3}}}
    _render_with_data(tmp_path, capsys, [STAT | {"type": panel_type, "targets": [{"expr": "gpu:temp"}],
                                                 "fieldConfig": {"defaults": {"mappings": [mapping, value]}}}])


def test_a_library_panel_reference_is_drawn_as_a_placeholder_not_refused_nor_without_data(tmp_path, capsys):
    """Grafana saves and exports a library panel as its place and a reference, no type: refused for its missing
    type (exit 2), and before that drawn as "No data" (exit 1 with --require-data). Its queries are in Grafana's
    library, not in the file: a placeholder saying so, neither drawn nor counted as without data."""
    from test_dashboards_render import GPUS

    library = {"id": 3, "gridPos": GRID | {"x": 12}, "libraryPanel": {"uid": "a1b2c3", "name": "Fleet temperature"}}
    _render_with_data(tmp_path, capsys, [STAT | {"targets": [{"expr": "gpu:temp"}]}, library])
    assert "board: library panels drawn as placeholders: Fleet temperature" in capsys.readouterr().err
    report, _ = _rendered(tmp_path)
    assert report.library_panels == {"board": ["Fleet temperature"]}
    assert report.empty_panels == {"board": []} and report.series == {"board": {"GPUs": len(GPUS)}}


def test_a_grid_transformation_without_options_is_drawn_as_a_table(tmp_path, capsys):
    """Grafana saves a `groupingToMatrix` step added but not yet set up with no `options`: the check lets it by
    (nothing to name the grid by) and the drawing read `t["options"]`, a KeyError traceback (review r2)."""
    _render_with_data(tmp_path, capsys, [STAT | {"type": "table", "targets": [{"expr": "gpu:temp"}],
                                                 "transformations": [{"id": "groupingToMatrix"}]}])


def test_a_text_panel_is_not_a_panel_without_data(tmp_path, capsys):
    """A text panel never queries (Grafana's `skipDataQuery`, whatever `targets` it kept from the type it was changed
    from): it was drawn as "No data", counted among the empty panels, and --require-data exited 1 for a dashboard
    whose every query had data. Its leftover queries are not run."""
    from test_dashboards_render import GPUS

    text = {"type": "text", "title": "Read me", "gridPos": GRID | {"x": 12}, "options": {"content": "# Notes"},
            "targets": [{"expr": "gpu:left_from_a_graph"}]}
    row = {"type": "row", "title": "More", "collapsed": False, "panels": [], "gridPos": GRID | {"y": 8, "h": 1}}
    _render_with_data(tmp_path, capsys, [STAT | {"targets": [{"expr": "gpu:temp"}]}, text, row])
    report, queries = _rendered(tmp_path)
    assert "gpu:left_from_a_graph" not in queries
    assert report.empty_panels == {"board": []} and report.series == {"board": {"GPUs": len(GPUS)}}


@pytest.mark.parametrize("targets", [{"targets": []}, {}], ids=["all removed", "no targets key"])
def test_a_query_panel_without_queries_is_a_panel_without_data(tmp_path, capsys, targets):
    """A stat (or graph, table...) whose queries were lost shows "No data" in Grafana: it was drawn as a text panel
    is, not counted, and --require-data passed a dashboard with a blank panel (audit s39)."""
    from test_dashboards_render import GPUS

    emptied = {k: v for k, v in STAT.items() if k != "targets"} | targets
    code = _require_data(tmp_path, [STAT | {"targets": [{"expr": "gpu:temp"}]},
                                    emptied | {"title": "Lost", "gridPos": GRID | {"y": 9}}])
    assert code == 1 and "board: no data for Lost" in capsys.readouterr().err
    report, _ = _rendered(tmp_path)
    assert report.empty_panels == {"board": ["Lost"]} and report.series == {"board": {"GPUs": len(GPUS), "Lost": 0}}


@pytest.mark.parametrize("panel_type", ["datagrid", "debug", "logstable", "logs-new", "xychart2"])
def test_grafanas_experimental_query_panels_without_queries_are_panels_without_data(tmp_path, capsys, panel_type):
    """Grafana's own datagrid (experimental), debug, logs table, new logs and XY chart 2 panels run their queries
    (their plugin.json has no `skipDataQuery`) and show "No data" without any: they were taken for a plugin's panel
    that never queries (not in QUERY_PANELS), drawn "runs no queries" and not counted, --require-data passing."""
    blank = {"type": panel_type, "title": "Blank", "gridPos": GRID | {"y": 9},
             "targets": [{"refId": "A", "expr": "gpu:hidden", "hide": True}]}
    code = _require_data(tmp_path, [STAT | {"targets": [{"expr": "gpu:temp"}]}, blank | {"targets": []},
                                    blank | {"title": "Hidden", "gridPos": GRID | {"x": 12, "y": 9}}])
    assert code == 1 and "board: no data for Blank, Hidden" in capsys.readouterr().err


def test_grafanas_alert_history_panel_runs_no_queries(tmp_path, capsys):
    """Grafana's alert state history panel (`alertStateHistory`, `skipDataQuery`) draws from Grafana's own API: a
    leftover query in it was run and counted as a plugin's panel's."""
    from test_dashboards_render import GPUS

    history = {"type": "alertStateHistory", "title": "History", "gridPos": GRID | {"x": 12},
               "targets": [{"expr": "gpu:left_from_a_graph"}]}
    _render_with_data(tmp_path, capsys, [STAT | {"targets": [{"expr": "gpu:temp"}]}, history])
    report, queries = _rendered(tmp_path)
    assert "gpu:left_from_a_graph" not in queries
    assert report.empty_panels == {"board": []} and report.series == {"board": {"GPUs": len(GPUS)}}


@pytest.mark.parametrize("targets", [
    pytest.param({"targets": []}, id="targets empty"),
    pytest.param({}, id="no targets key"),
    pytest.param({"targets": [{"refId": "A", "expr": ""}]}, id="a leftover empty query"),
    pytest.param({"targets": [{"refId": "A"}]}, id="a leftover query without expr"),
    pytest.param({"targets": [{"refId": "A", "expr": None}]}, id="a leftover query whose expr is null"),
])
def test_a_plugin_panel_without_targets_is_not_a_panel_without_data(tmp_path, capsys, targets):
    """A plugin's panel that never queries (grafana-clock-panel) is not in QUERYLESS_PANELS, Grafana's own: it was
    "No data", counted, and --require-data exited 1 for a dashboard whose every query had data (audit a7); so was one
    that kept an empty target Grafana does not run, and one whose target has no `expr` (or `"expr": null`, audit a10)
    was refused, exit 2 (review r3). A plugin's panel with a query Grafana runs is queried and counted as before."""
    from test_dashboards_render import GPUS

    clock = {"type": "grafana-clock-panel", "title": "Clock", "gridPos": GRID | {"x": 12}} | targets
    polystat = {"type": "grafana-polystat-panel", "title": "Hex", "gridPos": GRID | {"y": 9},
                "targets": [{"expr": "gpu:temp"}]}
    _render_with_data(tmp_path, capsys, [STAT | {"targets": [{"expr": "gpu:temp"}]}, clock, polystat])
    report, queries = _rendered(tmp_path)
    assert queries.count("gpu:temp") == 2 and "gpu:clock_left" not in queries
    assert report.empty_panels == {"board": []} and report.series == {"board": {"GPUs": len(GPUS), "Hex": len(GPUS)}}


def test_a_plugin_panel_whose_every_query_is_hidden_is_a_panel_without_data(tmp_path, capsys):
    """A plugin's panel made to query, its every query then hidden, is blank in Grafana as a built-in one is: it was
    taken for one that never queries, drawn "runs no queries" (it has queries) and not counted, --require-data passing
    a dashboard with a blank panel (audit a10)."""
    from test_dashboards_render import GPUS

    hex_ = {"type": "grafana-polystat-panel", "title": "Hex", "gridPos": GRID | {"x": 12},
            "targets": [{"refId": "A", "expr": "gpu:hex_hidden", "hide": True}]}
    code = _require_data(tmp_path, [STAT | {"targets": [{"expr": "gpu:temp"}]}, hex_])
    assert code == 1 and "board: no data for Hex" in capsys.readouterr().err
    report, queries = _rendered(tmp_path)
    assert "gpu:hex_hidden" not in queries, "a hidden query is not run"
    assert report.empty_panels == {"board": ["Hex"]} and report.series == {"board": {"GPUs": len(GPUS), "Hex": 0}}


@pytest.mark.parametrize("target", [
    pytest.param({"legendFormat": "{{gpu}}"}, id="a query without its expression"),
    pytest.param({"refId": "B", "expr": None}, id="a query whose expression is null"),
    pytest.param({"refId": "B", "hide": True}, id="a hidden query without its expression"),
    pytest.param({"refId": "C", "datasource": {"type": "__expr__", "uid": "__expr__"}, "type": "math",
                  "expression": "$A * 2"}, id="a server-side expression"),
])
def test_a_query_without_its_expression_is_not_run_nor_refused(tmp_path, capsys, target):
    """Grafana's Prometheus data source leaves out a target without `expr` (its filterQuery, `!query.expr`): a
    leftover {"refId": "B"}, a server-side expression (math, reduce: `expression`, no `expr`). The dashboard was
    refused for its missing `expr`, exit 2 (review r3), and for `"expr": null` (audit a10); the panel is drawn from
    its other queries, that one not run, and a text panel keeping such a target is drawn as any text panel."""
    from test_dashboards_render import GPUS

    text = {"type": "text", "title": "Read me", "gridPos": GRID | {"x": 12}, "targets": [{"refId": "A"}]}
    _render_with_data(tmp_path, capsys, [STAT | {"targets": [{"refId": "A", "expr": "gpu:temp"}, target]}, text])
    report, queries = _rendered(tmp_path)
    assert [q for q in queries if q is not None] == ["gpu:temp"]
    assert report.empty_panels == {"board": []} and report.series == {"board": {"GPUs": len(GPUS)}}


@pytest.mark.parametrize(("shown", "hidden"), [(0, 1), (0.0, 1.0)], ids=["0 and 1", "0.0 and 1.0"])
def test_a_query_hidden_by_1_is_hidden_and_one_by_0_shown(tmp_path, capsys, shown, hidden):
    """Grafana's Prometheus data source leaves out a query whose `hide` is truthy (its filterQuery,
    `query.hide || !query.expr`): dashboards carry 0/1 for it as well as false/true, and `"hide": 0` was refused,
    exit 2. 1 hides the query as true does, 0 shows it as false does. JSON's 1.0 and 0.0 are the numbers 1 and 0 to
    Grafana (a tool writing floats saves `"hide": 1.0`): both were refused too. A fraction (0.5) still is."""
    from test_dashboards_render import GPUS

    _render_with_data(tmp_path, capsys, [STAT | {"targets": [{"expr": "gpu:temp", "hide": shown},
                                                             {"expr": "gpu:hidden", "hide": hidden}]}])
    report, queries = _rendered(tmp_path)
    assert "gpu:temp" in queries and "gpu:hidden" not in queries
    assert report.series == {"board": {"GPUs": len(GPUS)}}


def test_a_query_with_hide_null_is_not_hidden(tmp_path, capsys):
    """Grafana takes `"hide": null` for a query shown (true or 1 hides it): it was refused, exit 2 (audit a7)."""
    from test_dashboards_render import GPUS

    _render_with_data(tmp_path, capsys, [STAT | {"targets": [{"expr": "gpu:temp", "hide": None}]}])
    report, queries = _rendered(tmp_path)
    assert "gpu:temp" in queries and report.series == {"board": {"GPUs": len(GPUS)}}


def _collapsed(y: int, *panels: dict) -> dict:
    """A collapsed row at grid row `y`, holding `panels` as Grafana saves it."""
    return {"type": "row", "title": "Details", "collapsed": True, "gridPos": {"x": 0, "y": y, "w": 24, "h": 1},
            "panels": list(panels)}


@pytest.mark.parametrize(("dashboard", "field", "value", "allowed"), [
    pytest.param({"title": "t", "panels": [STAT, _collapsed(8, {"type": "stat", "title": "hidden"})]},
                 "panels[1].panels[0].gridPos", "None", "an object with x, y, w, h (missing)",
                 id="a panel off the grid inside a collapsed row"),
    pytest.param({"title": "t", "panels": [_collapsed(0, STAT | {"targets": [{"expr": 5, "legendFormat": "x"}]})]},
                 "panels[0].panels[0].targets[0].expr", "5", "a string or null",
                 id="a query whose expression is not a string inside a collapsed row"),
    pytest.param({"title": "t", "panels": [_collapsed(0, _collapsed(1, STAT))]}, "panels[0].panels[0].type",
                 "'row'", "a panel other than a row (a collapsed row holds panels, not rows)", id="a row in a row"),
    pytest.param({"title": "t", "panels": [{k: v for k, v in _collapsed(0, STAT).items() if k != "gridPos"}]},
                 "panels[0].gridPos", "None", "an object with x, y, w, h (missing)",
                 id="a collapsed row with panels and no place to open them at"),
    pytest.param({"title": "t", "panels": [_collapsed(0, STAT | {"gridPos": GRID | {"h": 1000}}),
                                           STAT | {"gridPos": GRID | {"y": 1, "h": 700}}]},
                 "panels[1].gridPos.h", "700", "a height ending within the 1600 grid rows a PNG holds (with the "
                 "collapsed rows above it opened, it starts at grid row 1001)",
                 id="a panel below a collapsed row pushed past the PNG's height"),
])
def test_a_collapsed_rows_panels_are_checked_as_the_others(tmp_path, capsys, dashboard, field, value, allowed):
    """A collapsed row keeps its panels inside it (`row.panels`): they were neither checked nor drawn, so a broken one
    passed and a dashboard was drawn without them."""
    line = _one_error(capsys, _render(tmp_path, dashboard))
    assert line == (f"gputide: error: {tmp_path / 'boards' / 'board.json'}: field '{field}': invalid value {value}; "
                    f"allowed: {allowed}")


def test_a_collapsed_rows_panels_are_queried_drawn_and_listed(tmp_path, capsys):
    """As Grafana shows them when the row is opened: its panels queried, counted (--require-data: an empty one fails),
    library panels in it listed as placeholders."""
    from test_dashboards_render import GPUS, FakePrometheus

    from balancer import dashboards_render as dr

    hidden = STAT | {"title": "Hidden power", "gridPos": GRID | {"y": 40}, "targets": [{"expr": "gpu:power"}]}
    library = {"gridPos": GRID | {"x": 12, "y": 40}, "libraryPanel": {"uid": "a1b2c3", "name": "Fleet temperature"}}
    panels = [STAT | {"targets": [{"expr": "gpu:temp"}]}, _collapsed(8, hidden, library),
              STAT | {"title": "Below", "gridPos": GRID | {"y": 9}, "targets": [{"expr": "gpu:clock"}]}]
    _render_with_data(tmp_path, capsys, panels)
    assert "board: library panels drawn as placeholders: Fleet temperature" in capsys.readouterr().err
    fake = FakePrometheus(missing=("gpu:power",))
    try:
        report = dr.render(fake.url, tmp_path / "again", dashboards_dir=tmp_path, end=1_700_000_000)
        code = main(["dashboards", "render", "--prometheus", fake.url, "--out", str(tmp_path / "png"),
                     "--dashboards-dir", str(tmp_path), "--require-data"])
    finally:
        fake.close()
    assert "gpu:power" in [q.get("query") for q in fake.queries]
    assert report.empty_panels == {"board": ["Hidden power"]} and report.library_panels == {
        "board": ["Fleet temperature"]}
    assert report.series == {"board": {"GPUs": len(GPUS), "Hidden power": 0, "Below": len(GPUS)}}
    assert code == 1 and "board: no data for Hidden power" in capsys.readouterr().err


def test_a_collapsed_rows_panels_are_placed_below_it_and_push_the_panels_below_down():
    """Grafana opening a row: its panels (saved at y 40 and 48, from when it was last open) go right below it (y 9,
    17), and the panels below the row move down by the 16 grid rows they take; a second collapsed row likewise."""
    from balancer import dashboards_render as dr

    top = STAT | {"title": "top"}
    a, b = STAT | {"title": "a", "gridPos": GRID | {"y": 40}}, STAT | {"title": "b", "gridPos": GRID | {"y": 48}}
    below = STAT | {"title": "below", "gridPos": GRID | {"y": 9}}
    c = STAT | {"title": "c", "gridPos": GRID | {"y": 3, "h": 4}}
    panels = [top, _collapsed(8, a, b), below, _collapsed(17, c), {"type": "row", "gridPos": GRID | {"y": 18}}]
    placed = [(where, p["title"], p["gridPos"]["y"]) for where, p in dr.layout(panels)[0]]
    assert placed == [("panels[0]", "top", 0), ("panels[1].panels[0]", "a", 9), ("panels[1].panels[1]", "b", 17),
                      ("panels[2]", "below", 25), ("panels[3].panels[0]", "c", 34)]
    assert a["gridPos"]["y"] == 40, "the dashboard itself is left as it is"


def test_a_library_panel_with_an_inline_copy_is_drawn_as_the_library_placeholder(tmp_path, capsys):
    """Some Grafana versions save a library panel's model beside its reference (type, queries): it was drawn from
    that copy, its queries run, though Grafana draws the library element's model. A placeholder like the others."""
    from test_dashboards_render import GPUS

    library = STAT | {"title": "Old copy", "gridPos": GRID | {"x": 12}, "targets": [{"expr": "gpu:stale_copy"}],
                      "libraryPanel": {"uid": "a1b2c3", "name": "Fleet temperature"}}
    _render_with_data(tmp_path, capsys, [STAT | {"targets": [{"expr": "gpu:temp"}]}, library])
    assert "board: library panels drawn as placeholders: Old copy" in capsys.readouterr().err
    report, queries = _rendered(tmp_path)
    assert "gpu:stale_copy" not in queries
    assert report.library_panels == {"board": ["Old copy"]} and report.series == {"board": {"GPUs": len(GPUS)}}


@pytest.mark.parametrize(("regex", "detail"), [("/(?<=a+)b/", "look-behind requires fixed-width pattern"),
                                               ("/(?u)x/", "ASCII and UNICODE flags are incompatible"),
                                               ("a{99999999999}", "the repetition number is too large"),
                                               (5, None)],
                         ids=["a regex Python cannot read", "a unicode flag (ValueError)",
                              "a repetition too large (OverflowError)", "not a string"])
def test_a_variables_regex_python_cannot_read_is_refused_when_loaded_naming_file_field_value(tmp_path, capsys, regex,
                                                                                              detail):
    """Refused before any PNG is written, naming the file (it was found mid-render, some PNGs written, naming the
    dashboard's uid), even where no panel repeats for the variable."""
    var = {"name": "node", "type": "query", "query": "label_values(x, hostname)", "regex": regex}
    line = _one_error(capsys, _render(tmp_path, {"title": "t", "uid": "u", "panels": [STAT],
                                                 "templating": {"list": [var]}}))
    assert line.startswith(f"gputide: error: {tmp_path / 'boards' / 'board.json'}: field 'templating.list[0].regex': "
                           f"invalid value {regex!r}; allowed: ")
    assert detail is None or detail in line
    assert not (tmp_path / "png").exists(), "nothing is written for a refused dashboard"
