"""The dashboard's own words (its title, its rows' and panels' titles, a placeholder naming a panel's type or a library
panel's uid) are drawn as written. matplotlib reads the text between two `$` as mathtext: a row titled
`Rate over $__rate_interval on $node` failed `dashboards render` with a mathtext ValueError traceback, and
`GPU $gpu on $node` was drawn in italics with its `$` dropped. So were the dashboard's other words and the label
values drawn with them (legends, stats, a heatmap's axisLabel, a unit's `suffix:`, table cells, tick labels): every
text of the render is drawn with mathtext off, and the caller's rcParams are left as they were."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.mathtext import MathTextParser
from matplotlib.table import Table
from matplotlib.text import Text
from test_dashboards_render import FakePrometheus

from balancer import dashboards_render as dr
from balancer.cli import main

GRID = {"x": 0, "y": 1, "w": 6, "h": 8}
RATE = "Rate over $__rate_interval on $node"   # not mathtext matplotlib can parse: a ValueError
GPU = "GPU $gpu on $node"                      # mathtext it can: `gpu` in italics, the `$` gone
PANELS = [
    {"type": "row", "title": RATE, "gridPos": {"x": 0, "y": 0, "w": 24, "h": 1}},
    {"type": "stat", "title": GPU, "gridPos": GRID, "targets": [{"expr": "gpu:temp"}]},
    {"type": "stat", "title": f"Absent {GPU}", "gridPos": GRID | {"x": 6}, "targets": [{"expr": "absent_series"}]},
    {"type": "acme-$x$-clock", "title": f"Clock {RATE}", "gridPos": GRID | {"x": 12}},
    {"title": f"Library {GPU}", "gridPos": GRID | {"x": 18}, "libraryPanel": {"uid": "$lib$uid", "name": "n"}},
    {"type": "row", "title": GPU, "gridPos": {"x": 0, "y": 9, "w": 24, "h": 1}},
]
SHOWN = {"Fleet $cluster at $site (2023-11-14 22:13 UTC)", RATE, GPU, f"Absent {GPU}", "No data", f"Clock {RATE}",
         "acme-$x$-clock panel: runs no queries, not drawn here", f"Library {GPU}",
         "library panel $lib$uid\n(kept in Grafana's library, not drawn here)"}


def _board(tmp_path: Path) -> Path:
    boards = tmp_path / "boards"
    boards.mkdir()
    (boards / "board.json").write_text(json.dumps({"title": "Fleet $cluster at $site", "panels": PANELS}))
    return boards


def test_titles_with_dollar_pairs_render(tmp_path, capsys):
    """The row that failed the command with a traceback: rendered, exit 0, its PNG written."""
    fake = FakePrometheus(missing=("absent_series",))
    try:
        code = main(["dashboards", "render", "--prometheus", fake.url, "--out", str(tmp_path / "png"),
                     "--dashboards-dir", str(_board(tmp_path))])
    finally:
        fake.close()
    assert code == 0, capsys.readouterr().err
    assert (tmp_path / "png" / "board.png").stat().st_size > 0


def test_the_dashboards_words_are_drawn_as_written_not_as_mathtext(monkeypatch, tmp_path):
    """Every text of the dashboard's is on the figure literally, `$` and all, and the figure is drawn without
    mathtext (the panels here have no numeric axis that could use it)."""
    figures, parsed = [], []
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: figures.append(self))
    fake = FakePrometheus(missing=("absent_series",))
    try:
        dr.render(fake.url, tmp_path / "png", dashboards_dir=_board(tmp_path), end=1_700_000_000)
    finally:
        fake.close()
    (fig,) = figures
    parse = MathTextParser.parse
    monkeypatch.setattr(MathTextParser, "parse", lambda self, s, *a, **k: parsed.append(s) or parse(self, s, *a, **k))
    fig.draw(FigureCanvasAgg(fig).get_renderer())
    texts = {t.get_text(): t for t in fig.findobj(lambda a: hasattr(a, "get_parse_math")) if "$" in t.get_text()}
    assert SHOWN - {"No data"} == set(texts)
    assert not [s for s, t in texts.items() if t.get_parse_math()]
    assert parsed == []
    drawn = {t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_parse_math"))}
    assert drawn >= SHOWN



# `$__h$` is mathtext matplotlib cannot parse (a double subscript): with mathtext on, every case below failed the
# render with a ValueError traceback, the same text as `$h$` was drawn in italics without its `$`.
class DollarLabels(FakePrometheus):
    """Answers `dollar:` queries with two GPUs whose node names hold a `$` pair; every other query as FakePrometheus."""

    @staticmethod
    def result(params: dict[str, str]) -> list[dict]:
        if not params["query"].startswith("dollar:"):
            return FakePrometheus.result(params)
        start, end, step = float(params["start"]), float(params["end"]), float(params["step"])
        times = [start + i * step for i in range(int((end - start) // step) + 1)]
        return [{"metric": {"__name__": "dollar:x", "hostname": f"node $__h$ {g}", "gpu": str(g)},
                 "values": [[t, str(40 + g + (t - start) / 600)] for t in times]} for g in (1, 2)]


def _panel(kind: str, legend_format: str = "gpu {{gpu}}", **extra) -> dict:
    return {"type": kind, "title": kind, "gridPos": {"x": 0, "y": 0, "w": 12, "h": 8},
            "targets": [{"expr": "dollar:x", "legendFormat": legend_format}], **extra}


LOANS = {"name": "Loans $__a$", "expr": "dollar:loans"}
CASES = {   # what the dashboard holds, one text of the figure drawn from it
    "legendFormat": ([_panel("timeseries", "{{hostname}} on $__l$")], [], "node $__h$ 1 on $__l$"),
    "annotation name": ([_panel("timeseries")], [LOANS], "Loans $__a$ (61)"),
    "stat names": ([_panel("stat", "{{hostname}}")], [], "48  node $__h$ 2\n47  node $__h$ 1"),
    "heatmap axisLabel": ([_panel("heatmap", options={"yAxis": {"axisLabel": "GPU $__y$ (per GPU)"}})], [],
                          "2 GPU $__y$s"),
    "unit suffix": ([_panel("timeseries", fieldConfig={"defaults": {"unit": "suffix:$__u$"}})], [], "41 $__u$"),
    "table cells": ([_panel("table", "{{hostname}}")], [], "node $__h$ 2"),
    "matrix tick labels": ([_panel("table", transformations=[
        {"id": "groupingToMatrix", "options": {"rowField": "hostname", "columnField": "gpu"}}])], [], "node $__h$ 1"),
    "bar gauge tick labels": ([_panel("bargauge", "{{hostname}}")], [], "node $__h$ 1"),
    "heatmap tick labels": ([_panel("heatmap", "{{hostname}}")], [], "node $__h$ 2"),
}


@pytest.mark.parametrize("case", CASES)
def test_every_text_drawn_from_the_dashboard_or_its_labels_is_drawn_as_written(case, monkeypatch, tmp_path, capsys):
    """`dashboards render` of a dashboard with a `$` pair in one place: exit 0, the PNG written, the text on the
    figure as written (not mathtext: no text with a `$` would be parsed), tick labels too (made as it is saved)."""
    panels, annotations, shown = CASES[case]
    boards = tmp_path / "boards"
    boards.mkdir()
    (boards / "board.json").write_text(json.dumps({"title": "t", "panels": panels,
                                                   "annotations": {"list": annotations}}))
    figures, save = [], Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: figures.append(self) or save(self, *a, **k))
    fake = DollarLabels()
    try:
        code = main(["dashboards", "render", "--prometheus", fake.url, "--out", str(tmp_path / "png"),
                     "--dashboards-dir", str(boards), "--range", "1h", "--step", "1m"])
    finally:
        fake.close()
    assert code == 0, capsys.readouterr().err
    assert (tmp_path / "png" / "board.png").stat().st_size > 0
    (fig,) = figures
    cells = [c.get_text() for table in fig.findobj(Table) for c in table.get_celld().values()]   # not children
    texts = [t for t in fig.findobj(Text) + cells if "$" in t.get_text()]
    assert shown in {t.get_text() for t in texts}
    assert not [t.get_text() for t in texts if t.get_parse_math()]


def test_mathtext_is_off_only_while_the_render_draws(monkeypatch, tmp_path):
    """The setting is the render's own: off while a figure is saved, the caller's value again after the render,
    after one that failed as well (an --out it cannot write)."""
    seen = []

    def save(self, *args, **kwargs):
        seen.append(matplotlib.rcParams["text.parse_math"])
        raise OSError("read-only file system")

    monkeypatch.setitem(matplotlib.rcParams, "text.parse_math", True)
    monkeypatch.setattr(Figure, "savefig", save)
    fake = FakePrometheus(missing=("absent_series",))
    try:
        with pytest.raises(dr.InputError):
            dr.render(fake.url, tmp_path / "png", dashboards_dir=_board(tmp_path), end=1_700_000_000)
    finally:
        fake.close()
    assert seen == [False]
    assert matplotlib.rcParams["text.parse_math"] is True
