"""A panel or row repeated for a variable (`repeat`) is one copy per value in Grafana, each titled with its value;
the PNG draws one panel holding every series, and titled it "Demand vs forecast: All" (tidal-capacity), which
Grafana never shows. Its title now has the values selected joined by ", ": every value the variable resolves to for
All, the one picked otherwise, the variable as written where it has none."""

from __future__ import annotations

from test_dashboards_render import FakePrometheus
from test_dashboards_title_variables import render_titles

from balancer import dashboards_render as dr

GRID = {"x": 0, "y": 1, "w": 6, "h": 8}
TEMPLATING = {"list": [
    {"name": "cluster", "type": "query", "includeAll": True, "allValue": ".*",
     "query": "label_values(gpu:temp, cluster)"},
    {"name": "node", "type": "query", "query": "label_values(gpu:temp, hostname)"},
    {"name": "pool", "type": "query", "includeAll": True, "query": "label_values(gpu:temp, pool)"},   # no values
]}
PANELS = [
    {"type": "row", "title": "GPUs on $node", "repeat": "node", "gridPos": {"x": 0, "y": 0, "w": 24, "h": 1}},
    {"type": "stat", "title": "$node in $cluster", "gridPos": GRID, "targets": [{"expr": "gpu:temp"}]},
    {"type": "row", "title": "Clusters", "gridPos": {"x": 0, "y": 9, "w": 24, "h": 1}},
    {"type": "stat", "title": "${cluster} fleet on $node", "repeat": "cluster", "gridPos": GRID | {"y": 10},
     "targets": [{"expr": "gpu:temp"}]},
    {"type": "text", "title": "Pool $pool in $cluster", "repeat": "pool", "gridPos": GRID | {"x": 6, "y": 10}},
    {"type": "row", "title": "Per $cluster", "repeat": "cluster", "collapsed": True,
     "gridPos": {"x": 0, "y": 18, "w": 24, "h": 1},
     "panels": [{"type": "text", "title": "In $cluster", "gridPos": GRID | {"y": 19}}]},
]
VALUES = {"cluster": ["c2", "c1"], "hostname": ["node-a", "node-b"]}


def test_repeated_rows_and_panels_are_titled_with_the_values_selected(monkeypatch, tmp_path):
    """A repeated All variable: every value it resolves to (in its order); a repeated one-value variable: that value,
    and so for the panels of a repeated row, open or collapsed; a repeated variable without values: as written; a
    variable not repeated for: its text, All."""
    board = {"title": "t", "panels": PANELS, "templating": TEMPLATING}
    report, _, titles, rows = render_titles(monkeypatch, tmp_path, board, VALUES)
    assert rows == ["GPUs on node-a", "Clusters", "Per c2, c1"]
    assert titles == ["node-a in All", "c2, c1 fleet on node-a", "Pool $pool in All", "In c2, c1"]
    assert list(report.series["board"]) == ["$node in $cluster", "${cluster} fleet on $node"]


class _Answers:
    """A Prometheus answering each instant query with one series per service, as a query_result variable reads it."""

    def __init__(self, services: list[str]) -> None:
        self.services, self.asked = services, []

    def query(self, expr: str, at: float) -> dict:
        self.asked.append((expr, at))
        return {"resultType": "vector", "result": [{"metric": {"service": s, "cluster": "c1"}, "value": [at, "1"]}
                                                   for s in self.services]}

    def label_values(self, match: str, label: str) -> list[str]:
        return ["c1"]


def test_tidal_capacitys_demand_panel_is_titled_with_every_service_it_draws():
    """The committed dashboard's repeated panel: its `service` variable is All, a query_result read through the
    variable's regex at the render's end, over its range; the title names every service, not "All"."""
    [(_, board)] = dr.load_dashboards(dr.DEFAULT_DASHBOARDS_DIR, "gputide-tidal-capacity")   # regexes compiled
    prometheus = _Answers(["batch", "team-a/chat"])
    chosen = dr.selections(board, prometheus, (1_700_000_000.0, 7200, 60))
    assert (chosen["service"].value, chosen["service"].options) == (".*", ("batch", "team-a/chat"))
    ((expr, at),) = prometheus.asked   # one instant query (`PromClient.query`) at the render's end
    assert at == 1_700_000_000.0 and "[7200s]" in expr and "$" not in expr.split('"$1"')[0]
    ((where, panel),) = [(w, p) for w, p in dr.layout(board["panels"])[0] if p.get("repeat")]
    title = dr.repeat_title(panel["title"], chosen, dr.repeats(board["panels"])[where])
    assert title == "Demand vs forecast: batch, team-a/chat"
    assert dr.repeat_title(panel["title"], dr.selections(board, _Answers([])), ("service",)) == panel["title"]


def test_a_variables_regex_picks_its_values_as_grafana_reads_it():
    found = ['x{service="a"} 1 2', 'x{service="b"} 1 2', 'y{other="c"} 1 2', 'x{service="a"} 3 4']
    assert dr._matched(found, dr._js_regex('/service="([^"]+)"/')) == ["a", "b"]
    assert dr._matched(found, dr._js_regex('/(?<text>x)\\{service="(?<value>[^"]+)"/')) == ["a", "b"]
    assert dr._matched(["node-a", "Node-b", "gpu-c"], dr._js_regex("/^node/i")) == ["node-a", "Node-b"]
    assert dr._matched(["node-a", "node-ab"], dr._js_regex("node-a")) == ["node-a"]   # no slashes: the whole text


def test_a_query_result_variable_is_one_instant_query_at_the_renders_end(tmp_path):
    """Grafana runs query_result as an instant query (/api/v1/query); it was a range query with start = end, over
    `last_over_time(...[$__range])`. Through the HTTP API: tidal-capacity's service query asked once, at --end."""
    fake = FakePrometheus()
    try:
        dr.render(fake.url, tmp_path, uid="gputide-tidal-capacity", end=1_700_000_000)
    finally:
        fake.close()
    service = [q for q in fake.queries if "group by (service) (label_replace(last_over_time(" in q.get("query", "")]
    assert [(q["path"], q["time"]) for q in service] == [("/api/v1/query", "1700000000.000")]


def test_query_result_texts_are_written_as_grafanas_metric_find_query_writes_them():
    vector = {"resultType": "vector", "result": [{"metric": {"__name__": "up", "job": "a"}, "value": [1.5, "1e+00"]},
                                                 {"metric": {}, "value": [2, "NaN"]}]}
    assert dr._result_texts(vector) == ['up{job="a"} 1e+00 1500', "{} NaN 2000"]
    assert dr._result_texts({"resultType": "scalar", "result": [2, "42"]}) == ["42"]
    assert dr._result_texts({"resultType": "matrix", "result": [{"metric": {}, "values": [[1, "1"]]}]}) == []
