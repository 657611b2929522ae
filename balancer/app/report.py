"""A self-contained HTML report: sections of prose, tables and PNGs (relative links), nothing to install."""

from __future__ import annotations

import html
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1250px;margin:2em auto;padding:0 1em;
color:#1d2330;line-height:1.45}
h1{border-bottom:3px solid #2c7be5}h2{margin-top:2.2em;border-bottom:1px solid #d5dae3}
table{border-collapse:collapse;margin:1em 0;font-size:.92em}th,td{border:1px solid #d5dae3;padding:.3em .7em;
text-align:right}th{background:#f3f5f9}td:first-child,th:first-child{text-align:left}
img{max-width:100%;border:1px solid #d5dae3;margin:.6em 0}.ok{color:#147a3c;font-weight:600}
.bad{color:#b3261e;font-weight:600}pre{background:#f6f8fa;padding:.8em;overflow-x:auto;font-size:.85em}
"""


def fmt(value: Any) -> str:
    """A table cell or a figure in a sentence, rounded as a person would quote it: 170,700 GPU-seconds and 6,060
    GPU-hours, not 170,700.00 (or 4.97e+06 violating requests); 89.54 °C; "-" for a figure the run could not give
    (None, or a NaN/inf such as a MASE against a baseline with no error), never "nan"."""
    if value is None:   # a figure the run could not give (e.g. a ratio to a zero)
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, numbers.Integral):
        return f"{int(value):,}"
    if isinstance(value, numbers.Real):   # float, numpy floats (float32 is no float)
        return _real(float(value))
    return html.escape(str(value))


def _real(value: float) -> str:
    if not math.isfinite(value):
        return "-"
    size = abs(value)
    if 0.99 <= size < 1:
        return _near_one(value)
    if size >= 1000 or (size >= 10 and value == round(value)):   # 1.00 stays beside a column's 1.31
        return f"{value:,.0f}"
    if size >= 100:
        return f"{value:.1f}"
    if size >= 1:
        return f"{value:.2f}"
    if value == 0 or size >= 0.01:
        return f"{value:.4g}"
    return f"{value:.3g}"


def _near_one(value: float) -> str:
    """A share just under 1 (an SLO attainment) with the digits that tell it from 1: 0.99995, not "1" (four
    significant digits rounded every attainment above 0.99995 to 1, beside a count of violating requests)."""
    gap = 1.0 - abs(value)
    digits = math.ceil(-math.log10(gap)) + 2
    sign = "-" if value < 0 else ""
    if digits > 9:
        return f"{sign}1 − {gap:.1e}"
    return f"{value:.{digits}g}"


@dataclass
class Report:
    title: str
    parts: list[str] = field(default_factory=list)
    credits: list[str] = field(default_factory=list)   # the data sets the report used, as its last section

    def section(self, title: str, text: str = "") -> None:
        self.parts.append(f"<h2>{html.escape(title)}</h2>")
        if text:
            self.parts.append(f"<p>{text}</p>")

    def credit(self, text: str) -> None:
        """Name a data set the report used (HTML; once however many sections cite it)."""
        if text not in self.credits:
            self.credits.append(text)

    def text(self, text: str) -> None:
        self.parts.append(f"<p>{text}</p>")

    def pre(self, text: str) -> None:
        self.parts.append(f"<pre>{html.escape(text)}</pre>")

    def image(self, path: Path, root: Path, caption: str = "") -> None:
        rel = Path(path).resolve().relative_to(root.resolve())
        self.parts.append(f'<figure><img src="{html.escape(str(rel))}" alt="{html.escape(caption)}">'
                          f"<figcaption>{html.escape(caption)}</figcaption></figure>")

    def table(self, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
        body = "".join("<tr>" + "".join(f"<td>{fmt(c)}</td>" for c in row) + "</tr>" for row in rows)
        self.parts.append(f"<table><tr>{head}</tr>{body}</table>")

    def mapping_table(self, columns: Mapping[str, Mapping[str, Any]], keys: Sequence[tuple[str, str]]) -> None:
        """Rows are metrics (label, dotted key), columns are runs (e.g. policies)."""
        names = list(columns)
        rows = [[label, *(_dig(columns[n], key) for n in names)] for label, key in keys]
        self.table(["", *names], rows)

    def write(self, path: Path) -> Path:
        stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        doc = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(self.title)}</title>"
               f"<style>{_CSS}</style></head><body><h1>{html.escape(self.title)}</h1>"
               f"<p>Generated {stamp} by <code>gputide demo</code> (what <code>make demo</code> runs).</p>"
               f"{''.join(self.parts)}{self._credits()}</body></html>")
        path.write_text(doc, encoding="utf-8")
        return path

    def _credits(self) -> str:
        if not self.credits:
            return ""
        items = "".join(f"<li>{c}</li>" for c in self.credits)
        return f"<h2>Data and credits</h2><ul>{items}</ul>"


def _dig(data: Mapping[str, Any], dotted: str) -> Any:
    cur: Any = data
    for part in dotted.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return "-"
        cur = cur[part]
    return cur
