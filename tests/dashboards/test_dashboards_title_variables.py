"""Rows' and panels' titles are drawn with their template variables filled, as Grafana shows them: a row "GPUs on
$node" was drawn with the literal `$node` while the queries below it asked for one node. The titles get the
variables' texts (the node's name, "All"), the queries the same selection as a PromQL regex."""

from __future__ import annotations

import json

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from test_dashboards_render import FakePrometheus

from balancer import dashboards_render as dr

GRID = {"x": 0, "y": 1, "w": 6, "h": 8}
TEMPLATING = {"list": [
    {"name": "cluster", "type": "query", "includeAll": True, "allValue": ".*",
     "query": "label_values(gpu:temp, cluster)"},
    {"name": "node", "type": "query", "query": {"query": "label_values(gpu:temp{cluster=~\"$cluster\"}, hostname)"}},
    {"name": "pool", "type": "query", "query": "label_values(gpu:temp, pool)"},   # no values
]}
PANELS = [
    {"type": "row", "title": "GPUs on $node", "gridPos": {"x": 0, "y": 0, "w": 24, "h": 1}},
    {"type": "stat", "title": "${cluster} fleet, [[node]] in $pool", "gridPos": GRID,
     "targets": [{"expr": 'gpu:temp{hostname=~"$node"}'}]},
    {"type": "text", "title": "Notes on $node over $__rate_interval", "gridPos": GRID | {"x": 6}},
    {"title": "Library $node", "gridPos": GRID | {"x": 12}, "libraryPanel": {"uid": "u", "name": "n"}},
    {"type": "row", "title": "$nodeless", "gridPos": {"x": 0, "y": 9, "w": 24, "h": 1}},
]


def render_titles(monkeypatch, tmp_path, board: dict, values: dict[str, list[str]]):
    """`board` rendered against a fake Prometheus whose label values are `values`' (by label): the report, the range
    queries sent, the panels' titles drawn and the rows' headers, in the figure's order."""
    figures = []
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: figures.append(self))
    monkeypatch.setattr(dr.PromClient, "label_values", lambda self, match, label: values.get(label, []))
    boards = tmp_path / "boards"
    boards.mkdir()
    (boards / "board.json").write_text(json.dumps(board))
    fake = FakePrometheus()
    try:
        report = dr.render(fake.url, tmp_path / "png", dashboards_dir=boards, end=1_700_000_000)
    finally:
        fake.close()
    (fig,) = figures
    fig.draw(FigureCanvasAgg(fig).get_renderer())
    titles = [ax.get_title(loc="left") for ax in fig.axes if ax.get_title(loc="left")]
    rows = [ax.texts[0].get_text() for ax in fig.axes if not ax.get_title(loc="left") and len(ax.texts) == 1]
    return report, [q["query"] for q in fake.queries if q["path"] == "/api/v1/query_range"], titles, rows


def test_rows_and_panels_titles_are_drawn_with_the_variables_texts(monkeypatch, tmp_path):
    """Each title drawn filled ($var, ${var}, [[var]]): the first node as it is named, "All", "None" for a variable
    without values; a built-in variable and an unknown name stay as written; the query asks for the same node, as a
    regex; the report names the panels as the file does."""
    board = {"title": "t", "panels": PANELS, "templating": TEMPLATING}
    report, sent, titles, rows = render_titles(monkeypatch, tmp_path, board, {"hostname": ["node-a.1", "node-b"]})
    assert rows == ["GPUs on node-a.1", "$nodeless"]
    assert titles == ["All fleet, node-a.1 in None", "Notes on node-a.1 over $__rate_interval", "Library node-a.1"]
    assert sent == ['gpu:temp{hostname=~"node-a.1"}']   # as Grafana writes one value (prometheus_escaped)
    assert list(report.series["board"]) == ["${cluster} fleet, [[node]] in $pool"]
    assert report.library_panels["board"] == ["Library $node"]
