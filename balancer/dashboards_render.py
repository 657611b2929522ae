"""PNG previews of the Grafana dashboards, without Grafana.

Reads the generated `dashboards/*.json`, runs every panel's PromQL as a range query against a Prometheus
(plain HTTP, `/api/v1/query_range`) and draws the panels with matplotlib where Grafana would put them
(`gridPos` on the 24-column grid), one PNG per dashboard:

- timeseries: lines (stacked areas or bars when the panel stacks or draws bars), every dashboard annotation
  (e.g. GPU loans and reclaims) as vertical lines in its own `iconColor`;
- heatmap: one row per series (per GPU, or per MIG instance) and one column per step, the colour being the
  value, exactly what Grafana's heatmap panel with `calculate: false` shows, the rows counted by the noun of the
  panel's y-axis label;
- table with `groupingToMatrix` (node x GPU grid): a row-label x column-label image of the last values;
- other tables, bar gauges and stats: the last value of each series.

Variables are resolved the way Grafana does on first load: "All" variables take their `allValue`, others their
first label value; `$__rate_interval` is max(4 x scrape interval, step + scrape interval). A Prometheus that
cannot be reached raises `TelemetryUnavailable`; a panel without data is drawn with "No data" and counted in
the returned `RenderReport`, so a test or CI job can insist on data.
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
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from balancer.errors import InputError, TelemetryUnavailable

# A source checkout keeps them next to the package; the container image sets GPUTIDE_DASHBOARDS_DIR.
DEFAULT_DASHBOARDS_DIR = Path(os.environ.get("GPUTIDE_DASHBOARDS_DIR") or Path(__file__).resolve().parents[1] / "dashboards")
_DURATION = re.compile(r"^(\d+)([smhdw])$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_CMAPS = {"Turbo": "turbo", "Oranges": "Oranges", "Viridis": "viridis", "Blues": "Blues"}


def parse_duration(text: str, field_name: str = "--range") -> int:
    m = _DURATION.match(text.strip())
    if not m or int(m[1]) == 0:
        raise InputError(None, field_name, text, "a positive duration such as 30m, 6h, 7d")
    return int(m[1]) * _SECONDS[m[2]]


@dataclass(frozen=True)
class Series:
    labels: dict[str, str]
    times: np.ndarray
    values: np.ndarray


class PromClient:
    """The two Prometheus HTTP API calls the renderer needs, over urllib."""

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
            body = json.loads(exc.read() or b"{}")
            raise TelemetryUnavailable(f"{path}: HTTP {exc.code}: {body.get('error', '')}") from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise TelemetryUnavailable(f"cannot reach Prometheus at {self.url}: {exc}") from exc
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

    def label_values(self, match: str, label: str) -> list[str]:
        return sorted(self._get(f"/api/v1/label/{urllib.parse.quote(label)}/values", {"match[]": match}))


@dataclass
class RenderReport:
    """What one render produced: the PNGs and, per dashboard, the panels that had no data."""

    written: list[Path] = field(default_factory=list)
    empty_panels: dict[str, list[str]] = field(default_factory=dict)
    # per dashboard, the empty panels that show hardware this Prometheus has none of (MIG): not a missing series
    not_applicable: dict[str, list[str]] = field(default_factory=dict)
    series: dict[str, dict[str, int]] = field(default_factory=dict)
    # per dashboard, each annotation drawn: (name, matplotlib colour, event times)
    markers: dict[str, list[tuple[str, str, int]]] = field(default_factory=dict)


def _dashboard(path: Path) -> dict:
    """One dashboard file; unreadable, not UTF-8, not JSON or not a JSON object is an InputError naming it."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(str(path), "(file)", path.name, "a readable UTF-8 Grafana dashboard JSON file",
                         str(exc)) from exc
    if not isinstance(doc, dict):
        raise InputError(str(path), "(document)", type(doc).__name__, "a JSON object (a Grafana dashboard)")
    return doc


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


def resolve_variables(dashboard: dict, client: PromClient) -> dict[str, str]:
    values: dict[str, str] = {}
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") != "query":
            continue
        if var.get("includeAll"):
            values[var["name"]] = var.get("allValue") or ".*"
            continue
        query = var.get("query")
        query = query.get("query", "") if isinstance(query, dict) else str(query)
        m = re.match(r"label_values\((.+),\s*(\w+)\)$", query.strip())
        options = client.label_values(interpolate(m[1], values, 60, 3600), m[2]) if m else []
        values[var["name"]] = re.escape(options[0]) if options else ".*"
    return values


def interpolate(expr: str, variables: dict[str, str], step: int, range_s: int, scrape_s: int = 15) -> str:
    builtins = {
        "__rate_interval": f"{max(4 * scrape_s, step + scrape_s)}s",
        "__interval": f"{step}s",
        "__range_s": str(range_s),
        "__range": f"{range_s}s",
    }
    merged = {**variables, **builtins}
    for name in sorted(merged, key=len, reverse=True):
        expr = expr.replace(f"${{{name}}}", merged[name]).replace(f"${name}", merged[name])
    return expr


def legend(fmt: str, labels: dict[str, str]) -> str:
    if not fmt or fmt == "__auto":
        shown = {k: v for k, v in labels.items() if k != "__name__"}
        return ", ".join(f"{k}={v}" for k, v in sorted(shown.items())) or labels.get("__name__", "value")
    text = re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m[1], ""), fmt).strip(" :/")
    return text or legend("__auto", labels)


def format_value(value: float, unit: str) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    if unit == "percentunit":
        return f"{value * 100:.1f}%"
    if unit == "bytes":
        for suffix, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
            if abs(value) >= scale:
                return f"{value / scale:.1f} {suffix}"
        return f"{value:.0f} B"
    suffix = {"celsius": " °C", "watt": " W", "s": " s", "reqps": " req/s", "kwatth": " kWh", "ops": " /s"}.get(
        unit, " " + unit.removeprefix("suffix:").strip() if unit.startswith("suffix:") else "")
    return f"{value:.3g}{suffix}" if abs(value) < 1000 else f"{value:,.0f}{suffix}"


def _natural(text: str) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


class _Renderer:
    def __init__(self, client: PromClient, start: float, end: float, step: int) -> None:
        self.client, self.start, self.end, self.step = client, start, end, step

    def run(self, dashboard: dict, expr: str, variables: dict[str, str]) -> list[Series]:
        query = interpolate(expr, variables, self.step, int(self.end - self.start))
        return self.client.query_range(query, self.start, self.end, self.step)

    def panel_data(self, panel: dict, variables: dict[str, str]) -> list[tuple[str, Series]]:
        data = []
        for target in panel.get("targets", []):
            for s in self.run({}, target["expr"], variables):
                data.append((legend(target.get("legendFormat", ""), s.labels), s))
        return data

    def absent_hardware(self, panel: dict) -> str | None:
        """Why an empty `panel` is expected to be empty here, or None: every query of a per-MIG-instance panel reads
        `gpu_instance:` series, which exist only when some GPU in Prometheus is partitioned."""
        exprs = [t.get("expr", "") for t in panel.get("targets", [])]
        if not exprs or not all(HARDWARE_SERIES in e for e in exprs):
            return None
        return None if self.run({}, HARDWARE_PRESENT, {}) else "no MIG GPU in this Prometheus"


HARDWARE_SERIES, HARDWARE_PRESENT = "gpu_instance:", "count(gpu_instance:profile:info)"

# Grafana's named colours (its classic palette; a shade such as dark-red or light-blue is drawn as its base colour)
_GRAFANA_COLOURS = {"red": "#F2495C", "orange": "#FF9830", "yellow": "#FADE2A", "green": "#73BF69",
                    "blue": "#5794F2", "purple": "#B877D9"}
_SHADE = re.compile(r"^(?:super-light|light|semi-dark|dark)-")
_RGB = re.compile(r"^rgba?\(\s*([\d.]+)\s*,\s*([\d.]+)\s*,\s*([\d.]+)\s*(?:,\s*[\d.]+\s*)?\)$")


def annotation_colour(icon_color: object, index: int) -> str:
    """The colour an annotation's events are drawn in: its Grafana `iconColor` (a named colour, #rgb hex or
    rgb()/rgba()), or, for none that reads as one, the `index`-th colour of matplotlib's cycle."""
    text = _SHADE.sub("", icon_color.strip().lower()) if isinstance(icon_color, str) else ""
    if text in _GRAFANA_COLOURS:
        return _GRAFANA_COLOURS[text]
    if re.fullmatch(r"#(?:[0-9a-f]{3}|[0-9a-f]{6}|[0-9a-f]{8})", text):
        return text
    if (m := _RGB.match(text)) and all(float(v) <= 255 for v in m.groups()):
        return "#" + "".join(f"{round(float(v)):02x}" for v in m.groups())
    return f"C{index % 10}"


def _draw_timeseries(ax, panel, data, unit, annotations) -> None:
    custom = panel.get("fieldConfig", {}).get("defaults", {}).get("custom", {})
    stacked = custom.get("stacking", {}).get("mode") == "normal"
    bars = custom.get("drawStyle") == "bars"
    if stacked or bars:
        grid = np.unique(np.concatenate([s.times for _, s in data]))
        stack = np.array([np.interp(grid, s.times, s.values, left=np.nan, right=np.nan) for _, s in data])
        stack = np.nan_to_num(stack)
        if bars:
            width = (grid[1] - grid[0]) * 0.8 if len(grid) > 1 else 1.0
            bottom = np.zeros_like(grid)
            for (name, _), row in zip(data, stack):
                ax.bar(_dates(grid), row, bottom=bottom if stacked else None, width=width / 86400, label=name)
                bottom = bottom + row
        else:
            ax.stackplot(_dates(grid), stack, labels=[n for n, _ in data], alpha=0.7)
    else:
        for name, s in data:
            ax.plot(_dates(s.times), s.values, label=name, linewidth=1.2)
    for name, times, colour in annotations:
        for t in times:
            ax.axvline(_dates(np.array([t]))[0], color=colour, alpha=0.5, linewidth=0.8)
        if len(times):
            ax.plot([], [], color=colour, label=f"{name} ({len(times)})")
    ax.set_ylabel(unit)
    ax.yaxis.set_major_formatter(lambda v, _pos: format_value(v, unit))
    if len(data) <= 12:
        ax.legend(fontsize=6, loc="upper left")


def _dates(times: np.ndarray) -> np.ndarray:
    # matplotlib's date numbers: days since the epoch.
    return times / 86400.0


def heatmap_matrix(data: list[tuple[str, Series]], start: float, end: float, step: int
                   ) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Rows = series in natural order of their names, columns = steps from start to end; NaN where no sample."""
    data = sorted(data, key=lambda item: _natural(item[0]))
    grid = np.arange(start, end + step / 2, step)
    image = np.full((len(data), len(grid)), np.nan)
    for row, (_, s) in enumerate(data):
        cols = np.clip(np.round((s.times - start) / step).astype(int), 0, len(grid) - 1)
        image[row, cols] = s.values
    return [name for name, _ in data], grid, image


def heatmap_rows(panel: dict, n: int) -> str:
    """What the `n` rows of a heatmap are, from its y-axis label: "5 GPUs", "21 MIG instances"."""
    noun = str(panel.get("options", {}).get("yAxis", {}).get("axisLabel") or "GPU").split(" (")[0]
    return f"{n} {noun}s"


def _draw_heatmap(fig, ax, panel, data, unit, start, end, step) -> None:
    names, grid, image = heatmap_matrix(data, start, end, step)
    cmap = _CMAPS.get(panel.get("options", {}).get("color", {}).get("scheme", ""), "turbo")
    shown = ax.imshow(image, aspect="auto", interpolation="nearest", cmap=cmap, origin="lower",
                      extent=(_dates(grid[:1])[0], _dates(grid[-1:])[0], -0.5, len(names) - 0.5))
    fig.colorbar(shown, ax=ax, format=lambda v, _pos: format_value(v, unit), pad=0.01)
    ticks = np.linspace(0, len(names) - 1, min(len(names), 16)).round().astype(int)
    ax.set_yticks(ticks, [names[i] for i in ticks], fontsize=5)
    ax.set_ylabel(heatmap_rows(panel, len(names)))


def _draw_matrix(fig, ax, data, unit, row_label, column_label) -> None:
    rows = sorted({s.labels.get(row_label, "") for _, s in data}, key=_natural)
    cols = sorted({s.labels.get(column_label, "") for _, s in data}, key=_natural)
    image = np.full((len(rows), len(cols)), np.nan)
    for _, s in data:
        image[rows.index(s.labels.get(row_label, "")), cols.index(s.labels.get(column_label, ""))] = s.values[-1]
    shown = ax.imshow(image, aspect="auto", cmap="RdYlGn_r", interpolation="nearest")
    fig.colorbar(shown, ax=ax, format=lambda v, _pos: format_value(v, unit), pad=0.01)
    ax.set_xticks(range(len(cols)), cols, fontsize=6)
    ax.set_yticks(range(len(rows)), rows, fontsize=5 if len(rows) > 20 else 7)
    ax.set_xlabel(column_label)
    if len(rows) * len(cols) <= 128:
        for (r, c), v in np.ndenumerate(image):
            ax.text(c, r, format_value(v, unit), ha="center", va="center", fontsize=5)


def _draw_last_values(ax, panel, data, unit) -> None:
    items = sorted(((name, s.values[-1]) for name, s in data), key=lambda kv: -np.nan_to_num(kv[1]))[:15]
    if panel["type"] == "stat":
        ax.axis("off")
        text = "\n".join(f"{format_value(v, unit)}  {n}" if len(items) > 1 else format_value(v, unit)
                         for n, v in items)
        ax.text(0.5, 0.45, text, ha="center", va="center", fontsize=16 if len(items) == 1 else 10,
                transform=ax.transAxes, weight="bold")
        return
    names = [n for n, _ in items][::-1]
    values = [v for _, v in items][::-1]
    ax.barh(names, values, color="tab:orange")
    for i, v in enumerate(values):
        ax.text(v, i, " " + format_value(v, unit), va="center", fontsize=6)
    ax.tick_params(axis="y", labelsize=6)


def render_dashboard(dashboard: dict, renderer: _Renderer, out: Path, report: RenderReport, name: str) -> Path:
    variables = resolve_variables(dashboard, renderer.client)
    panels = [p for p in dashboard.get("panels", []) if p.get("type") != "row"]
    header = 2  # grid rows above the panels for the dashboard title
    rows = max((p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels), default=1) + header
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
    for panel in panels:
        g = panel["gridPos"]
        ax = fig.add_axes((g["x"] / 24 + 0.03, 1 - (header + g["y"] + g["h"]) / rows + 0.25 / rows,
                           g["w"] / 24 - 0.05, (g["h"] - 1.1) / rows))
        ax.set_title(panel.get("title", ""), fontsize=9, loc="left")
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        data = renderer.panel_data(panel, variables)
        data = [(n, s) for n, s in data if len(s.values)]
        report.series[name][panel.get("title", "")] = len(data)
        if not data:
            why = renderer.absent_hardware(panel)
            (report.not_applicable.setdefault(name, []) if why else report.empty_panels[name]).append(
                panel.get("title", ""))
            ax.axis("off")
            ax.text(0.5, 0.5, f"No data ({why})" if why else "No data", ha="center", va="center",
                    transform=ax.transAxes, color="grey")
            continue
        matrix = next((t["options"] for t in panel.get("transformations", []) if t["id"] == "groupingToMatrix"),
                      None)
        if panel["type"] == "heatmap":
            _draw_heatmap(fig, ax, panel, data, unit, renderer.start, renderer.end, renderer.step)
        elif matrix:
            _draw_matrix(fig, ax, data, unit, matrix["rowField"], matrix["columnField"])
        elif panel["type"] == "timeseries":
            _draw_timeseries(ax, panel, data, unit, annotations)
        else:
            _draw_last_values(ax, panel, data, unit)
        if panel["type"] in ("timeseries", "heatmap"):
            ax.xaxis_date()
            ax.tick_params(axis="x", labelsize=6)
    path = out / f"{name}.png"
    fig.savefig(path, dpi=90)
    return path


def render(prometheus_url: str, out: Path, *, dashboards_dir: Path = DEFAULT_DASHBOARDS_DIR,
           uid: str | None = None, range_s: int = 3600, end: float | None = None,
           step: int | None = None) -> RenderReport:
    """Render every dashboard (or the one with `uid`) to `out/<name>.png`."""
    end = time.time() if end is None else end
    step = step or max(1, math.ceil(range_s / 300))
    renderer = _Renderer(PromClient(prometheus_url), end - range_s, end, step)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    report = RenderReport()
    for name, dashboard in load_dashboards(dashboards_dir, uid):
        report.written.append(render_dashboard(dashboard, renderer, out, report, name))
    return report
