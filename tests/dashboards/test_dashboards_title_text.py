"""The dashboard's own words (its title, its rows' and panels' titles, a placeholder naming a panel's type or a library
panel's uid) are drawn as written. matplotlib reads the text between two `$` as mathtext: a row titled
`Rate over $__rate_interval on $node` failed `dashboards render` with a mathtext ValueError traceback, and
`GPU $gpu on $node` was drawn in italics with its `$` dropped."""

from __future__ import annotations

import json
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.mathtext import MathTextParser
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

