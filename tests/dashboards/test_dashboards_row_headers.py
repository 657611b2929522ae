"""A row's title is drawn where Grafana shows it: a header band across the dashboard in the row's grid row, a
collapsed row's as an open one's, its panels below it where Grafana opens them. The rows' titles were not drawn at
all: a PNG of a dashboard in sections showed its panels without the headings that say what each section is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from test_dashboards_render import FakePrometheus

from balancer import dashboards_render as dr
from balancer.cli import main

GRID = {"x": 0, "y": 0, "w": 12, "h": 8}
STAT = {"type": "stat", "title": "GPUs", "gridPos": GRID, "targets": [{"expr": "gpu:temp"}]}


def _row(title: str, y: int, *panels: dict) -> dict:
    """A row at grid row `y` as Grafana saves it: collapsed when it holds `panels`."""
    return {"type": "row", "title": title, "collapsed": bool(panels), "gridPos": {"x": 0, "y": y, "w": 24, "h": 1},
            "panels": list(panels)}


def _drawn(monkeypatch, tmp_path: Path, panels: list[dict] | None = None, uid: str | None = None) -> Figure:
    """The figure of one dashboard (`panels`, or the repository's dashboard `uid`), drawn against data."""
    figures = []
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: figures.append(self))
    boards = tmp_path / "boards"
    boards.mkdir()
    if panels is not None:
        (boards / "board.json").write_text(json.dumps({"title": "t", "panels": panels}))
    fake = FakePrometheus()
    try:
        dr.render(fake.url, tmp_path / "png", dashboards_dir=boards if uid is None else dr.DEFAULT_DASHBOARDS_DIR,
                  uid=uid, end=1_700_000_000)
    finally:
        fake.close()
    (fig,) = figures
    fig.draw(FigureCanvasAgg(fig).get_renderer())
    return fig


def _bands(fig: Figure) -> dict[str, object]:
    """The row headers drawn: axes without a panel's title, by the text on them."""
    return {ax.texts[0].get_text(): ax for ax in fig.axes if not ax.get_title(loc="left") and len(ax.texts) == 1}


def _panels(fig: Figure) -> dict[str, object]:
    return {ax.get_title(loc="left"): ax for ax in fig.axes if ax.get_title(loc="left")}


def _spills(fig: Figure, bands: dict, panels: dict) -> list[tuple[str, str]]:
    """(panel, row) where one draws into the other, as `test_no_panel_draws_into_another_panel` judges two panels:
    what the row draws (its tight box) on the panel's box, or what the panel draws (tick labels, texts) on the row's
    title."""
    renderer = FigureCanvasAgg(fig).get_renderer()
    return [(title, name) for title, ax in panels.items() for name, band in bands.items()
            if band.get_tightbbox(renderer).overlaps(ax.get_window_extent(renderer))
            or ax.get_tightbbox(renderer).overlaps(band.texts[0].get_window_extent(renderer))]


def test_a_rows_title_is_drawn_where_grafana_shows_it(monkeypatch, tmp_path):
    """An open row and a collapsed one (its panel, saved at y 40, opened right below it and the panel below the row
    pushed down by it): each title on a band between the panels above and below it, off both; a row at the bottom,
    below every panel, makes the figure that much taller."""
    inside = STAT | {"title": "Inside", "gridPos": GRID | {"y": 40}}
    panels = [STAT | {"title": "Top"}, _row("Open section", 8), STAT | {"title": "Middle", "gridPos": GRID | {"y": 9}},
              _row("Collapsed section", 17, inside), STAT | {"title": "Bottom", "gridPos": GRID | {"y": 18}},
              _row("Last section", 26)]
    assert [(where, r["title"], r["gridPos"]["y"]) for where, r in dr.layout(panels)[1]] == [
        ("panels[1]", "Open section", 8), ("panels[3]", "Collapsed section", 17), ("panels[5]", "Last section", 34)]
    fig = _drawn(monkeypatch, tmp_path, panels)
    bands, drawn = _bands(fig), _panels(fig)
    assert set(bands) == {"Open section", "Collapsed section", "Last section"}
    assert set(drawn) == {"Top", "Middle", "Inside", "Bottom"}
    renderer = FigureCanvasAgg(fig).get_renderer()
    top = {name: ax.get_window_extent(renderer) for name, ax in {**bands, **drawn}.items()}
    order = ["Top", "Open section", "Middle", "Collapsed section", "Inside", "Bottom", "Last section"]
    assert sorted(order, key=lambda name: -top[name].y1) == order
    for name, band in bands.items():
        assert band.get_window_extent(renderer).width > 0.9 * fig.bbox.width, f"{name}: a band across the dashboard"
    assert not _spills(fig, bands, drawn)
    assert fig.get_size_inches()[1] == pytest.approx((34 + 1 + 2) * 0.45)


def test_the_fleet_dashboards_section_titles_are_drawn_off_its_panels(monkeypatch, tmp_path):
    """The repository's GPU fleet dashboard has three rows: each title drawn, nothing a panel draws on a band."""
    fig = _drawn(monkeypatch, tmp_path, uid="gputide-gpu-fleet")
    bands = _bands(fig)
    rows = [p["title"] for p in json.loads((dr.DEFAULT_DASHBOARDS_DIR / "gpu-fleet.json").read_text())["panels"]
            if p["type"] == "row"]
    assert len(rows) == 3 and set(bands) == set(rows)
    assert not _spills(fig, bands, _panels(fig))


def test_a_dashboard_without_rows_is_drawn_as_before(monkeypatch, tmp_path):
    """Without rows nothing is added: one axes a panel, each with its title, and the figure as tall as its panels.
    (A guard for the change, not a test of it: it passed before it too.)"""
    panels = [STAT | {"title": "Left"}, STAT | {"title": "Right", "gridPos": GRID | {"x": 12}},
              STAT | {"title": "Under", "gridPos": GRID | {"y": 8, "h": 4}}]
    fig = _drawn(monkeypatch, tmp_path, panels)
    assert [ax.get_title(loc="left") for ax in fig.axes] == ["Left", "Right", "Under"]
    assert fig.get_size_inches()[1] == pytest.approx((12 + 2) * 0.45)


@pytest.mark.parametrize(("row", "field", "value", "allowed"), [
    pytest.param({"type": "row", "title": 5, "gridPos": GRID | {"w": 24, "h": 1}}, "panels[0].title", "5",
                 "a string", id="a title not a string"),
    pytest.param({"type": "row", "title": "r", "gridPos": {"x": 0, "y": 0, "w": 24}}, "panels[0].gridPos.h",
                 "None", "an integer (missing)", id="a place without its height"),
    pytest.param({"type": "row", "title": "r", "gridPos": {"x": 0, "y": 5000, "w": 24, "h": 1}},
                 "panels[0].gridPos.y", "5000", "an integer from 0 to 1599 (a PNG holds at most 1600 grid rows)",
                 id="a row past the PNG's height"),
])
def test_a_row_whose_title_or_place_cannot_be_drawn_exits_2(tmp_path, capsys, row, field, value, allowed):
    """A row's title and place are drawn now: one the drawing cannot read is refused naming it, not a traceback."""
    boards = tmp_path / "boards"
    boards.mkdir()
    (boards / "board.json").write_text(json.dumps({"title": "t", "panels": [row]}))
    code = main(["dashboards", "render", "--prometheus", "http://127.0.0.1:1", "--out", str(tmp_path / "png"),
                 "--dashboards-dir", str(boards)])
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == (f"gputide: error: {boards / 'board.json'}: field '{field}': invalid value "
                                         f"{value}; allowed: {allowed}"), err


def test_a_render_places_the_dashboard_once_for_its_panels_and_its_rows(monkeypatch, tmp_path):
    """The panels and the rows' headers are drawn from one placing of the dashboard (`dr.layout`), not one each."""
    inside = STAT | {"title": "Inside", "gridPos": GRID | {"y": 40}}
    panels = [STAT | {"title": "Top"}, _row("Collapsed section", 8, inside),
              STAT | {"title": "Bottom", "gridPos": GRID | {"y": 9}}]
    boards = tmp_path / "boards"
    boards.mkdir()
    (boards / "board.json").write_text(json.dumps({"title": "t", "panels": panels}))
    ((name, dashboard),) = dr.load_dashboards(boards)
    placed, place = [], dr._placed
    monkeypatch.setattr(dr, "_placed", lambda panels: placed.append(panels) or place(panels))
    fake = FakePrometheus()
    try:
        dr.render_dashboard(dashboard, dr._Renderer(dr.PromClient(fake.url), 0, 3600, 60), tmp_path, dr.RenderReport(),
                            name)
    finally:
        fake.close()
    assert placed == [dashboard["panels"]]
