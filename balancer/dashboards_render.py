"""PNG previews of the Grafana dashboards, without Grafana.

Reads the generated `dashboards/*.json`, runs every panel's PromQL as a range query against a Prometheus
(plain HTTP, `/api/v1/query_range`; the queries Grafana runs, `queries`: not those hidden, `hide` true or 1) and draws
the panels with matplotlib where Grafana would put them (`gridPos` on the 24-column grid; a collapsed row's panels
too, where Grafana puts them when the row is opened; each row's title on a header band in its grid row, as Grafana
shows it: `layout`), one PNG per dashboard:

- timeseries: lines (stacked areas or bars when the panel stacks or draws bars) on the query's steps, a step
  without a sample a gap as in Grafana (not a line across it, not 0), every dashboard annotation (e.g. GPU loans
  and reclaims) as vertical lines in its own `iconColor`;
- heatmap: one row per series (per GPU, or per MIG instance) and one column per step, the colour being the
  value, exactly what Grafana's heatmap panel with `calculate: false` shows, the rows counted by the noun of the
  panel's y-axis label;
- table with `groupingToMatrix` (node x GPU grid): a row-label x column-label image of the last values;
- other tables: a table of each series' labels and last value, inside the panel (value mappings applied);
- bar gauges and stats: the last value of each series;
- a library panel (a reference to a panel kept in Grafana's library: its queries are not in the file, or only
  in an inline copy Grafana does not draw from): a placeholder saying so, counted in `RenderReport.library_panels`,
  not as a panel without data;
- a panel of a type that never queries (text, news, dashboard or alert list, ...: `QUERYLESS_PANELS`), or a
  plugin's panel without any query (a clock, with no targets or only leftover ones without an expression): its
  title and a note, no data to miss (not a panel without data); a built-in query panel (`QUERY_PANELS`: graph, stat,
  table, ...) without a query Grafana runs (none left, or every one hidden or without an expression) is "No data",
  as Grafana shows it, and counted, as is a plugin's panel whose every query is hidden;
- a panel with a server-side expression (math, reduce, ...: a target of the `__expr__` data source) that draws
  nothing from its shown queries but whose hidden queries return samples (or which holds a target of another data
  source, without an `expr`, that this renderer cannot run): "No data (server-side expression, not evaluated here)",
  listed apart (`RenderReport.not_applicable`), not counted: Grafana evaluates the expression, running the queries it
  refers to even when they are hidden (grafana/grafana#84977), and shows its result, which this renderer does not
  compute. One whose every query returns nothing is "No data" in Grafana too, and counted.

The drawing itself is `balancer.dashboards_draw`.

Variables are resolved the way Grafana does on first load: "All" variables take their `allValue`, others their
first label value; `$__rate_interval` is max(4 x scrape interval, step + scrape interval). A Prometheus that
cannot be reached raises `TelemetryUnavailable`; a panel without data is drawn with "No data" and counted in
the returned `RenderReport`, so a test or CI job can insist on data.

Every text of a PNG is drawn as written, `$` and all: each dashboard's figure is made, drawn and saved with
matplotlib's `text.parse_math` off (`render_dashboard`), as the dashboard's words (its title, rows' and panels'
titles, legendFormat, annotation names, units' `suffix:`, a heatmap's axisLabel, value mappings' text) and the label
values in legends, tables and tick labels are Grafana's text, never mathtext. With it on, matplotlib read the text
between two `$` as mathtext: `Rate over $__rate_interval on $node` failed the render with a ValueError, `GPU $gpu on
$node` lost its `$` to italics. The setting is the rc_context's only: the caller's rcParams are left as they were.
Rows' and panels' titles have their variables filled as Grafana fills them (`$node`, `${node}`, `[[node]]`,
`${node:format}`: one `substitute` for queries and titles), with the variables' texts ("All", a node's name), not
the PromQL regexes the queries get (`selections`): a title "GPUs on $node" reads "GPUs on node-a". The dashboard's
own title is drawn as written. A panel or row repeated for a variable is drawn once, holding every series, its
title naming the values selected (`repeat_title`).
"""

from __future__ import annotations

import json
import math
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from balancer.dashboards_draw import (
    Series,
    _draw_heatmap,
    _draw_last_values,
    _draw_matrix,
    _draw_table,
    _draw_timeseries,
    annotation_colour,
)
from balancer.errors import InputError, TelemetryUnavailable
from balancer.telemetry.promapi import MAX_POINTS, MOST_RANGE_S

# A source checkout keeps them next to the package; the container image sets GPUTIDE_DASHBOARDS_DIR.
DEFAULT_DASHBOARDS_DIR = Path(os.environ.get("GPUTIDE_DASHBOARDS_DIR")
                              or Path(__file__).resolve().parents[1] / "dashboards")
_DURATION = re.compile(r"^(\d+)([smhdw])$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str, field_name: str = "--range") -> int:
    m = _DURATION.match(text.strip())
    seconds = int(m[1]) * _SECONDS[m[2]] if m else 0
    if not 0 < seconds <= MOST_RANGE_S:
        raise InputError(None, field_name, text, "a positive duration such as 30m, 6h, 7d, at most 366d")
    return seconds


def check_points(range_s: int, step: int, step_text: str, range_text: str) -> None:
    """A --step that gives --range more steps than Prometheus answers is the flag's fault (exit 2), not Prometheus'.
    Prometheus refuses when `(end - start) / step` exceeds MAX_POINTS in Go's Duration division, which truncates:
    --range 22001s --step 2s (11000.5) is answered: the least step is the least with range_s // step <= MAX_POINTS."""
    if range_s // step > MAX_POINTS:
        raise InputError(None, "--step", step_text, f"at least {range_s // (MAX_POINTS + 1) + 1}s for --range "
                         f"{range_text} (Prometheus answers at most {MAX_POINTS:,} steps, {MAX_POINTS + 1:,} points "
                         "a series)")


def _api_error(body: bytes) -> str:
    """The `error` of a Prometheus API error answer, or the start of whatever else answered (a proxy's HTML page:
    its JSON parse was a traceback inside the handler of the HTTP error)."""
    try:
        doc = json.loads(body or b"{}")
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        return str(doc.get("error", ""))
    return " ".join(body[:200].decode("utf-8", "replace").split()) + (" ..." if len(body) > 200 else "")


class PromClient:
    """The Prometheus HTTP API calls the renderer needs, over urllib: range queries for the panels, and for the
    variables' own queries the label values and instant queries Grafana's variable queries run."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise InputError(None, "--prometheus", url, "an http(s):// URL")
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _get(self, path: str, params: dict[str, str]) -> dict:
        full = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(full, timeout=self.timeout) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise TelemetryUnavailable(f"{path}: HTTP {exc.code}: {_api_error(exc.read())}") from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise TelemetryUnavailable(f"cannot reach Prometheus at {self.url}: {exc}") from exc
        if not isinstance(body, dict):   # a JSON list: not Prometheus' API
            raise TelemetryUnavailable(f"{path}: {body}")
        if body.get("status") != "success":
            raise TelemetryUnavailable(f"{path}: {body.get('error', body)}")
        return body["data"]

    def query_range(self, expr: str, start: float, end: float, step: int) -> list[Series]:
        data = self._get("/api/v1/query_range",
                         {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": str(step)})
        out = []
        for item in data.get("result", []):
            points = np.array(item["values"], dtype=float).reshape(-1, 2)
            out.append(Series(dict(item["metric"]), points[:, 0], points[:, 1]))
        return out

    def query(self, expr: str, at: float) -> dict:
        """An instant query (`/api/v1/query`) at `at`: the API's answer, `resultType` and `result`, as it is."""
        return self._get("/api/v1/query", {"query": expr, "time": f"{at:.3f}"})

    def label_values(self, match: str, label: str) -> list[str]:
        return sorted(self._get(f"/api/v1/label/{urllib.parse.quote(label)}/values", {"match[]": match}))


@dataclass
class RenderReport:
    """What one render produced: the PNGs and, per dashboard, the panels that had no data."""

    written: list[Path] = field(default_factory=list)
    empty_panels: dict[str, list[str]] = field(default_factory=dict)
    # per dashboard, the empty panels that show hardware this Prometheus has none of (MIG), or a server-side
    # expression's result (not evaluated here), not a missing series, each with its reason: (title, why) pairs, not a
    # dict by title, as two panels may share a title (one MIG's, one an expression's) and each keeps its own reason
    not_applicable_why: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    series: dict[str, dict[str, int]] = field(default_factory=dict)
    # per dashboard, the library panels (a reference to a panel kept in Grafana's library, its queries not in the
    # file): each a placeholder box saying so, its queries not run, not counted as a panel without data
    library_panels: dict[str, list[str]] = field(default_factory=dict)
    # per dashboard, each annotation drawn: (name, matplotlib colour, event times)
    markers: dict[str, list[tuple[str, str, int]]] = field(default_factory=dict)
    # per dashboard, each variable whose query failed (drawn without its options, as Grafana does): (name, error)
    failed_variables: dict[str, list[tuple[str, str]]] = field(default_factory=dict)

    @property
    def not_applicable(self) -> dict[str, list[str]]:
        """Per dashboard, the titles of `not_applicable_why`, in its order."""
        return {name: [title for title, _ in pairs] for name, pairs in self.not_applicable_why.items()}


@dataclass(frozen=True)
class _Need:
    """A key the renderer reads without a default (`d["gridPos"]`): a dashboard without it is refused."""

    spec: object


@dataclass(frozen=True)
class _Among:
    """A value among `values`, each compared with its type (True is not 1, 0 not False): `text` says them."""

    values: tuple
    text: str


@dataclass(frozen=True)
class _Each:
    """An object whose every value is `spec` (a `type: value` mapping's options: value -> {text, color})."""

    spec: object


# What the renderer reads of a dashboard, and nothing more (not Grafana's schema): a key left out takes the
# renderer's default; a key there must be of its kind, else a TypeError or KeyError deep in the drawing.
# A target without `expr` (a leftover {"refId": "A"}, a server-side expression) is one Grafana does not run (`queries`);
# `"expr": null` is one without, as Grafana's filterQuery (`query.hide || !query.expr`) takes it. `hide` is read as
# that filterQuery reads it, truthy: null and 0 shown, 1 hidden, as true (dashboards written by hand or by other tools
# carry 0/1, as Grafana's own variables' `hide` is a number; 0.0/1.0 too, JSON numbers Grafana reads as 0 and 1, as a
# tool writing floats saves them); any other value (2, 0.5, "true") is refused, not guessed at.
_HIDE = _Among((True, False, 0, 1, 0.0, 1.0, None), "true or false, 0 or 1, or null")
_TARGET = {"expr": (str, type(None)), "legendFormat": str, "hide": _HIDE}
_PANEL = {
    "type": _Need(str), "title": str, "targets": [_TARGET],
    "gridPos": _Need({"x": _Need(int), "y": _Need(int), "w": _Need(int), "h": _Need(int)}),
    # a mapping's options are checked by its type (_check_drawn): range, regex and special ones hold scalars
    "fieldConfig": {"defaults": {"unit": str, "mappings": [dict], "custom": {"stacking": dict}}},
    "transformations": [{"id": _Need(str), "options": {"rowField": str, "columnField": str}}],
    "options": {"yAxis": dict, "color": {"scheme": str}},
}
# The one kind of value mapping the renderer reads (dashboards_draw._mapped): value -> {text, color}.
_VALUE_MAPPING = {"options": _Each((dict, type(None)))}
# A library panel as Grafana saves and exports it: its place and a reference (its model is in the library; an inline
# copy of it, type and queries, that some Grafana versions also save is not what Grafana shows, and is not read).
_LIBRARY_REF = {"title": str, "gridPos": _PANEL["gridPos"], "libraryPanel": _Need({"uid": str, "name": str})}
_DASHBOARD = {
    "title": _Need(str), "uid": str,
    "panels": _Need(list),   # of _PANEL, each checked by _check_panel (a row as _check_row: its title and place)
    "templating": {"list": [{"name": _Need(str), "type": str, "allValue": (str, type(None)),
                             "query": (str, dict), "regex": str}]},
    "annotations": {"list": [{"expr": str}]},
}
_KINDS = {str: "a string", int: "an integer", dict: "an object", list: "a list", type(None): "null",
          bool: "true or false"}
# The PNG is 40.5 pixels per grid row (0.45 in at 90 dpi). matplotlib before 3.10 draws under 2**16 pixels a side
# (3.10 raised it to 2**23, matplotlib PR #28904) and the project supports matplotlib>=3.8: 1600 rows and the
# title's 2 are 64,881 pixels.
MAX_GRID_ROWS = 1600


class _Bad(Exception):
    def __init__(self, where: str, value: object, allowed: str, detail: str = "") -> None:
        super().__init__(where)
        shown = value if value is None or isinstance(value, (str, int, float)) else f"({_kind(value)})"
        self.where, self.value, self.allowed, self.detail = where, shown, allowed, detail


def _kind(value: object) -> str:
    return next((text for t, text in _KINDS.items() if isinstance(value, t) and not isinstance(value, bool)),
                type(value).__name__)


def _allowed(spec: object) -> str:
    if isinstance(spec, (type, tuple)):
        return " or ".join(_KINDS[k] for k in (spec if isinstance(spec, tuple) else (spec,)))
    return "a list" if isinstance(spec, list) else f"an object with {', '.join(spec)}"


def _check(value: object, spec: object, where: str) -> None:
    """`value` (at `where`) is of `spec`: a type or tuple of types, one of _Among's values, a {key: spec} object, a
    [spec] list or _Each."""
    if isinstance(spec, _Among):
        if not any(type(value) is type(v) and value == v for v in spec.values):
            raise _Bad(where, value, spec.text)
    elif isinstance(spec, (type, tuple)):
        kinds = spec if isinstance(spec, tuple) else (spec,)
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):   # True is no integer
            raise _Bad(where, value, _allowed(spec))
    elif isinstance(spec, list):
        _check(value, list, where)
        for i, item in enumerate(value):
            _check(item, spec[0], f"{where}[{i}]")
    else:
        _check(value, dict, where)
        keys = {key: spec.spec for key in value} if isinstance(spec, _Each) else spec
        for key, inner in keys.items():
            if key in value:
                _check(value[key], inner.spec if isinstance(inner, _Need) else inner, f"{where}.{key}".lstrip("."))
            elif isinstance(inner, _Need):
                raise _Bad(f"{where}.{key}".lstrip("."), None, _allowed(inner.spec), "missing")


# Grafana's built-in panels that never run queries (their plugin.json says `skipDataQuery: true`): Grafana draws them
# from their options or its own API, whatever `targets` they hold (a panel changed to text keeps its old ones).
QUERYLESS_PANELS = frozenset({"text", "news", "dashlist", "alertlist", "annolist", "alertGroups", "pluginlist",
                              "gettingstarted", "welcome", "live", "alertStateHistory"})
# Grafana's built-in panels that draw their queries' results: without queries (lost, all removed) Grafana shows one
# as "No data". A panel of a type in neither set is a plugin's, which may never query (grafana-clock-panel): without a
# query (a target with an `expr`, hidden or not) it is taken for one that does not, with one for one that does
# (`shows_data`). Either, drawing a server-side expression whose hidden queries return samples, is not "No data"
# though nothing is drawn here (`_Renderer.answer`). Both checked against the plugin.json files of Grafana's
# public/app/plugins/panel (the experimental and preview ones too: datagrid, debug, logstable, logs-new, xychart2).
QUERY_PANELS = frozenset({"timeseries", "graph", "stat", "singlestat", "gauge", "bargauge", "table", "table-old",
                          "heatmap", "barchart", "piechart", "histogram", "state-timeline", "status-history",
                          "xychart", "xychart2", "trend", "candlestick", "geomap", "nodeGraph", "logs", "logs-new",
                          "logstable", "traces", "flamegraph", "canvas", "datagrid", "debug"})


def is_library_panel(panel: dict) -> bool:
    """A reference to a library panel (`libraryPanel`): the file holds its place, not its queries. With an inline
    `type` too (a copy of the library's model some Grafana versions save beside the reference) it is still one:
    Grafana draws the library element's model, not the copy, which may be out of date or gone from the library."""
    return "libraryPanel" in panel


def shows_data(panel: dict) -> bool:
    """A panel Grafana draws from its queries' results: its queries are run and, should they return nothing, it is
    "No data" and counted (`RenderReport.empty_panels`, --require-data). A built-in query panel (`QUERY_PANELS`) is,
    with queries or without; a plugin's panel only with a query, a target with an `expr`, hidden or not (without, it
    is taken for one that never queries, a clock, whatever leftover targets without one it kept; with only hidden ones
    it was made to query, and Grafana shows it blank, as a built-in one). Not a library panel reference (its queries
    are in Grafana's library) nor a panel of a type that never queries (`QUERYLESS_PANELS`, a text panel). `panel`
    checked by `_check_panel`."""
    if is_library_panel(panel) or panel["type"] in QUERYLESS_PANELS:
        return False
    return panel["type"] in QUERY_PANELS or any(t.get("expr") for t in panel.get("targets", []))


def queries(panel: dict) -> list[dict]:
    """The queries of `panel` Grafana runs: its `targets` but those hidden (`hide` true or 1, the eye switched off in
    the query editor) and those without an expression, empty or missing, which Grafana's Prometheus data source
    leaves out (its filterQuery, `!query.expr`); the others' results are drawn. A panel whose every query is hidden
    is left with none: a query panel so left, built-in or a plugin's, is drawn "No data" and counted under
    --require-data, as one whose queries were lost is (`shows_data`): Grafana shows it blank, asking Prometheus
    nothing, and a dashboard whose viewers see a blank panel is what --require-data is there to catch, however the
    panel came to ask nothing. (Unless a server-side expression refers to a hidden one: Grafana runs it for the
    expression, `_Renderer.answer`.)"""
    return [t for t in panel.get("targets", []) if not t.get("hide") and t.get("expr")]


def _check_panel(panel: object, where: str, in_row: bool = False) -> None:
    """One panel: a row is drawn as a header (`_check_row`: its title a string, its place, where it has one, on the
    grid; a collapsed one's panels each checked as any other); a library panel reference its place and the reference
    (drawn as a placeholder); every other panel is drawn, on the grid."""
    if isinstance(panel, dict) and panel.get("type") == "row":
        if in_row:
            raise _Bad(f"{where}.type", "row", "a panel other than a row (a collapsed row holds panels, not rows)")
        _check_row(panel, where)
        return
    library = isinstance(panel, dict) and is_library_panel(panel)
    _check(panel, _LIBRARY_REF if library else _PANEL, where)
    _check_grid(panel["gridPos"], where)
    if not library:
        _check_drawn(panel, where)


def _check_row(row: dict, where: str) -> None:
    """A row's title and its place on the grid, where it has one, are drawn as its header (`layout`). A collapsed
    row keeps its panels inside it (`panels`): each is checked as the others, for each is drawn, and the row's own
    place is where they are drawn below (`layout`), so it needs one."""
    holds = bool(row.get("collapsed") and row.get("panels"))
    _check(row, {"title": str, "gridPos": _PANEL["gridPos"] if holds else _PANEL["gridPos"].spec}, where)
    if "gridPos" in row:
        _check_grid(row["gridPos"], where)
    if not holds:
        return
    _check(row, {"panels": list}, where)
    for j, panel in enumerate(row["panels"]):
        _check_panel(panel, f"{where}.panels[{j}]", in_row=True)


def layout(panels: list[dict]) -> tuple[list[tuple[str, dict]], list[tuple[str, dict]]]:
    """The panels drawn and the rows' headers, each with where it is in the file, of one placing (`_placed`), as
    Grafana shows the dashboard with every collapsed row opened: a collapsed row keeps its panels inside it at the
    places they had when it was last open, and Grafana, opening it, moves them right below the row (their top one on
    the row's next grid row, the others kept where they are from it) and every panel and row below the row down by
    as much as they take. (Grafana measures from the row's first panel, which is its top one as Grafana saves them;
    this from the top one.) A row's header is where Grafana draws it, its title in a band across the dashboard, a
    collapsed row's as an open one's, its panels below it; a row without a `gridPos` (Grafana saves one for every
    row) has no place to draw it at. `panels` checked by `_check_panel`: a panel moved is a copy. `render_dashboard`
    places a dashboard once for both."""
    placed = _placed(panels)
    return ([(where, p) for where, p in placed if p.get("type") != "row"],
            [(where, p) for where, p in placed if p.get("type") == "row"])


def _placed(panels: list[dict]) -> list[tuple[str, dict]]:
    """The panels and the rows with a place, in the file's order, placed with every collapsed row opened."""
    out, shift = [], 0
    for i, panel in enumerate(panels):
        if panel.get("type") != "row" or "gridPos" in panel:
            out.append((f"panels[{i}]", _moved(panel, shift)))
        if panel.get("type") != "row":
            continue
        inner = panel.get("panels") if panel.get("collapsed") else None
        if not inner:
            continue
        row_bottom = panel["gridPos"]["y"] + shift + panel["gridPos"]["h"]
        lift = min(p["gridPos"]["y"] for p in inner) - row_bottom
        out += [(f"panels[{i}].panels[{j}]", _moved(p, -lift)) for j, p in enumerate(inner)]
        shift += max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in inner) - lift - row_bottom
    return out


def _moved(panel: dict, down: int) -> dict:
    return panel if not down else {**panel, "gridPos": {**panel["gridPos"], "y": panel["gridPos"]["y"] + down}}


def _check_layout(panels: list[dict]) -> None:
    """Opening the collapsed rows moves panels and rows down: each must still end within the PNG's grid rows."""
    for where, panel in _placed(panels):
        g = panel["gridPos"]
        if g["y"] + g["h"] > MAX_GRID_ROWS:
            raise _Bad(f"{where}.gridPos.h", g["h"], f"a height ending within the {MAX_GRID_ROWS} grid rows a PNG "
                       f"holds (with the collapsed rows above it opened, it starts at grid row {g['y']})")


def _check_grid(g: dict, where: str) -> None:
    wide, tall = "Grafana's grid is 24 columns wide", f"a PNG holds at most {MAX_GRID_ROWS} grid rows"
    for key, least, most, why in (("x", 0, 23, wide), ("w", 1, 24 - g["x"], wide), ("y", 0, MAX_GRID_ROWS - 1, tall),
                                  ("h", 1, MAX_GRID_ROWS - g["y"], tall)):
        if not least <= g[key] <= most:
            raise _Bad(f"{where}.gridPos.{key}", g[key], f"an integer from {least} to {most} ({why})")


def _check_drawn(panel: dict, where: str) -> None:
    """What of a drawn panel depends on another of its fields: a value mapping's options, a grid's two fields."""
    for i, mapping in enumerate(panel.get("fieldConfig", {}).get("defaults", {}).get("mappings", [])):
        if mapping.get("type") == "value":
            _check(mapping, _VALUE_MAPPING, f"{where}.fieldConfig.defaults.mappings[{i}]")
    for i, t in enumerate(panel.get("transformations", [])):
        if t["id"] == "groupingToMatrix" and t.get("options") and not {"rowField", "columnField"} <= set(t["options"]):
            raise _Bad(f"{where}.transformations[{i}].options", t["options"],
                       "an object naming the rowField and the columnField of the grid", "groupingToMatrix")


def _dashboard(path: Path) -> dict:
    """One dashboard file; unreadable, not UTF-8, not JSON, not a JSON object or without what the renderer reads
    of a Grafana dashboard (`_DASHBOARD`) is an InputError naming it and the field."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(str(path), "(file)", path.name, "a readable UTF-8 Grafana dashboard JSON file",
                         str(exc)) from exc
    if not isinstance(doc, dict):
        raise InputError(str(path), "(document)", type(doc).__name__, "a JSON object (a Grafana dashboard)")
    try:
        _check(doc, _DASHBOARD, "")
        for i, panel in enumerate(doc["panels"]):
            _check_panel(panel, f"panels[{i}]")
        _check_layout(doc["panels"])
        _compile_regexes(doc)
    except _Bad as bad:
        raise InputError(str(path), bad.where, bad.value, bad.allowed, bad.detail) from None
    return doc


def _compile_regexes(doc: dict) -> None:
    """Every query variable's `regex` (the only variables whose regex Grafana applies, `_options`) compiled when the
    dashboards are loaded, before any PNG is written, and kept in its place, the pattern `_matched` reads: one Python
    cannot read was found only when the render resolved that variable (some PNGs written, the error naming the
    dashboard's uid, not its file)."""
    for i, var in enumerate(doc.get("templating", {}).get("list", [])):
        if var.get("type") == "query" and var.get("regex"):
            try:
                var["regex"] = _js_regex(var["regex"])
            except (re.error, ValueError, OverflowError) as exc:   # (?u) against re.ASCII; a{99999999999}
                raise _Bad(f"templating.list[{i}].regex", var["regex"],
                           "a JavaScript regex, /pattern/flags, that Python's re reads too", str(exc)) from None


def load_dashboards(directory: Path, uid: str | None = None) -> list[tuple[str, dict]]:
    found = [(p.stem, _dashboard(p)) for p in sorted(Path(directory).glob("*.json"))]
    if not found:
        raise InputError(str(directory), "--dashboards-dir", str(directory), "a directory with dashboard JSON")
    if uid is not None:
        found = [(stem, d) for stem, d in found if d.get("uid") == uid]
        if not found:
            uids = ", ".join(d.get("uid", "?") for _, d in load_dashboards(directory))
            raise InputError(None, "--dashboard", uid, uids)
    return found


@dataclass(frozen=True)
class Selection:
    """A query variable as selected (`selections`): `value`, in a query without a format (a PromQL regex, or an All
    variable's `allValue`); `text`, in a title and for the `text` format; `picked`, the values selected as they are
    named, which the other formats write (`substitute`); none for All or a variable without values."""

    value: str
    text: str
    picked: tuple[str, ...] = ()
    options: tuple[str, ...] = ()   # every value it resolved to (for All: only where a panel or row repeats for it)
    # All selected without an allValue of its own: a format writes every value resolved (`options`); with one, or
    # with none resolved, its `value` whatever the format
    everything: bool = False


def selections(dashboard: dict, client: PromClient, window: tuple[float | None, int, int] = (None, 3600, 60),
               failed: list[tuple[str, str]] | None = None) -> dict[str, Selection]:
    """Each query variable as Grafana selects it on first load, by name (`Selection`). An "All" variable is its
    `allValue` in the queries, whatever the format (as Grafana puts a custom `allValue`; `.*` where none is set), and
    "All" in the titles; another is its first value (`_options`), escaped in the queries as Grafana's Prometheus data
    source escapes a value without a format (`prometheus_escaped`) and as it is in the titles, or, without any, `.*`
    and "None" (the option Grafana gives a query variable without values). Grafana fills titles with the text
    (`getDisplayTitle`'s 'text' format): a title "GPUs on $node" reads "GPUs on node-a.1", not "GPUs on
    node-a\\\\.1" (a multi-value variable's query value). A panel or row repeated for a variable (`repeat`) is one
    copy per value selected in Grafana, each titled with its value, and one here, holding every series: its title
    has the values selected joined by ", " (`repeat_title`), every value the variable resolves to for All (so an All
    variable that something repeats for is resolved too), as written without any. `window`: (end, range_s, step) of
    the render, for the variables' own queries (`_options`; end None: now); `failed` gets each variable whose query
    failed, with the error (`_queried`). `dashboard` as `load_dashboards` gives it, its variables' regexes compiled."""
    repeated = {name for names in repeats(dashboard.get("panels", [])).values() for name in names}
    chosen: dict[str, Selection] = {}
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") != "query":
            continue
        everything = var.get("includeAll")
        options = (_queried(var, chosen, client, window, [] if failed is None else failed)
                   if not everything or var["name"] in repeated else ())
        if everything:
            chosen[var["name"]] = Selection(var.get("allValue") or ".*", "All", (), options, not var.get("allValue"))
        elif options:
            chosen[var["name"]] = Selection(prometheus_escaped(options[:1], var), options[0], options[:1], options)
        else:
            chosen[var["name"]] = Selection(".*", "None")
    return chosen


def _queried(var: dict, chosen: dict[str, Selection], client: PromClient, window: tuple[float | None, int, int],
             failed: list[tuple[str, str]]) -> tuple[str, ...]:
    """A variable's options (`_options`), or none where its query fails (Prometheus answers an error, a 4xx, or
    cannot be reached: `TelemetryUnavailable`). Grafana draws the dashboard when a variable's query fails, the
    variable without options (a title that names it repeated stays as written, a query gets `.*` or its allValue);
    the render goes on, the variable and its error added to `failed` (`RenderReport.failed_variables`, which the
    command prints; a Prometheus not reached fails the panels' own queries next)."""
    try:
        return tuple(_options(var, chosen, client, window))
    except TelemetryUnavailable as exc:
        failed.append((var["name"], str(exc)))
        return ()


def prometheus_escaped(values: tuple[str, ...], var: dict) -> str:
    """`values` selected of `var` in a query without a format, as Grafana's Prometheus data source writes them
    (interpolateQueryExpr): a variable not multi-value takes its one value with only `\\` and `'` escaped
    (prometheusRegularEscape: `node-a.1` as it is, which `=~` reads as a regex, as in Grafana); a multi-value one each
    value as a regex inside PromQL's double quotes (prometheusSpecialRegexEscape: `node-a.1`
    is `node-a\\\\.1` in the query's text, the regex `node-a\\.1` once PromQL has read the string), several
    joined by `|` in parentheses. Not Python's re.escape: its `\\-` is an escape sequence PromQL's string refuses
    ("unknown escape sequence", HTTP 400), so any node name with a hyphen failed the render. (Grafana escapes a value
    picked of an include-All variable as a multi-value one's; none is picked here: `selections` gives such a variable
    All, its allValue, as Grafana on first load, and the render takes no value from its caller.)"""
    if not var.get("multi"):
        return ",".join(v.replace("\\", "\\\\").replace("'", "\\\\'") for v in values)
    escaped = [re.sub(r"[$^*{}\[\]'+?.()|]", lambda m: "\\\\" + m[0], v.replace("\\", "\\" * 4)) for v in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def _options(var: dict, chosen: dict[str, Selection], client: PromClient, window: tuple[float | None, int, int]
             ) -> list[str]:
    """The values a query variable resolves to, as Grafana's Prometheus variable queries give them:
    `label_values(series, label)` (the label's values, sorted), `query_result(query)` (each series of the instant
    query at the render's end as Grafana writes it, `name{label="value",...} value timestamp_ms`), then the
    variable's `regex` (`_matched`, compiled at load: `_compile_regexes`); any other query resolves to none.
    Not re-sorted by the variable's `sort`."""
    query = var.get("query")
    query = str(query.get("query", "") if isinstance(query, dict) else query).strip()
    end, range_s, step = window
    if m := re.match(r"label_values\((.+),\s*(\w+)\)$", query):
        found = client.label_values(interpolate(m[1], chosen, step, range_s), m[2])
    elif m := re.match(r"query_result\((.+)\)$", query, re.DOTALL):
        at = time.time() if end is None else end
        found = _result_texts(client.query(interpolate(m[1], chosen, step, range_s), at))
    else:
        return []
    return _matched(found, var.get("regex") or None)


def _result_texts(data: dict) -> list[str]:
    """A `query_result` variable's instant query answer as Grafana's metricFindQuery writes it for the variable's
    regex: each series of a vector `name{label="value",...} value timestamp_ms` (the value as Prometheus wrote it), a
    scalar's or string's value as it is; a matrix (a range vector selector's) none."""
    result = data.get("result") or []
    if data.get("resultType") in ("scalar", "string"):
        return [str(result[1])] if len(result) > 1 else []
    if data.get("resultType") != "vector":
        return []
    out = []
    for item in result:
        metric, (at, value) = item["metric"], item["value"]
        labels = ",".join(f'{k}="{v}"' for k, v in metric.items() if k != "__name__")
        out.append(f"{metric.get('__name__', '')}{{{labels}}} {value} {round(float(at) * 1000)}")
    return out


def _matched(found: list[str], pattern: re.Pattern | None) -> list[str]:
    """`found` through a variable's regex as Grafana reads it (`_js_regex`): a value that does not match is left
    out; one that does is its `value` (or `text`) group, else its first group, else as it is. Without a regex, each as
    it is; once each, in order. (A `g` flag's many matches are read as one.)"""
    out: list[str] = []
    for item in found:
        if pattern:
            m = pattern.search(item)
            if not m:
                continue
            groups = m.groupdict()
            item = groups.get("value") or groups.get("text") or (m[1] if m.re.groups else None) or item
        if item not in out:
            out.append(item)
    return out


def _js_regex(regex: str) -> re.Pattern:
    """A variable's regex as Grafana reads it (`/pattern/flags`, else the whole text); one Python's re cannot read
    raises re.error, ValueError (a `(?u)`, with the re.ASCII it is read with) or OverflowError (a repetition count
    past what re counts), each refused where the dashboards are loaded (`_compile_regexes`)."""
    m = re.fullmatch(r"/(.*)/(\w*)", regex, re.DOTALL)
    pattern, flags = (m[1], m[2]) if m else (f"^{regex}$", "")
    pattern = re.sub(r"\(\?<(?=[A-Za-z_])", "(?P<", pattern)   # JavaScript's named groups
    return re.compile(pattern, re.ASCII | (re.IGNORECASE if "i" in flags else 0) | (re.MULTILINE if "m" in flags
                      else 0) | (re.DOTALL if "s" in flags else 0))


def repeats(panels: list[dict]) -> dict[str, tuple[str, ...]]:
    """The variables each panel and row (by where it is in the file, as `layout` names them) is repeated for: its own
    `repeat`, and its row's (an open row's panels are those below it up to the next row; a collapsed row's, inside
    it)."""
    out: dict[str, tuple[str, ...]] = {}
    row: str | None = None
    for i, panel in enumerate(panels):
        own = panel.get("repeat") or None
        if panel.get("type") != "row":
            out[f"panels[{i}]"] = tuple(dict.fromkeys(v for v in (own, row) if v))
            continue
        out[f"panels[{i}]"] = (own,) if own else ()
        for j, inner in enumerate(panel.get("panels") or []):
            out[f"panels[{i}].panels[{j}]"] = tuple(dict.fromkeys(v for v in (inner.get("repeat"), own) if v))
        row = None if panel.get("collapsed") else own
    return out


def repeat_title(title: str, variables: dict[str, Selection], repeated: tuple[str, ...]) -> str:
    """A row's or panel's title as drawn (`substitute`, its variables' texts), a variable it repeats for
    (`repeats`) filled with the values selected joined by ", " (every value resolved for All: `selections`), or left
    as written where it has none."""
    shown = dict(variables)
    for name in repeated:
        chosen = shown.pop(name, None)
        values = chosen and (chosen.picked or chosen.options)
        if values:
            shown[name] = Selection(", ".join(values), ", ".join(values), values)
    return substitute(title, shown, "text")


def interpolate(expr: str, variables: dict[str, str | Selection], step: int, range_s: int, scrape_s: int = 15) -> str:
    """`expr` as Grafana sends it: the variables' values and Grafana's built-in ones filled (`substitute`). The
    interval is the step (Grafana's `$__interval` is the step it asks Prometheus for), `_ms` the same in ms."""
    builtins = {
        "__rate_interval": f"{max(4 * scrape_s, step + scrape_s)}s",
        "__interval": f"{step}s",
        "__interval_ms": str(step * 1000),
        "__range_s": str(range_s),
        "__range": f"{range_s}s",
        "__range_ms": str(range_s * 1000),
        "__rate_interval_ms": str(max(4 * scrape_s, step + scrape_s) * 1000),
    }
    return substitute(expr, {**variables, **builtins})


# A variable in Grafana's forms, as Grafana's variable regex reads them (ASCII `\w`, as JavaScript's): `$name`,
# `[[name]]` and `[[name:format]]`, `${name}`, `${name.field}`, `${name:format}`, `${name.field:format}`. Its name is
# the whole word: `$nodes` is no `$node` and `s`, `$__range_s` no `$__range` and `_s`.
_VARIABLE = re.compile(r"\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?:\.([^:^}]+))?(?::([^}]+))?\}", re.ASCII)


def _regex_escaped(value: str) -> str:
    return re.sub(r"[\\^$*+?.()|[\]{}/]", lambda m: "\\" + m[0], value)   # Grafana's escapeRegex


def _quoted(quote: str, escaped: str) -> Callable[[tuple[str, ...]], str]:
    return lambda vs: ",".join(quote + v.replace(quote, escaped) + quote for v in vs)


# Grafana's formats (`${name:format}`) that write the values selected, as Grafana's format registry writes them: one
# value, or several joined as the format joins them: an All variable's every value where they were resolved (a
# panel or row repeats for it: `selections`); else, and for one with a custom allValue, its `value` (its allValue, or
# `.*`) whatever the format (`_formatted`), not the values Grafana would join, which were not queried. The renderer
# writes PromQL and titles only: these are the formats they take (`text` is the variable's text, `_formatted`); any
# other name (Grafana's json, queryparam, percentencode, date, ..., or one Grafana does not know) is written as
# `glob`, as Grafana writes a name it does not know (formatVariableValue's fallback).
FORMATS: dict[str, Callable[[tuple[str, ...]], str]] = {
    "regex": lambda vs: _regex_escaped(vs[0]) if len(vs) == 1 else "(" + "|".join(map(_regex_escaped, vs)) + ")",
    "pipe": "|".join,
    "raw": ",".join,
    "csv": ",".join,
    "glob": lambda vs: vs[0] if len(vs) == 1 else "{" + ",".join(vs) + "}",
    "doublequote": _quoted('"', '\\"'),
    "singlequote": _quoted("'", "\\'"),
}


def _formatted(chosen: str | Selection, fmt: str | None) -> str:
    """A variable's value in `fmt` (`substitute`), the format's arguments (`date:iso`) not read."""
    fmt = fmt and fmt.split(":")[0]
    if isinstance(chosen, str) or fmt is None:
        return chosen if isinstance(chosen, str) else chosen.value
    if fmt == "text":
        return chosen.text
    values = chosen.picked or (chosen.options if chosen.everything else ())
    return FORMATS.get(fmt, FORMATS["glob"])(values) if values else chosen.value


def substitute(text: str, values: dict[str, str | Selection], fmt: str | None = None) -> str:
    """`text` with each variable of `values` replaced, in Grafana's forms (`_VARIABLE`: `$name`, `${name}`,
    `[[name]]`, deprecated, still replaced by Grafana), in one pass (a value is not read again for variables); a name
    not in `values` is left as written. A `Selection` is written in the form's format, else in `fmt` (None: its
    `value`): `text` its text; one of `FORMATS` its values selected (an All variable's every value where resolved;
    else, or with a custom allValue, or one without values, its `value` whatever the format, as Grafana leaves a
    custom allValue); any other name as `glob` (`FORMATS`). A `${name.field}`'s field is not read: Grafana reads one
    only of a scoped variable (a repeat's, a data link's), none of a dashboard's. A plain string (a built-in
    variable's) is written as it is. A query's (`interpolate`: the variables' values and the built-in ones) and a row's
    or panel's title (`render_dashboard`: `fmt` "text"; the built-in ones, `$__rate_interval` and the like, are a
    query's)."""
    def value(m: re.Match) -> str:
        name = m[1] or m[2] or m[4]
        return _formatted(values[name], m[3] or m[6] or fmt) if name in values else m[0]
    return _VARIABLE.sub(value, text)


def legend(fmt: str, labels: dict[str, str]) -> str:
    if not fmt or fmt == "__auto":
        shown = {k: v for k, v in labels.items() if k != "__name__"}
        return ", ".join(f"{k}={v}" for k, v in sorted(shown.items())) or labels.get("__name__", "value")
    text = re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m[1], ""), fmt).strip(" :/")
    return text or legend("__auto", labels)


@dataclass(frozen=True)
class PanelAnswer:
    """What a panel's queries answered (`_Renderer.answer`): the series it draws and, when there are none, why none
    are expected here (`_Renderer.absent_hardware`: no MIG GPU; `EXPRESSION_WHY`: a server-side expression, not
    evaluated here, whose input queries return samples), else None."""

    data: list[tuple[str, Series]]
    why: str | None = None

    @property
    def counted_empty(self) -> bool:
        """Without data and with no reason to be empty here: "No data", counted (`RenderReport.empty_panels`, failing
        --require-data); one without data for want of hardware, or drawing a server-side expression whose input
        queries return samples, is listed apart (`RenderReport.not_applicable`)."""
        return not self.data and self.why is None


class _Renderer:
    def __init__(self, client: PromClient, start: float, end: float, step: int) -> None:
        self.client, self.start, self.end, self.step = client, start, end, step

    def run(self, dashboard: dict, expr: str, variables: dict[str, str]) -> list[Series]:
        query = interpolate(expr, variables, self.step, int(self.end - self.start))
        return self.client.query_range(query, self.start, self.end, self.step)

    def panel_data(self, panel: dict, variables: dict[str, str]) -> list[tuple[str, Series]]:
        """What `panel` draws: each series with samples that its queries (`queries`) answer, by its legend; none is
        "No data"."""
        data = []
        for target in queries(panel):
            for s in self.run({}, target["expr"], variables):
                data.append((legend(target.get("legendFormat", ""), s.labels), s))
        return [(n, s) for n, s in data if len(s.values)]

    def absent_hardware(self, panel: dict) -> str | None:
        """Why an empty `panel` is expected to be empty here, or None: every query of a per-MIG-instance panel reads
        `gpu_instance:` series, which exist only when some GPU in Prometheus is partitioned."""
        exprs = [t["expr"] for t in queries(panel)]
        if not exprs or not all(HARDWARE_SERIES in e for e in exprs):
            return None
        return None if self.run({}, HARDWARE_PRESENT, {}) else "no MIG GPU in this Prometheus"

    def expression_has_input(self, panel: dict, variables: dict[str, str]) -> bool:
        """Whether `panel`, its shown queries empty, shows a server-side expression that Grafana draws from something:
        one of its hidden queries (with an `expr`; Grafana runs those an expression refers to, grafana/grafana#84977)
        returns samples, or it holds a target of another data source without an `expr` (`other_source`), which this
        renderer cannot run. An expression whose every input returns nothing is "No data" in Grafana as well."""
        targets = panel.get("targets", [])
        if not any(is_expression(t) and not t.get("hide") for t in targets):
            return False
        if any(other_source(t, panel.get("datasource")) for t in targets):
            return True
        hidden = [t["expr"] for t in targets if t.get("hide") and t.get("expr") and not is_expression(t)]
        return any(len(s.values) for expr in hidden for s in self.run({}, expr, variables))

    def answer(self, panel: dict, variables: dict[str, str]) -> PanelAnswer:
        """`panel`'s series (`panel_data`) and, without any, why (`EXPRESSION_WHY`, `absent_hardware`): how the PNG
        draws it and the report counts it, and how a test waiting for data judges it. A panel with a shown server-side
        expression draws its result, which Grafana computes from the queries it refers to, run even when hidden
        (grafana/grafana#84977): not computed here, so, when those queries return samples
        (`expression_has_input`), its panel is no panel without data; when they return nothing, it is one."""
        data = self.panel_data(panel, variables)
        if data:
            return PanelAnswer(data)
        if self.expression_has_input(panel, variables):
            return PanelAnswer(data, EXPRESSION_WHY)
        return PanelAnswer(data, self.absent_hardware(panel))


EXPRESSION_WHY = "server-side expression, not evaluated here"


def is_expression(target: dict) -> bool:
    """A server-side expression (math, reduce, resample, ...): a target of Grafana's `__expr__` data source, referred
    to as Grafana's isExpressionReference takes it (a `{"type": "__expr__"}` reference, or by uid or by name)."""
    ref = target.get("datasource")
    names = (ref.get("type"), ref.get("uid")) if isinstance(ref, dict) else (ref,)
    return any(name in ("__expr__", "Expression", "-100") for name in names)


def other_source(target: dict, panel_source: object = None) -> bool:
    """A target of a data source this renderer does not run (SQL, a plugin's): no server-side expression, no `expr`,
    and its data source reference (its own, else its panel's, `panel_source`, as older dashboards keep it) names a
    type other than Prometheus. A leftover `{"refId": "A"}`, or one naming Prometheus or its data source by name or
    uid only, is not: it is a Prometheus target without a query, which Grafana leaves out."""
    ref = target.get("datasource") or panel_source
    return (not is_expression(target) and not target.get("expr") and isinstance(ref, dict)
            and ref.get("type") not in (None, "", "prometheus"))


HARDWARE_SERIES, HARDWARE_PRESENT = "gpu_instance:", "count(gpu_instance:profile:info)"

# Every text made while the figure is built and saved (tick labels too, made as it is drawn in savefig) is drawn as
# written: mathtext off for this call only, the caller's rcParams restored after it (module docstring). Not each text's
# own `parse_math=False`: the tick labels an axis makes as the figure is saved (a unit's `suffix:` from a formatter, a
# colorbar's) take rcParams' value when made, as no call can give it them (tick_params refuses parse_math; a new tick
# copies its look from the first, not parse_math: matplotlib 3.11). rcParams are the process', so two renders must not
# draw at once in threads (`render` draws its dashboards one after another).
@matplotlib.rc_context({"text.parse_math": False})
def render_dashboard(dashboard: dict, renderer: _Renderer, out: Path, report: RenderReport, name: str) -> Path:
    window = (renderer.end, int(renderer.end - renderer.start), renderer.step)
    failed: list[tuple[str, str]] = []
    variables = selections(dashboard, renderer.client, window, failed)
    if failed:
        report.failed_variables[name] = failed
    placed, headers = layout(dashboard["panels"])
    repeated = repeats(dashboard["panels"])
    header = 2  # grid rows above the panels for the dashboard title
    rows = max((p["gridPos"]["y"] + p["gridPos"]["h"] for _, p in placed + headers), default=1) + header
    fig = Figure(figsize=(22, max(4.0, rows * 0.45)))
    fig.suptitle(f"{dashboard.get('title')} ({time.strftime('%Y-%m-%d %H:%M', time.gmtime(renderer.end))} UTC)",
                 fontsize=14, y=1 - 0.5 / rows)
    annotations = []
    for i, ann in enumerate(a for a in dashboard.get("annotations", {}).get("list", []) if a.get("expr")):
        hits = renderer.run(dashboard, ann["expr"], variables)
        times = np.unique(np.concatenate([s.times[s.values > 0] for s in hits])) if hits else np.array([])
        annotations.append((ann.get("name", "annotation"), times, annotation_colour(ann.get("iconColor"), i)))
    report.markers[name] = [(n, colour, len(times)) for n, times, colour in annotations]
    report.empty_panels[name], report.series[name] = [], {}
    for where, row in headers:
        title = repeat_title(row.get("title", ""), variables, repeated.get(where, ()))
        _row_header(fig, title, (header + row["gridPos"]["y"]) / rows, 1 / rows)
    for where, panel in placed:
        g, title = panel["gridPos"], repeat_title(panel.get("title", ""), variables, repeated.get(where, ()))
        # a 1-column or 1-row panel (Grafana's least) is drawn small, not refused by matplotlib for its negative size
        ax = fig.add_axes((g["x"] / 24 + 0.03, 1 - (header + g["y"] + g["h"]) / rows + 0.25 / rows,
                           max(g["w"] / 24 - 0.05, 0.5 / 24), max(g["h"] - 1.1, 0.5) / rows))
        if is_library_panel(panel):
            written = _library_placeholder(ax, panel, variables, repeated.get(where, ()))
            report.library_panels.setdefault(name, []).append(written)
            continue
        ax.set_title(title, fontsize=9, loc="left")
        if not shows_data(panel):   # a text panel, a clock: it never queries, no data to miss (--require-data)
            _placeholder(ax, f"{panel['type']} panel: runs no queries, not drawn here")
        else:
            _draw_panel(fig, ax, panel, renderer, (variables, annotations), report, name)
    path = out / f"{name}.png"
    try:
        fig.savefig(path, dpi=90)
    except OSError as exc:   # a read-only or full folder: the flag's to name, not a traceback
        raise InputError(None, "--out", str(out), "a folder this process can write PNGs in", str(exc)) from exc
    return path


def _draw_panel(fig, ax, panel: dict, renderer: _Renderer, context: tuple[dict[str, str], list], report: RenderReport,
                name: str) -> None:
    """One panel Grafana draws from its queries (`shows_data`): drawn from their results, or "No data" (counted in
    `report`, or, for hardware this Prometheus has none of or a server-side expression whose input queries return
    samples, listed apart with its reason), as a panel without any query is."""
    variables, annotations = context
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
    answer = renderer.answer(panel, variables)
    data = answer.data
    report.series[name][panel.get("title", "")] = len(data)
    if not data:
        if answer.counted_empty:
            report.empty_panels[name].append(panel.get("title", ""))
        else:
            report.not_applicable_why.setdefault(name, []).append((panel.get("title", ""), answer.why))
        ax.axis("off")
        ax.text(0.5, 0.5, f"No data ({answer.why})" if answer.why else "No data", ha="center", va="center",
                transform=ax.transAxes, color="grey")
        return
    matrix = next((t.get("options") for t in panel.get("transformations", []) if t["id"] == "groupingToMatrix"),
                  None)
    if panel["type"] == "heatmap":
        _draw_heatmap(fig, ax, panel, data, unit, renderer.start, renderer.end, renderer.step)
    elif matrix:
        _draw_matrix(fig, ax, data, unit, matrix["rowField"], matrix["columnField"])
    elif panel["type"] == "timeseries":
        _draw_timeseries(ax, panel, data, unit, annotations, (renderer.start, renderer.end, renderer.step))
    elif panel["type"] == "table":
        _draw_table(ax, panel, data, unit)
    else:
        _draw_last_values(ax, panel, data, unit)
    if panel["type"] in ("timeseries", "heatmap"):
        ax.xaxis_date()
        ax.tick_params(axis="x", labelsize=6)


def _row_header(fig, title: str, top: float, grid_row: float) -> None:
    """A row's header, as Grafana draws it: its title (bold, its variables filled: `render_dashboard`) on a band
    across the dashboard, in the row's first grid row (`top`, from the figure's top, and `grid_row` high, in figure
    fractions). The band is the lower half of that grid row, its title at its foot: the panel above ends a quarter of
    a grid row above the row's, its tick labels below that (a node x GPU grid's reach half a grid row further); the
    panels below have their titles in their own first grid row. A collapsed row's is drawn as an open one's: its
    panels are drawn below it, where Grafana opens them."""
    ax = fig.add_axes((0.03, 1 - top - grid_row, 0.95, 0.5 * grid_row))
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.set_facecolor("#eef0f3")   # a band, as Grafana's row header (axis("off") would hide it)
    ax.text(0.005, 0.04, title, ha="left", va="bottom", transform=ax.transAxes, fontsize=10,
            fontweight="bold", clip_on=True)


def _library_placeholder(ax, panel: dict, variables: dict[str, Selection], repeated: tuple[str, ...]) -> str:
    """A library panel's box, saying what it is: its queries are in Grafana's library, not in the file. Its name, as
    written (on the box with its variables filled, `repeat_title`)."""
    ref = panel["libraryPanel"]
    title = panel.get("title") or ref.get("name") or ref.get("uid", "")
    ax.set_title(repeat_title(title, variables, repeated), fontsize=9, loc="left")
    _placeholder(ax, f"library panel {ref.get('uid', '')}\n(kept in Grafana's library, not drawn here)")
    return title


def _placeholder(ax, text: str) -> None:
    """A panel's box (its title set by the caller) with, in grey, why nothing is drawn in it (the text names the
    panel's type or library uid, the dashboard's words, drawn as written, as every text: `render_dashboard`)."""
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="grey", clip_on=True)


def render(prometheus_url: str, out: Path, *, dashboards_dir: Path = DEFAULT_DASHBOARDS_DIR,
           uid: str | None = None, range_s: int = 3600, end: float | None = None,
           step: int | None = None) -> RenderReport:
    """Render every dashboard (or the one with `uid`) to `out/<name>.png`."""
    end = time.time() if end is None else end
    step = step or max(1, math.ceil(range_s / 300))
    renderer = _Renderer(PromClient(prometheus_url), end - range_s, end, step)
    out = Path(out)
    dashboards = load_dashboards(dashboards_dir, uid)   # refused before anything is written
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(None, "--out", str(out), "a folder this process can create and write PNGs in",
                         str(exc)) from exc
    report = RenderReport()
    for name, dashboard in dashboards:
        report.written.append(render_dashboard(dashboard, renderer, out, report, name))
    return report
