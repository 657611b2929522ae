"""A query variable's value in a query without a format is escaped as Grafana's Prometheus data source escapes it
(interpolateQueryExpr), not with Python's re.escape: `node-a.1` was `node\\-a\\.1` inside PromQL's double quotes,
which Prometheus refuses ("unknown escape sequence", HTTP 400), so a render with a node name holding a hyphen
failed. The queries sent are read by promtool, and select the node picked."""

from __future__ import annotations

import pytest
from panel_eval import run
from test_dashboards_variable_formats import sent_queries

from balancer import dashboards_render as dr


@pytest.mark.parametrize(
    ("values", "var", "expected"),
    [
        (("node-a.1",), {}, "node-a.1"),
        (("it's\\x",), {}, "it\\\\'s\\\\x"),
        (("node-a.1",), {"multi": True}, "node-a\\\\.1"),
        (("a$^*{}[]'+?.()|b\\",), {"multi": True}, "a" + "".join("\\\\" + c for c in "$^*{}[]'+?.()|") + "b\\\\\\\\"),
        (("a.1", "b-2"), {"multi": True}, "(a\\\\.1|b-2)"),
    ],
    ids=["one value: as it is", "one value: backslash and quote", "multi: a regex",
         "every metacharacter", "several joined"],
)
def test_values_are_escaped_as_grafanas_prometheus_data_source_escapes_them(values, var, expected):
    assert dr.prometheus_escaped(values, var) == expected


def _sent(monkeypatch, tmp_path, variable: dict) -> str:
    """The panel's query as `render` sends it, the node variable at its first value, node-a.1."""
    monkeypatch.setattr(dr.PromClient, "label_values", lambda self, match, label: ["node-a.1", "node-b"])
    templating = {"list": [{"name": "node", "type": "query", "query": "label_values(gpu:temp, hostname)"} | variable]}
    panel = {"type": "stat", "title": "t", "gridPos": {"x": 0, "y": 0, "w": 6, "h": 8},
             "targets": [{"expr": 'sum by (hostname) (gpu:temp{hostname=~"$node"})'}]}
    (sent,) = sent_queries(tmp_path, templating, panel)
    return sent


@pytest.mark.parametrize(("variable", "matched"), [({}, ["node-a.1", "node-aX1"]), ({"multi": True}, ["node-a.1"])],
                         ids=["one value (its . any character, as in Grafana)", "multi-value (its . a dot)"])
def test_a_node_with_a_hyphen_and_a_dot_is_a_query_prometheus_reads_selecting_that_node(
        monkeypatch, tmp_path, promtool, variable, matched):
    sent = _sent(monkeypatch, tmp_path, variable)
    assert "\\-" not in sent
    series = [{"series": f'gpu:temp{{hostname="{h}"}}', "values": "1x10"} for h in ("node-a.1", "node-aX1", "node-b")]
    run(promtool, tmp_path, series, [{"expr": sent, "eval_time": "5m", "exp_samples": [
        {"labels": f'{{hostname="{h}"}}', "value": 1} for h in matched]}])
