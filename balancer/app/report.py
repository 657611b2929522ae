"""A self-contained HTML report: sections of prose, tables and PNGs (relative links), nothing to install."""

from __future__ import annotations

import html
import math
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
    if value is None:   # a figure the run could not give (e.g. a ratio to a zero)
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if 0.99 <= abs(value) < 1:
            return _near_one(value)
        if value == 0 or 0.01 <= abs(value) < 1e6:
            return f"{value:,.4g}" if abs(value) < 1 else f"{value:,.2f}"
        return f"{value:.3g}"
    return html.escape(str(value))


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

    def section(self, title: str, text: str = "") -> None:
        self.parts.append(f"<h2>{html.escape(title)}</h2>")
        if text:
            self.parts.append(f"<p>{text}</p>")

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
               f"<p>Generated {stamp} by <code>make demo</code>.</p>{''.join(self.parts)}</body></html>")
        path.write_text(doc, encoding="utf-8")
        return path


def _dig(data: Mapping[str, Any], dotted: str) -> Any:
    cur: Any = data
    for part in dotted.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return "-"
        cur = cur[part]
    return cur
