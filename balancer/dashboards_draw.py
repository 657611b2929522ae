"""Drawing for the PNG previews of `balancer.dashboards_render`: each panel type on a matplotlib axes, the query's
results put on its steps so that a step without a sample is a gap, as Grafana shows it.

Pure functions of the query results: no Prometheus, no files. Their texts (legends, units, label values) are drawn
under the caller's rcParams: `dashboards_render.render_dashboard` turns mathtext off, so a `$` pair in them is drawn
as written, not parsed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

_CMAPS = {"Turbo": "turbo", "Oranges": "Oranges", "Viridis": "viridis", "Blues": "Blues"}


@dataclass(frozen=True)
class Series:
    labels: dict[str, str]
    times: np.ndarray
    values: np.ndarray


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


def on_grid(data: list[tuple[str, Series]], start: float, end: float, step: float) -> tuple[np.ndarray, np.ndarray]:
    """The query's steps from `start` to `end` and each series' values on them, NaN at a step where the series has
    no sample (Prometheus leaves it out of a range result: no sample within the lookback, or stale)."""
    grid = np.arange(start, end + step / 2, step)
    values = np.full((len(data), len(grid)), np.nan)
    for row, (_, s) in enumerate(data):
        cols = np.clip(np.round((s.times - start) / step).astype(int), 0, len(grid) - 1)
        values[row, cols] = s.values
    return grid, values


def stack_values(values: np.ndarray) -> np.ndarray:
    """`values` (series x steps) as Grafana stacks them: a series without a sample at a step adds 0 there, and a
    step where no series has one is a gap (NaN), not 0. Interpolating over the gap, as this renderer once did,
    stacked a series still there (a one-step spike) on the others' values carried across it."""
    out = np.nan_to_num(values)
    out[:, np.isnan(values).all(axis=0)] = np.nan
    return out


def _window(data: list[tuple[str, Series]]) -> tuple[float, float, float]:
    """The range query's start, end and step, read off its results (the step: the least spacing of their times)."""
    times = np.unique(np.concatenate([s.times for _, s in data]))
    step = float(np.diff(times).min()) if len(times) > 1 else 1.0
    return float(times[0]), float(times[-1]), step


def _draw_timeseries(ax, panel, data, unit, annotations, window: tuple[float, float, float] | None = None) -> None:
    """Lines, or stacked areas or bars, over the query's steps (`window`: start, end, step; default read off the
    data). A step without a sample is a gap, as Grafana draws it (never a line across it, never 0); a sample
    with gaps on both sides is a dot."""
    custom = panel.get("fieldConfig", {}).get("defaults", {}).get("custom", {})
    stacked = custom.get("stacking", {}).get("mode") == "normal"
    bars = custom.get("drawStyle") == "bars"
    grid, values = on_grid(data, *(window or _window(data)))
    if bars:
        width = (grid[1] - grid[0]) * 0.8 if len(grid) > 1 else 1.0
        heights = np.nan_to_num(stack_values(values) if stacked else values)
        bottom = np.zeros_like(grid)
        for (name, _), row in zip(data, heights):
            ax.bar(_dates(grid), row, bottom=bottom if stacked else None, width=width / 86400, label=name)
            bottom = bottom + row
    elif stacked:
        ax.stackplot(_dates(grid), stack_values(values), labels=[n for n, _ in data], alpha=0.7)
    else:
        for (name, _), row in zip(data, values):
            (line,) = ax.plot(_dates(grid), row, label=name, linewidth=1.2)
            there = ~np.isnan(row)
            alone = there & ~np.r_[False, there[:-1]] & ~np.r_[there[1:], False]
            if alone.any():
                ax.plot(_dates(grid[alone]), row[alone], ".", color=line.get_color(), markersize=3)
    for name, times, colour in annotations:
        # one collection of full-height lines per annotation (x in data, y in axes coordinates, as axvline draws
        # each): an axvline per event cost ~1.5 ms, and an annotation firing at every step drew hundreds
        if len(times):
            ax.vlines(_dates(np.asarray(times, dtype=float)), 0, 1, transform=ax.get_xaxis_transform(),
                      colors=colour, alpha=0.5, linewidth=0.8)
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
    grid, image = on_grid(data, start, end, step)
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


def _mapped(value: float, unit: str, mappings: list) -> str:
    """`value` as the panel shows it: the text of a value mapping that names it (Grafana's `type: value`), else
    formatted in `unit`."""
    for mapping in mappings:
        if mapping.get("type") == "value" and math.isfinite(value) and value == int(value):
            hit = mapping.get("options", {}).get(str(int(value)))
            if hit and hit.get("text"):
                return str(hit["text"])
    return format_value(value, unit)


def table_rows(data: list[tuple[str, Series]], unit: str, mappings: list = ()) -> tuple[list[str], list[list[str]]]:
    """A table panel's header and rows, one row per series (its last value), as Grafana's table shows a `format:
    table` query after `organize` drops Time: the labels as columns (those that differ between rows; every one
    for a single row) and Value. The series' order is the query's (topk: highest first)."""
    labels = [{k: v for k, v in s.labels.items() if k != "__name__"} for _, s in data]
    keys = sorted({k for lab in labels for k in lab})
    if len(labels) > 1:
        keys = [k for k in keys if len({lab.get(k, "") for lab in labels}) > 1]
    rows = [[lab.get(k, "") for k in keys] + [_mapped(float(s.values[-1]), unit, list(mappings))]
            for lab, (_, s) in zip(labels, data)]
    return [*keys, "Value"], rows


def _draw_table(ax, panel, data, unit, max_rows: int = 20) -> None:
    """A table inside the panel's own box (long label values never spill into the panel beside it)."""
    mappings = panel.get("fieldConfig", {}).get("defaults", {}).get("mappings", [])
    header, rows = table_rows(data, unit, mappings)
    if len(rows) > max_rows:
        rows = [*rows[:max_rows - 1], [f"... {len(rows) - max_rows + 1} more", *[""] * (len(header) - 1)]]
    ax.axis("off")
    widths = np.array([max(len(str(c)) for c in col) + 2 for col in zip(header, *rows)], dtype=float)
    table = ax.table(cellText=rows, colLabels=header, colWidths=list(widths / widths.sum()), bbox=(0, 0, 1, 1),
                     cellLoc="left")
    table.auto_set_font_size(False)
    table.set_fontsize(6)
    for cell in table.get_celld().values():
        cell.set_linewidth(0.3)
        cell.get_text().set_clip_on(True)
