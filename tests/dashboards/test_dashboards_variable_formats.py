"""Grafana's `${var:format}`, `[[var:format]]` and `${var.field}` are read as Grafana reads them: the lint accepts
`${name:fmt}`, and the renderer sent it to Prometheus as written, which answers 400 for it. A query gets the value in
the format asked for, a title the variable's text unless its form names another format."""

from __future__ import annotations

import json

import pytest
from matplotlib.figure import Figure
from test_dashboards_render import FakePrometheus

from balancer import dashboards_render as dr

NODE = dr.Selection("node-a.1", "node-a.1", ("node-a.1",))   # a value picked, as `selections` picks it
CLUSTER = dr.Selection(".*", "All")                             # an All variable with its allValue
VARIABLES = {"node": NODE, "cluster": CLUSTER}


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ('x{h=~"${node:regex}"}', r'x{h=~"node-a\.1"}'),
        ('x{h="${node:raw}", c=~"${cluster:raw}"}', 'x{h="node-a.1", c=~".*"}'),
        ('x{h=~"[[node:pipe]]"} [[node:csv]] [[node:glob]]', 'x{h=~"node-a.1"} node-a.1 node-a.1'),
        ("${node:doublequote} ${node:singlequote}", '"node-a.1" \'node-a.1\''),
        ('x{h=~"${node:text}", c=~"${cluster:regex}"} ${cluster:text}', 'x{h=~"node-a.1", c=~".*"} All'),
        ('x{h=~"${node.labels}", d="${node:date:iso}"} ${node:nosuch}', 'x{h=~"node-a.1", d="node-a.1"} node-a.1'),
        ('x{h=~"${nodes:regex}"} [[nodes]] $nodeé', 'x{h=~"${nodes:regex}"} [[nodes]] node-a.1é'),
        ("x[${__range:raw}] / ${__interval_ms:text} / $__rate_interval_ms", "x[3600s] / 60000 / 75000"),
    ],
    ids=["regex", "raw, and All's allValue whatever the format", "pipe, csv, glob in brackets",
         "quoting formats", "text in a query", "field not read, other names as glob",
         "unknown names as written, ASCII names", "built-ins with a format"],
)
def test_a_querys_variable_is_written_in_its_format(expr, expected):
    assert dr.interpolate(expr, VARIABLES, step=60, range_s=3600) == expected


def test_several_values_are_joined_as_each_format_joins_them():
    both = {"node": dr.Selection("(a|b)", "a + b", ("a.1", 'b"2'))}
    written = dr.substitute("${node:regex} ${node:pipe} ${node:csv} ${node:glob}", both)
    assert written == r'(a\.1|b"2) a.1|b"2 a.1,b"2 {a.1,b"2}'
    assert dr.substitute("${node:doublequote} ${node:singlequote}", both) == '"a.1","b\\"2" \'a.1\',\'b"2\''
    # the renderer writes PromQL and titles: any other name, Grafana's or not, is written as glob
    assert dr.substitute("${node:nosuch} ${node:json} ${node:date:iso}", both) == '{a.1,b"2} {a.1,b"2} {a.1,b"2}'


def test_an_all_variable_without_allvalue_joins_its_values_where_resolved_else_is_its_value():
    resolved = {"node": dr.Selection(".*", "All", (), ("a.1", "b"), True)}
    assert dr.substitute("${node:csv} ${node:pipe} ${node:regex} $node", resolved) == 'a.1,b a.1|b (a\\.1|b) .*'
    unresolved = {"node": dr.Selection(".*", "All", (), (), True)}
    assert dr.substitute("${node:csv} ${node:glob} $node", unresolved) == ".* .* .*"
    custom = {"node": dr.Selection("n.*", "All", (), ("a.1", "b"))}   # with its own allValue: not `everything`
    assert dr.substitute("${node:csv} ${node:glob} $node", custom) == "n.* n.* n.*"


def test_selections_join_an_all_variables_values_only_without_an_allvalue_of_its_own():
    """Both repeated (so resolved): the one with its own allValue is that in any format, the other its values."""
    class Labels:
        def label_values(self, match: str, label: str) -> list[str]:
            return ["a.1", "b"]

    query = {"type": "query", "includeAll": True, "query": "label_values(gpu:temp, hostname)"}
    board = {"templating": {"list": [query | {"name": "own", "allValue": "n.*"}, query | {"name": "plain"}]},
             "panels": [{"type": "stat", "repeat": name} for name in ("own", "plain")]}
    chosen = dr.selections(board, Labels())
    assert dr.substitute("${own:csv} ${plain:csv} $own $plain", chosen) == "n.* a.1,b n.* .*"


def test_a_title_gets_the_text_unless_its_form_names_a_format():
    title = "GPUs on $node, ${node}, [[node]], ${node:regex} in ${cluster:raw} ($cluster)"
    assert dr.substitute(title, VARIABLES, "text") == r"GPUs on node-a.1, node-a.1, node-a.1, node-a\.1 in .* (All)"


def test_a_render_sends_the_formatted_query_and_draws_the_formatted_title(monkeypatch, tmp_path):
    """Through `render`: the node picked on load (`selections`) reaches Prometheus in the panel's format."""
    figures = []
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: figures.append(self))
    monkeypatch.setattr(dr.PromClient, "label_values", lambda self, match, label: ["node-a.1", "node-b"])
    templating = {"list": [{"name": "node", "type": "query", "query": "label_values(gpu:temp, hostname)"}]}
    panel = {"type": "stat", "title": "${node:singlequote}", "gridPos": {"x": 0, "y": 0, "w": 6, "h": 8},
             "targets": [{"expr": 'gpu:temp{hostname=~"${node:regex}", h="[[node:raw]]"}'}]}
    assert sent_queries(tmp_path, templating, panel) == [r'gpu:temp{hostname=~"node-a\.1", h="node-a.1"}']
    assert [ax.get_title(loc="left") for ax in figures[0].axes] == ["'node-a.1'"]


def sent_queries(tmp_path, templating: dict, panel: dict) -> list[str]:
    """The range queries `render` sends for a dashboard of `panel` with `templating`, to a fake Prometheus."""
    boards = tmp_path / "boards"
    boards.mkdir()
    (boards / "board.json").write_text(json.dumps({"title": "t", "panels": [panel], "templating": templating}))
    fake = FakePrometheus()
    try:
        dr.render(fake.url, tmp_path / "png", dashboards_dir=boards, end=1_700_000_000)
    finally:
        fake.close()
    return [q["query"] for q in fake.queries if q["path"] == "/api/v1/query_range"]
