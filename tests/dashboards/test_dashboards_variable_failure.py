"""A variable's query that fails (Prometheus answers an error) does not fail the render: Grafana draws the dashboard
with the variable without options. tidal-capacity's `service` is queried only to title its repeated panel; its query
refused (HTTP 422, too many samples) failed the whole render, exit 1 and no PNG written."""

from __future__ import annotations

from matplotlib.figure import Figure
from test_dashboards_render import FakePrometheus

from balancer import cli

SERVICE_QUERY = "group by (service) (label_replace(last_over_time("


def test_a_failing_variable_query_leaves_the_title_as_written_and_the_render_goes_on(monkeypatch, tmp_path, capsys):
    saved = Figure.savefig
    titles: list[str] = []

    def save(self, *args, **kwargs):
        titles.extend(ax.get_title(loc="left") for ax in self.axes)
        return saved(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", save)
    fake = FakePrometheus(failing=(SERVICE_QUERY,))
    try:
        code = cli.main(["dashboards", "render", "--prometheus", fake.url, "--out", str(tmp_path),
                         "--end", "1700000000", "--dashboard", "gputide-tidal-capacity"])
    finally:
        fake.close()
    err = capsys.readouterr().err
    assert code == 0
    assert "Demand vs forecast: $service" in titles
    assert [p.name for p in tmp_path.iterdir()] == ["tidal-capacity.png"]
    assert err.count("variable 'service': its query failed") == 1 and "too many samples" in err
    assert "tidal-capacity: variable 'service': its query failed, drawn without its options" in err   # by file
    assert any(SERVICE_QUERY in q.get("query", "") for q in fake.queries)   # it was asked, and failed
